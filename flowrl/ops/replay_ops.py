"""Replay operators: StoreToReplayBuffer, Replay, UpdatePriorities, UpdateTargets.

Examples:
    >>> from flowrl.ops import Concurrently
    >>> from flowrl.replay import ReplayBuffer
    >>> buffer = PolicyBuffers(lambda i: ReplayBuffer(100))
    >>> rows = MultiAgentBatch({"default": SampleBatch(obs=np.arange(4))}, env_steps=4)
    >>> store_op = LocalIterator.from_items([rows], repeat=True)
    >>> store_op = store_op.for_each(StoreToReplayBuffer(buffer))
    >>> replay_op = Replay(buffer, batch_size=2, learning_starts=4)
    >>> plan = Concurrently([store_op, replay_op], mode="round_robin", output_indexes=[1])
    >>> plan.take(1)[0]
    MultiAgentBatch(2 env steps; default: 2 rows)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from flowrl.core.config import ArgumentTypeError, ConfigError
from flowrl.core.context import STEPS_SAMPLED, STEPS_TRAINED
from flowrl.core.iter import (
    LocalIterator,
    NotReady,
    Operator,
    ParallelIterator,
    send_call,
    take_result,
    tell,
    wait_for,
)
from flowrl.core.sample_batch import MultiAgentBatch, SampleBatch
from flowrl.replay import BATCH_INDEXES, PolicyBuffers, ReplayBuffer, SampleShard, shard_of

# local buffers (one per policy id), or ReplayActor handles
ReplayTarget = PolicyBuffers | Sequence[Any]


def _is_local(target: ReplayTarget) -> bool:
    if isinstance(target, PolicyBuffers):
        return True
    if isinstance(target, Sequence) and len(target) > 0:
        return False
    hint = ": a buffer per policy, PolicyBuffers(lambda i: ReplayBuffer(...))"
    raise ArgumentTypeError(
        f"expected PolicyBuffers (make_replay) or a non-empty list of ReplayActors, got "
        f"{target!r}{hint if isinstance(target, ReplayBuffer) else ''}"
    )


class StoreToReplayBuffer(Operator):
    """Adds each batch to a replay buffer, or to a random replay actor shard, and passes it
    on. Adds to shards do not block; at most ``max_pending_adds`` are in flight. With
    ``checkpoint``, checkpoints of the plan keep the (local) buffer's contents.

    Examples:
        >>> rollouts.for_each(StoreToReplayBuffer(buffer))  # doctest: +SKIP
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
            raise ConfigError(
                "StoreToReplayBuffer cannot checkpoint replay shards; use a local buffer"
            )
        self._checkpoint = checkpoint
        self._target = target
        self._rng = np.random.default_rng(seed)
        self._pending: list[Any] = []
        self._max_pending = max_pending_adds

    @property
    def sends_to(self) -> ReplayTarget:
        return self._target

    def bind(self, context: Any) -> None:
        super().bind(context)
        if self._checkpoint:
            context.register_checkpointable("replay_buffer", self._target)

    def __call__(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        if self._local:
            self._target.add(batch)
            return batch
        shard = self._target[self._rng.integers(len(self._target))]
        # over the channel Replay's requests take, where it has opened one (add, then sample)
        self._pending.append(send_call(getattr(self, "context", None), shard, "add", batch))
        excess = len(self._pending) - self._max_pending
        if excess > 0:
            done, self._pending = wait_for(self._pending, excess, None)
            for request in done:
                take_result(request)  # raises if a shard failed
        return batch


def Replay(
    target: ReplayTarget,
    *,
    batch_size: int,
    learning_starts: int = 0,
    num_async: int = 1,
    channels: bool = False,
) -> LocalIterator[MultiAgentBatch]:
    """Sampled training batches, ``batch_size`` rows of each policy whose buffer has
    received ``learning_starts`` rows (each shard its share of them); ``NotReady`` before
    that. Over replay actors, every shard has ``num_async`` sample requests in flight and
    batches come in completion order; with ``channels``, over a socket to each shard
    (``flowrl.core.channels``), which ``StoreToReplayBuffer`` and ``UpdatePriorities``
    then send on too.

    Examples:
        >>> Replay(buffer, batch_size=32, learning_starts=1000).take(1)  # doctest: +SKIP
    """
    name = f"Replay(batch_size={batch_size})"
    if not _is_local(target):
        per_shard = -(-learning_starts // len(target))  # ceil
        shards = ParallelIterator.from_actors(
            target, name="ReplayActor", receives_from=target, channels=channels
        )
        sample = SampleShard(batch_size, learning_starts=per_shard)
        return shards.for_each(sample).gather_async(num_async=num_async)

    def build(ctx: Any, timeout: float | None):
        while True:
            batch = target.sample_after(batch_size, learning_starts)
            yield NotReady if batch is None else batch

    return LocalIterator(build, name=name, receives_from=target)


class TrainingIntensity(Operator):
    """A gate for a replay branch (``replay.gate(TrainingIntensity(2.0))``): open while
    env steps trained stay below ``intensity`` times env steps sampled, so a learner that
    could train faster leaves the CPU to sampling.

    Examples:
        >>> from flowrl.core.context import PlanContext
        >>> gate = TrainingIntensity(2.0)
        >>> gate.bind(PlanContext())
        >>> gate.context.counters.update({STEPS_SAMPLED: 100, STEPS_TRAINED: 150})
        >>> gate()
        True
    """

    def __init__(self, intensity: float) -> None:
        if intensity <= 0:
            raise ConfigError(f"TrainingIntensity's intensity must be > 0, got {intensity}")
        self.intensity = intensity

    def __call__(self) -> bool:
        counters = self.context.counters
        return counters[STEPS_TRAINED] < self.intensity * counters[STEPS_SAMPLED]


class SamplingLead(Operator):
    """A gate for a sampling branch (``rollouts.gate(SamplingLead(2.0, lead=4096))``): open
    while env steps sampled stay within ``lead`` of the env steps a learner training at
    ``intensity`` has caught up with (beyond the first ``learning_starts``). A learner slower
    than sampling then keeps its env steps trained per env step sampled, so what a run
    learns per env step does not depend on how busy the machine is; a learner that keeps up
    never shuts it; ``lead=None`` never does.

    Examples:
        >>> from flowrl.core.context import PlanContext
        >>> gate = SamplingLead(2.0, lead=100, learning_starts=1000)
        >>> gate.bind(PlanContext())
        >>> gate()
        True
        >>> gate.context.counters.update({STEPS_SAMPLED: 1200, STEPS_TRAINED: 150})
        >>> gate()
        False
    """

    def __init__(self, intensity: float, *, lead: int | None, learning_starts: int = 0) -> None:
        if intensity <= 0:
            raise ConfigError(f"SamplingLead's intensity must be > 0, got {intensity}")
        self.intensity, self.lead, self.learning_starts = intensity, lead, learning_starts
        self._start: tuple[int, int] | None = None

    def __call__(self) -> bool:
        if self.lead is None:
            return True
        counters = self.context.counters
        if self._start is None:  # counted from this plan's start: a resumed run whose buffer
            # starts empty samples learning_starts again before its learner can train
            self._start = counters[STEPS_SAMPLED], counters[STEPS_TRAINED]
        sampled = counters[STEPS_SAMPLED] - self._start[0]
        trained = counters[STEPS_TRAINED] - self._start[1]
        return sampled <= self.learning_starts + trained / self.intensity + self.lead


class UpdatePriorities(Operator):
    """Writes new priorities (absolute TD errors) back to the buffer rows, or the replay
    shards, a trained batch came from. Takes TrainOneStep's ``(batch, stats)`` with
    each policy's ``stats[policy_id]["td_error"]``.

    Examples:
        >>> train_op.for_each(UpdatePriorities(buffer))  # doctest: +SKIP
    """

    def __init__(self, target: ReplayTarget) -> None:
        self._local = _is_local(target)
        self._target = target

    def __call__(self, item: tuple[MultiAgentBatch, dict[str, Any]]) -> Any:
        batch, stats = item
        updates = {
            pid: (batch[pid][BATCH_INDEXES], np.abs(s["td_error"])) for pid, s in stats.items()
        }
        if self._local:
            self._target.update_priorities(updates)
            return item
        by_shard: dict[int, dict[str, Any]] = defaultdict(dict)
        for pid, (indexes, priorities) in updates.items():
            shards, _ = shard_of(indexes, len(self._target))
            for s in np.unique(shards):
                rows = shards == s
                by_shard[int(s)][pid] = indexes[rows], priorities[rows]
        plan = getattr(self, "context", None)  # None: called outside a plan
        for s, shard_updates in by_shard.items():
            tell(plan, self._target[s], "update_priorities", shard_updates)
        return item


class MixInReplay(Operator):
    """Mixes replayed batches into a stream (IMPALA's replay option). Use it with
    ``combine``: each batch comes out with, on average, ``replay_proportion`` batches
    replayed from the last ``capacity`` it saw (uniformly, seeded).

    Examples:
        >>> mix = MixInReplay(capacity=4, replay_proportion=1.0)
        >>> [len(mix(SampleBatch(x=np.arange(n)))) for n in (1, 2, 3)]  # nothing to replay at first
        [1, 2, 2]
    """

    def __init__(self, *, capacity: int, replay_proportion: float, seed: int = 0) -> None:
        if capacity < 1 or replay_proportion < 0:
            raise ConfigError("MixInReplay needs capacity >= 1 and replay_proportion >= 0")
        self.capacity, self.replay_proportion = capacity, replay_proportion
        self._stored: list[SampleBatch] = []
        self._next = 0
        self._rng = np.random.default_rng(seed)

    def __call__(self, batch: SampleBatch) -> list[SampleBatch]:
        replayed = []
        if self._stored:
            whole, part = divmod(self.replay_proportion, 1.0)
            n = int(whole) + int(self._rng.random() < part)
            replayed = [self._stored[i] for i in self._rng.integers(len(self._stored), size=n)]
        if len(self._stored) < self.capacity:
            self._stored.append(batch)
        else:
            self._stored[self._next] = batch
            self._next = (self._next + 1) % self.capacity
        return [batch, *replayed]
