"""Replay storage: a fixed-capacity ring buffer over numpy columns, and samplers on it.

Storage and sampling stay apart: ``ReplayBuffer`` stores rows; a sampler picks them.
``UniformSampler`` picks uniformly; ``PrioritizedSampler`` (Schaul et al. 2016,
https://arxiv.org/abs/1511.05952) picks rows with probability proportional to
``priority ** alpha`` and returns importance weights ``(N * P(i)) ** -beta`` normalised by
their maximum (in the batch, or in the whole buffer). Columns keep their dtype: uint8
frames stay uint8, and stacks of frames (Atari's ``(4, 84, 84)`` observations and next
observations) are kept a frame at a time by a ``FrameStore`` (``flowrl.replay.frames``).

Examples:
    >>> buf = ReplayBuffer(1000, sampler=PrioritizedSampler(1000, alpha=0.6, beta=0.4))
    >>> _ = buf.add(SampleBatch(obs=np.zeros((8, 4), np.float32), rewards=np.ones(8)))
    >>> batch = buf.sample(4)
    >>> sorted(batch.keys())
    ['batch_indexes', 'obs', 'rewards', 'weights']
    >>> buf.update_priorities(batch["batch_indexes"], np.full(4, 2.0))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from flowrl.core.sample_batch import MultiAgentBatch, SampleBatch
from flowrl.replay.frames import FrameStore, stacked_frames
from flowrl.replay.segment_tree import MinTree, SumTree

BATCH_INDEXES = "batch_indexes"
WEIGHTS = "weights"
#: A column of initial priorities a batch may carry (Ape-X workers compute them from their
#: TD errors): a prioritized buffer uses them instead of the largest priority so far. It is
#: not stored.
PRIORITIES = "priorities"


class UniformSampler:
    """Every stored row is equally likely; all importance weights are 1."""

    def on_add(self, indices: np.ndarray, priorities: np.ndarray | None = None) -> None:
        pass

    def sample(self, n: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return rng.integers(0, size, n), np.ones(n, dtype=np.float32)

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        raise TypeError("uniform replay has no priorities; use a PrioritizedSampler")

    def get_state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        pass


class PrioritizedSampler:
    """Proportional prioritized sampling over sum/min segment trees.

    New rows get the largest priority seen so far. ``beta`` anneals linearly to
    ``beta_final`` over the first ``beta_annealing_rows`` sampled rows (0: constant).
    Weights are divided by the largest weight in the batch (``normalize_by="batch"``) or in
    the whole buffer (``"buffer"``, from the min tree). Buffer-wide normalisation lets one
    stale near-zero priority shrink every weight; on CartPole-v1 DQN it collapsed learning.
    """

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_annealing_rows: int = 0,
        eps: float = 1e-6,
        normalize_by: str = "batch",
    ) -> None:
        if alpha < 0 or beta < 0:
            raise ValueError(f"alpha and beta must be >= 0, got {alpha}, {beta}")
        if normalize_by not in ("batch", "buffer"):
            raise ValueError(f"normalize_by must be batch or buffer, got {normalize_by!r}")
        self.normalize_by = normalize_by
        self.alpha, self.eps = alpha, eps
        self.beta_start, self.beta_final = beta, beta_final
        self.beta_annealing_rows = beta_annealing_rows
        self.rows_sampled = 0
        self._sum = SumTree(capacity)
        # the min tree only serves buffer-wide normalisation: don't update it otherwise
        self._min = MinTree(capacity) if normalize_by == "buffer" else None
        self.max_priority = 1.0

    def on_add(self, indices: np.ndarray, priorities: np.ndarray | None = None) -> None:
        """New rows get ``priorities`` when given, else the largest priority so far."""
        if priorities is None:
            self._set(indices, np.full(len(indices), self.max_priority))
        else:
            self.update(indices, priorities)

    def _set(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        scaled = priorities**self.alpha
        self._sum.set(indices, scaled)
        if self._min is not None:
            self._min.set(indices, scaled)

    @property
    def beta(self) -> float:
        if self.beta_annealing_rows <= 0:
            return self.beta_start
        progress = min(1.0, self.rows_sampled / self.beta_annealing_rows)
        return self.beta_start + progress * (self.beta_final - self.beta_start)

    def probabilities(self, indices: np.ndarray) -> np.ndarray:
        """P(i) for the given stored rows."""
        return self._sum.get(indices) / self._sum.total()

    def sample(self, n: int, size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        total = self._sum.total()
        indices = self._sum.find_prefix(rng.random(n) * total)
        indices = np.minimum(indices, size - 1)  # guards float round-off at the top end
        probs = self._sum.get(indices) / total
        weights = (probs * size) ** -self.beta
        if self._min is not None:
            weights /= (self._min.min() / total * size) ** -self.beta
        else:
            weights /= weights.max()
        self.rows_sampled += n
        return indices, weights.astype(np.float32)

    def update(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        priorities = np.abs(np.asarray(priorities, dtype=np.float64)) + self.eps
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self._set(np.asarray(indices), priorities)

    def get_state(self) -> dict:
        """Priorities (the trees), the largest so far and the annealing progress."""
        return {
            "sum": self._sum.nodes,
            "min": None if self._min is None else self._min.nodes,
            "max_priority": self.max_priority,
            "rows_sampled": self.rows_sampled,
        }

    def set_state(self, state: dict) -> None:
        self._sum.nodes = np.array(state["sum"], dtype=np.float64)
        if self._min is not None and state["min"] is not None:
            self._min.nodes = np.array(state["min"], dtype=np.float64)
        self.max_priority = state["max_priority"]
        self.rows_sampled = state["rows_sampled"]


class ReplayBuffer:
    """A ring buffer of ``capacity`` rows over numpy columns, sampled by ``sampler``.

    Columns are allocated on the first ``add`` with the dtypes and shapes of that batch.
    """

    def __init__(
        self,
        capacity: int,
        *,
        sampler: UniformSampler | PrioritizedSampler | None = None,
        seed: int = 0,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.sampler = sampler if sampler is not None else UniformSampler()
        self.rng = np.random.default_rng(seed)
        self._columns: dict[str, np.ndarray] = {}
        self._frames: FrameStore | None = None  # stacked frames, kept once each
        self._next = 0
        self._size = 0
        self.num_added = 0

    def __repr__(self) -> str:
        return f"ReplayBuffer(capacity={self.capacity}, {type(self.sampler).__name__})"

    def __len__(self) -> int:
        return self._size

    def add(self, batch: SampleBatch) -> np.ndarray:
        """Store the rows of ``batch`` (the oldest rows make room); returns their slots.
        A ``PRIORITIES`` column gives the rows' initial priorities."""
        n = len(batch)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        priorities = None
        if PRIORITIES in batch:
            priorities = batch[PRIORITIES]
            batch = SampleBatch({k: v for k, v in batch.items() if k != PRIORITIES})
        if not self._columns and self._frames is None:
            self._allocate(batch)
        elif set(batch.keys()) != self._keys():
            raise ValueError(f"batch columns {batch.keys()} differ from {sorted(self._keys())}")
        keep = min(n, self.capacity)  # a batch larger than the buffer keeps its last rows
        slots = (self._next + np.arange(keep)) % self.capacity
        for k, col in self._columns.items():
            col[slots] = batch[k][n - keep :]
        self._next = int((self._next + keep) % self.capacity)
        self._size = min(self._size + keep, self.capacity)
        if self._frames is not None:  # the oldest row left is the next to go, once full
            oldest = self._next if self._size == self.capacity else 0
            stacks = {k: batch[k][n - keep :] for k in self._frames.keys}
            self._frames.write(slots, stacks, oldest)
        self.num_added += n
        self.sampler.on_add(slots, None if priorities is None else priorities[n - keep :])
        return slots

    def _allocate(self, batch: SampleBatch) -> None:
        """Columns of ``batch``'s dtypes and row shapes; stacked frames (the first such
        column's shape, and every column of it) go to a ``FrameStore``."""
        stacks = [k for k, v in batch.items() if stacked_frames(v)]
        shape = batch[stacks[0]].shape[1:] if stacks else None
        keys = tuple(k for k in stacks if batch[k].shape[1:] == shape)
        if keys:
            dtype = batch[keys[0]].dtype
            self._frames = FrameStore(
                self.capacity, stack=shape[0], frame=shape[1:], dtype=dtype, keys=keys
            )
        self._columns = {
            k: np.empty((self.capacity, *v.shape[1:]), dtype=v.dtype)
            for k, v in batch.items()
            if k not in keys
        }

    def _keys(self) -> set[str]:
        return set(self._columns) | set(self._frames.keys if self._frames is not None else ())

    def sample(self, n: int) -> SampleBatch:
        """``n`` rows (with replacement), plus ``batch_indexes`` and ``weights`` columns."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        indices, weights = self.sampler.sample(n, self._size, self.rng)
        columns = {k: v[indices] for k, v in self._columns.items()}
        if self._frames is not None:
            columns.update(self._frames.read(indices))
        out = SampleBatch(columns)
        out[BATCH_INDEXES] = indices
        out[WEIGHTS] = weights
        return out

    def sample_after(self, n: int, learning_starts: int) -> SampleBatch | None:
        """``sample(n)`` once the buffer has received ``learning_starts`` rows (at least
        one); ``None`` before that."""
        if self.num_added < max(learning_starts, 1):
            return None
        return self.sample(n)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """New priorities (e.g. absolute TD errors) for rows returned by ``sample``."""
        self.sampler.update(indices, priorities)

    def get_state(self) -> dict:
        """The stored rows, ring position, sampler (priorities) and RNG, for checkpoints."""
        return {
            "columns": {k: v[: self._size] for k, v in self._columns.items()},
            "frames": None if self._frames is None else self._frames.get_state(self._size),
            "size": self._size,
            "next": self._next,
            "num_added": self.num_added,
            "sampler": self.sampler.get_state(),
            "rng": self.rng.bit_generator.state,
        }

    def set_state(self, state: dict) -> None:
        size = state.get("size", len(next(iter(state["columns"].values()), ())))
        if size > self.capacity:
            raise ValueError(f"a checkpoint of {size} rows does not fit capacity {self.capacity}")
        self._columns, self._frames = {}, None
        if state.get("frames") is not None:
            self._frames = FrameStore.from_state(self.capacity, state["frames"])
        for k, v in state["columns"].items():
            self._columns[k] = np.empty((self.capacity, *v.shape[1:]), dtype=v.dtype)
            self._columns[k][:size] = v
        self._size, self._next, self.num_added = size, state["next"], state["num_added"]
        self.sampler.set_state(state["sampler"])
        self.rng.bit_generator.state = state["rng"]


class PolicyBuffers:
    """One replay buffer per policy id, made by ``make(i)`` when the ``i``-th policy's
    first rows arrive (``i`` offsets its seed, so policies sample apart): ``add`` takes a
    ``MultiAgentBatch`` and ``sample_after`` returns one, with ``n`` rows of every policy
    whose buffer is ready. A single-agent run's has one buffer.

    Examples:
        >>> prioritized = lambda i: ReplayBuffer(100, sampler=PrioritizedSampler(100), seed=i)
        >>> buffers = PolicyBuffers(prioritized)
        >>> rows = {"a": SampleBatch(x=np.arange(4)), "b": SampleBatch(x=np.arange(2))}
        >>> buffers.add(MultiAgentBatch(rows, env_steps=4))
        >>> batch = buffers.sample_after(3, learning_starts=3)
        >>> batch
        MultiAgentBatch(3 env steps; a: 3 rows)
        >>> buffers.update_priorities({"a": (batch["a"][BATCH_INDEXES], np.ones(3))})
    """

    def __init__(self, make: Callable[[int], ReplayBuffer]) -> None:
        self._make = make
        self.buffers: dict[str, ReplayBuffer] = {}
        self._kind = repr(make(0))  # an empty buffer allocates nothing

    def __repr__(self) -> str:
        return f"{self._kind} per policy"

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def _buffer(self, policy_id: str) -> ReplayBuffer:
        if policy_id not in self.buffers:
            self.buffers[policy_id] = self._make(len(self.buffers))
        return self.buffers[policy_id]

    def add(self, batch: MultiAgentBatch) -> None:
        for pid, rows in batch.policy_batches.items():
            if len(rows):
                self._buffer(pid).add(rows)

    def sample_after(self, n: int, learning_starts: int) -> MultiAgentBatch | None:
        """``n`` rows of each policy whose buffer has received ``learning_starts`` rows;
        None while none has."""
        parts = {pid: b.sample_after(n, learning_starts) for pid, b in self.buffers.items()}
        ready = {pid: rows for pid, rows in parts.items() if rows is not None}
        return MultiAgentBatch(ready, env_steps=n) if ready else None

    def update_priorities(self, updates: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """New priorities by policy id: ``(row indexes, priorities)`` of its buffer."""
        for pid, (indexes, priorities) in updates.items():
            self.buffers[pid].update_priorities(indexes, priorities)

    def get_state(self) -> dict:
        return {pid: b.get_state() for pid, b in self.buffers.items()}

    def set_state(self, state: dict) -> None:
        for pid, s in state.items():
            self._buffer(pid).set_state(s)
