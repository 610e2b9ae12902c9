"""Shared helpers for the benchmark scripts: timing, a printed table, and the JSON file
each script writes to ``benchmarks/results/<name>.json``."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flowrl.core.tables import print_table  # noqa: F401  (the scripts print their tables with it)

RESULTS = Path(__file__).parent / "results"


def start_ray(logical_cpus: int) -> None:
    """Start Ray with ``logical_cpus``: contenders that take turns all keep their actors
    (and RLlib asks for learner actors too), so the machine's own count would leave some
    unscheduled and the run would wait for them forever."""
    from flowrl import init_ray

    init_ray(num_cpus=logical_cpus, include_dashboard=False, logging_level="ERROR")


def time_per_call(fn: Callable[[], Any], *, repeats: int, warmup: int = 10) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` calls (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def steady(pull: Callable[[], int], seconds: float, warmup: int = 1) -> tuple[float, float]:
    """Steps and seconds of a stream in steady state: the clock starts once ``warmup``
    items have arrived and ``pull`` returns the steps of the next item.

    A pipelined source needs a warm-up of one item per request it keeps in flight (a
    turn): the requests sent when it was built started before the clock and would count
    work done outside the window. The window also ends on a whole turn, so what is in
    flight when the clock stops (not counted) is as far along as it was when it started.
    """
    for _ in range(warmup):
        pull()
    steps, items, start = 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds or items % warmup:
        steps += pull()
        items += 1
    return steps, time.perf_counter() - start


def interleaved(
    measures: dict[str, Callable[[float], tuple[float, float]]], rounds: int, seconds: float
) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Steps per second of each contender over ``rounds`` windows taken in turn, and each
    round's rates (one window per contender) for :func:`ratio_spread`."""
    totals = {name: [0.0, 0.0] for name in measures}
    per_round = []
    names = list(measures)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        this_round = {}
        for name in order:
            steps, elapsed = measures[name](seconds)
            totals[name][0] += steps
            totals[name][1] += elapsed
            this_round[name] = steps / elapsed
        per_round.append(this_round)
        print(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{n} {s / t:,.0f}" for n, (s, t) in totals.items()))  # fmt: skip
    return {name: steps / elapsed for name, (steps, elapsed) in totals.items()}, per_round


def ratio_spread(per_round: list[dict[str, float]], name: str, baseline: str) -> str:
    """The 10th-90th percentile of ``name``'s rate over ``baseline``'s within a round: how
    far one run's ratio can be trusted on a noisy machine (``"0.61-0.70"``)."""
    lo, hi = np.percentile([r[name] / r[baseline] for r in per_round], [10, 90])
    return f"{lo:.2f}-{hi:.2f}"


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """``payload`` plus the machine it ran on, to ``results/<name>.json``; returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    machine = {"python": platform.python_version(), "machine": platform.machine(),
               "processor": platform.processor(), "cpus": _cpu_count()}  # fmt: skip
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    path.write_text(json.dumps({"benchmark": name, "date": stamp, "machine": machine, **payload},
                               indent=2))  # fmt: skip
    print(f"wrote {path}")
    return path


def train_cli(
    algo: str,
    env: str,
    seed: int,
    budget: int,
    out: Path,
    more: list[str],
    stop_reward: float | None = None,
    checkpoint_every: int = 0,
) -> dict:
    """One ``flowrl train`` run as a user runs it (layout auto unless ``more`` sets one) to
    ``budget`` env steps, or to ``stop_reward`` first; its summary, wall time, env steps/s,
    layout and learning curve, or the error's last line.

    With ``checkpoint_every`` the run checkpoints every that many iterations, and a call
    whose ``out`` holds an unfinished run (checkpoints, and no summary or an interrupted
    one) takes it up from its last checkpoint with ``flowrl train --resume``: a run longer
    than a sitting survives being stopped. Its wall time is then the sum of its sittings'.
    An ``out`` with nothing to take up is cleared and the run starts over."""
    last = out / "summary.json"
    ended = last.exists() and json.loads(last.read_text())["stopped_by"] != "interrupted"
    started = (out / "checkpoints").is_dir() and not ended
    if not started:  # nothing to take up (no checkpoints, as DQN's): the run starts over
        shutil.rmtree(out, ignore_errors=True)
    where = ["--resume", str(out)] if started else ["--output", str(out)]
    command = [sys.executable, "-m", "flowrl", "train", algo, "--env", env, "--seed", str(seed),
               "--stop-timesteps", str(budget), *where, "--no-progress", *more]  # fmt: skip
    if stop_reward is not None:
        command += ["--stop-reward", str(stop_reward)]
    if checkpoint_every:  # the newest only: each can hold GBs of replay
        command += ["--checkpoint-every", str(checkpoint_every), "--keep-checkpoints", "1"]
    sittings = out / "sittings_s.txt"  # the wall seconds of the sittings before this one
    before = float(sittings.read_text()) if started and sittings.exists() else 0.0
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True)
    finally:  # stopped by a signal too: the next sitting counts this one's time
        seconds = before + time.perf_counter() - start
        if out.is_dir():
            sittings.write_text(f"{seconds:.1f}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        return {"algo": algo, "env": env, "seed": seed, "error": " ".join(tail),
                "seconds": round(seconds, 1)}  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    steps, curve = summary["env_steps_sampled"], _curve(out / "result.jsonl", budget // 100)
    return {"algo": algo, "env": env, "seed": seed, "stopped_by": summary["stopped_by"],
            "env_steps": steps, "return": summary["episode_return_mean"],
            "seconds": round(seconds, 1), "steps_per_s": round(steps / seconds),
            "layout": _layout(summary, out / "config.json"), "curve": curve}  # fmt: skip


def _curve(log: Path, every: int) -> list[tuple[int, float]]:
    """The run's mean training return about every ``every`` env steps: whether a run
    learned slowly or learned and then fell back."""
    curve, next_at = [], 0
    for line in log.read_text().splitlines():
        row = json.loads(line)
        if row["env_steps_sampled"] >= next_at and row.get("episode_return_mean") is not None:
            curve.append((row["env_steps_sampled"], round(row["episode_return_mean"], 3)))
            next_at = row["env_steps_sampled"] + every
    return curve


def _layout(summary: dict, config: Path) -> str:
    """workers x envs x fragment: the automatic layout's choice, or the run's config where
    none was made (a preset or the arguments set the workers)."""
    layout = summary.get("layout") or json.loads(config.read_text())["config"]
    return "x".join(str(layout.get(k, "?")) for k in
                    ("num_workers", "num_envs_per_worker", "rollout_fragment_length"))  # fmt: skip


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def rllib_available() -> bool:
    try:
        import ray.rllib  # noqa: F401
    except ImportError:
        return False
    return True


def rllib_environment(config: Any, env_id: str) -> Any:
    """An RLlib AlgorithmConfig set to ``env_id`` as flowrl runs it. Atari ids get RLlib's
    own Atari wrappers (84x84 grey, 4 stacked, frame skip 4) and the Nature CNN trunk
    (valid padding) with a 512-unit head, as flowrl's model."""
    from flowrl.rollout.envs import is_atari

    if not is_atari(env_id):
        return config.environment(env_id)
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    register_env("flowrl_rllib_atari", _rllib_atari)
    nature = [[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"]]
    config = config.environment("flowrl_rllib_atari", env_config={"env_id": env_id})
    return config.rl_module(
        model_config=DefaultModelConfig(
            conv_filters=nature, head_fcnet_hiddens=[512], vf_share_layers=True
        )
    )


def _rllib_atari(env_config: dict) -> Any:
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    from flowrl.rollout.envs import check_env_id

    check_env_id(env_config["env_id"])  # registers the ALE envs in the runner process
    env = gym.make(env_config["env_id"], frameskip=1, repeat_action_probability=0.25)
    return wrap_atari_for_new_api_stack(env, dim=84, framestack=4)
