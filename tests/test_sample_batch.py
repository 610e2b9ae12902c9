"""SampleBatch properties."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowrl.core.sample_batch import ArrayPool, Fragment, MultiAgentBatch, SampleBatch

sizes = st.lists(st.integers(0, 30), min_size=1, max_size=5)


def make(n, start=0):
    return SampleBatch(
        obs=np.arange(start, start + n, dtype=np.float32)[:, None].repeat(3, 1),
        rewards=np.arange(start, start + n, dtype=np.float32),
    )


@given(sizes)
def test_concat_keeps_every_row_in_order(ns):
    starts = np.cumsum([0, *ns[:-1]])
    batch = SampleBatch.concat([make(n, s) for n, s in zip(ns, starts, strict=True)])
    assert len(batch) == sum(ns)
    assert batch["rewards"].tolist() == list(range(sum(ns)))
    assert batch["obs"].flags["C_CONTIGUOUS"]


@given(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40))
def test_slicing_is_row_slicing(n, a, b):
    batch = make(n)
    assert batch[a:b]["rewards"].tolist() == list(range(n))[a:b]


def test_columns_must_have_equal_rows_and_concat_equal_columns():
    with pytest.raises(ValueError, match="rows"):
        SampleBatch(a=np.zeros(3), b=np.zeros(4))
    with pytest.raises(ValueError, match="concat"):
        SampleBatch.concat([SampleBatch(a=np.zeros(1)), SampleBatch(b=np.zeros(1))])


def test_pickles_and_keeps_dtypes():
    batch = SampleBatch(obs=np.zeros((2, 84, 84), np.uint8), rewards=np.ones(2, np.float32))
    back = pickle.loads(pickle.dumps(batch, protocol=5))
    assert back["obs"].dtype == np.uint8 and len(back) == 2
    assert "obs" in back and back.keys() == ["obs", "rewards"]


@given(st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_fragment_to_batch_keeps_the_valid_rows_in_time_major_order(steps, envs, seed):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(steps, envs, 2)).astype(np.float32)
    valid = rng.random((steps, envs)) < 0.7
    cases = [(mask, pool) for mask in (valid, np.ones_like(valid)) for pool in (None, ArrayPool())]
    for mask, pool in cases:  # rows dropped / all kept (views); fresh arrays / a pool's
        batch = Fragment({"obs": obs, "t": np.arange(steps)[:, None].repeat(envs, 1)},
                         mask, last_obs=obs[-1], pool=pool).to_batch()  # fmt: skip
        rows = [(t, i) for t in range(steps) for i in range(envs) if mask[t, i]]
        assert len(batch) == len(rows)
        assert batch["t"].tolist() == [t for t, _ in rows]
        expected = np.array([obs[t, i] for t, i in rows]).reshape(-1, 2)
        np.testing.assert_array_equal(batch["obs"], expected)
        assert batch["obs"].flags["C_CONTIGUOUS"]


def test_array_pool_reuses_only_what_nobody_holds():
    pool = ArrayPool(slots=2)
    first = pool.empty("obs", (3, 2), np.float32)
    address = first.ctypes.data
    del first
    again = pool.empty("obs", (2, 2), np.float32)
    assert again.ctypes.data == address and again.shape == (2, 2)  # free, with room: reused
    second = pool.empty("obs", (3, 2), np.float32)  # ``again`` holds the first: a second
    assert not np.shares_memory(second, again)
    del again
    third = pool.empty("obs", (3, 2), np.float32)  # the last stage holds ``second``
    assert third.ctypes.data == address
    held = [third, second, pool.empty("obs", (3, 2), np.float32)]  # all held: a new one
    assert len({a.ctypes.data for a in held}) == 3
    assert len(pool._arrays["obs"]) == 2  # the pool forgot the oldest; its holder keeps it
    assert pool.empty("obs", (4, 2), np.float32).shape == (4, 2)  # no room: a new one
    assert pool.empty("obs", (2, 2), np.int64).dtype == np.int64
    assert pool.empty("obs", (2, 3), np.int64).shape == (2, 3)


def test_array_pool_makes_new_arrays_with_room_for_the_longest_so_far():
    pool = ArrayPool()
    longest = pool.empty("obs", (5, 2), np.float32)
    short = pool.empty("obs", (3, 2), np.float32)  # ``longest`` is held: a new array
    address = short.ctypes.data
    del short
    assert pool.empty("obs", (5, 2), np.float32).ctypes.data == address
    assert longest.shape == (5, 2)
    assert pool.empty("t", (2,), np.int64, capacity=8).base.shape == (8,)


def test_concat_into_a_pool_reuses_the_memory_of_a_dropped_batch_only():
    pool = ArrayPool()
    parts = [SampleBatch(obs=np.full((n, 2), n, np.uint8), t=np.arange(n)) for n in (3, 2)]
    kept = SampleBatch.concat(parts, pool=pool)
    again = SampleBatch.concat(parts, pool=pool)
    assert not np.shares_memory(kept["obs"], again["obs"])
    assert again["obs"][:, 0].tolist() == [3, 3, 3, 2, 2] and again["t"].tolist() == [0, 1, 2, 0, 1]
    address = again["obs"].ctypes.data
    del again
    assert SampleBatch.concat(parts[1:] * 2, pool=pool)["obs"].ctypes.data == address
    assert kept["obs"][:, 0].tolist() == [3, 3, 3, 2, 2]


def test_concat_keeps_what_every_batch_reports_in_order():
    def batch(*reports):
        return MultiAgentBatch({"p": SampleBatch(obs=np.zeros((2, 1)))}, 2, reports=reports)

    both = MultiAgentBatch.concat([batch("worker 1"), batch(), batch("worker 2", "again")])
    assert both.reports == ("worker 1", "worker 2", "again") and len(both) == 6
    assert pickle.loads(pickle.dumps(both)).reports == both.reports
