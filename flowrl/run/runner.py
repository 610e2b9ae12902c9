"""The training loop shared by the CLI and the Python API: stop criteria, logging,
checkpoints, a progress bar, clean Ctrl-C, recovery from dead workers.

Examples:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0)
    >>> summary = run(algo, stop=StopCriteria(iters=2), output_dir=Path(tempfile.mkdtemp()))
    >>> summary["stopped_by"], summary["iterations"]
    ('iterations', 2)
    >>> algo.stop()
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from flowrl.core.callbacks import CallbackError
from flowrl.core.config import Config, ConfigError
from flowrl.core.context import (
    EPISODE_RETURN_MEAN,
    ITERATION,
    STEPS_SAMPLED,
    STEPS_TRAINED,
    TIME_TOTAL_S,
    WORKER_RESTARTS,
)
from flowrl.core.errors import one_line
from flowrl.core.sample_batch import NonFiniteError
from flowrl.core.schedules import is_schedule, scheduled
from flowrl.learning.acting import Weights
from flowrl.rollout.envs import EndlessEpisodes, EnvError, env_name, reward_threshold
from flowrl.run.checkpoints import BEST, CheckpointWriteError, checkpoint_dir
from flowrl.run.evaluation import EVAL_ITERATION, EVAL_RETURN_MEAN, Evaluation
from flowrl.run.logger import ERROR_FILE, RunLogger, json_text
from flowrl.run.tracking import Guarded, Tracker

if TYPE_CHECKING:  # (the command's --help and usage errors import no torch)
    from flowrl.run.spec import AlgorithmSpec

logger = logging.getLogger(__name__)
# what the progress bar keeps showing from the last result that had it
_SHOWN = {"eval": EVAL_RETURN_MEAN, "win": "selfplay/vs_random/win"}  # SelfPlay's


class Trainable(Protocol):
    """What the loop drives: ``flowrl.Algorithm`` (named here only by its shape, so
    this module, which ``Algorithm.run`` calls, does not import it back)."""

    spec: AlgorithmSpec
    config: Config
    plan: Any
    evaluation: Evaluation
    last_result: dict[str, Any] | None
    unreported: list[dict[str, Any]]

    @property
    def iteration(self) -> int: ...

    def train(self) -> dict[str, Any]: ...

    def rebuild_after_failure(self, broken_workers: Sequence[int] = ()) -> list[str]: ...

    def save(self, path: Path, *, weights: dict[str, Weights] | None = None) -> Path: ...


def _check_stop(algo: Trainable, stop: StopCriteria) -> None:
    """A ConfigError when ``algo`` has met a criterion of ``stop`` already (a second
    ``algo.run(stop={"iters": 3})``: it trained one more); the warnings of
    ``_warn_if_learning_stops``."""
    steps = _steps(algo)
    if steps is not None and not algo.unreported:  # (Algorithm.auto's results: not yet run's)
        reached = {**(algo.last_result or {}), STEPS_SAMPLED: steps[0], ITERATION: algo.iteration}
        stop.check_left(reached, f"{algo.spec.name} on {algo.config.env}", _raise_stop)
    _warn_if_learning_stops(algo.config, stop)


def _raise_stop(field: str) -> str:
    return f"raise stop's {field} to train on, or leave it out"


def _warn_if_learning_stops(config: Config, stop: StopCriteria) -> None:
    """Say so when the run's step budget ends before its replay buffer reaches
    ``learning_starts`` (a preset's 10k steps, say: nothing would be learned at all), or
    after the learning rate's schedule reaches 0 (nothing would be learned after that)."""
    starts = getattr(config, "learning_starts", 0)
    if stop.timesteps is not None and starts >= stop.timesteps:
        logger.warning(
            "learning_starts is %s env steps, at or past this run's stop at %s: the run "
            "fills its replay buffer and learns nothing (--set learning_starts=N)",
            f"{starts:,}",
            f"{stop.timesteps:,}",
        )
    lr = getattr(config, "lr", None)
    if lr is None or not is_schedule(lr) or stop.timesteps is None:
        return
    end = lr[-1][0]
    if scheduled(lr, end) == 0 and end < stop.timesteps:
        logger.warning(
            "lr reaches 0 at %s env steps, before this run's stop at %s: nothing is learned "
            "after it (give lr a schedule of your own, or a constant)",
            f"{end:,.0f}",
            f"{stop.timesteps:,}",
        )


@dataclass
class StopCriteria:
    """Stop when any criterion is met: mean return, env steps, seconds, iterations.
    ``reward`` judges the training return, or with ``on_evaluation`` the evaluation
    return (``flowrl.run.evaluation``), which ``run`` picks when the config evaluates."""

    reward: float | None = None
    timesteps: int | None = None
    time_s: float | None = None
    iters: int | None = None
    on_evaluation: bool = False

    @classmethod
    def of(cls, stop: StopCriteria | Mapping[str, float] | None) -> StopCriteria:
        """``stop`` as criteria: criteria, a mapping of their names, or None (none set).

        Examples:
            >>> StopCriteria.of({"timesteps": 50_000, "reward": 450})
            StopCriteria(reward=450, timesteps=50000, time_s=None, iters=None, on_evaluation=False)
        """
        if stop is None or isinstance(stop, StopCriteria):
            return stop or cls()
        names = ("reward", "timesteps", "time_s", "iters")
        if not isinstance(stop, Mapping):
            raise ConfigError(f"stop takes StopCriteria(...) or a dict of {names}, got {stop!r}")
        for key in stop:
            if key not in names:
                raise ConfigError(f"unknown stop criterion {key!r}; the criteria: {names}")
        return cls(**stop)

    @classmethod
    def default_for(cls, config: Config) -> StopCriteria:
        """The env's registered reward threshold and the default budget: the env steps of
        the run's preset where it gives some (``Preset.budget``), else the algorithm's
        (``default_stop_timesteps``), or iterations for one that samples none (offline)."""
        from flowrl.run.spec import config_preset  # loads torch: not before the CLI parses

        preset = config_preset(config)
        steps = (preset and preset.budget) or config.default_stop_timesteps
        iters = config.default_stop_iters
        return cls(reward=reward_threshold(config.env), timesteps=steps or None, iters=iters)

    def for_config(self, config: Config) -> StopCriteria:
        """These criteria for a run of ``config``: ``default_for`` it when empty, judged
        on the evaluation return when it evaluates. A step budget for a config that
        samples nothing (an offline algorithm's: its default budget is iterations) is a
        ConfigError: the run would never stop."""
        if self.timesteps is not None and not config.default_stop_timesteps:
            raise ConfigError(
                "an offline run samples no env steps, so a step budget (--stop-timesteps) "
                "never stops it: give it iterations (--stop-iters), a time or a reward"
            )
        stop = StopCriteria.default_for(config) if self.is_empty() else self
        return dataclasses.replace(stop, on_evaluation=config.evaluation_interval > 0)

    def is_empty(self) -> bool:
        return all(v is None for v in (self.reward, self.timesteps, self.time_s, self.iters))

    def check_left(
        self, reached: Mapping[str, Any], where: str, remedy: Callable[[str], str]
    ) -> None:
        """A ConfigError when ``reached`` (the last result of ``where``, an algorithm or a
        checkpoint: its env steps and iterations at least) meets a criterion already (they
        count from its start): a run from there trained an iteration more and stopped. The
        line ends with ``remedy`` of the criterion's field name.

        Examples:
            >>> StopCriteria(iters=3).check_left({ITERATION: 3}, "the algorithm", str)
            Traceback (most recent call last):
            ...
            flowrl.core.config.ConfigError: the algorithm has 3 iterations already, ...
        """
        met = self._met(reached)
        if met is None:
            return
        name, key, limit = met
        _, field, _, held, criterion = next(c for c in _CRITERIA if c[0] == name)
        raise ConfigError(
            f"{where} has {held.format(reached[key])} already, at or past the run's "
            f"{criterion.format(limit)}: {remedy(field)}"
        )

    def _criteria(self) -> list[tuple[str, str, float | None]]:
        """Each criterion's name (as ``reason`` gives it), the result key it judges and its
        value, in the order ``reason`` tries them."""
        ret = EVAL_RETURN_MEAN if self.on_evaluation else EPISODE_RETURN_MEAN
        return [(name, key or ret, getattr(self, field)) for name, field, key, *_ in _CRITERIA]

    def thresholds(self) -> dict[str, float]:
        """The criteria as result keys and the values that stop a run (Ray Tune's ``stop``
        takes this form); the evaluation return replaces the training return when
        ``on_evaluation``."""
        return {key: limit for _, key, limit in self._criteria() if limit is not None}

    def reason(self, result: Mapping[str, Any]) -> str | None:
        """The name of the first criterion ``result`` meets (one it lacks the key of, or
        has NaN for, it does not), or None."""
        met = self._met(result)
        return None if met is None else met[0]

    def _met(self, result: Mapping[str, Any]) -> tuple[str, str, float] | None:
        for name, key, limit in self._criteria():
            value = result.get(key, math.nan)
            if limit is not None and math.isfinite(value) and value >= limit:
                return name, key, limit
        return None


#: each stop criterion: the name ``StopCriteria.reason`` gives it, its field, the result
#: key it judges (None: the return, training or evaluation), what a result that meets it
#: holds, and the criterion (in the order ``reason`` tries them)
_CRITERIA = (
    ("reward", "reward", None, "a mean return of {:,.1f}", "stop reward of {:,}"),
    ("timesteps", "timesteps", STEPS_SAMPLED, "{:,} env steps", "budget of {:,} env steps"),
    ("time", "time_s", TIME_TOTAL_S, "{:,.1f} s of training", "time budget of {:,} s"),
    ("iterations", "iters", ITERATION, "{:,} iterations", "budget of {:,} iterations"),
)


@contextlib.contextmanager
def signal_handled(signum: int, handler: Any) -> Iterator[None]:
    """Signal ``signum`` handled by ``handler`` inside, the previous handler after (in the
    main thread; elsewhere signals cannot be set, and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)


#: an interrupt that ``raise_interrupt`` raised, set until the run it was meant for
#: finishes: one that Python swallowed still stops the run at its next result
_INTERRUPTED = threading.Event()


def raise_interrupt(signum: int, frame: Any) -> None:
    """A signal handler that is a Ctrl-C (KeyboardInterrupt), and which ``run`` still
    obeys where Python swallowed it. A handler raises wherever the main thread is, and
    an exception raised inside a weakref callback or a ``__del__`` (importlib's module
    locks have one) is printed as "Exception ignored" and dropped: the run went on."""
    _INTERRUPTED.set()
    raise KeyboardInterrupt


def sigint_ignored() -> contextlib.AbstractContextManager[None]:
    """Ctrl-C is ignored inside: cleanup that a second Ctrl-C would tear, such as the last
    checkpoint, completes."""
    return signal_handled(signal.SIGINT, signal.SIG_IGN)


def _progress_bar(stop: StopCriteria, enabled: bool | None, done: tuple[int, int] = (0, 0)) -> Any:
    """A bar over the run's budget (with its ETA): its env steps when it has a step budget,
    else its iterations when it has an iteration budget (an offline run's, which samples
    nothing), else a counter of env steps; one rate (tqdm's, of what it counts). Drawn on
    stderr when ``enabled`` (None: when stderr is a terminal). It starts at what was
    ``done`` before it, as (env steps, iterations): a restored run's, or the layout
    measurement's, whose results come to it at once; its rate counts only what follows.
    Enabled where stderr is not redrawn (a file, a pipe), it writes a line every
    ``LINE_INTERVAL_S``."""
    from tqdm import tqdm

    by_steps = stop.timesteps is not None or stop.iters is None
    total = stop.timesteps if by_steps else stop.iters
    start = done[0] if by_steps else done[1]
    counted = "{n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
    redrawn = sys.stderr.isatty() or type(sys.stderr).__module__.startswith("ipykernel")
    lines = (enabled or False) and not redrawn  # a log file's, or a CI job's
    bar = tqdm(
        total=total,
        initial=min(start, total or start),
        unit=" steps" if by_steps else " it",
        unit_scale=by_steps,
        disable=not (sys.stderr.isatty() if enabled is None else enabled),
        file=_Lines(sys.stderr) if lines else None,
        dynamic_ncols=not lines,
        mininterval=LINE_INTERVAL_S if lines else 0.5,
        bar_format=("{l_bar}" if lines else "{l_bar}{bar}| ") + counted if total else None,
    )
    bar.counts, bar.lines = STEPS_SAMPLED if by_steps else ITERATION, lines
    return bar


#: seconds between two lines of a progress bar written where it cannot be redrawn
LINE_INTERVAL_S = 30.0


class _Lines:
    """Where a progress bar writes when stderr is a file or a pipe (a log, a CI job's or a
    cluster scheduler's): each of its redraws a line of its own, where their carriage
    returns would have joined an hour's redraws into one line."""

    def __init__(self, file: Any) -> None:
        self.file = file

    def write(self, text: str) -> None:
        line = text.replace("\r", "").strip()
        if line:
            self.file.write(line + "\n")

    def flush(self) -> None:
        self.file.flush()


class FailureBudget:
    """How many dead workers (or replay shards) a run survives, as a rate: ``burst`` at
    once, and one more for every ``iterations_per_failure`` iterations that complete. A
    worker killed every few iterations is replaced for as long as the run lasts; one that
    dies on every try (a broken env) ends the run after ``burst`` replacements.

    Examples:
        >>> budget = FailureBudget(burst=1, iterations_per_failure=2)
        >>> budget.spend(), budget.spend()
        (True, False)
        >>> budget.earn(); budget.earn(); budget.spend()
        True
    """

    def __init__(self, burst: int = 3, iterations_per_failure: float = 2.0) -> None:
        self.burst = burst
        self.iterations_per_failure = iterations_per_failure
        self.tokens = float(burst)
        self.spent = 0

    def spend(self) -> bool:
        """Count one failure; False when the budget is exhausted."""
        self.spent += 1
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def earn(self) -> None:
        """One iteration completed."""
        self.tokens = min(self.burst, self.tokens + 1 / self.iterations_per_failure)


def _train_with_recovery(algo: Trainable, budget: FailureBudget) -> dict[str, Any]:
    """One ``train()``; a dead rollout worker or replay shard, or a remote worker whose env
    raised, is replaced and the plan rebuilt, within the budget. An env that raised in
    this process (no remote workers) ends the run: nothing can replace it."""
    while True:
        try:
            result = _train_watched(algo)
        except (*_ray_actor_errors(), EnvError) as e:
            broken = [e.worker_index] if isinstance(e, EnvError) else []
            if 0 in broken or isinstance(e, EndlessEpisodes):  # no new worker would help
                raise
            if not budget.spend():
                raise RuntimeError(
                    f"{budget.spent} worker failures, faster than the run tolerates "
                    f"({budget.burst} at once, one per {budget.iterations_per_failure:g} "
                    f"iterations after that); the last: {describe_error(e)}{_slow_cause(algo, e)}"
                ) from e
            replaced = algo.rebuild_after_failure(broken)
            algo.plan.context.counters[WORKER_RESTARTS] += len(replaced)
            logger.warning(
                "replaced %s after %s; training goes on",
                ", ".join(replaced) or "nothing",
                describe_error(e),
            )
            continue
        budget.earn()
        return result


def _slow_cause(algo: Trainable, error: BaseException) -> str:
    """For a worker killed for lateness: what runs in the time ``sample_timeout_s`` allows
    (the env's steps and the callbacks' episode hooks, named) and what to do about it."""
    if not getattr(error, "timed_out", None):
        return ""
    config = algo.config
    callbacks = getattr(config, "callbacks", None)
    hooks = f" or the episode hooks of {getattr(callbacks, '__name__', callbacks)}"
    return (
        f": sampling (the steps of env {env_name(config.env)}{hooks if callbacks else ''}) took "
        f"longer than sample_timeout_s={config.sample_timeout_s:g}; raise it (--set "
        f"sample_timeout_s=...) or make them faster"
    )


def _ray_actor_errors() -> tuple[type[BaseException], ...]:
    """Ray's dead-actor error once Ray is imported; a run in-process never imports it
    (a quarter of a second)."""
    ray = sys.modules.get("ray")
    return (ray.exceptions.RayActorError,) if ray is not None else ()


def _train_watched(algo: Trainable) -> dict[str, Any]:
    """``algo.train()``, with a warning when the plan has sampled and trained no env step
    for the config's ``sample_timeout_s``: remote workers that hang are restarted, but an
    env that hangs in this process (``num_workers=0``) cannot be, so at least the run says
    so. A long iteration that moves on (DQN's 10k Atari steps on a slow host) is no hang."""
    limit = algo.config.sample_timeout_s
    if getattr(getattr(algo, "workers", None), "remote_workers", None):
        return algo.train()  # a late remote worker is killed and replaced (Requests)
    returned = threading.Event()

    def watch() -> None:
        seen = _steps(algo)
        while not returned.wait(limit):
            now = _steps(algo)
            if now is None or now == seen:
                logger.warning("no env step for %.0f s: an env step or the plan may hang in "
                               "this process", limit)  # fmt: skip
                return
            seen = now

    threading.Thread(target=watch, name="flowrl-hang-watch", daemon=True).start()
    try:
        return algo.train()
    finally:
        returned.set()


def _steps(algo: Trainable) -> tuple[int, int] | None:
    """The plan's env steps sampled and trained so far (None: a trainable without them)."""
    counters = getattr(getattr(getattr(algo, "plan", None), "context", None), "counters", None)
    if counters is None:
        return None
    return counters.get(STEPS_SAMPLED, 0), counters.get(STEPS_TRAINED, 0)


def describe_error(error: BaseException) -> str:
    """An error in one line: its type, its own message (a Ray task error's cause, not the
    remote traceback) and the file and line that raised it.

    Examples:
        >>> try:
        ...     {}["lr"]
        ... except KeyError as e:
        ...     describe_error(e).split(" (raised at")[0]
        "KeyError: 'lr'"
    """
    if getattr(error, "timed_out", None):
        return error.timed_out
    cause = getattr(error, "cause", None)
    remote = isinstance(cause, BaseException)
    error = cause if remote else error
    line = one_line(error)
    frames = traceback.extract_tb(error.__traceback__)
    if getattr(error, "raised_at", None):  # where an env or a Ray worker raised
        line += f" (raised at {error.raised_at})"
    elif frames:
        line += f" (raised at {frames[-1].filename}:{frames[-1].lineno})"
    elif remote:
        line += " (raised in a Ray worker)"
    return line


def run(
    algo: Trainable,
    *,
    stop: StopCriteria | Mapping[str, float] | None = None,
    output_dir: str | Path | None = None,
    checkpoint_every: int = 0,
    keep_checkpoints: int = 0,
    progress: bool | None = None,
    failure_budget: FailureBudget | None = None,
    trackers: Sequence[Tracker] = (),
) -> dict[str, Any]:
    """Train until a stop criterion of ``stop`` holds (``StopCriteria``, or a dict of its
    names: ``{"timesteps": 100_000}``; default: ``StopCriteria.default_for``).

    With ``output_dir`` (empty, unless ``algo`` was restored: the run goes on there, its
    logs cut back to the checkpoint), writes the run's files and checkpoints (every
    ``checkpoint_every`` iterations, the newest ``keep_checkpoints`` kept if set, and at
    the end). Ctrl-C and an error (re-raised) still write the final checkpoint (unless the
    weights went non-finite: the last good one stays) and the summary. Dead workers are
    replaced within ``failure_budget``. Returns the summary.
    A config that evaluates (``evaluation_interval``) has ``stop.reward`` judged on the
    evaluation return, and keeps ``checkpoints/best``: the weights of the best evaluation.
    ``trackers`` (``flowrl.run.tracking``) get the config, every result and the summary;
    ``progress`` draws a progress bar on stderr (default: when stderr is a terminal)."""
    stop = StopCriteria.of(stop).for_config(algo.config)
    _check_stop(algo, stop)
    budget = failure_budget or FailureBudget()
    pending, algo.unreported = list(algo.unreported), []  # Algorithm.auto's measuring run
    log = _start_logs(algo, output_dir, trackers, logged=algo.iteration - len(pending))
    trackers = [Guarded(tracker) for tracker in trackers]  # a server gone: the run goes on
    bar = _progress_bar(stop, progress, ((_steps(algo) or (0, 0))[0], algo.iteration))
    best, result, stopped_by = -math.inf, algo.last_result, None
    kept, shown = _Kept(keep=keep_checkpoints), {}
    error: Exception | None = None
    try:
        while stopped_by is None or pending:  # every result made is logged
            result = _next_result(algo, pending, budget, stop, bar)
            best = max(best, ret) if math.isfinite(ret := result[EPISODE_RETURN_MEAN]) else best
            for tracker in trackers:
                tracker.log(result)
            if log is not None:
                log.log(result)
            kept.checkpoint(algo, result, output_dir, checkpoint_every)
            _show_progress(bar, stop, result, shown)
            stopped_by = stopped_by or stop.reason(result)
        _score_final_weights(algo, result, kept, output_dir, bar)
    except (KeyboardInterrupt, Exception) as e:  # keep what was made; the caller sees an error
        stopped_by, error = ("error", e) if isinstance(e, Exception) else ("interrupted", None)
        result, best = _log_unlogged(algo, result, pending, log, trackers, best)
    finally:
        bar.close()
    with sigint_ignored():
        summary, error = _finish(
            algo, log, result, (best, kept.best_eval), stopped_by, error, kept.last
        )
        for tracker in trackers:
            tracker.finish(summary)
    if error is not None:
        raise error
    return summary


@dataclass
class _Kept:
    """The checkpoints a run keeps as it goes: every ``checkpoint_every`` iterations (the
    last of them; with ``keep``, the newest ``keep`` on disk), and the weights of the best
    evaluation so far."""

    keep: int = 0
    last: Path | None = None
    best_eval: float = -math.inf

    def checkpoint(
        self, algo: Trainable, result: dict, output_dir: str | Path | None, every: int
    ) -> None:
        """The checkpoints ``result`` is due for, where the run writes (``output_dir``), and
        the best evaluation return so far (which a summary gives whether or not it does)."""
        if output_dir is not None and every and result[ITERATION] % every == 0:
            self.last = algo.save(checkpoint_dir(output_dir, result[ITERATION]))
            if self.keep:  # the older ones go once the new one is written whole
                older = sorted(self.last.parent.glob("checkpoint_*"))[: -self.keep]
                for path in older:
                    shutil.rmtree(path, ignore_errors=True)
        if result.get(EVAL_RETURN_MEAN, -math.inf) > self.best_eval:
            self.best_eval = result[EVAL_RETURN_MEAN]
            if output_dir is not None:
                scored = algo.evaluation.scored_weights
                algo.save(Path(output_dir) / "checkpoints" / BEST, weights=scored)


def _log_unlogged(
    algo: Trainable,
    current: dict[str, Any] | None,
    pending: list[dict[str, Any]],
    log: RunLogger | None,
    trackers: Sequence,
    best: float,
) -> tuple[dict[str, Any] | None, float]:
    """After an error or Ctrl-C: the results made and not logged yet, logged so the run's
    rows match its iterations: the one being logged (``current``, unless its row was
    written), those made before the loop (``pending``: ``Algorithm.auto``'s) and the
    algorithm's last (made, then a hook raised). Returns the last result and the best
    return, with theirs."""
    done = log.last_iteration if log is not None else (current or {}).get(ITERATION, 0)
    unlogged = [current, *pending, algo.last_result]
    pending.clear()
    last = current
    with sigint_ignored():  # a second Ctrl-C waits for the rows, as for the last checkpoint
        for result in {id(r): r for r in unlogged if r and r[ITERATION] > done}.values():
            for tracker in trackers:
                tracker.log(result)
            if log is not None:
                log.log(result)
            ret, last = result[EPISODE_RETURN_MEAN], result
            best = max(best, ret) if math.isfinite(ret) else best
    return last, best


#: the progress bar shows each agent's return in runs of at most this many agents
MAX_AGENTS_SHOWN = 4


def _show_progress(bar: Any, stop: StopCriteria, result: dict[str, Any], shown: dict) -> None:
    """Move the progress bar to the result's env steps or iterations (what it counts; at
    most its total) and show the return against the reward to reach, when there is one,
    and what ``shown`` keeps from earlier results: the last evaluation's return and, in
    self-play, the last win rate against a random player (a zero-sum game's return says
    nothing); the return of each agent, when there are few (a game's players)."""
    target = f"/{stop.reward:g}" if stop.reward is not None else ""
    shown.update({k: result[key] for k, key in _SHOWN.items() if key in result})
    ret = result[EPISODE_RETURN_MEAN]
    # (an offline run's training return is always NaN: its evaluation's says it all)
    quiet = "win" in shown or ("eval" in shown and not math.isfinite(ret))
    postfix = {} if quiet else {"ret": f"{ret:.1f}"}
    agents = {} if quiet else agent_returns(result)
    if len(agents) <= MAX_AGENTS_SHOWN:  # a game's players (its summed return is 0)
        postfix |= {agent: f"{value:.1f}" for agent, value in agents.items()}
    postfix |= {k: f"{v:.2f}" if k == "win" else f"{v:.1f}" for k, v in shown.items()}
    where = "eval" if stop.on_evaluation else "ret"
    if where in postfix:
        postfix[where] += target
    bar.set_postfix(postfix, refresh=False)  # (a bar of lines: drawn with its next line)
    done = result[bar.counts] if bar.total is None else min(result[bar.counts], bar.total)
    bar.update(max(0, done - bar.n))  # (results made before the bar began: behind it)
    if not bar.lines:
        bar.refresh()


def _next_result(
    algo: Trainable,
    pending: list[dict[str, Any]],
    budget: FailureBudget,
    stop: StopCriteria,
    bar: Any,
) -> dict[str, Any]:
    """The next result to log: one made before the loop (``Algorithm.auto``'s), or a new
    one; the last (a stop criterion holds), when it holds no evaluation, with the one still
    running on the evaluation worker waited for, as the progress bar says: it scores the
    final weights."""
    if _INTERRUPTED.is_set():  # raised where Python dropped it (``raise_interrupt``)
        raise KeyboardInterrupt
    if pending:
        return pending.pop(0)
    context = algo.plan.context
    context.step_budget = stop.timesteps  # the iteration ends at the budget, not past it
    try:
        result = _train_with_recovery(algo, budget)
    finally:
        context.step_budget = None  # a train() after the run has whole iterations again
    if stop.reason(result) and EVAL_RETURN_MEAN not in result:
        result.update(algo.evaluation.finish(waiting=lambda what: _waiting_for(bar, what)))
    return result


def _score_final_weights(
    algo: Trainable, last: dict[str, Any], kept: _Kept, output_dir: str | Path | None, bar: Any
) -> None:
    """Where the last row holds the evaluation of earlier weights (one that ended after
    the row before's was logged; with an evaluation every iteration on a worker, always),
    the final weights are scored too where they are due (``Evaluation.score_last``): the
    result counts toward the best evaluation (the summary's, ``checkpoints/best``)."""
    if last.get(EVAL_ITERATION, last[ITERATION]) == last[ITERATION]:
        return
    scores = algo.evaluation.score_last(
        last[ITERATION], waiting=lambda what: _waiting_for(bar, what)
    )
    if scores:
        kept.checkpoint(algo, scores, output_dir, every=0)


def _waiting_for(bar: Any, what: str) -> None:
    bar.set_postfix_str(f"waiting for {what}", refresh=True)


def run_meta(algo: Trainable) -> dict[str, Any]:
    """What a run's config.json holds: the algorithm, its whole config, the plan as text."""
    return {"algo": algo.spec.name, "config": algo.config.to_dict(), "plan": str(algo.plan)}


def _start_logs(
    algo: Trainable, output_dir: str | Path | None, trackers: Sequence[Tracker], *, logged: int
) -> RunLogger | None:
    """The run's files (a fresh directory, or its logs cut back to the checkpoint) and
    config.json; the trackers' start. ``logged``: the iterations already in the logs (0
    for a new run, whose first results may still be unreported)."""
    meta = run_meta(algo)
    log = None
    if output_dir is not None:
        steps = algo.plan.context.counters[STEPS_SAMPLED] if logged else 0
        log = RunLogger(output_dir, resume_iteration=logged, resume_env_steps=steps)
        log.write_json("config.json", meta)
    name = (
        Path(output_dir).name if output_dir is not None else f"{algo.spec.name}_{algo.config.env}"
    )
    try:
        for tracker in trackers:
            tracker.start(name, meta)
    except BaseException:  # (wandb without an API key, say)
        if log is not None and not logged:  # the run never began: its output stays free
            log.discard()
        raise
    return log


def agent_returns(values: Mapping[str, Any]) -> dict[str, float]:
    """A multi-agent run's mean returns by agent id, from its result or summary
    (``agent/<id>/episode_return_mean``).

    Examples:
        >>> agent_returns({"agent/player_1/episode_return_mean": 0.5, "iteration": 3})
        {'player_1': 0.5}
    """
    prefix, suffix = "agent/", f"/{EPISODE_RETURN_MEAN}"
    return {k[len(prefix) : -len(suffix)]: v for k, v in values.items()
            if k.startswith(prefix) and k.endswith(suffix)}  # fmt: skip


def _finish(
    algo: Trainable,
    log: RunLogger | None,
    result: dict[str, Any] | None,
    best: tuple[float, float],
    stopped_by: str,
    error: Exception | None,
    last_checkpoint: Path | None,
) -> tuple[dict[str, Any], Exception | None]:
    """The summary, the final checkpoint and summary.json; returns the summary and the
    error to raise (``error``, or a final checkpoint that could not be written). An
    interrupt meant for the run is spent."""
    _INTERRUPTED.clear()
    summary = {
        "algo": algo.spec.name,
        "env": algo.config.env,
        "iterations": algo.iteration,
        STEPS_SAMPLED: result[STEPS_SAMPLED] if result else 0,
        TIME_TOTAL_S: result[TIME_TOTAL_S] if result else 0.0,
        EPISODE_RETURN_MEAN: result[EPISODE_RETURN_MEAN] if result else math.nan,
        "best_episode_return_mean": best[0] if math.isfinite(best[0]) else math.nan,
        "stopped_by": stopped_by,
    }
    for agent, ret in agent_returns(result or {}).items():  # (a game's sum says little)
        summary[f"agent/{agent}/{EPISODE_RETURN_MEAN}"] = ret
    if math.isfinite(best[1]):
        summary["best_evaluation_episode_return_mean"] = best[1]
    if algo.layout is not None:  # chosen by Algorithm.auto
        summary["layout"] = algo.layout.report()
    if error is not None:
        summary["error"] = describe_error(error)
        if log is not None:
            _write_or_say(log.output_dir / ERROR_FILE, "".join(traceback.format_exception(error)))
    if log is not None:
        path = checkpoint_dir(log.output_dir, algo.iteration)
        try:
            if not isinstance(error, CheckpointWriteError):  # a full disk: no second try
                last_checkpoint = algo.save(path)
        except (NonFiniteError, OSError) as e:  # the last good checkpoint stays the latest
            logger.error("final checkpoint not written: %s", e)
            error = error or e
        except CallbackError as e:  # written; then on_checkpoint raised
            last_checkpoint, error = path, error or e
        summary["checkpoint"] = str(last_checkpoint) if last_checkpoint else None
        _write_or_say(log.output_dir / "summary.json", json_text(summary))
        log.close()
    return summary, error


def _write_or_say(path: Path, text: str) -> None:
    """Write ``path``; on a full disk say so and go on (the run's own error matters more
    than the file that would have told it; a half-written file is removed)."""
    try:
        path.write_text(text)
    except OSError as e:
        path.unlink(missing_ok=True)
        logger.error("%s not written: %s", path.name, e)
