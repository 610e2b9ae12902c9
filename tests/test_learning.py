"""Learning tests: fixed seeds, a reward threshold within a step budget."""

from __future__ import annotations

import pytest
from reach import reach

from flowrl import Algorithm

pytestmark = pytest.mark.slow


@pytest.mark.ray
def test_ppo_with_ray_workers_reaches_450_on_cartpole(ray_session):
    summary = reach(Algorithm("ppo", env="CartPole-v1", seed=0), 450, 150_000)
    assert summary["stopped_by"] == "reward", summary
    assert summary["env_steps_sampled"] <= 150_000


@pytest.mark.ray
def test_ppo_sampling_a_round_ahead_reaches_450_on_cartpole(ray_session):
    # one update behind: each round sampled while the learner trains on the one before
    algo = Algorithm("ppo", env="CartPole-v1", seed=0, sample_ahead=True)
    assert "ParallelRollouts(bulk_sync, ahead)" in repr(algo.plan)
    summary = reach(algo, 450, 150_000)
    assert summary["stopped_by"] == "reward", summary


def test_ppo_without_ray_reaches_150_on_cartpole(monkeypatch):
    import ray

    def no_ray(*args, **kwargs):
        raise AssertionError("num_workers=0 must not start Ray")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setattr(ray, "put", no_ray)
    summary = reach(Algorithm("ppo", env="CartPole-v1", num_workers=0, seed=1), 150, 100_000)
    assert summary["stopped_by"] == "reward", summary


@pytest.mark.ray
def test_a3c_reaches_150_on_cartpole(ray_session):
    summary = reach(Algorithm("a3c", env="CartPole-v1", seed=0), 150, 200_000)
    assert summary["stopped_by"] == "reward", summary


@pytest.mark.ray
@pytest.mark.parametrize("name", ["impala", "appo"])
def test_learner_thread_algorithms_reach_450_on_cartpole_within_500k_steps(name, ray_session):
    summary = reach(Algorithm(name, env="CartPole-v1", seed=0), 450, 500_000)
    assert summary["stopped_by"] == "reward", summary


def test_impala_in_process_reaches_450_on_cartpole():
    """In process (the layout flowrl train chooses for it here, and notebooks' num_workers=0)
    sampling ran batches ahead of the learner thread it shares the process with; IMPALA's
    returns then collapsed to 9-10 on seeds 0-2 within 600k env steps (now 0-9 reach 450)."""
    algo = Algorithm("impala", env="CartPole-v1", num_workers=0, seed=0)
    summary = reach(algo, 450, 300_000)
    assert summary["stopped_by"] == "reward", summary


@pytest.mark.ray
def test_impala_with_an_aggregation_worker_learns_cartpole(ray_session):
    # seed 0 is not repeatable (the learner thread races the samplers): 24 runs reached 200
    # at 72k-282k env steps (plain IMPALA, 2 workers: 84k-263k); with two requests in
    # flight per worker, as before, 74k-381k, past this budget in 5 of 38
    algo = Algorithm("impala", env="CartPole-v1", seed=0, num_aggregation_workers=1)
    assert "AggregatedRollouts(1 aggregator, 2 workers)" in repr(algo.plan)
    summary = reach(algo, 200, 300_000)
    assert summary["stopped_by"] == "reward", summary


@pytest.mark.ray
def test_apex_reaches_450_on_cartpole_within_400k_steps(ray_session):
    # seeds 0-47 reached 450 at 108k-390k env steps (seed 0: ~290k, ~20 s of training)
    import sys

    ray = ray_session
    algo = Algorithm("apex", env="CartPole-v1", seed=0)
    assert (algo.config.num_workers, algo.config.replay_shards) == (2, 2)
    assert algo.workers.numpy_workers  # they act, explore and prioritise in numpy
    algo.train()
    actors = algo.workers.remote_workers
    loaded = [a.__ray_call__.remote(lambda self: "torch" in sys.modules) for a in actors]
    assert ray.get(loaded) == [False, False]
    summary = reach(algo, 450, 400_000)
    assert summary["stopped_by"] == "reward", summary


def test_dqn_reaches_450_on_cartpole():
    summary = reach(Algorithm("dqn", env="CartPole-v1", seed=0), 450, 200_000)
    assert summary["stopped_by"] == "reward", summary


def test_sac_reaches_minus_250_on_pendulum():
    # RL Zoo's pendulum preset (lr 1e-3): seeds 0-6 passed -250 at 5k-8k env steps, where
    # the defaults' 3e-4 took 5k-7k; both played -108 to -111 greedy at 20k
    algo = Algorithm("sac", env="Pendulum-v1", seed=0)
    assert algo.config.metrics_smoothing_episodes <= 10 and algo.config.lr == 1e-3
    summary = reach(algo, -250, 20_000)
    assert summary["stopped_by"] == "reward", summary


def test_ppo_with_its_pendulum_preset_reaches_minus_250_on_pendulum():
    # with the CartPole defaults PPO's return fell back to -735 at 1M env steps (best -286);
    # with the preset seeds 0-4 passed -250 at 53k-77k (benchmarks/suite.py --part classic)
    algo = Algorithm("ppo", env="Pendulum-v1", seed=0)
    assert (algo.config.gamma, algo.config.num_sgd_iter) == (0.9, 10)
    summary = reach(algo, -250, 120_000)
    assert summary["stopped_by"] == "reward", summary


def test_ppo_with_gsde_drives_the_continuous_mountain_car_up_the_hill():
    # without gSDE the same settings stood still (a return of 0 at 20k, seed 0), and so did
    # PPO's defaults at 1M; with it 5 of seeds 0-6 scored 87-98 greedy at 20k env steps
    algo = Algorithm("ppo", env="MountainCarContinuous-v0", seed=4)
    assert algo.config.gsde
    summary = reach(algo, 90, 20_000)
    assert summary["stopped_by"] == "reward", summary


def test_discrete_sac_reaches_150_on_cartpole():
    summary = reach(Algorithm("sac", env="CartPole-v1", discrete=True, seed=0), 150, 100_000)
    assert summary["stopped_by"] == "reward", summary
