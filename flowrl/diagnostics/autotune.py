"""Automatic layout: how many rollout workers, envs per worker and steps per fragment make
a plan fastest on this machine (``num_workers="auto"``, ``--num-workers auto``).

It measures, for a second or more (14 s on Pong), what the costs are here:

- sampling: seconds per env step of one rollout worker (env step, batched inference and
  post-processing) with each candidate number of envs, and the bytes a step takes;
- learning: the learner's seconds per env step sampled, from a short in-process run of the
  plan itself (its ``learn``/``apply`` timers; that run goes on training when its layout
  wins); whether it learns in the plan's thread (between sampling rounds) or beside the
  sampling (a learner thread in the plan's graph, or remote workers that sample the next
  round while the plan learns: ``sample_ahead``);
- the weights' size,

and predicts each layout's env steps per second with a small model of the plan on this
machine's (or the Ray cluster's) CPUs: workers sample in parallel on the CPUs left, a
learner in the plan's thread waits for the round, a learner thread needs a CPU of its own,
and Ray costs a round trip per request, copies of fragments and weights, and its start.
Every layout keeps the config's env steps per round (workers x envs x fragment length),
so learning sees batches of the same size whatever the layout.

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm.auto("ppo", env="CartPole-v1")  # doctest: +SKIP
    >>> algo.layout.overrides()  # doctest: +SKIP
    {'num_workers': 0, 'num_envs_per_worker': 16, 'rollout_fragment_length': 128}
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from flowrl.core.context import STEPS_SAMPLED, STEPS_TRAINED
from flowrl.core.iter import walk
from flowrl.ops.concurrency import LearnerThread

ENVS_PER_WORKER = (4, 8, 16, 32)
# Ray's costs in the model: a request round trip, copying bytes between processes
# (serialise, object store, load), and starting Ray with its first workers (imports, actor
# processes); source: benchmarks/autotune.py (benchmarks/results/defaults.md)
RAY_ROUND_TRIP_S = 0.002
RAY_BYTES_PER_S = 1.0e9
RAY_START_S = 7.0
# with no step budget given, starting Ray must pay for itself within a run this long
PAYBACK_S = 30.0
# the measuring run of a replay plan starts learning after at most this long of sampling,
# where its config's learning_starts would take longer in one process (DQN's Atari preset:
# 100k env steps, minutes). Such a run only measures, a result per SGD step (the preset's
# iteration of 10k env steps learns for minutes), and the run starts afresh
MEASURING_FILL_S = 10.0


@dataclass
class Costs:
    """What one env step, one learner step and a weight transfer cost here."""

    sample_s: dict[int, float]  # envs per worker -> seconds per env step (one worker)
    step_bytes: float  # bytes of one env step in a fragment
    learn_s: float  # learner seconds per env step sampled
    learner_thread: bool  # learning runs beside sampling, not between rounds
    weight_bytes: int
    cpus: int
    ray_running: bool
    # the in-process layout that was run: (envs, its measured env steps per second)
    measured: tuple[int, float] | None = None
    # remote workers sample the next round while the plan learns (``sample_ahead``)
    rounds_ahead: bool = False


@dataclass
class Layout:
    """A layout, its predicted env steps per second, and why it was chosen."""

    num_workers: int
    num_envs_per_worker: int
    rollout_fragment_length: int
    steps_per_s: float
    reason: str = ""
    #: every layout predicted (left out of the repr: a notebook shows the reason)
    candidates: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def report(self) -> dict[str, Any]:
        """What a run's summary says of the layout: the choice, its prediction, why."""
        return {
            **self.overrides(),
            "predicted_env_steps_per_s": self.steps_per_s,
            "reason": self.reason,
        }

    def overrides(self) -> dict[str, int]:
        """The config values this layout sets."""
        return {
            "num_workers": self.num_workers,
            "num_envs_per_worker": self.num_envs_per_worker,
            "rollout_fragment_length": self.rollout_fragment_length,
        }


def is_auto(values: Mapping[str, Any]) -> bool:
    """Whether ``values`` ask for the automatic layout (``num_workers="auto"``)."""
    return values.get("num_workers") == "auto"


def choose_layout(
    spec: Any,
    config: Any,
    *,
    algorithm_cls: Any,
    plan: Any = None,
    envs: tuple[int, ...] | None = None,
    cpus: int | None = None,
    horizon_steps: int | None = None,
    seconds: float = 1.0,
    min_workers: int = 0,
    until: Callable[[dict[str, Any]], Any] | None = None,
    step_budget: int | None = None,
) -> tuple[Layout, Any, list[dict[str, Any]]]:
    """Measure the costs of ``spec``'s plan (or ``plan``) with ``config`` (its layout
    aside); return the layout with the most env steps per second on ``cpus`` (default: the
    Ray cluster's when Ray runs, else this machine's), the in-process run that measured
    learning when that layout is its own (it goes on training; else, or where it began
    learning early, it is stopped and None comes back) and that run's results. ``until``
    is the run's stop criterion: a measuring run that meets it is the run (it is done);
    ``step_budget`` its env steps, where such a run's last iteration ends (as a run's does).
    ``envs``: the envs per worker to try. With ``horizon_steps``, Ray's start counts
    against the layouts that need it, spread over that many env steps; ``min_workers`` 1
    keeps every layout on Ray (a cluster was named). ``Algorithm.auto`` calls it
    (``algorithm_cls`` runs the plan in-process).

    Examples:
        >>> algo = Algorithm.auto("ppo", env="CartPole-v1")  # doctest: +SKIP
        >>> print(algo.layout.reason)  # doctest: +SKIP
    """
    round_steps, floor = round_of(config), config.min_fragment_length
    envs = [n for n in envs or ENVS_PER_WORKER if round_steps / n >= floor]
    envs = envs or [max(1, round_steps // floor)]
    sample_s, step_bytes = measure_sampling(spec, config, tuple(envs), seconds / 8)
    # learning is measured on the fastest in-process layout, which can then keep going
    in_process = min(sample_s, key=sample_s.get)
    fragment = max(1, round(round_steps / in_process))
    measuring, keeps = _measuring_config(config, in_process, fragment, sample_s[in_process])
    until = until if keeps else None  # a run that only measures is not the run
    run = algorithm_cls(spec, measuring, plan=plan)
    run.plan.context.step_budget = step_budget if keeps else None
    results: list[dict[str, Any]] = []
    with _stopped_on_error(run):
        learn_s, learner_thread, weight_bytes, rate = measure_learning(
            run, seconds, results=results, until=until
        )
    run.plan.context.step_budget = None  # as the run goes on, ``run`` sets it
    cpus = cpus if cpus is not None else cluster_cpus()
    costs = Costs(sample_s, step_bytes, learn_s, learner_thread, weight_bytes, cpus,
                  ray_running(), measured=(in_process, rate),
                  rounds_ahead=bool(getattr(config, "sample_ahead", False)))  # fmt: skip
    layout = best_layout(
        costs, round_steps, horizon_steps=horizon_steps, min_workers=min_workers, floor=floor
    )
    if until is not None and until(results[-1]):
        return _finished_while_measured(in_process, fragment, rate), run, results
    if not keeps or (layout.num_workers, layout.num_envs_per_worker) != (0, in_process):
        run.stop()
        return layout, None, []
    return layout, run, results


def _measuring_config(config: Any, envs: int, fragment: int, step_s: float) -> tuple[Any, bool]:
    """The in-process config that measures learning, and whether its run can be the run:
    not where its buffer takes longer than ``MEASURING_FILL_S`` to fill (``step_s`` a step)
    to ``learning_starts``; it then learns early, with a result per SGD step."""
    layout = {"num_workers": 0, "num_envs_per_worker": envs, "rollout_fragment_length": fragment}
    fill_steps = max(1, int(MEASURING_FILL_S / step_s))
    keeps = getattr(config, "learning_starts", 0) <= fill_steps
    if not keeps:
        layout.update(learning_starts=fill_steps, min_env_steps_per_iteration=0,
                      min_time_s_per_iteration=0.0)  # fmt: skip
    return config.replace(**layout), keeps


def round_of(config: Any) -> int:
    """The env steps of one sampling round of ``config``'s layout (every worker's envs x
    its fragment), which every layout tried keeps."""
    workers = max(1, config.num_workers)
    return workers * config.num_envs_per_worker * config.rollout_fragment_length


@contextlib.contextmanager
def _stopped_on_error(run: Any) -> Iterator[None]:
    """``run`` stopped when what the block does with it fails (or is interrupted)."""
    try:
        yield
    except BaseException:
        run.stop()
        raise


def _finished_while_measured(envs: int, fragment: int, rate: float) -> Layout:
    """The layout of a measuring run that met its stop criterion: it is the run."""
    reason = (
        f"layout auto: in-process (no Ray) x {envs} envs x {fragment} steps, "
        f"~{rate:,.0f} env steps/s measured; the run met its stop criterion while its "
        "learning was measured"
    )
    return Layout(0, envs, fragment, rate, reason)


def best_layout(
    costs: Costs,
    round_steps: int,
    *,
    horizon_steps: int | None = None,
    min_workers: int = 0,
    floor: int = 1,
) -> Layout:
    """The layout the cost model predicts fastest (plain numbers: no Ray, no env); the
    layouts with workers hold at least ``floor`` steps per fragment
    (``Config.min_fragment_length``; ``choose_layout`` measures only the envs per worker
    that keep it in-process).

    When Ray is not running yet, the layouts that need it pay for its start over
    ``horizon_steps`` env steps, or, with no budget given, over what the fastest
    in-process layout samples in ``PAYBACK_S`` seconds (a cheap env on a short run
    stays in-process; Ray must win back its start within half a minute)."""
    if horizon_steps is None:
        in_process = max(predict(costs, 0, envs, 1) for envs in _in_process_envs(costs))
        horizon_steps = int(PAYBACK_S * in_process)
    candidates = []
    for workers in range(min_workers, max(1, min_workers, costs.cpus) + 1):
        for envs in sorted(costs.sample_s) if workers else _in_process_envs(costs):
            fragment = max(1, round(round_steps / (max(workers, 1) * envs)))
            if workers > min_workers and fragment < floor:  # in-process: measured ones only
                continue
            rate = predict(costs, workers, envs, fragment)
            if workers and not costs.ray_running:
                rate = horizon_steps / (horizon_steps / rate + RAY_START_S)
            candidates.append(
                {"num_workers": workers, "num_envs_per_worker": envs, "fragment": fragment}
                | {"steps_per_s": rate}
            )
    best = max(candidates, key=lambda c: c["steps_per_s"])
    return Layout(
        best["num_workers"],
        best["num_envs_per_worker"],
        best["fragment"],
        best["steps_per_s"],
        _reason(best, candidates, costs),
        candidates,
    )


def _in_process_envs(costs: Costs) -> list[int]:
    """The envs counts whose in-process layouts compete: the measured run's alone where
    there is one. It has the cheapest sampling per step, so another count's prediction
    could only beat its measured rate by what the model leaves out: sampling in process
    shares the interpreter with a learner thread, and the fewer the envs the more Python
    each step costs (docs/dataflow.md, "Automatic layout")."""
    return [costs.measured[0]] if costs.measured else sorted(costs.sample_s)


def _reason(best: dict[str, Any], candidates: list[dict[str, Any]], costs: Costs) -> str:
    """Why ``best`` of the ``candidates``: its predicted rate, the costs it comes from, and
    the best rate with another number of workers."""
    runner_up = max(
        (c for c in candidates if c["num_workers"] != best["num_workers"]),
        key=lambda c: c["steps_per_s"],
        default=None,
    )
    where = "in-process (no Ray)" if not best["num_workers"] else f"{best['num_workers']} workers"
    ran = not best["num_workers"] and costs.measured is not None  # in process: the run's
    ahead = ", beside the rounds asked ahead" if costs.rounds_ahead and best["num_workers"] else ""
    reason = (
        f"layout auto: {where} x {best['num_envs_per_worker']} envs x "
        f"{best['fragment']} steps, ~{best['steps_per_s']:,.0f} env steps/s "
        f"{'measured' if ran else 'predicted'} on "
        f"{costs.cpus} CPUs (one env step {1e6 * costs.sample_s[best['num_envs_per_worker']]:.0f}"
        f" us, learning {1e6 * costs.learn_s:.0f} us per env step"
        f"{' on a learner thread' if costs.learner_thread else ''}"
        f"{ahead})"
    )
    if runner_up is not None:
        n = runner_up["num_workers"]
        reason += (
            f"; best with {n or 'no'} worker{'s' if n != 1 else ''}: "
            f"~{runner_up['steps_per_s']:,.0f}/s"
        )
    return reason


def predict(costs: Costs, workers: int, envs: int, fragment: int) -> float:
    """Predicted env steps per second of one layout."""
    sample, learn = costs.sample_s[envs], costs.learn_s
    cpus = max(1, costs.cpus)
    if workers == 0 and costs.measured and costs.measured[0] == envs:
        return costs.measured[1]  # what the in-process run did beats what the model says
    if workers == 0:  # sampling in the plan's thread
        if costs.learner_thread and cpus > 1:
            return 1.0 / max(sample, learn)
        return 1.0 / (sample + learn)
    round_steps = workers * envs * fragment
    # the plan's process deserialises every fragment; weights go out once a round
    copy = costs.step_bytes / RAY_BYTES_PER_S
    weights = 2 * costs.weight_bytes / RAY_BYTES_PER_S / round_steps
    overhead = copy + weights + RAY_ROUND_TRIP_S / (envs * fragment)
    if costs.learner_thread or costs.rounds_ahead:  # learning beside the sampling
        rate = 1.0 / max(learn, 1e-9)
        for _ in range(20):  # the learner thread's CPU share and the workers' settle
            free = max(cpus - min(1.0, learn * rate), 0.25)
            sampling = min(workers, free) / (sample * max(1.0, workers / free))
            rate = min(1.0 / max(learn, 1e-9), 1.0 / (1.0 / sampling + overhead))
        return rate
    # between rounds: workers sample in parallel, then the learner learns while they wait
    per_step = sample * max(1.0, workers / cpus) / workers
    return 1.0 / (per_step + overhead + learn)


def cluster_cpus() -> int:
    """The Ray cluster's CPUs when Ray runs in this process, else this machine's."""
    if ray_running():
        import ray

        return int(ray.cluster_resources().get("CPU", 1))
    return os.cpu_count() or 1


def measure_sampling(
    spec: Any, config: Any, envs: Any, seconds: float
) -> tuple[dict[int, float], float]:
    """Seconds per env step of one rollout worker (one torch thread, as a remote worker
    has) with each number of ``envs``, and the bytes of one env step in a fragment."""
    from flowrl.rollout.worker import RolloutWorker, one_torch_thread

    sample_s, step_bytes = {}, 0.0
    with one_torch_thread():
        for n in envs:
            fragment = max(8, 256 // n)
            cfg = config.replace(
                num_workers=0, num_envs_per_worker=n, rollout_fragment_length=fragment
            )
            worker = RolloutWorker(policy_cls=spec.classes(cfg)[0], config=cfg, worker_index=1)
            try:
                worker.sample()  # warm-up
                steps, start, batch = 0, time.perf_counter(), None
                while time.perf_counter() - start < seconds / len(envs) or not steps:
                    batch = worker.sample()
                    steps += len(batch)
                sample_s[n] = (time.perf_counter() - start) / steps
                step_bytes = len(pickle.dumps(batch, protocol=5)) / len(batch)
            finally:
                worker.close()
    return sample_s, step_bytes


def measure_learning(
    run: Any,
    seconds: float,
    *,
    results: list[dict[str, Any]] | None = None,
    until: Callable[[dict[str, Any]], Any] | None = None,
) -> tuple[float, bool, int, float]:
    """Learner seconds per env step sampled, whether a learner thread does it, the
    weights' bytes and the run's env steps per second, from ``run`` (an in-process
    Algorithm) trained for ``seconds`` and at least two iterations after a first one
    (warm-up: with its replay buffer filling up, until it has trained), or until a result
    meets ``until``. Appends each result to ``results``. Reads the plan's ``learn`` and
    ``apply`` timers: no profiler needed."""
    timers, counters = run.plan.context.timers, run.plan.context.counters
    results = [] if results is None else results

    def learned() -> float:
        return sum(timers[k].total_s for k in ("learn", "apply") if k in timers)

    def done() -> bool:
        return until is not None and bool(until(results[-1]))

    began = time.perf_counter()
    results.append(run.train())
    filling = getattr(run.config, "learning_starts", 0)
    while not done() and counters[STEPS_TRAINED] == 0 and counters[STEPS_SAMPLED] <= filling:
        results.append(run.train())
    start, start_steps, start_learned = time.perf_counter(), counters[STEPS_SAMPLED], learned()
    iterations = 0
    while not done() and (time.perf_counter() - start < seconds or iterations < 2):
        results.append(run.train())
        iterations += 1
    if iterations == 0:  # ``until`` met before the measurement: the whole run measures
        start, start_steps, start_learned = began, 0, 0.0
    elapsed = time.perf_counter() - start
    steps = max(1, counters[STEPS_SAMPLED] - start_steps)
    weights = run.workers.local_worker.get_weights()
    weight_bytes = sum(getattr(w, "nbytes", 0) for w in weights.values())
    learn_s = (learned() - start_learned) / steps
    return learn_s, _has_learner_thread(run.plan), weight_bytes, steps / elapsed


def _has_learner_thread(plan: Any) -> bool:
    return any(isinstance(getattr(it.op, "sends_to", None), LearnerThread) for it in walk(plan))


def ray_running() -> bool:
    """Whether this process has Ray up (without importing it: that alone takes a second)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()
