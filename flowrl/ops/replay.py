"""Replay operators: StoreToReplayBuffer, Replay, UpdatePriorities, UpdateTargets, and
Concurrently to run a plan's branches side by side.

Example:
    >>> store_op = rollouts.for_each(StoreToReplayBuffer(buffer))
    >>> replay_op = Replay(buffer, batch_size=32, learning_starts=1000).for_each(train)
    >>> plan = Concurrently([store_op, replay_op], mode="round_robin", output_indexes=[1])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowrl.context import STEPS_SAMPLED, STEPS_TRAINED
from flowrl.iter import LocalIterator, NotReady, Operator
from flowrl.replay import BATCH_INDEXES, ReplayBuffer
from flowrl.sample_batch import SampleBatch


def Concurrently(
    ops: Sequence[LocalIterator[Any]],
    *,
    mode: str = "round_robin",
    output_indexes: Sequence[int] | None = None,
    round_robin_weights: Sequence[int | str] | None = None,
) -> LocalIterator[Any]:
    """Run several branches of one plan; only the branches in ``output_indexes`` reach the
    output (the others still run, for their side effects).

    ``round_robin``: deterministic turns, ``round_robin_weights[i]`` items from branch ``i``
    per turn (``"*"``: as many as are ready). ``async``: whichever branch has an item.

    Example:
        >>> Concurrently([store_op, train_op], mode="round_robin", output_indexes=[1],
        ...              round_robin_weights=[1, 4])
    """
    if mode not in ("round_robin", "async"):
        raise ValueError(f"mode must be round_robin or async, got {mode!r}")
    if round_robin_weights is not None and mode != "round_robin":
        raise ValueError("round_robin_weights need mode='round_robin'")
    outputs = set(range(len(ops)) if output_indexes is None else output_indexes)
    if not outputs <= set(range(len(ops))):
        raise ValueError(f"output_indexes {sorted(outputs)} out of range for {len(ops)} ops")
    tagged = [op.for_each(_Tag(i)) for i, op in enumerate(ops)]
    merged = tagged[0].union(
        *tagged[1:],
        deterministic=mode == "round_robin",
        round_robin_weights=round_robin_weights,
    )
    out = merged.filter(lambda item: item[0] in outputs).for_each(_untag)
    out.name = f"Concurrently[{mode}, outputs={sorted(outputs)}]({', '.join(o.name for o in ops)})"
    return out


class _Tag:
    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, item: Any) -> tuple[int, Any]:
        return self.index, item

    def __repr__(self) -> str:
        return f"tag[{self.index}]"


def _untag(item: tuple[int, Any]) -> Any:
    return item[1]


class StoreToReplayBuffer(Operator):
    """Adds each batch to a replay buffer and passes it on.

    Example:
        >>> rollouts.for_each(StoreToReplayBuffer(buffer))
    """

    def __init__(self, buffer: ReplayBuffer) -> None:
        self._buffer = buffer

    def __call__(self, batch: SampleBatch) -> SampleBatch:
        self._buffer.add(batch)
        return batch


def Replay(
    buffer: ReplayBuffer, *, batch_size: int, learning_starts: int = 0
) -> LocalIterator[SampleBatch]:
    """Sampled training batches once the buffer has received ``learning_starts`` rows;
    ``NotReady`` before that.

    Example:
        >>> Replay(buffer, batch_size=32, learning_starts=1000).take(1)
    """

    def build(ctx: Any, timeout: float | None):
        while True:
            if buffer.num_added < max(learning_starts, 1):
                yield NotReady
            else:
                yield buffer.sample(batch_size)

    return LocalIterator(build, name=f"Replay(batch_size={batch_size})")


class UpdatePriorities(Operator):
    """Writes new priorities (absolute TD errors) back to the buffer rows a trained batch
    came from. Takes TrainOneStep's ``(batch, stats)`` with ``stats["td_error"]``.

    Example:
        >>> train_op.for_each(UpdatePriorities(buffer))
    """

    def __init__(self, buffer: ReplayBuffer) -> None:
        self._buffer = buffer

    def __call__(self, item: tuple[SampleBatch, dict[str, Any]]) -> Any:
        batch, stats = item
        self._buffer.update_priorities(batch[BATCH_INDEXES], np.abs(stats["td_error"]))
        return item


class UpdateTargets(Operator):
    """Copies the online network into the target network once ``period`` env steps
    (trained, or sampled when ``by="sampled"``) have passed since the last copy, or, with
    ``tau``, blends it in softly after every item (Polyak averaging).

    Example:
        >>> train_op.for_each(UpdateTargets(update_fn, period=500))
    """

    def __init__(
        self,
        update_fn: Callable[[float], None],
        *,
        period: int = 0,
        tau: float | None = None,
        by: str = "trained",
    ) -> None:
        if (tau is None) == (period <= 0):
            raise ValueError("give either period > 0 (hard copies) or tau (soft updates)")
        if by not in ("trained", "sampled"):
            raise ValueError(f"by must be trained or sampled, got {by!r}")
        self._update_fn = update_fn
        self.period, self.tau, self.by = period, tau, by
        self._last = 0

    def __call__(self, item: Any) -> Any:
        if self.tau is not None:
            self._update_fn(self.tau)
            return item
        steps = self.context.counters[STEPS_TRAINED if self.by == "trained" else STEPS_SAMPLED]
        if steps - self._last >= self.period:
            self._update_fn(1.0)
            self._last = steps
            self.context.counters["num_target_updates"] += 1
        return item
