"""StandardMetricsReporting: the training stream becomes one result dict per iteration.

Example:
    >>> results = StandardMetricsReporting(train_op, workers, config)
    >>> next(results)["episode_return_mean"]
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any

from flowrl.config import Config
from flowrl.context import STEPS_SAMPLED, STEPS_TRAINED, PlanContext
from flowrl.iter import LocalIterator, Operator
from flowrl.worker import Episode, WorkerSet


class OncePerIteration(Operator):
    """Passes an item through once an iteration's least time and env steps have elapsed.

    Example:
        >>> train_op.filter(OncePerIteration(min_time_s=1.0, min_env_steps=0))
    """

    def __init__(self, *, min_time_s: float, min_env_steps: int) -> None:
        self.min_time_s = min_time_s
        self.min_env_steps = min_env_steps
        self._last_time = time.perf_counter()
        self._last_steps = 0

    def __call__(self, item: Any) -> bool:
        steps = self.context.counters[STEPS_SAMPLED]
        now = time.perf_counter()
        if now - self._last_time < self.min_time_s or steps - self._last_steps < self.min_env_steps:
            return False
        self._last_time, self._last_steps = now, steps
        return True


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


class CollectMetrics(Operator):
    """Builds the result dict of the results contract from the plan context and the
    episodes the workers finished.

    Example:
        >>> train_op.for_each(CollectMetrics(workers, smoothing_episodes=100))
    """

    def __init__(self, workers: WorkerSet, *, smoothing_episodes: int) -> None:
        self.workers = workers
        self.smoothing_episodes = smoothing_episodes
        self._last_time = time.perf_counter()
        self._last_steps = 0

    def bind(self, context: PlanContext) -> None:
        super().bind(context)
        self._last_steps = context.counters[STEPS_SAMPLED]  # non-zero after a restore
        self._last_time = time.perf_counter()

    def __call__(self, item: Any) -> dict[str, Any]:
        ctx = self.context
        window: collections.deque[Episode] = ctx.info.setdefault(
            "recent_episodes", collections.deque(maxlen=self.smoothing_episodes)
        )
        new = self.workers.collect_episodes()
        window.extend(new)
        ctx.counters["episodes_total"] += len(new)
        ctx.counters["iteration"] += 1
        now = time.perf_counter()
        steps = ctx.counters[STEPS_SAMPLED]
        elapsed = max(now - self._last_time, 1e-9)
        rate = (steps - self._last_steps) / elapsed
        ctx.info["time_total_s"] = ctx.info.get("time_total_s", 0.0) + elapsed
        self._last_time, self._last_steps = now, steps
        returns = [r for r, _ in window]
        result = {
            "iteration": ctx.counters["iteration"],
            "time_total_s": ctx.info["time_total_s"],
            "time_this_iter_s": elapsed,
            "env_steps_sampled": steps,
            "env_steps_trained": ctx.counters[STEPS_TRAINED],
            "episodes_total": ctx.counters["episodes_total"],
            "episodes_this_iter": len(new),
            "episode_return_mean": _mean(returns),
            "episode_return_min": min(returns, default=math.nan),
            "episode_return_max": max(returns, default=math.nan),
            "episode_len_mean": _mean([float(n) for _, n in window]),
            "env_steps_per_s": rate,
        }
        result.update({f"learner/{k}": v for k, v in ctx.info.get("learner", {}).items()})
        result.update({f"timers/{k}_ms": t.mean_ms for k, t in ctx.timers.items()})
        return result


def StandardMetricsReporting(
    train_op: LocalIterator[Any], workers: WorkerSet, config: Config
) -> LocalIterator[dict[str, Any]]:
    """One result per iteration, an iteration lasting at least
    ``config.min_time_s_per_iteration`` and ``config.min_env_steps_per_iteration``.

    Example:
        >>> StandardMetricsReporting(train_op, workers, config)
    """
    return train_op.filter(
        OncePerIteration(
            min_time_s=config.min_time_s_per_iteration,
            min_env_steps=config.min_env_steps_per_iteration,
        )
    ).for_each(CollectMetrics(workers, smoothing_episodes=config.metrics_smoothing_episodes))
