"""Sweeps on Ray Tune: any flowrl algorithm or plan file as a Tune trainable.

``FlowrlTrainable`` is a class trainable with save and restore, so schedulers that
checkpoint and clone trials (PBT) work; each trial also writes flowrl's own run files
(result.jsonl, progress.csv, TensorBoard) under ``TRIAL_DIR/flowrl``. A trial asks Tune for
one CPU plus its rollout workers' (``num_workers x num_cpus_per_worker``), so trials share
the machine's CPUs as their configs need. ``sweep`` runs a grid (and samples) and
returns Tune's ResultGrid; ``resume_sweep`` goes on with one that was interrupted (its
trials checkpoint every minute or so); ``flowrl tune`` is their command.

Examples:
    >>> from ray import tune
    >>> grid = sweep("ppo", {"lr": [1e-3, 3e-4]}, fixed={"num_workers": 0},
    ...              stop={"training_iteration": 2}, storage=Path("sweeps"))  # doctest: +SKIP
    >>> [r.metrics["episode_return_mean"] for r in grid]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flowrl.core.config import ConfigError, check_local_path, parse_set_value, with_dotted

try:
    from ray import tune
except ImportError:  # Ray installed without its tune extra
    raise ConfigError("sweeps need Ray Tune: pip install 'flowrl-ray[tune]'") from None
from ray.tune.result import DONE, SHOULD_CHECKPOINT

from flowrl.core.context import EPISODE_RETURN_MEAN, ITERATION, STEPS_SAMPLED, STEPS_TRAINED
from flowrl.core.errors import one_line
from flowrl.diagnostics.autotune import cluster_cpus
from flowrl.rollout.envs import env_name, register_env, registered_creator
from flowrl.rollout.worker import cpus_held_here
from flowrl.run.algorithm import Algorithm, ensure_ray, get_algorithm, preset_values
from flowrl.run.evaluation import EVAL_RETURN_MEAN
from flowrl.run.logger import LOCK, RunLogger
from flowrl.run.runner import LINE_INTERVAL_S, run_meta, signal_handled
from flowrl.run.spec import AlgorithmSpec, check_keys
from flowrl.run.tracking import quiet_loggers

ALGO_KEY = "_flowrl_algo"  # the trial config's algorithm (a name or path.py:plan)
BUDGET_KEY = "_flowrl_step_budget"  # Tune's stop in env steps: a trial's iterations end there
SAVE_KEY = "_flowrl_checkpoint_every_s"  # a trial's seconds between checkpoints (None: at end)
ENV_KEY = "_flowrl_env_creator"  # an env class or function no trial process could import
OWN_KEYS = (ALGO_KEY, BUDGET_KEY, SAVE_KEY, ENV_KEY)  # flowrl's in a trial's config, not algo's
SWEEP_FILE = "sweep.json"  # in a sweep's storage: its algorithm, keys, name and trials
RUN_FILES = "run"  # in a trial's checkpoint: its flowrl run files up to there
METRIC = EPISODE_RETURN_MEAN  # what trials are ranked by (an offline one's: ``metric``)
RESTORES = "restores"  # in each result: checkpoints of other trials this one took over
SCHEDULERS = ("fifo", "asha", "pbt")
SEARCHES = ("random", "optuna")  # random: Tune's own (grids in full, ranges sampled)
# --space's distributions, as Tune's sampling functions
DISTRIBUTIONS = {
    "uniform": tune.uniform,
    "loguniform": tune.loguniform,
    "randint": tune.randint,
    "choice": lambda *values: tune.choice(list(values)),
}


class FlowrlTrainable(tune.Trainable):
    """A flowrl ``Algorithm`` stepped by Tune: one ``train()`` per
    Tune iteration, its checkpoints Tune's."""

    def setup(self, config: dict[str, Any]) -> None:
        # Ray Train logs a line with the absolute path of every checkpoint it persists
        logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
        values = with_dotted({k: v for k, v in config.items() if k not in OWN_KEYS})
        for key in OUTPUT_KEYS:  # trials run side by side:
            if values.get(key):  # a directory of its own for each, under the one named
                values[key] = str(Path(values[key]) / self.trial_id)
        if config.get(ENV_KEY) is not None:  # a notebook's class, pickled with the config
            register_env(values["env"], config[ENV_KEY])
        self.algo = Algorithm(config[ALGO_KEY], values)
        # trials stop at the same env steps, not an iteration past (timed ones: IMPALA's)
        self.algo.plan.context.step_budget = config.get(BUDGET_KEY)
        self.restores = 0
        self.run_log: RunLogger | None = None
        # a checkpoint every save_every_s, or ten times what the last took (a replay buffer's)
        self.save_every_s, self.saved_at, self.save_s = config.get(SAVE_KEY), time.monotonic(), 0.0

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> tune.PlacementGroupFactory:
        spec = get_algorithm(config[ALGO_KEY])
        defaults = spec.config_cls()
        workers = config.get("num_workers", defaults.num_workers)
        per_worker = config.get("num_cpus_per_worker", defaults.num_cpus_per_worker)
        return tune.PlacementGroupFactory([{"CPU": 1}] + [{"CPU": per_worker}] * workers)

    def step(self) -> dict[str, Any]:
        result = self._logged(self.algo.train())
        # while a replay buffer fills to learning_starts, results come from sampling alone:
        # they go to the trial's run files, and Tune's schedulers (ASHA's rungs, PBT's
        # intervals) count from the first result that trained, comparing trials that learned
        while result[STEPS_TRAINED] == 0 and getattr(self.algo.config, "learning_starts", 0):
            result = self._logged(self.algo.train())
        result = {**result, RESTORES: self.restores}
        since = time.monotonic() - self.saved_at
        if self.save_every_s is not None and since >= max(self.save_every_s, 10 * self.save_s):
            result[SHOULD_CHECKPOINT] = True  # so an interrupted sweep resumes from here
        return result

    def _logged(self, result: dict[str, Any]) -> dict[str, Any]:
        if self.run_log is None:
            self.run_log = self._open_run_log()
        self.run_log.log(result)
        return result

    @property
    def run_dir(self) -> Path:
        """flowrl's run files of this trial, in its working directory."""
        return Path(self.logdir) / "flowrl"

    def _open_run_log(self) -> RunLogger:
        """flowrl's run files for this trial: continued from a restored checkpoint's
        iteration, or started afresh."""
        iteration = self.algo.iteration - 1  # the result about to be logged is new
        if iteration == 0 and self.run_dir.exists():
            shutil.rmtree(self.run_dir)  # a trial started again from scratch
        steps = self.algo.plan.context.counters.get(STEPS_SAMPLED, 0)
        log = RunLogger(self.run_dir, resume_iteration=iteration, resume_env_steps=steps)
        log.write_json("config.json", run_meta(self.algo))
        return log

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        started = time.monotonic()
        self.algo.save(Path(checkpoint_dir) / "flowrl")
        if self.run_dir.exists():  # a resumed sweep starts the trial in a new working directory
            # (but its config.json, written again: a copy with it is a run to flowrl plot)
            shutil.copytree(self.run_dir, Path(checkpoint_dir) / RUN_FILES,
                            ignore=shutil.ignore_patterns(LOCK, "config.json"))  # fmt: skip
        self.saved_at = time.monotonic()
        self.save_s = self.saved_at - started

    def load_checkpoint(self, checkpoint: str) -> None:
        self.algo.restore(Path(checkpoint) / "flowrl")
        if self.run_dir.exists():  # another trial's checkpoint, taken over (PBT's exploit)
            self.restores += 1
        elif (Path(checkpoint) / RUN_FILES).is_dir():  # its own, in a resumed sweep
            shutil.copytree(Path(checkpoint) / RUN_FILES, self.run_dir)
        if self.run_log is not None:  # cut back to the restored iteration on the next step
            self.run_log.close()
            self.run_log = None

    def cleanup(self) -> None:
        if self.run_log is not None:
            self.run_log.close()
        self.algo.stop()


def ended(last: Mapping[str, Any], stop: Mapping[str, float]) -> str:
    """How a trial whose ``last`` result ended it ended: ``done`` where it met ``stop``
    (Tune's: result keys and thresholds) or there is none, else ``stopped early`` (by
    the scheduler: ASHA's rungs).

    Examples:
        >>> ended({"iteration": 4}, {"iteration": 12})
        'stopped early'
    """
    met = any(last.get(key, -math.inf) >= limit for key, limit in stop.items())
    return "done" if met or not stop else "stopped early"


class SweepProgress(tune.Callback):
    """What a sweep says as it goes, on stderr: each trial as it ends (its swept ``keys``'
    values and what it reached, whether it met ``stop`` or its scheduler stopped it early,
    or its error in one line), and every ``interval_s`` how many of the sweep's
    ``trials`` are done, running and waiting, with the best return so far (``ranked_by``).

    Examples:
        >>> SweepProgress(["lr"], trials=4).values({"lr": 0.000123456, "gamma": 0.9})
        'lr=0.0001235'
    """

    def __init__(
        self,
        keys: Sequence[str],
        *,
        trials: int,
        ranked_by: str = METRIC,
        stop: Mapping[str, float] | None = None,
        interval_s: float = LINE_INTERVAL_S,
    ) -> None:
        self.keys, self.trials, self.ranked_by = list(keys), trials, ranked_by
        self.stop = dict(stop or {})
        self.interval_s, self.said_at = interval_s, time.monotonic()

    def setup(self, **info: Any) -> None:
        self.said_at = time.monotonic()  # (a resumed sweep's callback is the one pickled)

    def values(self, config: Mapping[str, Any]) -> str:
        """The swept values of a trial's ``config``, short."""
        shown = {key: config.get(key) for key in self.keys}
        return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in shown.items())  # fmt: skip

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        last = trial.last_result
        self._say(
            f"trial {trial.trial_id} ({self.values(trial.config)}) {ended(last, self.stop)}: "
            f"{self.ranked_by} {last.get(self.ranked_by, math.nan):.4g} at iteration "
            f"{last.get(ITERATION)}, {last.get(STEPS_SAMPLED, 0):,} env steps"
        )

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # (Tune's copy in the sweep's storage comes later: the trial's local one is there)
        written = Path(trial.error_file) if trial.error_file else None
        error = written.read_text() if written and written.exists() else None
        why = trial_error(RuntimeError(error)) if error else "(Tune wrote no error.txt)"
        self._say(f"trial {trial.trial_id} ({self.values(trial.config)}) failed: {why}")

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if time.monotonic() - self.said_at < self.interval_s:
            return
        status = Counter(trial.status for trial in trials)
        done = status["TERMINATED"] + status["ERROR"]
        line = (
            f"{done} of {self.trials} trials ended, {status['RUNNING']} running, "
            f"{max(0, self.trials - done - status['RUNNING'])} waiting"
        )
        scores = [(t.last_result.get(self.ranked_by), t) for t in trials if t.last_result]
        scores = [(score, t) for score, t in scores if score is not None and math.isfinite(score)]
        if scores:
            score, best = max(scores, key=lambda pair: pair[0])
            line += f"; best {self.ranked_by} {score:.4g} ({self.values(best.config)})"
        self._say(line)

    def _say(self, line: str) -> None:
        print(f"flowrl: {line}", file=sys.stderr, flush=True)
        self.said_at = time.monotonic()


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``key=v1,v2`` items (each value read as ``--set`` reads one), or ``key=[v1,v2]``
    (a JSON list, for values that are lists themselves), as ``{key: [v1, v2]}``; a
    ConfigError names a bad one. The bare form is what zsh, the macOS shell, passes
    unquoted: it takes ``[...]`` for a file pattern.

    Examples:
        >>> parse_grid(["lr=0.001,3e-4", "model_hiddens=[[32],[64,64]]"])
        {'lr': [0.001, 0.0003], 'model_hiddens': [[32], [64, 64]]}
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        text = text.strip()
        if not text.startswith("["):
            values = [parse_set_value(v.strip()) for v in text.split(",")] if text else None
        else:
            try:
                values = json.loads(text)
            except ValueError:
                values = None
        if not (key and sep) or not isinstance(values, list) or not values or "" in values:
            raise ConfigError(
                f"--grid expects KEY=V1,V2,... (or a JSON list, KEY='[V1,V2]'), got '{item}'"
            )
        grid[key.strip()] = values
    return grid


def parse_space(items: Sequence[str]) -> dict[str, tuple[str, list[Any]]]:
    """``key=dist(a,b)`` items as ``{key: (dist, [a, b])}``, ``dist`` one of
    ``DISTRIBUTIONS`` and its arguments JSON values; a ConfigError names a bad one.

    Examples:
        >>> parse_space(["lr=loguniform(1e-5, 1e-2)", "num_sgd_iter=choice(2, 4)"])
        {'lr': ('loguniform', [1e-05, 0.01]), 'num_sgd_iter': ('choice', [2, 4])}
    """
    import json
    import re

    space: dict[str, tuple[str, list[Any]]] = {}
    for item in items:
        match = re.fullmatch(r"\s*([\w.]+)\s*=\s*(\w+)\((.*)\)\s*", item)
        try:
            args = json.loads(f"[{match.group(3)}]") if match else None
        except ValueError:
            args = None
        if match is None or args is None or match.group(2) not in DISTRIBUTIONS:
            raise ConfigError(
                f"--space expects KEY=DIST(ARGS), DIST one of {', '.join(DISTRIBUTIONS)}: "
                f"got '{item}'"
            )
        dist = match.group(2)
        if (dist != "choice" and len(args) != 2) or not args:
            wants = "one or more values" if dist == "choice" else "LOW, HIGH"
            raise ConfigError(f"--space {dist} takes {wants}: got '{item}'")
        space[match.group(1)] = (dist, args)
    return space


def check_trials(
    spec: Any,
    fixed: dict[str, Any],
    grid: Mapping[str, list[Any]],
    space: Mapping[str, tuple[str, list[Any]]],
    cpus: float,
    held: Mapping[str, float] | None = None,
) -> str | None:
    """Before Ray starts: every grid value and both ends of every range must be values the
    config takes (a float range for a whole-number key is refused: ``randint`` or ``choice``
    draws those), and every trial must fit on ``cpus`` (one CPU for the trial and its
    workers'), less those ``held`` by this process's algorithms not stopped. Where nothing
    chose the workers, trials run in-process (``fixed`` gets ``num_workers=0``) and the
    returned line says so; a trial that cannot fit is a ConfigError, not a sweep Ray waits
    on forever.

    Examples:
        >>> from flowrl.algorithms.ppo import ALGORITHM
        >>> check_trials(ALGORITHM, {"num_workers": 2}, {"lr": [1e-3]}, {}, cpus=2)
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: each trial reserves 3 CPUs (1 + 2 workers x 1), ...
    """
    defaults = spec.config_cls()
    for key, values in grid.items():
        for value in values:
            spec.config_cls.from_dict(with_dotted({**fixed, key: value}))
    intervals = {fixed.get("evaluation_interval", 1), *grid.get("evaluation_interval", [])}
    if spec.offline and intervals != {1}:  # Tune needs the evaluation in every result
        raise ConfigError(
            f"a sweep of {spec.name} ranks its trials by their evaluation return, which every "
            "result must have: evaluation_interval=1"
        )
    for key, (dist, bounds) in space.items():
        default = getattr(defaults, key, None)  # (a dotted key's entry has none)
        if isinstance(default, int) and not isinstance(default, bool) and "uniform" in dist:
            raise ConfigError(
                f"--space {key}={dist}(...) draws fractions, but {key} takes whole numbers: "
                f"use randint({', '.join(map(str, bounds))}) or choice(...)"
            )
        for value in bounds if dist != "randint" else [bounds[0], bounds[1] - 1]:
            spec.config_cls.from_dict(with_dotted({**fixed, key: value}))
    said = None
    if "num_workers" not in {*fixed, *grid, *space, *preset_values(spec, fixed)}:
        fixed["num_workers"] = 0
        said = "trials run in-process, one CPU each (--num-workers N gives each N workers)"
    config = spec.config_cls.from_dict(fixed)
    _check_trial_fits(config, max(grid.get("num_workers", [config.num_workers])), cpus, held)
    return said


def _check_trial_fits(
    config: Any, workers: int, cpus: float, held: Mapping[str, float] | None
) -> None:
    """A ConfigError unless a trial of ``workers`` workers fits on ``cpus``, less those
    ``held`` by this process's algorithms (naming them)."""
    need, taken = 1 + workers * config.num_cpus_per_worker, sum((held or {}).values())
    if need > cpus - taken and taken:
        raise ConfigError(
            f"each trial reserves {need:g} CPUs, but of this machine's {cpus:g} the workers "
            f"of {', '.join(held)} (built in this process and not stopped) hold {taken:g}: "
            "stop that first (algo.stop())"
        )
    if need > cpus:
        fit = int((cpus - 1) // config.num_cpus_per_worker)
        raise ConfigError(
            f"each trial reserves {need:g} CPUs (1 + {workers} workers x "
            f"{config.num_cpus_per_worker:g}), but this machine has {cpus:g}: set "
            f"--num-workers {fit} or fewer (0: trials in-process)"
        )


def metric(spec: AlgorithmSpec) -> str:
    """What the trials of an algorithm (its ``AlgorithmSpec``) are ranked by: the mean
    return of their episodes, or of their evaluation episodes where it learns from a
    recording (it samples none).

    Examples:
        >>> metric(get_algorithm("ppo")), metric(get_algorithm("bc"))
        ('episode_return_mean', 'evaluation/episode_return_mean')
    """
    return EVAL_RETURN_MEAN if spec.offline else METRIC


def sweep(
    algo: str,
    grid: Mapping[str, list[Any]],
    *,
    fixed: Mapping[str, Any] | None = None,
    stop: Mapping[str, float] | None = None,
    storage: Path,
    name: str = "tune",
    num_samples: int = 1,
    scheduler: str = "fifo",
    perturbation_interval: int = 2,
    space: Mapping[str, tuple[str, list[Any]]] | None = None,
    search: str = "random",
    seed: int | None = None,
    checkpoint_every_s: float | None = 60.0,
) -> tune.ResultGrid:
    """Train ``algo`` once per combination of ``grid`` values (times ``num_samples``) on
    ``fixed`` config values, until Tune's ``stop`` (result keys and thresholds); results
    under ``storage/name``. ``scheduler="pbt"`` runs Population Based Training over the
    grid's values every ``perturbation_interval`` iterations.

    ``space`` holds ranges (``parse_space``) that each trial draws from: at random,
    or with ``search="optuna"``, chosen by Optuna's TPE sampler from the trials so far
    (``num_samples`` trials; Optuna takes ranges, not grids).

    Each trial checkpoints after an iteration that ends ``checkpoint_every_s`` after its
    last checkpoint (or ten times as long as that one took to write; None: at its end
    only), so that ``resume_sweep(storage)`` goes on with an interrupted sweep (Ctrl-C,
    SIGTERM) from there. ``storage`` holds one sweep: a second is refused."""
    space, fixed = dict(space or {}), dict(fixed or {})
    fixed.update({"env": env_name(fixed["env"])} if "env" in fixed else {})  # a class too
    algo = get_algorithm(algo).name  # a plan file's path made absolute: trials run elsewhere
    check_sweep(algo, grid, space, fixed, search, scheduler, stop)
    ensure_ray(None)  # (joining RAY_ADDRESS's cluster: its CPUs are what trials fit on)
    said = check_trials(get_algorithm(algo), fixed, grid, space, cluster_cpus(), cpus_held_here())
    if said:  # (flowrl tune has said it: its fixed values name the workers)
        print(f"flowrl: {said}")
    check_new_sweep(storage)
    grid = {key: [_absolute(key, v) for v in values] for key, values in grid.items()}
    ranked_by = metric(get_algorithm(algo))
    params = _param_space(algo, fixed, grid, space, stop)
    trials = math.prod(len(values) for values in grid.values()) * num_samples
    progress = SweepProgress([*grid, *space], trials=trials, ranked_by=ranked_by, stop=stop)
    tuner = tune.Tuner(
        FlowrlTrainable,
        param_space={**params, SAVE_KEY: checkpoint_every_s},
        tune_config=tune.TuneConfig(
            metric=ranked_by,
            mode="max",
            num_samples=num_samples,
            scheduler=_scheduler(
                scheduler, grid, perturbation_interval, dict(stop or {}).get(ITERATION)
            ),
            search_alg=optuna_search(seed, ranked_by) if search == "optuna" else None,
        ),
        run_config=_run_config(name, storage, stop, scheduler, progress),
    )
    write_sweep(storage, algo=algo, keys=[*grid, *space], name=name, trials=trials,
                scheduler=scheduler, stop=dict(stop or {}))  # fmt: skip
    return _fit(tuner)


def _run_config(
    name: str,
    storage: Path,
    stop: Mapping[str, float] | None,
    scheduler: str,
    progress: SweepProgress,
) -> tune.RunConfig:
    """Tune's RunConfig of a sweep: where it writes, when its trials stop, the
    checkpoints it keeps, what it says as it goes (``progress``, Tune's own quiet)."""
    return tune.RunConfig(
        name=name,
        callbacks=[progress],
        storage_path=str(Path(storage).resolve()),
        stop=dict(stop or {}),
        # PBT exploits recent checkpoints of other trials: keep a few more for it
        checkpoint_config=tune.CheckpointConfig(
            checkpoint_at_end=True, num_to_keep=5 if scheduler == "pbt" else 2
        ),
        # flowrl's run files, written to each trial's local directory, go to storage too
        sync_config=tune.SyncConfig(sync_artifacts=True),
        verbose=0,
    )


def resume_sweep(storage: Path) -> tune.ResultGrid:
    """Go on with the sweep that ``sweep`` started in ``storage`` and an interrupt ended:
    its trials that had not ended go on from their newest checkpoints (from the start where
    they had none, or had not started), failed trials too; those that ended stay as they
    are. The grid, ranges, stop and scheduler are the sweep's, as it was started."""
    saved = resumable_sweep(storage)
    ensure_ray(None)  # (joining RAY_ADDRESS's cluster, as sweep does)
    tuner = tune.Tuner.restore(
        str(Path(storage).resolve() / saved["name"]),
        FlowrlTrainable,
        resume_unfinished=True,
        resume_errored=True,
    )
    return _fit(tuner)


def _fit(tuner: tune.Tuner) -> tune.ResultGrid:
    """Tune's fit, quiet and stopped by SIGTERM as by Ctrl-C: Tune saves the trials'
    state and returns what they reached (SIGTERM's default ended the process at once).
    Ray runs already: ray.init sets a SIGTERM handler of its own, which this one replaces."""

    def interrupt(signum: int, frame: Any) -> None:
        signal.raise_signal(signal.SIGINT)  # Tune's handler, set inside fit

    # Tune's own report of a failed trial is its whole traceback (trial_error says it in a
    # line), "wrote the results to <path>" at the end, and Optuna's "A new study created"
    quiet = quiet_loggers("ray.tune", "ray.train", "optuna", level=logging.CRITICAL)
    with quiet, signal_handled(signal.SIGTERM, interrupt):
        return tuner.fit()


def check_new_sweep(storage: Path) -> None:
    """A ConfigError when ``storage`` holds a sweep already: a second one's trials would
    mix with its trials (in ``flowrl plot``, say), and ``resume_sweep`` goes on with it.
    A URI is one too: a sweep's storage is a directory this machine (or each node) sees."""
    check_local_path("storage", storage)
    if (Path(storage) / SWEEP_FILE).exists():
        raise ConfigError(
            f"{storage} holds a sweep already: go on with it (flowrl tune --resume {storage}, "
            "or resume_sweep), or sweep into another directory"
        )


#: what an interrupted sweep of Population Based Training says instead of how to resume it
PBT_DOES_NOT_RESUME = (
    "Population Based Training does not go on after an interrupt (Tune restores its "
    "trials, not its rounds: they stay paused): sweep again, or with --scheduler asha or "
    "fifo, which do"
)


def resumable_sweep(storage: Path) -> dict[str, Any]:
    """``read_sweep(storage)``; a ConfigError for a sweep that cannot go on (PBT's)."""
    saved = read_sweep(storage)
    if saved["scheduler"] == "pbt":
        raise ConfigError(f"cannot resume the sweep in {storage}: {PBT_DOES_NOT_RESUME}")
    return saved


def write_sweep(storage: Path, **sweep: Any) -> None:
    """What ``resume_sweep`` needs of the sweep in ``storage``: its algorithm, swept keys,
    Tune's name for it, how many trials it runs, its scheduler and stop."""
    Path(storage).mkdir(parents=True, exist_ok=True)
    (Path(storage) / SWEEP_FILE).write_text(json.dumps(sweep, indent=2) + "\n")


def read_sweep(storage: Path) -> dict[str, Any]:
    """What ``sweep`` wrote of the sweep in ``storage`` (``write_sweep``); a ConfigError
    where it holds none."""
    try:
        return json.loads((Path(storage) / SWEEP_FILE).read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{storage} holds no sweep to resume (no {SWEEP_FILE}): give the --output "
            "of a flowrl tune"
        ) from None


def _param_space(
    algo: str,
    fixed: Mapping[str, Any],
    grid: Mapping[str, list[Any]],
    space: Mapping[str, tuple[str, list[Any]]],
    stop: Mapping[str, float] | None,
) -> dict[str, Any]:
    """Tune's ``param_space``: the ``fixed`` values (directories made absolute), the
    ``grid``'s and the ``space``'s, and flowrl's own: the algorithm and ``stop``'s env steps."""
    params = {k: _absolute(k, v) for k, v in fixed.items()}
    params.update({ALGO_KEY: algo, BUDGET_KEY: dict(stop or {}).get(STEPS_SAMPLED)})
    params[ENV_KEY] = registered_creator(params.get("env", ""), only_here=True)
    params.update({key: tune.grid_search(list(values)) for key, values in grid.items()})
    params.update({key: DISTRIBUTIONS[dist](*args) for key, (dist, args) in space.items()})
    return params


#: config values that name a directory a run writes to (each trial gets its own below it)
OUTPUT_KEYS = ("record_experiences", "evaluation_video_dir")
#: config values that name a directory, which Tune's trials (each run in its own directory)
#: must be given whole
PATH_KEYS = ("input", *OUTPUT_KEYS)


def _absolute(key: str, value: Any) -> Any:
    """``value`` of config key ``key``, made absolute where it is a relative directory of
    ``PATH_KEYS`` (a Minari dataset's ``minari:`` id stays as it is).

    Examples:
        >>> _absolute("input", "/data/rec"), _absolute("lr", 0.1)
        ('/data/rec', 0.1)
        >>> _absolute("input", "rec") == str(Path.cwd() / "rec")
        True
    """
    if key in PATH_KEYS and isinstance(value, str) and value and not value.startswith("minari:"):
        return str(Path(value).absolute())
    return value


def check_sweep(
    algo: str,
    grid: Mapping,
    space: Mapping,
    fixed: Mapping,
    search: str,
    scheduler: str,
    stop: Mapping | None = None,
) -> None:
    """A ConfigError, one line, for a key ``algo``'s config lacks, an unknown search or
    scheduler, a search or scheduler given what it cannot use, or a ``stop`` on env steps
    for an offline algorithm (it samples none: its trials would never stop)."""
    spec = get_algorithm(algo)
    if spec.offline and STEPS_SAMPLED in (stop or {}):
        raise ConfigError(
            f"{spec.name} samples no env steps, so {STEPS_SAMPLED} never stops its trials: "
            "stop them on training_iteration"
        )
    check_keys(spec, [*grid, *space, *fixed])
    if search not in SEARCHES:
        raise ConfigError(f"unknown search '{search}'; available: {', '.join(SEARCHES)}")
    if search == "optuna" and (grid or not space):
        raise ConfigError("--search optuna draws from ranges: give --space, not --grid")
    if scheduler == "pbt" and (space or not grid):
        raise ConfigError("--scheduler pbt moves trials between --grid values: give --grid")
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"unknown scheduler '{scheduler}'; available: {', '.join(SCHEDULERS)}")


def _scheduler(
    name: str, grid: Mapping[str, list[Any]], interval: int, iterations: float | None = None
) -> Any:
    """Tune's trial scheduler called ``name`` (None for fifo, Tune's default); PBT moves
    trials between the ``grid``'s values every ``interval`` iterations. ASHA's rungs go up
    to the sweep's ``iterations`` (its own default, 100, ended the best trials there)."""
    if name == "asha":
        most = int(iterations) if iterations else 10**9
        return tune.schedulers.ASHAScheduler(time_attr="training_iteration", max_t=most)
    if name == "pbt":
        return tune.schedulers.PopulationBasedTraining(
            time_attr="training_iteration",
            perturbation_interval=interval,
            hyperparam_mutations={key: list(values) for key, values in grid.items()},
            synch=True,
        )
    return None


def optuna_search(seed: int | None, ranked_by: str = METRIC) -> Any:
    """Tune's Optuna searcher (TPE), maximising ``ranked_by`` (the mean return); a
    ConfigError when optuna is not installed."""
    try:
        import optuna  # noqa: F401  (OptunaSearch imports it only when built)
        from ray.tune.search.optuna import OptunaSearch
    except ImportError:
        raise ConfigError("--search optuna needs optuna: pip install 'flowrl-ray[tune]'") from None
    return OptunaSearch(metric=ranked_by, mode="max", seed=seed)


def trial_error(error: BaseException) -> str:
    """A failed trial's error in one line: what the trial itself raised (a Ray error's
    cause, or the last exception line of a trial actor that died while it was made).

    Examples:
        >>> trial_error(ValueError("lr must be > 0"))
        'ValueError: lr must be > 0'
    """
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    raised = re.findall(r"^([\w.]*(?:Error|Exception|Interrupt)): (.*)$", str(error), re.M)
    if raised and raised[-1][0] != type(error).__name__:  # a traceback's last line
        name, text = raised[-1]
        return f"{name.rsplit('.', 1)[-1]}: {text.strip()}"
    return one_line(error)


def trial_rows(
    grid: tune.ResultGrid | Sequence[Any],
    keys: Sequence[str],
    ranked_by: str = METRIC,
    stop: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """One row per trial: its swept values, iterations, env steps, last and best return
    (``ranked_by``: ``metric``) and status: ``done``, ``stopped early`` (short of the
    sweep's ``stop``, by default the one ``sweep`` kept: ``ended``), ``failed:
    ErrorType``, or, in a sweep that was interrupted, ``unfinished`` or ``not started``."""
    trials = _trials(grid)
    storage = Path(grid.experiment_path).parent if isinstance(grid, tune.ResultGrid) else None
    if stop is None and storage is not None and (storage / SWEEP_FILE).exists():
        stop = read_sweep(storage).get("stop")
    rows = []
    for result in grid:
        metrics = result.metrics or {}  # none: failed at once, or not started
        trial = trials.get(result.path)
        config = result.config or (trial.config if trial is not None else {})
        history = result.metrics_dataframe
        has = history is not None and ranked_by in history
        best = float(history[ranked_by].max()) if has else None
        if result.error is not None:
            status = f"failed: {trial_error(result.error).split(':')[0]}"
        else:
            ran = "unfinished" if has else "not started"
            status = ended(metrics, stop or {}) if metrics.get(DONE) else ran
        rows.append(
            {
                "trial": metrics.get("trial_id", trial.trial_id if trial is not None else "?"),
                **{key: config.get(key) for key in keys},
                # the run's own (``--stop-iters``'), warm-up included: not Tune's
                "iterations": metrics.get(ITERATION),
                "env_steps": metrics.get(STEPS_SAMPLED),
                ranked_by: metrics.get(ranked_by),
                "best": best,
                "status": status,
            }
        )
    return rows


def _trials(grid: tune.ResultGrid | Sequence[Any]) -> dict[str, Any]:
    """A ResultGrid's trials by their directories: the config of one that did not start
    is there, not in its result."""
    if not isinstance(grid, tune.ResultGrid):
        return {}
    # (Tune warns of each trial that has no results yet)
    with quiet_loggers("ray.tune", level=logging.CRITICAL):
        return {trial.path: trial for trial in tune.ExperimentAnalysis(grid.experiment_path).trials}
