"""RolloutWorker sampling semantics (local) and WorkerSet behaviour under Ray."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from custom_envs import ScriptedVectorEnv

from flowrl.algorithms.ppo import PPOConfig, PPOLearner, PPOPolicy
from flowrl.core.config import Config
from flowrl.core.sample_batch import (
    ACTIONS,
    ADVANTAGES,
    LOGP,
    OBS,
    REWARDS,
    TERMINATEDS,
    TRUNCATEDS,
)
from flowrl.learning.multi import PolicyMap
from flowrl.learning.policy import Policy, inference
from flowrl.rollout.envs import EPISODE_ENDS, make_vector_env
from flowrl.rollout.sampler import SINGLE, Sampler, VectorLanes
from flowrl.rollout.worker import RolloutWorker, StoredWeights, WorkerSet, weights_carry


def raw_fragment(worker):
    """One fragment of a single-agent worker as sampled, before postprocessing."""
    return worker.sampler.sample(worker.config.rollout_fragment_length)[SINGLE]


def local_worker(**overrides):
    cfg = PPOConfig(num_workers=0, num_envs_per_worker=4, rollout_fragment_length=50, **overrides)
    return RolloutWorker(policy_cls=PPOPolicy, config=cfg)


def test_fragment_shapes_and_reset_steps_are_masked():
    worker = local_worker()
    frag = raw_fragment(worker)
    assert frag.columns[OBS].shape == (50, 4, 4)
    assert frag.valid.shape == (50, 4)
    ends = frag.columns[TERMINATEDS] | frag.columns[TRUNCATEDS]
    # the step after an episode end is the reset step, and only those are invalid
    expected_invalid = np.zeros_like(ends)
    expected_invalid[1:] = ends[:-1]
    assert (~frag.valid == expected_invalid).all()
    assert (frag.columns[REWARDS][~frag.valid] == 0).all()


def test_episode_returns_match_lengths_on_cartpole():
    worker = local_worker()
    batches = [worker.sample()[SINGLE] for _ in range(10)]
    episodes, policy_metrics, unsent = worker.get_metrics()
    assert episodes, "random CartPole episodes are short"
    assert all(ep.episode_return == ep.length for ep in episodes)
    valid_rows = sum(len(b) for b in batches)
    assert valid_rows <= 10 * 50 * 4 and ADVANTAGES in batches[0]
    assert worker.get_metrics() == ([], policy_metrics, {}) and unsent == {}  # normalising: off


def reference_episodes(rewards, done, valid, ep_return, ep_len):
    """Per-step episode bookkeeping, the plain way."""
    episodes = []
    for t in range(len(rewards)):
        ep_return += rewards[t] * valid[t]
        ep_len += valid[t]
        for i in np.flatnonzero(done[t] & valid[t]):
            episodes.append((float(ep_return[i]), int(ep_len[i])))
            ep_return[i], ep_len[i] = 0.0, 0
    return episodes


def test_episode_bookkeeping_counts_valid_steps_across_fragments():
    """Scripted rewards and ends (a reset step after each end, NEXT_STEP), sampled in
    fragments of 120 (the lanes count every 256 steps): the lanes' episodes are the plain
    per-step count's."""
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(600, 4))  # float rewards, as Pendulum's
    done = rng.random((600, 4)) < 0.1
    valid = np.ones((600, 4), bool)
    valid[1:] = ~done[:-1]
    lanes = VectorLanes(ScriptedVectorEnv(rewards, done))
    policy = Policy(lanes.observation_spaces[SINGLE], lanes.action_spaces[SINGLE], Config())
    sampler = Sampler(lanes, PolicyMap({SINGLE: policy}), seed=0, where="scripted")
    for _ in range(5):
        fragment = sampler.sample(120)
    np.testing.assert_array_equal(fragment[SINGLE].valid, valid[-120:])
    expected = reference_episodes(rewards, done, valid, np.zeros(4), np.zeros(4, np.int64))
    got = lanes.take_episodes()
    assert [ep.length for ep in got] == [n for _, n in expected]
    np.testing.assert_allclose(
        [ep.episode_return for ep in got], [r for r, _ in expected], rtol=1e-12
    )
    assert lanes.take_episodes() == []


def test_clip_rewards_clips_what_is_learned_from_and_returns_stay_the_envs():
    rng = np.random.default_rng(1)
    rewards = rng.normal(scale=5.0, size=(100, 2))
    done = rng.random((100, 2)) < 0.1
    valid = np.ones((100, 2), bool)
    valid[1:] = ~done[:-1]
    lanes = VectorLanes(ScriptedVectorEnv(rewards, done))
    config = Config(clip_rewards=True)
    policy = Policy(lanes.observation_spaces[SINGLE], lanes.action_spaces[SINGLE], config)
    sampler = Sampler(lanes, PolicyMap({SINGLE: policy}), seed=0, where="scripted")
    fragment = sampler.sample(100)[SINGLE]
    np.testing.assert_array_equal(fragment.columns[REWARDS][valid], np.sign(rewards[valid]))
    expected = reference_episodes(rewards, done, valid, np.zeros(2), np.zeros(2, np.int64))
    np.testing.assert_allclose(
        [ep.episode_return for ep in lanes.take_episodes()], [r for r, _ in expected]
    )


@pytest.mark.slow
def test_a_lost_life_is_terminal_for_learning_and_the_game_is_the_episode():
    """Breakout with ``life_loss_info``: each of a game's 5 lives ends in a terminated
    row followed by a reset step (FIRE pressed for the agent), and an episode is a whole
    game, its length every step of it."""
    env = make_vector_env("ALE/Breakout-v5", num_envs=2, seed=0,
                          env_config={"life_loss_info": True})  # fmt: skip
    lanes = VectorLanes(env)
    policy = Policy(lanes.observation_spaces[SINGLE], lanes.action_spaces[SINGLE], Config())
    sampler = Sampler(lanes, PolicyMap({SINGLE: policy}), seed=0, where="Breakout")
    fragment = sampler.sample(800)[SINGLE]
    terminated, valid = fragment.columns[TERMINATEDS], fragment.valid
    assert (valid[1:] == ~terminated[:-1]).all()
    copies = list(lanes.episode_copies)
    episodes = lanes.take_episodes()
    for i in range(2):
        terminals = np.flatnonzero(terminated[:, i])
        games = [ep for ep, copy in zip(episodes, copies, strict=True) if copy == i]
        assert len(games) == len(terminals) // 5 > 0, "random Breakout games last ~200 steps"
        last_end = terminals[5 * len(games) - 1]
        assert sum(ep.length for ep in games) == last_end + 1 - (len(games) - 1)
    env.close()


def test_after_a_lost_life_the_game_goes_on_without_the_agent_pressing_fire():
    env = make_vector_env("ALE/Breakout-v5", num_envs=1, seed=0,
                          env_config={"life_loss_info": True})  # fmt: skip
    env.reset(seed=0)
    lost = 0
    for _ in range(2000):  # NOOP only: the ball is served and missed, life after life
        _, _, terminated, _, infos = env.step(np.zeros(1, np.int64))
        lost += int(terminated[0] and not infos[EPISODE_ENDS][0])
        if infos[EPISODE_ENDS][0]:
            break
    assert lost == 4 and infos[EPISODE_ENDS][0]
    env.close()


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_action_logp_is_the_sampling_policys_log_prob(env):
    # added per fragment from the recorded distribution inputs; must equal the log-prob
    # the unchanged policy gives each row's action
    worker = local_worker(env=env)
    batch = worker.sample()[SINGLE]
    with torch.no_grad():
        dist, _ = worker.policy.distribution(torch.from_numpy(batch[OBS]))
        expected = dist.log_prob(torch.from_numpy(batch[ACTIONS])).numpy()
    np.testing.assert_allclose(batch[LOGP], expected, rtol=1e-5, atol=1e-5)


def test_inference_methods_run_in_inference_mode_whoever_calls_them():
    seen = []

    @inference
    def act(x):
        seen.append(torch.is_inference_mode_enabled())
        return x * 2

    assert act(torch.ones(1)).item() == 2.0
    with torch.inference_mode():  # as in the rollout loop
        act(torch.ones(1))
    assert seen == [True, True]
    assert not torch.is_inference_mode_enabled()


def test_continuous_actions_are_clipped_for_the_env_only():
    worker = local_worker(env="Pendulum-v1")
    batch = worker.sample()[SINGLE]
    assert batch["actions"].shape == (len(batch), 1)
    clipped = worker.policy.env_actions(np.array([[5.0], [-5.0]], np.float32))
    assert clipped.tolist() == [[2.0], [-2.0]]


def test_evaluate_runs_exactly_the_episodes_asked_for():
    worker = local_worker()
    assert len(worker.evaluate(7)) == 7


def test_same_seed_same_samples():
    a, b = local_worker(seed=3).sample()[SINGLE], local_worker(seed=3).sample()[SINGLE]
    assert a.keys() == b.keys()
    assert all(np.array_equal(v, b[k]) for k, v in a.items())


def test_a_kept_batch_is_never_overwritten_and_a_dropped_one_is_reused():
    worker = local_worker()
    kept = worker.sample()[SINGLE]
    copy = {k: v.copy() for k, v in kept.items()}
    for _ in range(3):  # CartPole with 4 envs ends episodes: some rows dropped, some not
        worker.sample()
    assert all(np.array_equal(v, kept[k]) for k, v in copy.items())

    address = raw_fragment(worker).columns[OBS].ctypes.data  # dropped at once
    assert raw_fragment(worker).columns[OBS].ctypes.data == address


@pytest.mark.ray
def test_small_weights_travel_inside_the_requests_and_large_ones_through_the_store(ray_session):
    ray = ray_session
    for hiddens, inline in (((64, 64), True), ((256, 256), False)):  # 37 KB; 540 KB
        cfg = PPOConfig(num_workers=1, num_envs_per_worker=2, model_hiddens=hiddens)
        workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
        try:
            for p in workers.local_worker.policy.module.parameters():
                p.data.add_(1.0)
            workers.defer_weight_sync()
            payload = workers.take_deferred_weights()
            assert isinstance(payload, ray.ObjectRef) is not inline
            workers.sync_weights(weights_ref=payload)
            remote = ray.get(workers.remote_workers[0].get_weights.remote())[SINGLE]
            local = workers.local_worker.policy.get_weights()
            assert all(np.array_equal(remote[k], local[k]) for k in local)
            # as a sample request carries them: a stored payload is fetched by the worker
            for p in workers.local_worker.policy.module.parameters():
                p.data.add_(1.0)
            workers.defer_weight_sync()
            carry = weights_carry(workers.take_deferred_weights())
            assert isinstance(carry.arg, StoredWeights) is not inline
            ray.get(workers.remote_workers[0].set_weights.remote(carry.arg))
            remote = ray.get(workers.remote_workers[0].get_weights.remote())[SINGLE]
            local = workers.local_worker.policy.get_weights()
            assert all(np.array_equal(remote[k], local[k]) for k in local)
        finally:
            workers.stop()


@pytest.mark.ray
def test_worker_set_broadcasts_weights_and_collects_episodes(ray_session):
    ray = ray_session
    cfg = PPOConfig(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=100)
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
    try:
        policy = workers.local_worker.policy
        built = vars(workers.learner["default"])
        assert "optimizers" in built, "the learner's optimiser was built while they started"
        for p in policy.module.parameters():
            p.data.add_(1.0)
        workers.sync_weights()
        remote = ray.get([w.get_weights.remote() for w in workers.remote_workers])
        local = policy.get_weights()
        for weights in remote:
            assert all(np.array_equal(weights[SINGLE][k], local[k]) for k in local)
        seeds = ray.get([w.sample.remote() for w in workers.remote_workers])
        assert not np.array_equal(seeds[0][SINGLE][OBS], seeds[1][SINGLE][OBS]), (
            "workers use different seeds"
        )
        episodes = []
        for _ in range(50):
            episodes += workers.collect_metrics(timeout_s=1.0)[0]
            if episodes:
                break
        assert episodes and all(ep.episode_return == ep.length for ep in episodes)
    finally:
        workers.stop()


@pytest.mark.ray
@pytest.mark.slow
def test_dead_worker_is_replaced_with_current_weights(ray_session):
    ray = ray_session
    cfg = PPOConfig(num_workers=2, num_envs_per_worker=2)
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
    try:
        dead = workers.remote_workers[0]
        ray.kill(dead)
        # ray.kill is asynchronous: a ping sent at once can still be answered (failed here once)
        with pytest.raises(ray.exceptions.RayActorError):
            for _ in range(100):
                ray.get(dead.ping.remote(), timeout=30)
                time.sleep(0.05)
        assert workers.recreate_failed_workers() == [1]
        assert workers.remote_workers[0] is not dead
        weights = ray.get(workers.remote_workers[0].get_weights.remote())
        local = workers.local_worker.get_weights()[SINGLE]
        assert all(np.array_equal(weights[SINGLE][k], local[k]) for k in local)
    finally:
        workers.stop()


def test_workers_this_process_holds_the_cpus_of_are_one_line_not_a_wait(ray_session):
    """A notebook cell that built an algorithm again while the last one still held its
    workers waited forever: Ray had no free CPU to place the new ones."""
    from flowrl.core.config import ConfigError

    cfg = PPOConfig(num_workers=2, num_envs_per_worker=2)  # the session's 2 CPUs
    first = WorkerSet(policy_cls=PPOPolicy, config=cfg)
    try:
        held = r"Ray has 0 free: the workers of ppo on CartPole-v1 \(built earlier in this"
        with pytest.raises(ConfigError, match=held):
            WorkerSet(policy_cls=PPOPolicy, config=cfg)
    finally:
        first.stop()
    WorkerSet(policy_cls=PPOPolicy, config=cfg).stop()  # once stopped, the CPUs are free


def test_the_learner_takes_only_the_loss_columns_and_names_a_missing_one():
    worker = local_worker()
    batch = worker.sample()[SINGLE]
    seen = []

    class Spy(PPOLearner):
        def loss(self, b):
            seen.append(set(b))
            return super().loss(b)

    Spy(worker.policy, worker.config).learn_on_batch(batch, minibatch_size=64)
    assert seen and all(keys == set(PPOLearner.loss_columns) for keys in seen)

    class ReadsMore(PPOLearner):
        def loss(self, b):
            return super().loss(b)[0] + b[TERMINATEDS].float().mean(), {}

    with pytest.raises(KeyError, match=r"terminateds.*loss_columns"):
        ReadsMore(worker.policy, worker.config).learn_on_batch(batch)


def test_ppo_loss_has_the_entropy_bonus_with_its_weight_and_reports_entropy_always():
    worker = local_worker()
    batch = {k: torch.from_numpy(v) for k, v in worker.sample()[SINGLE].items()}
    spaces = worker.env.observation_spaces[SINGLE], worker.env.action_spaces[SINGLE]
    losses = {}
    for coeff in (0.0, 0.5):
        config = worker.config.replace(entropy_coeff=coeff)
        policy = PPOPolicy(*spaces, config)
        policy.set_weights(worker.policy.get_weights())
        losses[coeff], stats = PPOLearner(policy, config).loss(batch)
        assert stats["entropy"] > 0
    torch.testing.assert_close(losses[0.5], losses[0.0] - 0.5 * stats["entropy"])


@pytest.mark.parametrize(
    "name, follows", [("ppo", False), ("impala", False), ("dqn", True), ("apex", True)]
)
def test_remote_workers_are_told_the_run_s_env_steps_only_where_a_policy_follows_them(
    name, follows
):
    """DQN's epsilon follows the run's env steps; PPO's acting does not, so its remote
    workers are spared a Ray call each per iteration."""
    from flowrl.rollout.worker import follows_env_steps
    from flowrl.run.spec import get_algorithm

    spec = get_algorithm(name)
    workers = WorkerSet(policy_cls=spec.policy_cls, config=spec.config_cls(num_workers=0))
    assert follows_env_steps(workers.local_worker) is follows
