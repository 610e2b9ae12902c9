"""Learning curves: return against env steps and wall-clock, runs that differ only in seed
drawn as their mean with a 95% confidence band.

Examples:
    >>> plot_runs(["runs/ppo_seed0", "runs/ppo_seed1"], "curves.png")  # doctest: +SKIP
    PosixPath('curves.png')
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.core.config import ConfigError
from flowrl.core.context import EPISODE_RETURN_MEAN, STEPS_SAMPLED, TIME_TOTAL_S
from flowrl.diagnostics.graph import pyplot

X_AXES = ((STEPS_SAMPLED, "env steps"), (TIME_TOTAL_S, "wall-clock (s)"))
Y = EPISODE_RETURN_MEAN


CONFIG, RESULTS = "config.json", "result.jsonl"


def find_runs(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The run directories ``paths`` name: each that is one, and the runs found below one
    that is not (a sweep's output, whose trials write theirs in ``TRIAL/flowrl``; a folder
    of runs); a ConfigError for a path that is neither.

    Examples:
        >>> find_runs(["runs/tune_ppo_CartPole-v1_TIME"])  # doctest: +SKIP
        [PosixPath('runs/tune_ppo_CartPole-v1_TIME/tune/FlowrlTrainable_..._00000_.../flowrl'), ...]
    """
    found = []
    for path in map(Path, paths):
        if (path / CONFIG).is_file():
            found.append(path)
            continue
        below = sorted(p.parent for p in path.rglob(RESULTS) if (p.parent / CONFIG).is_file())
        if not below:
            raise ConfigError(f"{path} is not a run directory, nor holds one ({CONFIG} "
                              f"and {RESULTS}, as flowrl train and tune write)")  # fmt: skip
        found += below
    return found


def read_run(run_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run directory's config.json and result.jsonl rows (a torn last line skipped)."""
    run_dir = Path(run_dir)
    try:
        meta = json.loads((run_dir / CONFIG).read_text())
        lines = (run_dir / RESULTS).read_text().splitlines()
    except (OSError, ValueError) as e:
        raise ConfigError(f"{run_dir} is not a run directory ({e})") from None
    rows = []
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return meta, rows


#: what sets runs apart whose configs are compared setting by setting
FAMILY = ("algo", "env")


def group_by_config(runs: dict[str, dict[str, Any]]) -> tuple[str, dict[str, list[str]]]:
    """What every run shares (the algorithm and env, when all runs have the same: the
    plot's title), and the runs whose algorithm and config differ only in ``seed``, by a
    label naming what sets their group apart (the title when nothing does): the algorithm
    and env where they vary, and the settings that vary among the runs of that algorithm on
    that env (two algorithms' configs differ in most of their defaults, which say nothing).

    Examples:
        >>> runs = {"a": {"algo": "ppo", "config": {"env": "E", "seed": 0, "lr": 0.1}},
        ...         "b": {"algo": "ppo", "config": {"env": "E", "seed": 0, "lr": 0.2}},
        ...         "c": {"algo": "dqn", "config": {"env": "E", "seed": 0, "lr": 0.5}}}
        >>> group_by_config(runs)
        ('E', {'ppo lr=0.1': ['a'], 'ppo lr=0.2': ['b'], 'dqn': ['c']})
    """
    keyed = {}
    for name, meta in runs.items():
        config = {k: v for k, v in meta.get("config", {}).items() if k != "seed"}
        keyed[name] = {"algo": meta.get("algo"), **config}
    varying = _varying(keyed.values())
    first = next(iter(keyed.values()), {})
    shared = [str(first.get(k)) for k in FAMILY if k not in varying]
    title = " on ".join(shared)
    groups: dict[str, list[str]] = {}
    for name, config in keyed.items():
        family = [c for c in keyed.values() if all(c.get(k) == config.get(k) for k in FAMILY)]
        parts = [str(config.get(k)) for k in FAMILY if k in varying]
        parts += [f"{k}={config.get(k)}" for k in _varying(family) if k not in FAMILY]
        groups.setdefault(" ".join(parts) or title, []).append(name)
    return title, groups


def _how_many(names: list[str], runs: dict[str, dict[str, Any]]) -> str:
    """A group's count for its label: its seeds, or its runs where some share a seed (the
    trials of one sweep)."""
    if len(names) == 1:
        return ""
    seeds = {json.dumps(runs[n].get("config", {}).get("seed")) for n in names}
    return f" ({len(names)} {'seeds' if len(seeds) == len(names) else 'runs'})"


def _varying(configs: Iterable[dict[str, Any]]) -> list[str]:
    """The keys whose values are not the same in all of ``configs``, sorted."""
    configs = list(configs)
    keys = dict.fromkeys(k for c in configs for k in c)
    return sorted(
        k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1
    )


def mean_and_band(
    curves: list[tuple[np.ndarray, np.ndarray]], points: int = 200
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The curves interpolated onto a shared x grid (up to where the shortest ends), their
    mean and the half-width of a 95% confidence interval of the mean: Student's t with
    n - 1 degrees of freedom, as a few seeds need (0 for one curve)."""
    end = min(x[-1] for x, _ in curves)
    start = max(x[0] for x, _ in curves)
    grid = np.linspace(start, end, points) if end > start else np.array([end])
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])
    mean = ys.mean(axis=0)
    if len(curves) == 1:
        return grid, mean, np.zeros_like(mean)
    n = len(curves)
    return grid, mean, t_95(n - 1) * ys.std(axis=0, ddof=1) / np.sqrt(n)


# Student's t at 0.975 (a two-sided 95% interval) for 1 to 30 degrees of freedom
_T_95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179)
_T_95 += (2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064)
_T_95 += (2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_95(df: int) -> float:
    """Student's t quantile of a two-sided 95% interval with ``df`` degrees of freedom
    (from a table up to 30, then the first terms of its expansion around 1.96).

    Examples:
        >>> t_95(1), t_95(2), round(t_95(100), 3)
        (12.706, 4.303, 1.984)
    """
    if df < 1:
        raise ValueError(f"a t interval needs at least 1 degree of freedom, got {df}")
    if df <= len(_T_95):
        return _T_95[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def legend_below(fig: Any, ax: Any, most_columns: int = 4) -> None:
    """The legend of ``ax``'s curves below the axes, where it covers no curve: one column
    per curve, up to ``most_columns``, and fewer where long labels would run past the
    figure's edges (a label too long for a line of its own is folded)."""
    handles, labels = ax.get_legend_handles_labels()
    labels = [textwrap.fill(label, 100) for label in labels]
    renderer = fig.canvas.get_renderer()
    for columns in range(min(len(labels), most_columns), 0, -1):
        legend = fig.legend(handles, labels, loc="outside lower center", ncol=columns,
                            fontsize="small")  # fmt: skip
        if columns == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width:
            return
        legend.remove()


def plot_runs(run_dirs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """Draw the returns of ``run_dirs`` (``find_runs``: runs, or what holds them) against
    env steps and wall-clock into the PNG ``out``."""
    plt = pyplot("drawing curves")

    runs, rows = {}, {}
    for run_dir in find_runs(run_dirs):
        meta, result_rows = read_run(run_dir)
        points = [r for r in result_rows if isinstance(r.get(Y), int | float)]
        if not points:
            raise ConfigError(f"{run_dir} has no result with {Y} yet")
        runs[str(run_dir)], rows[str(run_dir)] = meta, points
    title, groups = group_by_config(runs)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
    for label, names in groups.items():
        for ax, (key, _) in zip(axes, X_AXES, strict=True):
            curves = [
                (np.array([r[key] for r in rows[n]]), np.array([r[Y] for r in rows[n]]))
                for n in names
            ]
            grid, mean, band = mean_and_band(curves)
            (line,) = ax.plot(grid, mean, label=label + _how_many(names, runs),
                              marker="o" if len(grid) == 1 else None)  # fmt: skip
            if len(names) > 1:
                ax.fill_between(grid, mean - band, mean + band, alpha=0.25, color=line.get_color())
    for ax, (_, xlabel) in zip(axes, X_AXES, strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("episode return (mean)")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    legend_below(fig, axes[0])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
