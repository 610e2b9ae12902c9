"""Observation and reward normalisation: running statistics on plain arrays, in a worker's
fragments, merged from Ray workers on the learner, sent back with the weights, in checkpoints."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrl import Algorithm
from flowrl.algorithms.ppo import PPOConfig, PPOLearner, PPOPolicy
from flowrl.core.config import Config
from flowrl.core.sample_batch import OBS, REWARDS
from flowrl.learning.normalization import Normalizer, RunningMeanStd
from flowrl.rollout.sampler import SINGLE
from flowrl.rollout.worker import RolloutWorker, WorkerSet

BOX = gym.spaces.Box(-np.inf, np.inf, (3,))


def raw_fragment(worker):
    """One fragment of a single-agent worker as sampled, before postprocessing."""
    return worker.sampler.sample(worker.config.rollout_fragment_length)[SINGLE]


def normalizer(**overrides):
    cfg = Config(normalize_observations=True, normalize_rewards=True, **overrides)
    return Normalizer(BOX, cfg)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=5), st.integers(0, 2**16))
def test_merged_parts_equal_the_statistics_of_the_whole(sizes, seed):
    rng = np.random.default_rng(seed)
    parts = [rng.normal(3.0, 2.0, size=(n, 3)) for n in sizes]
    merged = RunningMeanStd((3,))
    for part in parts:
        one = RunningMeanStd((3,))
        one.update(part)
        merged.merge(one)
    whole = np.concatenate(parts)
    assert merged.count == len(whole)
    np.testing.assert_allclose(merged.mean, whole.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(merged.var, whole.var(0), rtol=1e-9, atol=1e-12)


def test_observations_are_centred_scaled_and_clipped():
    norm = normalizer(normalize_clip=2.0)
    norm.observe_fragment(np.array([[[0.0, 0.0, 0.0]], [[2.0, 4.0, 6.0]]]))  # [T=2, N=1, 3]
    out = norm.observations(np.array([[2.0, 0.0, 100.0]]))
    np.testing.assert_allclose(out, [[1.0, -1.0, 2.0]], rtol=1e-6)  # 100 is clipped
    assert out.dtype == np.float32


def test_rewards_are_scaled_by_the_std_of_the_discounted_return():
    norm = normalizer(gamma=0.5)
    rewards = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    done = np.array([[False, True], [False, False], [False, False]])
    valid = np.array([[True, True], [True, False], [True, True]])  # env 1 reset at step 1
    scaled = norm.scale_rewards(rewards, done, valid)
    # the per-step reference: G = gamma * G + r, G = 0 after an episode ends
    returns = np.array([[1.0, 2.0], [1.5, 2.0], [1.75, 3.0]])
    expected_std = np.sqrt(returns[valid].var() + 1e-8)
    np.testing.assert_allclose(scaled, rewards / expected_std, rtol=1e-6)
    assert norm.ret.count == valid.sum()


def test_what_a_worker_sends_is_merged_once_and_the_learners_state_comes_back():
    learner, worker = normalizer(), normalizer()
    worker.observe_fragment(np.ones((4, 2, 3)))
    learner.merge(worker.take_unsent())
    assert learner.obs.count == 8 and worker.take_unsent()["normalizer/obs_count"] == 0
    worker.observe_fragment(np.zeros((1, 2, 3)))  # sampled before the learner's state arrives
    worker.set_state(learner.get_state())
    assert worker.obs.count == 10  # the learner's 8 and its own 2 not yet sent
    np.testing.assert_allclose(worker.obs.mean, 0.8)


def test_off_by_default_costs_nothing_and_changes_nothing():
    norm = Normalizer(BOX, Config())
    obs = np.arange(6.0).reshape(2, 3)
    assert not norm.enabled and norm.observations(obs) is obs
    assert norm.get_state() == {} and norm.take_unsent() == {}


def test_a_worker_feeds_its_policy_normalised_observations_and_scaled_rewards():
    cfg = PPOConfig(
        env="Pendulum-v1",
        num_workers=0,
        num_envs_per_worker=4,
        rollout_fragment_length=200,
        normalize_observations=True,
        normalize_rewards=True,
    )
    worker = RolloutWorker(policy_cls=PPOPolicy, config=cfg)
    fragments = [raw_fragment(worker) for _ in range(5)]
    # all but the first, normalised by statistics still forming; a single fragment's
    # pendulums may hang on one side for all of it
    obs = np.concatenate([frag.columns[OBS][frag.valid] for frag in fragments[1:]])
    assert np.abs(obs.mean(0)).max() < 0.5 and np.abs(obs.std(0) - 1).max() < 0.5
    frag = fragments[-1]
    assert np.abs(frag.columns[REWARDS]).max() < 10  # Pendulum's rewards reach -16
    episodes, _, _ = worker.get_metrics()
    # results keep the env's own returns: Pendulum's 200-step episodes score below -100
    assert episodes and max(ep.episode_return for ep in episodes) < -100


@pytest.mark.usefixtures("ray_session")
def test_ray_workers_statistics_are_merged_on_the_learner_and_sent_back_with_the_weights():
    cfg = PPOConfig(
        num_workers=2,
        num_envs_per_worker=2,
        rollout_fragment_length=25,
        normalize_observations=True,
    )
    import ray

    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
    try:
        batches = ray.get([w.sample.remote() for w in workers.remote_workers for _ in range(2)])
        workers.collect_metrics(timeout_s=30)
        learner = workers.local_worker.policy.normalizer
        # the observations of the steps learned from: every step but the reset steps
        assert learner.obs.count == sum(len(b[SINGLE]) for b in batches)
        workers.sync_weights()
        state = ray.get(workers.remote_workers[0].get_weights.remote())[SINGLE]
        assert float(state["normalizer/obs_count"]) == learner.obs.count
        np.testing.assert_allclose(state["normalizer/obs_mean"], learner.obs.mean)
    finally:
        workers.stop()


def test_checkpoints_keep_the_statistics_and_evaluation_applies_them(tmp_path):
    algo = Algorithm(
        "ppo", num_workers=0, normalize_observations=True, train_batch_size=256, seed=1
    )
    algo.train()
    before = algo.evaluate(2)
    algo.save(tmp_path / "ckpt")
    saved = algo.workers.local_worker.policy.normalizer
    algo.stop()
    restored = Algorithm.from_checkpoint(tmp_path / "ckpt", in_process=True)
    norm = restored.workers.local_worker.policy.normalizer
    assert norm.obs.count == saved.obs.count > 0
    np.testing.assert_allclose(norm.obs.var, saved.obs.var)
    assert restored.evaluate(2) == before  # greedy, seeded: the same scores
    restored.stop()
