"""The shared state of one execution plan: counters, timers, learner info, source actor.

Every iterator in a plan refers to one :class:`PlanContext`. Operators that join a plan
(subclasses of :class:`flowrl.iter.Operator`) get it as ``self.context`` when the plan is
built, so there are no module-level globals and two plans in one process never mix.

Example:
    >>> ctx = PlanContext()
    >>> ctx.counters[STEPS_SAMPLED] += 200
    >>> with ctx.timer("sample"):
    ...     pass
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Any

STEPS_SAMPLED = "env_steps_sampled"
STEPS_TRAINED = "env_steps_trained"
WEIGHT_BROADCASTS = "num_weight_broadcasts"


class TimerStat:
    """Wall-clock timer over a sliding window of the last ``window`` measurements.

    Example:
        >>> t = TimerStat()
        >>> with t:
        ...     pass
        >>> t.count
        1
    """

    def __init__(self, window: int = 20) -> None:
        self._samples: collections.deque[float] = collections.deque(maxlen=window)
        self._start = 0.0
        self.count = 0
        self.total_s = 0.0

    def __enter__(self) -> TimerStat:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.push(time.perf_counter() - self._start)

    def push(self, seconds: float) -> None:
        self._samples.append(seconds)
        self.count += 1
        self.total_s += seconds

    @property
    def mean_ms(self) -> float:
        """Mean of the window in milliseconds (0 before the first measurement)."""
        return 1000.0 * sum(self._samples) / len(self._samples) if self._samples else 0.0


@dataclass
class PlanContext:
    """Counters, timers and learner info shared by the operators of one plan.

    ``current_actor`` is the Ray actor the item being processed came from (set by
    ``gather_async`` and ``gather_sync``); ``worker`` is the local rollout worker when the
    context lives inside a worker actor (remote-side operators use it). ``checkpointables``
    are plan-owned objects (a replay buffer, say) with ``get_state``/``set_state`` that
    checkpoints keep (see :meth:`register_checkpointable`).
    """

    counters: collections.Counter[str] = field(default_factory=collections.Counter)
    timers: dict[str, TimerStat] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    current_actor: Any = None
    worker: Any = None
    checkpointables: dict[str, Any] = field(default_factory=dict)
    pending_state: dict[str, Any] = field(default_factory=dict)

    def register_checkpointable(self, name: str, obj: Any) -> None:
        """Have checkpoints keep ``obj``'s state; a restored state that arrived before the
        plan was built (plans build on their first pull) is applied now."""
        self.checkpointables[name] = obj
        if name in self.pending_state:
            obj.set_state(self.pending_state.pop(name))

    def timer(self, name: str) -> TimerStat:
        """The timer called ``name``, created on first use."""
        if name not in self.timers:
            self.timers[name] = TimerStat()
        return self.timers[name]
