"""ReplayActor: one shard of a replay buffer held by a Ray actor.

A sharded buffer spreads storage and sampling over several processes (Ape-X's layout).
Each shard owns a ``PolicyBuffers`` (a buffer per policy id); the row indexes it hands out are
global: ``local * num_shards + shard_index``, so ``shard_of`` routes new priorities back
to the shard a row came from, even after batches from several shards were concatenated.
A shard is also the shard of a ``ParallelIterator`` whose every item is
the shard itself, so ``flowrl.ops.Replay`` samples shards through ``gather_async``.

Examples:
    >>> make = lambda i: PolicyBuffers(lambda j: ReplayBuffer(100_000, seed=i + 2 * j))
    >>> shards = create_replay_actors(make, num_shards=2)  # doctest: +SKIP
    >>> rollouts.for_each(StoreToReplayBuffer(shards))  # doctest: +SKIP
    >>> Replay(shards, batch_size=32, learning_starts=1000)  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from flowrl.core.channels import taking_turns
from flowrl.core.iter import NotReady, ParallelIteratorWorker, ray_call
from flowrl.core.sample_batch import MultiAgentBatch
from flowrl.replay.buffer import BATCH_INDEXES, PolicyBuffers


def shard_of(indexes: np.ndarray, num_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """``(shard, local index)`` of each global row index."""
    indexes = np.asarray(indexes)
    return indexes % num_shards, indexes // num_shards


class ReplayActor(ParallelIteratorWorker):
    """One replay shard: adds rows, samples batches, and takes priority updates in global
    row indexes."""

    def __init__(
        self, make_buffer: Callable[[int], PolicyBuffers], *, shard_index: int, num_shards: int
    ) -> None:
        super().__init__(lambda: itertools.repeat(self))
        self.buffer = make_buffer(shard_index)
        self.shard_index, self.num_shards = shard_index, num_shards

    def add(self, batch: MultiAgentBatch) -> None:
        self.buffer.add(batch)

    def sample(self, n: int, learning_starts: int = 0) -> MultiAgentBatch | None:
        """``n`` rows of each policy with global ``batch_indexes``; ``None`` until the
        shard has received ``learning_starts`` rows of one."""
        batch = self.buffer.sample_after(n, learning_starts)
        if batch is None:
            return None
        for rows in batch.policy_batches.values():
            rows[BATCH_INDEXES] = rows[BATCH_INDEXES] * self.num_shards + self.shard_index
        return batch

    def size(self) -> int:
        """Rows stored."""
        return len(self.buffer)

    def update_priorities(self, updates: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """New priorities by policy id: ``(global row indexes, priorities)``."""
        local = {}
        for pid, (indexes, priorities) in updates.items():
            shards, local_indexes = shard_of(indexes, self.num_shards)
            if np.any(shards != self.shard_index):
                raise ValueError(f"shard {self.shard_index} got rows of shards {np.unique(shards)}")
            local[pid] = local_indexes, priorities
        self.buffer.update_priorities(local)


class SampleShard:
    """On a replay actor: a sampled batch of its shard, or ``NotReady`` until the shard has
    received ``learning_starts`` rows. It lives here, not in ``flowrl.ops``, so a shard
    that unpickles it imports numpy and its buffer, not torch.

    Examples:
        >>> shards = ParallelIterator.from_actors(replay_actors)  # doctest: +SKIP
        >>> shards.for_each(SampleShard(32, learning_starts=1000)).gather_async()  # doctest: +SKIP
    """

    def __init__(self, batch_size: int, *, learning_starts: int = 0) -> None:
        self.batch_size, self.learning_starts = batch_size, learning_starts

    def __call__(self, shard: ReplayActor) -> MultiAgentBatch | Any:
        batch = shard.sample(self.batch_size, self.learning_starts)
        return NotReady if batch is None else batch

    def __repr__(self) -> str:
        return f"SampleShard({self.batch_size}, learning_starts={self.learning_starts})"


class ReplayShards(list):
    """The ReplayActors of one sharded buffer (a list of actor handles) that can replace
    the ones that died: ``revive`` recreates them, empty."""

    def __init__(
        self, make_buffer: Callable[[int], PolicyBuffers], *, num_shards: int, num_cpus: float = 0
    ) -> None:
        import ray

        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        self._actor_cls = ray.remote(num_cpus=num_cpus)(taking_turns(ReplayActor))
        self._make_buffer = make_buffer
        super().__init__(self._create(i, num_shards) for i in range(num_shards))

    def _create(self, index: int, num_shards: int) -> Any:
        return self._actor_cls.remote(self._make_buffer, shard_index=index, num_shards=num_shards)

    def revive(self, timeout_s: float = 30) -> list[int]:
        """Recreate, empty, the shards that no longer answer; returns their indexes."""
        import ray

        dead = []
        for i, actor in enumerate(self):
            try:
                ray.get(ray_call(actor, "size"), timeout=timeout_s)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                self[i] = self._create(i, len(self))
                dead.append(i)
        return dead


def create_replay_actors(
    make_buffer: Callable[[int], PolicyBuffers], *, num_shards: int, num_cpus: float = 0
) -> ReplayShards:
    """``num_shards`` ReplayActors; ``make_buffer(shard_index)`` builds each shard's buffer
    inside its actor (a 1M-row buffer is never pickled).

    Examples:
        >>> make = lambda i: PolicyBuffers(lambda j: ReplayBuffer(50_000, seed=i + 4 * j))
        >>> shards = create_replay_actors(make, num_shards=4)  # doctest: +SKIP
    """
    return ReplayShards(make_buffer, num_shards=num_shards, num_cpus=num_cpus)
