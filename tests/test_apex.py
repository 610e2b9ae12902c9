"""Ape-X: per-worker epsilons, initial priorities, weight syncs, and surviving dead actors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl import Algorithm
from flowrl.algorithms.apex import ApexConfig, ApexPolicy
from flowrl.core.context import WEIGHT_BROADCASTS
from flowrl.core.sample_batch import SampleBatch
from flowrl.replay import PRIORITIES, PrioritizedSampler, ReplayBuffer
from flowrl.rollout.worker import RolloutWorker
from flowrl.run.runner import StopCriteria

OBS_SPACE = gym.spaces.Box(-1, 1, (4,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)


def policy(worker_index: int, **overrides) -> ApexPolicy:
    config = ApexConfig(**overrides)
    return ApexPolicy(OBS_SPACE, ACTION_SPACE, config, worker_index=worker_index)


@pytest.mark.parametrize("num_workers", [2, 3, 8])
def test_each_worker_ends_at_its_own_epsilon_and_the_learner_acts_greedily(num_workers):
    eps, alpha = 0.4, 7.0  # the paper's
    paper = {"exploration_final_eps": eps, "worker_epsilon_alpha": alpha}
    for i in range(num_workers):  # remote worker i + 1 is worker i of the paper
        p = policy(i + 1, num_workers=num_workers, exploration_timesteps=100, **paper)
        assert p.epsilon() == 1.0, "every worker starts from the initial epsilon"
        p.timesteps = 10_000
        expected = eps ** (1 + alpha * i / (num_workers - 1))
        assert p.epsilon() == pytest.approx(expected) and p.metrics() == {"epsilon": p.epsilon()}
    assert policy(0, num_workers=num_workers).epsilon() == 0.0
    alone = policy(0, num_workers=0, exploration_timesteps=100, **paper)
    alone.timesteps = 10_000
    assert alone.epsilon() == pytest.approx(eps), "a local worker that samples explores"


def reference_td_errors(p: ApexPolicy, batch: SampleBatch) -> np.ndarray:
    """|Q(s, a) - (r + discount * (1 - terminated) * Q(s', argmax Q(s')))|, row by row."""
    out = []
    with torch.no_grad():
        for row in range(len(batch)):
            q = p.module(torch.as_tensor(batch["obs"][row : row + 1])).dist_inputs[0]
            q_next = p.module(torch.as_tensor(batch["next_obs"][row : row + 1])).dist_inputs[0]
            alive = 0.0 if batch["terminateds"][row] else 1.0
            target = batch["rewards"][row] + batch["discounts"][row] * alive * q_next.max()
            out.append(abs(float(q[batch["actions"][row]]) - float(target)))
    return np.array(out)


def test_workers_send_their_td_errors_as_initial_priorities():
    config = ApexConfig(env="CartPole-v1", num_workers=2, num_envs_per_worker=2)
    worker = RolloutWorker(policy_cls=ApexPolicy, config=config, worker_index=1)
    batch = worker.sample()["default"]
    assert batch["terminateds"].any() or batch["discounts"].min() < config.gamma**config.n_step
    np.testing.assert_allclose(
        batch[PRIORITIES], reference_td_errors(worker.policy, batch), rtol=1e-5, atol=1e-5
    )
    off = RolloutWorker(
        policy_cls=ApexPolicy, config=config.replace(worker_side_prioritization=False)
    )
    assert PRIORITIES not in off.sample()["default"]


@pytest.mark.parametrize(
    "env, env_config",
    [
        ("flowrl.rollout.toy_envs:SleepyVectorEnv", {"step_s": 0.0, "length": 7}),
        ("flowrl.rollout.toy_multi_agent:IndependentCartPoles", {"agents": 2}),
        ("custom_envs:float_tictactoe", {}),
    ],
    ids=["truncated episodes", "parallel env", "turn-based game"],
)
def test_td_errors_from_the_q_values_acting_computed_are_those_of_the_network(env, env_config):
    """A worker's priorities come from the Q-values its acting recorded (and one forward
    pass over the fragment's last observations); the network's own, run over every row's
    observation and next observation, gives the same, in every kind of env."""
    config = ApexConfig(env=env, env_config=env_config, num_workers=2, num_envs_per_worker=2,
                        rollout_fragment_length=40)  # fmt: skip
    worker = RolloutWorker(policy_cls=ApexPolicy, config=config, worker_index=1)
    fragments = worker.sample()
    for pid in fragments.policy_ids:
        batch = fragments[pid]
        assert not {"q_values", "next_values"} & set(batch.keys()), "not sent to the replay"
        recomputed = worker.policies[pid].td_errors(batch)
        np.testing.assert_allclose(batch[PRIORITIES], recomputed, rtol=1e-5, atol=1e-5)


def test_a_prioritized_buffer_takes_the_initial_priorities_and_does_not_store_them():
    sampler = PrioritizedSampler(8, alpha=1.0)
    buffer = ReplayBuffer(8, sampler=sampler)
    priorities = np.array([1.0, 2.0, 3.0, 4.0])
    slots = buffer.add(SampleBatch(obs=np.arange(4.0), priorities=priorities))
    np.testing.assert_allclose(
        sampler.probabilities(slots), (priorities + sampler.eps) / (priorities + sampler.eps).sum()
    )
    assert sampler.max_priority == pytest.approx(4.0 + sampler.eps)
    assert PRIORITIES not in buffer.sample(2)
    buffer.add(SampleBatch(obs=np.arange(2.0)))  # without: the largest priority so far
    assert sampler.probabilities(np.array([4]))[0] == pytest.approx(
        sampler.probabilities(np.array([3]))[0]
    )


def test_apex_trains_in_one_process_without_ray(monkeypatch):
    import ray

    def no_ray(*args, **kwargs):
        raise AssertionError("num_workers=0 and replay_shards=0 must not start Ray")

    monkeypatch.setattr(ray, "init", no_ray)
    algo = Algorithm("apex", env="CartPole-v1", num_workers=0, replay_shards=0, seed=0,
                     learning_starts=200, min_time_s_per_iteration=0.2)  # fmt: skip
    results = [algo.train() for _ in range(3)]
    algo.stop()
    assert results[-1]["env_steps_trained"] > 0
    assert results[-1]["worker_0/epsilon"] < 1.0


@pytest.mark.ray
def test_apex_samples_in_process_beside_replay_shard_actors(ray_session):
    # the replay branch's items come from shard actors; the in-process fragments from none,
    # so no weights are sent to a shard (what num_workers=auto's measuring run does)
    algo = Algorithm("apex", env="CartPole-v1", num_workers=0, replay_shards=2, seed=0,
                     learning_starts=200, min_time_s_per_iteration=0.2)  # fmt: skip
    try:
        results = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    assert results[-1]["env_steps_trained"] > 0


@pytest.mark.ray
@pytest.mark.slow
def test_weights_reach_a_worker_at_most_every_max_weight_sync_delay_steps(ray_session):
    algo = Algorithm("apex", env="CartPole-v1", seed=0, learning_starts=500,
                     max_weight_sync_delay=2_000, min_time_s_per_iteration=2.0)  # fmt: skip
    reported = {}
    try:
        result = algo.train()
        while result["env_steps_trained"] == 0 or len(reported) < 2:
            result = algo.train()
            reported |= {k: v for k, v in result.items() if k.startswith("worker_")}
    finally:
        algo.stop()
    broadcasts = algo.plan.context.counters[WEIGHT_BROADCASTS]
    assert 0 < broadcasts <= result["env_steps_sampled"] / 2_000
    # each worker reports its own (read at different times, so not compared here)
    assert all(0 <= reported[f"worker_{i}/epsilon"] <= 1 for i in (1, 2))


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_replay_shard_and_rollout_worker_do_not_end_the_run(ray_session):
    import ray

    algo = Algorithm("apex", env="CartPole-v1", seed=0, learning_starts=500,
                     min_time_s_per_iteration=0.5)  # fmt: skip
    try:
        algo.run(stop=StopCriteria(iters=2))
        shards = algo.workers.keep("replay", list)
        dead_shard, dead_worker = shards[1], algo.workers.remote_workers[0]
        ray.kill(dead_shard)
        ray.kill(dead_worker)
        summary = algo.run(stop=StopCriteria(iters=4))
        assert summary["stopped_by"] == "iterations" and summary["iterations"] == 4
        assert shards[1] is not dead_shard, "the dead shard was recreated"
        assert algo.workers.remote_workers[0] is not dead_worker
        assert ray.get(shards[1].size.remote()) > 0, "the new shard receives transitions"
        assert algo.last_result["env_steps_trained"] > 0
    finally:
        algo.stop()
