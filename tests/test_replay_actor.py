"""Replay shards: global row indexes, and the replay operators over ReplayActors."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl import Algorithm
from flowrl.core.iter import LocalIterator, send_call, take_result, wait_for
from flowrl.core.sample_batch import SINGLE, MultiAgentBatch, SampleBatch
from flowrl.ops import Concurrently, Replay, StoreToReplayBuffer, UpdatePriorities
from flowrl.replay import (
    PolicyBuffers,
    PrioritizedSampler,
    ReplayActor,
    ReplayBuffer,
    create_replay_actors,
    shard_of,
)


def rows(start, n, policy_ids=(SINGLE,)):
    obs = np.arange(start, start + n, dtype=np.float32)[:, None]
    return MultiAgentBatch({pid: SampleBatch(obs=obs + i) for i, pid in enumerate(policy_ids)}, n)


def prioritized(shard_index):
    return PolicyBuffers(
        lambda i: ReplayBuffer(
            64, sampler=PrioritizedSampler(64, alpha=1.0, eps=0.0), seed=shard_index + 10 * i
        )
    )


def test_a_shard_hands_out_global_indexes_per_policy_and_takes_back_only_its_own():
    shard = ReplayActor(prioritized, shard_index=1, num_shards=3)
    assert shard.sample(4, learning_starts=8) is None
    shard.add(rows(0, 8, ("a", "b")))
    batch = shard.sample(4, learning_starts=8)
    assert batch.policy_ids == ["a", "b"]
    for pid in ("a", "b"):
        shards, local = shard_of(batch[pid]["batch_indexes"], 3)
        assert (shards == 1).all()
        stored = shard.buffer.buffers[pid]._columns["obs"][local]
        assert np.array_equal(stored, batch[pid]["obs"])
    shard.update_priorities({"b": (batch["b"]["batch_indexes"], np.ones(4))})
    with pytest.raises(ValueError, match="shard 1 got rows"):
        shard.update_priorities({"a": (np.array([0, 3]), np.ones(2))})


@pytest.mark.slow
@pytest.mark.ray
def test_store_replay_and_priorities_over_shards(ray_session, channels):
    shards = create_replay_actors(prioritized, num_shards=2)
    store = LocalIterator.from_items([rows(10 * i, 10) for i in range(8)])
    store = store.for_each(StoreToReplayBuffer(shards, seed=0))
    replay = Replay(shards, batch_size=16, learning_starts=40, channels=channels)
    plan = Concurrently([store, replay], output_indexes=[1])
    batches = plan.take(4)
    ctx = plan.context
    assert len([c for c in ctx.channels.values() if c is not None]) == (2 if channels else 0)
    # asked as the adds went (a Ray task may overtake an add queued on a channel)
    asks = [send_call(ctx, s, "sample", 1, 1) for s in shards]
    wait_for(asks, len(asks), 30)
    assert all(take_result(a) is not None for a in asks), "rows spread over both shards"
    assert "gather_async" in str(replay), "shards are sampled through the iterator core"
    assert all(len(b) == 16 for b in batches)
    # send a huge priority to one row per shard: those rows then dominate each shard's samples
    batch = batches[0]
    picked = {}
    for index in batch[SINGLE]["batch_indexes"]:
        picked.setdefault(int(index) % 2, int(index))
    indexes = np.array(list(picked.values()))
    trained = MultiAgentBatch({SINGLE: SampleBatch(batch_indexes=indexes)}, len(indexes))
    update = UpdatePriorities(shards)
    update.bind(ctx)  # over the shards' channels where the plan has them
    update((trained, {SINGLE: {"td_error": np.full(len(indexes), 1e6)}}))
    for s, index in picked.items():
        request = send_call(ctx, shards[s], "sample", 64)  # after the update, either way
        wait_for([request], 1, 30)
        again = take_result(request)
        assert np.mean(again[SINGLE]["batch_indexes"] == index) > 0.9


@pytest.mark.ray
def test_dqn_with_replay_shards(ray_session):
    algo = Algorithm("dqn", env="CartPole-v1", num_workers=0, replay_shards=2,
                     prioritized_replay=True, learning_starts=64,
                     min_env_steps_per_iteration=200)  # fmt: skip
    first, second = algo.train(), algo.train()
    assert second["env_steps_trained"] > first["env_steps_trained"] > 0
    algo.stop()


@pytest.mark.ray
def test_shard_actors_stay_light_whatever_config_class_built_them(ray_session):
    # an algorithm's config is a subclass from its own module; the shards get a plain
    # ReplayConfig, and the sampling step they unpickle lives beside them, so their
    # processes import numpy and the buffer, not torch (~1 s each at start-up)
    algo = Algorithm("dqn", env="CartPole-v1", num_workers=0, replay_shards=2, seed=0)
    try:
        algo.train()
        shards = algo.workers.keep("replay", list)
        imported = ray_session.get(
            [s.__ray_call__.remote(lambda _: "torch" in __import__("sys").modules) for s in shards]
        )
        assert imported == [False, False]
    finally:
        algo.stop()
