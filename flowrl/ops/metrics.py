"""StandardMetricsReporting: the training stream becomes one result dict per iteration.

Examples:
    >>> results = StandardMetricsReporting(train_op, workers, config)  # doctest: +SKIP
    >>> next(results)["episode_return_mean"]  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Iterable
from typing import Any

from flowrl.core.config import Config
from flowrl.core.context import (
    ENV_STEPS_PER_S,
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MEAN,
    EPISODES_TOTAL,
    ITERATION,
    LEARNER_INFO,
    STEPS_SAMPLED,
    STEPS_TRAINED,
    TIME_TOTAL_S,
    WORKER_RESTARTS,
    PlanContext,
)
from flowrl.core.iter import LocalIterator, Operator
from flowrl.learning.multi import POLICY_PREFIX
from flowrl.rollout.episodes import Episode, as_episode
from flowrl.rollout.worker import WorkerSet


class OncePerIteration(Operator):
    """Passes an item through once an iteration's least time and env steps have elapsed,
    or once the plan's env steps reach the run's budget (``PlanContext.step_budget``).

    Examples:
        >>> train_op.filter(OncePerIteration(min_time_s=1.0, min_env_steps=0))  # doctest: +SKIP
    """

    def __init__(self, *, min_time_s: float, min_env_steps: int) -> None:
        self.min_time_s = min_time_s
        self.min_env_steps = min_env_steps
        self._last_time = time.perf_counter()
        self._last_steps = 0

    def bind(self, context: PlanContext) -> None:
        super().bind(context)
        # a restored run's iteration counts from its env steps so far, not from zero (else
        # its first item passed at once: a warm-up iteration of one fragment)
        self._last_steps = context.counters[STEPS_SAMPLED]

    def __call__(self, item: Any) -> bool:
        steps, budget = self.context.counters[STEPS_SAMPLED], self.context.step_budget
        now = time.perf_counter()
        short = (
            now - self._last_time < self.min_time_s or steps - self._last_steps < self.min_env_steps
        )
        if short and (budget is None or steps < budget):
            return False
        self._last_time, self._last_steps = now, steps
        return True


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


class CollectMetrics(Operator):
    """Builds the result dict of the results contract from the plan context and the
    episodes the workers finished. Its window of recent episodes and the run's total time
    are its own state, kept by checkpoints (registered as ``"metrics"``).

    Examples:
        >>> train_op.for_each(CollectMetrics(workers, smoothing_episodes=100))  # doctest: +SKIP
    """

    def __init__(self, workers: WorkerSet, *, smoothing_episodes: int) -> None:
        self._workers = workers
        self.smoothing_episodes = smoothing_episodes
        self._episodes: collections.deque[Episode] = collections.deque(maxlen=smoothing_episodes)
        self._time_total_s = 0.0
        self._worker_metrics: dict[int, dict[str, float]] = {}  # the latest of each worker
        self._last_time = time.perf_counter()
        self._last_steps = 0

    def bind(self, context: PlanContext) -> None:
        super().bind(context)
        self._last_steps = context.counters[STEPS_SAMPLED]  # non-zero after a restore
        self._last_time = time.perf_counter()
        context.register_checkpointable("metrics", self)

    def get_state(self) -> dict[str, Any]:
        return {"episodes": list(self._episodes), "time_total_s": self._time_total_s}

    def set_state(self, state: dict[str, Any]) -> None:
        self._episodes.clear()
        # an episode comes back from a checkpoint as a plain sequence
        self._episodes.extend(as_episode(ep) for ep in state["episodes"])
        self._time_total_s = state["time_total_s"]

    def take_over(self, previous: CollectMetrics) -> None:
        """In a plan rebuilt after a failure: the iteration under way goes on, so the time
        and env steps since ``previous``'s last result (the restart's included) count in it."""
        self.set_state(previous.get_state())
        self._worker_metrics = previous._worker_metrics
        self._last_time, self._last_steps = previous._last_time, previous._last_steps

    def __call__(self, item: Any) -> dict[str, Any]:
        counters = self.context.counters
        new, by_worker = self._workers.collect_metrics(plan=self.context)
        self._episodes.extend(new)
        self._worker_metrics.update(by_worker)
        counters[EPISODES_TOTAL] += len(new)
        counters[ITERATION] += 1
        now = time.perf_counter()
        steps = counters[STEPS_SAMPLED]
        elapsed = max(now - self._last_time, 1e-9)
        rate = (steps - self._last_steps) / elapsed
        self._time_total_s += elapsed
        self._last_time, self._last_steps = now, steps
        returns = [ep.episode_return for ep in self._episodes]
        result = {
            ITERATION: counters[ITERATION],
            TIME_TOTAL_S: self._time_total_s,
            "time_this_iter_s": elapsed,
            STEPS_SAMPLED: steps,
            STEPS_TRAINED: counters[STEPS_TRAINED],
            EPISODES_TOTAL: counters[EPISODES_TOTAL],
            "episodes_this_iter": len(new),
            EPISODE_RETURN_MEAN: _mean(returns),
            "episode_return_min": min(returns, default=math.nan),
            "episode_return_max": max(returns, default=math.nan),
            EPISODE_LEN_MEAN: _mean([float(ep.length) for ep in self._episodes]),
            ENV_STEPS_PER_S: rate,
            WORKER_RESTARTS: counters[WORKER_RESTARTS],
        }
        result.update(agent_returns(self._episodes))
        result.update(custom_metrics(self._episodes))
        learner = self.context.info.get(LEARNER_INFO, {})  # a policy's stats name their policy
        result.update(
            {k if k.startswith(POLICY_PREFIX) else f"learner/{k}": v for k, v in learner.items()}
        )
        for index, metrics in sorted(self._worker_metrics.items()):
            result.update({f"worker_{index}/{k}": v for k, v in metrics.items()})
        result.update({f"timers/{k}_ms": t.mean_ms for k, t in self.context.timers.items()})
        profiler = self.context.profiler
        if profiler is not None:
            profiler.worker_busy(by_worker)
            result.update(profiler.window().results())
        return result


def custom_metrics(episodes: Iterable[Episode]) -> dict[str, float]:
    """``custom/<name>_mean``, ``_min`` and ``_max`` of what episode callbacks reported,
    over the episodes that reported a number for it (a NaN is no value).

    Examples:
        >>> coins = [Episode(1.0, 5, custom={"coins": 2}), Episode(2.0, 6, custom={"coins": 4})]
        >>> custom_metrics([*coins, Episode(0.0, 3)])
        {'custom/coins_mean': 3.0, 'custom/coins_min': 2.0, 'custom/coins_max': 4.0}
        >>> custom_metrics([Episode(1.0, 5, custom={"rate": float("nan")})])
        {}
    """
    by_name: dict[str, list[float]] = {}
    for ep in episodes:
        for name, value in ep.custom.items():
            if not math.isnan(value):
                by_name.setdefault(name, []).append(float(value))
    out = {}
    for name, values in by_name.items():
        out.update({f"custom/{name}_mean": _mean(values), f"custom/{name}_min": min(values),
                    f"custom/{name}_max": max(values)})  # fmt: skip
    return out


def agent_returns(episodes: Iterable[Episode]) -> dict[str, float]:
    """The mean return of each agent (``agent/<id>/episode_return_mean``) and of each
    policy's agents (``policy/<id>/episode_return_mean``) over multi-agent episodes.

    Examples:
        >>> returns = agent_returns([Episode(3.0, 2, {"a": 1.0, "b": 2.0}, {"p": 1.5})])
        >>> returns["agent/b/episode_return_mean"], returns["policy/p/episode_return_mean"]
        (2.0, 1.5)
    """
    by_name: dict[str, list[float]] = {}
    for ep in episodes:
        for prefix, values in (("agent/", ep.agents), (POLICY_PREFIX, ep.policies)):
            for name, value in values.items():
                by_name.setdefault(f"{prefix}{name}/{EPISODE_RETURN_MEAN}", []).append(value)
    return {name: _mean(values) for name, values in by_name.items()}


def StandardMetricsReporting(
    train_op: LocalIterator[Any], workers: WorkerSet, config: Config
) -> LocalIterator[dict[str, Any]]:
    """One result per iteration, an iteration lasting at least
    ``config.min_time_s_per_iteration`` and ``config.min_env_steps_per_iteration``.

    Examples:
        >>> StandardMetricsReporting(train_op, workers, config)  # doctest: +SKIP
    """
    return train_op.filter(
        OncePerIteration(
            min_time_s=config.min_time_s_per_iteration,
            min_env_steps=config.min_env_steps_per_iteration,
        )
    ).for_each(CollectMetrics(workers, smoothing_episodes=config.metrics_smoothing_episodes))
