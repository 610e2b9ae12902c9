"""SampleBatch: a batch of experience as named, contiguous numpy columns of equal length.

Batches cross processes through Ray's object store without copies (numpy arrays travel
out of band). ``len(batch)`` is the number of rows, not the number of columns.

Example:
    >>> b = SampleBatch(obs=np.zeros((4, 2)), rewards=np.ones(4))
    >>> len(b), float(b["rewards"].sum()), len(b[1:3])
    (4, 4.0, 2)
    >>> len(SampleBatch.concat([b, b]))
    8
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

OBS = "obs"
ACTIONS = "actions"
REWARDS = "rewards"
TERMINATEDS = "terminateds"
TRUNCATEDS = "truncateds"
LOGP = "action_logp"
ACTION_DIST_INPUTS = "action_dist_inputs"
VF_PREDS = "vf_preds"
ADVANTAGES = "advantages"
VALUE_TARGETS = "value_targets"


class SampleBatch:
    """Named numpy columns that all have the same number of rows."""

    __slots__ = ("_columns", "_count")

    def __init__(self, columns: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        data = {**(columns or {}), **kwargs}
        self._columns: dict[str, np.ndarray] = {}
        self._count = 0
        for key, value in data.items():
            self[key] = value

    # -- mapping of columns ------------------------------------------------------------
    def __getitem__(self, key: str | slice) -> Any:
        if isinstance(key, slice):
            return SampleBatch({k: v[key] for k, v in self._columns.items()})
        return self._columns[key]

    def __setitem__(self, key: str, value: Any) -> None:
        array = np.ascontiguousarray(value)
        if array.ndim == 0:
            raise ValueError(f"column {key!r} must have a row axis, got a scalar")
        if self._columns and len(array) != self._count:
            raise ValueError(f"column {key!r} has {len(array)} rows, the batch has {self._count}")
        self._columns[key] = array
        self._count = len(array)

    def __contains__(self, key: object) -> bool:
        return key in self._columns

    def keys(self) -> list[str]:
        return list(self._columns)

    def items(self) -> list[tuple[str, np.ndarray]]:
        return list(self._columns.items())

    def __len__(self) -> int:
        return self._count

    @property
    def count(self) -> int:
        """Number of rows."""
        return self._count

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}: {v.dtype}{list(v.shape[1:])}" for k, v in self._columns.items())
        return f"SampleBatch({self._count} rows; {cols})"

    def __getstate__(self) -> dict[str, Any]:
        return {"columns": self._columns, "count": self._count}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._columns = state["columns"]
        self._count = state["count"]

    # -- rows --------------------------------------------------------------------------
    def take(self, indices: np.ndarray) -> SampleBatch:
        """A new batch holding the rows at ``indices`` (a copy)."""
        return SampleBatch({k: v[indices] for k, v in self._columns.items()})

    @staticmethod
    def concat(batches: Sequence[SampleBatch]) -> SampleBatch:
        """Rows of all ``batches`` in order; every batch must have the same columns."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        if len(batches) == 1:
            return batches[0]
        keys = batches[0].keys()
        for b in batches[1:]:
            if b.keys() != keys:
                raise ValueError(f"cannot concat batches with columns {keys} and {b.keys()}")
        return SampleBatch({k: np.concatenate([b[k] for b in batches]) for k in keys})

    def minibatches(
        self, size: int, *, rng: np.random.Generator, drop_last: bool = False
    ) -> Iterator[SampleBatch]:
        """Shuffled minibatches of ``size`` rows that cover every row once.

        The last one is smaller when ``size`` does not divide the batch, unless ``drop_last``.
        """
        if size < 1:
            raise ValueError(f"minibatch size must be >= 1, got {size}")
        order = rng.permutation(self._count)
        for start in range(0, self._count, size):
            idx = order[start : start + size]
            if drop_last and len(idx) < size:
                return
            yield self.take(idx)


class ArrayPool:
    """Arrays that a worker's fragments are written into, reused from one fragment to the
    next instead of fresh memory each time.

    A remote worker's fragment is copied into Ray's object store as soon as ``sample``
    returns, so the next fragment can reuse its memory. Fresh memory costs a page fault per
    4 KiB on first touch: for a Pong fragment (500 steps x 4 envs, 56 MB of frames, written
    once while sampling and once more when the reset steps are dropped) 0.1-0.3 s on a VM,
    up to a tenth of the time it takes to sample it. An array is handed out again only when
    nothing outside the pool still refers to it (its reference count says so), so a
    fragment that someone kept, or any view of it, is never overwritten.

    Example:
        >>> pool = ArrayPool()
        >>> address = pool.empty("obs", (2, 3), np.float32).ctypes.data
        >>> pool.empty("obs", (2, 3), np.float32).ctypes.data == address  # not held: reused
        True
        >>> kept = pool.empty("obs", (2, 3), np.float32)[0]  # a view holds its array
        >>> pool.empty("obs", (2, 3), np.float32).ctypes.data == kept.ctypes.data
        False
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        # the references a free array has in ``empty`` (the pool's, the local name's, the
        # count's own), counted the same way rather than assumed: interpreters differ
        probe = {"probe": np.empty(0)}
        array = probe.get("probe")
        self._free_refs = _refs(array)

    def empty(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised array of ``shape`` and ``dtype``, kept under ``key`` for reuse."""
        array = self._arrays.get(key)
        in_use = array is not None and _refs(array) > self._free_refs
        if array is None or in_use or array.shape != shape or array.dtype != dtype:
            array = self._arrays[key] = np.empty(shape, dtype)
        return array


def _refs(array: np.ndarray) -> int:
    return sys.getrefcount(array) - 1  # less the reference of this call's argument


@dataclass
class Fragment:
    """What one worker sampled, time-major (``[T, num_envs, ...]``), before flattening.

    ``valid[t, i]`` is False on the reset steps of NEXT_STEP autoreset (see
    :mod:`flowrl.postprocessing`); ``last_obs`` is the observation after the last step.
    With a ``pool``, the valid rows are gathered into its arrays instead of fresh ones.
    """

    columns: dict[str, np.ndarray]
    valid: np.ndarray
    last_obs: np.ndarray
    pool: ArrayPool | None = None

    def to_batch(self) -> SampleBatch:
        """The valid rows, flattened in time-major order (views of the columns when every
        row is valid: no copy of a fragment's frames)."""
        n = self.valid.size
        if self.valid.all():
            return SampleBatch({k: v.reshape(n, *v.shape[2:]) for k, v in self.columns.items()})
        if self.pool is None:
            return SampleBatch({k: v[self.valid] for k, v in self.columns.items()})
        rows = np.flatnonzero(self.valid)
        batch = {}
        for k, v in self.columns.items():
            flat = v.reshape(n, *v.shape[2:])
            out = self.pool.empty(f"valid/{k}", flat.shape, flat.dtype)[: len(rows)]
            # mode="clip" (the indices are in range anyway): "raise" gathers via a temporary
            batch[k] = np.take(flat, rows, axis=0, out=out, mode="clip")
        return SampleBatch(batch)
