"""SampleBatch: a batch of experience as named, contiguous numpy columns of equal length.

Batches cross processes through Ray's object store without copies (numpy arrays travel
out of band). ``len(batch)`` is the number of rows, not the number of columns.

Example:
    >>> b = SampleBatch(obs=np.zeros((4, 2)), rewards=np.ones(4))
    >>> len(b), b["rewards"].sum(), len(b[1:3])
    (4, 4.0, 2)
    >>> len(SampleBatch.concat([b, b]))
    8
"""

from __future__ import annotations

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


@dataclass
class Fragment:
    """What one worker sampled, time-major (``[T, num_envs, ...]``), before flattening.

    ``valid[t, i]`` is False on the reset steps of NEXT_STEP autoreset (see
    :mod:`flowrl.postprocessing`); ``last_obs`` is the observation after the last step.
    """

    columns: dict[str, np.ndarray]
    valid: np.ndarray
    last_obs: np.ndarray

    def to_batch(self) -> SampleBatch:
        """The valid rows, flattened in time-major order (views of the columns when every
        row is valid: no copy of a fragment's frames)."""
        if self.valid.all():
            n = self.valid.size
            return SampleBatch({k: v.reshape(n, *v.shape[2:]) for k, v in self.columns.items()})
        return SampleBatch({k: v[self.valid] for k, v in self.columns.items()})
