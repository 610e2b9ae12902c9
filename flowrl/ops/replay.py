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
from flowrl.replay_actor import shard_of
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


ReplayTarget = ReplayBuffer | Sequence[Any]  # a local buffer, or ReplayActor handles


def _is_local(target: ReplayTarget) -> bool:
    if isinstance(target, ReplayBuffer):
        return True
    if isinstance(target, Sequence) and len(target) > 0:
        return False
    raise TypeError(f"expected a ReplayBuffer or a non-empty list of ReplayActors, got {target!r}")


class StoreToReplayBuffer(Operator):
    """Adds each batch to a replay buffer, or to a random replay actor shard, and passes it
    on. Adds to shards do not block; at most ``max_pending_adds`` are in flight. With
    ``checkpoint``, checkpoints of the plan keep the (local) buffer's contents.

    Example:
        >>> rollouts.for_each(StoreToReplayBuffer(buffer))
    """

    def __init__(
        self,
        target: ReplayTarget,
        *,
        seed: int = 0,
        max_pending_adds: int = 16,
        checkpoint: bool = False,
    ) -> None:
        self._local = _is_local(target)
        if checkpoint and not self._local:
            raise ValueError("checkpointing replay shards is not supported; use a local buffer")
        self._checkpoint = checkpoint
        self._target = target
        self._rng = np.random.default_rng(seed)
        self._pending: list[Any] = []
        self._max_pending = max_pending_adds

    def bind(self, context: Any) -> None:
        super().bind(context)
        if self._checkpoint:
            context.register_checkpointable("replay_buffer", self._target)

    def __call__(self, batch: SampleBatch) -> SampleBatch:
        if self._local:
            self._target.add(batch)
            return batch
        import ray

        shard = self._target[self._rng.integers(len(self._target))]
        self._pending.append(shard.add.remote(batch))
        excess = len(self._pending) - self._max_pending
        if excess > 0:
            done, self._pending = ray.wait(self._pending, num_returns=excess)
            ray.get(done)  # raises if a shard failed
        return batch


def Replay(
    target: ReplayTarget, *, batch_size: int, learning_starts: int = 0
) -> LocalIterator[SampleBatch]:
    """Sampled training batches once the buffer has received ``learning_starts`` rows
    (each shard its share of them); ``NotReady`` before that. Over replay actors, every
    shard has one sample request in flight and batches come in completion order.

    Example:
        >>> Replay(buffer, batch_size=32, learning_starts=1000).take(1)
    """
    name = f"Replay(batch_size={batch_size})"
    if not _is_local(target):
        per_shard = -(-learning_starts // len(target))  # ceil
        return LocalIterator(_shard_samples(target, batch_size, per_shard), name=name)

    def build(ctx: Any, timeout: float | None):
        while True:
            batch = target.sample_after(batch_size, learning_starts)
            yield NotReady if batch is None else batch

    return LocalIterator(build, name=name)


def _shard_samples(shards: Sequence[Any], batch_size: int, learning_starts: int):
    def build(ctx: Any, timeout: float | None):
        import ray

        pending = {shard.sample.remote(batch_size, learning_starts): shard for shard in shards}
        while True:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0)
            if not ready:
                yield NotReady
                continue
            shard = pending.pop(ready[0])
            batch = ray.get(ready[0])
            pending[shard.sample.remote(batch_size, learning_starts)] = shard
            yield NotReady if batch is None else batch

    return build


class UpdatePriorities(Operator):
    """Writes new priorities (absolute TD errors) back to the buffer rows, or the replay
    shards, a trained batch came from. Takes TrainOneStep's ``(batch, stats)`` with
    ``stats["td_error"]``.

    Example:
        >>> train_op.for_each(UpdatePriorities(buffer))
    """

    def __init__(self, target: ReplayTarget) -> None:
        self._local = _is_local(target)
        self._target = target

    def __call__(self, item: tuple[SampleBatch, dict[str, Any]]) -> Any:
        batch, stats = item
        indexes, priorities = batch[BATCH_INDEXES], np.abs(stats["td_error"])
        if self._local:
            self._target.update_priorities(indexes, priorities)
            return item
        shards, _ = shard_of(indexes, len(self._target))
        for s in np.unique(shards):
            rows = shards == s
            self._target[s].update_priorities.remote(indexes[rows], priorities[rows])
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
