"""SampleBatch: a batch of experience as named, contiguous numpy columns of equal length.

Batches cross processes through Ray's object store without copies (numpy arrays travel
out of band). ``len(batch)`` is the number of rows, not the number of columns.

Examples:
    >>> b = SampleBatch(obs=np.zeros((4, 2)), rewards=np.ones(4))
    >>> len(b), float(b["rewards"].sum()), len(b[1:3])
    (4, 4.0, 2)
    >>> len(SampleBatch.concat([b, b]))
    8
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flowrl.core.config import ArgumentTypeError

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
#: the recurrent state a step started from (recurrent policies' fragments); in training
#: rows, each sequence's state at its first valid step, laid over the sequence's rows
#: (``flowrl.learning.postprocessing.sequence_states`` reads it back)
STATE_IN = "state_in"
#: the recurrent state after a step, in ``Policy.compute_actions``'s extras only
STATE_OUT = "state_out"
#: a step's observation before normalisation, in the rows of a policy that normalises
#: (the valid ones update the statistics)
RAW_OBS = "raw_obs"
#: where a recurrent policy's step started from a fresh state (an episode's start): a
#: learner's unroll starts there from the module's ``initial_state``
STATE_STARTS = "state_starts"


class NonFiniteError(RuntimeError):
    """A NaN or infinity reached training: the update that met it was not applied."""


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

    def __delitem__(self, key: str) -> None:
        del self._columns[key]

    def __contains__(self, key: object) -> bool:
        return key in self._columns

    def keys(self) -> list[str]:
        return list(self._columns)

    def items(self) -> list[tuple[str, np.ndarray]]:
        return list(self._columns.items())

    def __len__(self) -> int:
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
    def concat(
        batches: Sequence[SampleBatch], *, pool: ArrayPool | None = None, prefix: str = ""
    ) -> SampleBatch:
        """Rows of all ``batches`` in order; every batch must have the same columns.
        With a ``pool``, written into its arrays (kept under ``prefix`` + column name)
        instead of fresh ones."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        if len(batches) == 1:
            return batches[0]
        keys = batches[0].keys()
        for b in batches[1:]:
            if set(b.keys()) != set(keys):  # in any order
                raise ValueError(f"cannot concat batches with columns {keys} and {b.keys()}")
        columns = {}
        for k in keys:
            parts = [b[k] for b in batches]
            shape = (sum(len(p) for p in parts), *parts[0].shape[1:])
            out = None if pool is None else pool.empty(prefix + k, shape, np.result_type(*parts))
            columns[k] = np.concatenate(parts, out=out)
        return SampleBatch(columns)


#: the policy id of a run with one policy (a single-agent env's)
SINGLE = "default"


class MultiAgentBatch:
    """Rows of one or more policies from the same env steps: one ``SampleBatch`` per
    policy id (a single-agent run's under ``SINGLE``), and the number of env steps they
    came from. Every batch a plan passes on is one of these. ``len()`` is the env steps (an
    env step of three agents is one env step and three rows), which is what
    ``train_batch_size`` and the step counters count.

    Examples:
        >>> a, b = SampleBatch(obs=np.zeros((4, 2))), SampleBatch(obs=np.ones((2, 2)))
        >>> batch = MultiAgentBatch({"ppo": a, "dqn": b}, env_steps=4)
        >>> len(batch), len(batch["dqn"]), batch.policy_ids
        (4, 2, ['ppo', 'dqn'])
        >>> both = MultiAgentBatch.concat([batch, batch])
        >>> len(both), len(both["ppo"]), batch.select(["dqn"]).policy_ids
        (8, 8, ['dqn'])
    """

    __slots__ = ("env_steps", "policy_batches", "reports")

    def __init__(
        self, policy_batches: Mapping[str, SampleBatch], env_steps: int, reports: tuple = ()
    ) -> None:
        self.policy_batches = dict(policy_batches)
        self.env_steps = int(env_steps)
        #: what the workers that sampled these rows reported with them (episodes, metrics),
        #: until the plan's source takes it off (``flowrl.ops.rollouts``)
        self.reports = reports

    @property
    def policy_ids(self) -> list[str]:
        return list(self.policy_batches)

    def __getitem__(self, policy_id: str) -> SampleBatch:
        return self.policy_batches[policy_id]

    def __contains__(self, policy_id: object) -> bool:
        return policy_id in self.policy_batches

    def __len__(self) -> int:
        return self.env_steps

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {len(v)} rows" for k, v in self.policy_batches.items())
        return f"MultiAgentBatch({self.env_steps} env steps; {parts})"

    def select(self, policy_ids: Sequence[str]) -> MultiAgentBatch:
        """The named policies' rows (those this batch has), from the same env steps."""
        kept = {k: v for k, v in self.policy_batches.items() if k in policy_ids}
        return MultiAgentBatch(kept, self.env_steps)

    @staticmethod
    def concat(
        batches: Sequence[MultiAgentBatch], *, pool: ArrayPool | None = None, prefix: str = ""
    ) -> MultiAgentBatch:
        """Each policy's rows of all ``batches`` in order (a policy missing from some
        batches has rows from the others), and their env steps summed."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        ids = list(dict.fromkeys(pid for b in batches for pid in b.policy_batches))
        merged = {
            pid: SampleBatch.concat(
                [b[pid] for b in batches if pid in b], pool=pool, prefix=f"{prefix}{pid}/"
            )
            for pid in ids
        }
        reports = tuple(r for b in batches for r in b.reports)
        return MultiAgentBatch(merged, sum(b.env_steps for b in batches), reports)


class ArrayPool:
    """Arrays reused from one batch to the next instead of fresh memory each time: the
    columns a rollout worker writes its fragments into, and the batch of a bulk_sync round.

    Fresh memory costs a page fault per 4 KiB on first touch, and on this project's VMs a
    slow one: for Pong, writing a fragment (500 steps x 4 envs, 56 MB of frames) and
    dropping its reset rows took 0.1-0.3 s more in fresh memory, and concatenating a
    round's fragments 0.2-0.5 s while every worker waited, against 2-3 s of sampling.
    A remote worker's fragment is copied into Ray's object store when ``sample`` returns,
    and a round's batch is dropped once trained on, so the next one can take their memory.
    An array is handed out again only when nothing outside the pool still refers to it
    (its reference count says so): a batch that someone kept, or any view of it, is never
    overwritten. The pool keeps ``slots`` arrays per key, as the stages of a plan hold on
    to the last batch while the next one is made.

    Examples:
        >>> pool = ArrayPool()
        >>> address = pool.empty("obs", (3, 2), np.float32).ctypes.data
        >>> pool.empty("obs", (2, 2), np.float32).ctypes.data == address  # not held: reused
        True
        >>> kept = pool.empty("obs", (3, 2), np.float32)[1:]  # a view holds its array
        >>> np.shares_memory(pool.empty("obs", (3, 2), np.float32), kept)
        False
    """

    def __init__(self, slots: int = 2) -> None:
        self.slots = slots
        self._arrays: dict[str, list[np.ndarray]] = {}
        # the references a free array has in ``empty`` (its list's, the loop's, the count's
        # own), counted the same way rather than assumed: interpreters differ
        for array in [np.empty(0)]:
            self._free_refs = _refs(array)

    def empty(
        self, key: str, shape: tuple[int, ...], dtype: Any, *, capacity: int = 0
    ) -> np.ndarray:
        """An uninitialised array of ``shape`` and ``dtype``: the first ``shape[0]`` rows of
        a free array kept under ``key`` that has room, else of a new one with room for
        ``capacity`` rows, or as many as any array under ``key`` had (batches vary a little
        in length, and a new array for every longer one would cost what the pool saves)."""
        arrays = self._arrays.setdefault(key, [])
        for array in arrays:
            if (
                _refs(array) <= self._free_refs
                and array.dtype == dtype
                and array.shape[1:] == shape[1:]
                and len(array) >= shape[0]
            ):
                return array[: shape[0]]
        rows = max(shape[0], capacity, *(len(a) for a in arrays if a.shape[1:] == shape[1:]))
        arrays.append(np.empty((rows, *shape[1:]), dtype))
        if len(arrays) > self.slots:
            del arrays[0]  # the oldest: whoever holds it keeps it
        return arrays[-1][: shape[0]]


def check_batch(item: Any, taker: str) -> None:
    """An ``ArgumentTypeError`` unless ``item``, which ``taker`` was given, is a batch.

    Examples:
        >>> check_batch([], "learning")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        flowrl.core.config.ArgumentTypeError: learning takes a batch of experiences, got a list ...
    """
    if not isinstance(item, MultiAgentBatch):
        hint = " (ConcatBatches gives lists to .combine(), not to .for_each())"
        raise ArgumentTypeError(
            f"{taker} takes a batch of experiences, got a {type(item).__name__}"
            + (hint if isinstance(item, list) else "")
        )


def _refs(array: np.ndarray) -> int:
    return sys.getrefcount(array) - 1  # less the reference of this call's argument


@dataclass
class Fragment:
    """What one worker sampled, time-major (``[T, num_envs, ...]``), before flattening.

    ``valid[t, i]`` is False on the reset steps of NEXT_STEP autoreset (see
    ``flowrl.learning.postprocessing``); ``last_obs`` is the observation after the last
    step, and ``last_state`` a recurrent policy's state after it. With a ``pool``, the valid
    rows are gathered into its arrays instead of fresh ones.
    """

    columns: dict[str, np.ndarray]
    valid: np.ndarray
    last_obs: np.ndarray
    pool: ArrayPool | None = None
    last_state: np.ndarray | None = None

    def to_batch(self) -> SampleBatch:
        """The valid rows, flattened in time-major order (views of the columns when every
        row is valid: no copy of a fragment's frames)."""
        n = self.valid.size
        if self.valid.all():
            return SampleBatch({k: v.reshape(n, *v.shape[2:]) for k, v in self.columns.items()})
        rows = np.flatnonzero(self.valid)
        batch = {}
        for k, v in self.columns.items():
            flat = v.reshape(n, *v.shape[2:])
            shape = (len(rows), *flat.shape[1:])
            if self.pool is None:
                out = np.empty(shape, flat.dtype)
            else:
                out = self.pool.empty(f"valid/{k}", shape, flat.dtype, capacity=n)
            # mode="clip" (the indices are in range anyway): "raise" gathers via a temporary
            batch[k] = np.take(flat, rows, axis=0, out=out, mode="clip")
        return SampleBatch(batch)
