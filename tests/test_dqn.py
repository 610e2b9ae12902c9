"""DQN: the plan runs with uniform and prioritized replay; bad spaces fail clearly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flowrl import Algorithm, ConfigError
from flowrl.algorithms.dqn import q_and_targets

SMALL = dict(num_workers=0, learning_starts=64, min_env_steps_per_iteration=200)


@pytest.mark.parametrize("prioritized", [False, True])
def test_dqn_trains_and_updates_targets(prioritized):
    algo = Algorithm("dqn", env="CartPole-v1", prioritized_replay=prioritized,
                     target_network_update_freq=256, **SMALL)  # fmt: skip
    first, second = algo.train(), algo.train()
    assert second["env_steps_trained"] > first["env_steps_trained"] > 0
    assert algo.plan.context.counters["num_target_updates"] >= 1
    assert "learner/q_mean" in second and "learner/td_error" not in second
    policy = algo.workers.local_worker.policy
    assert policy.epsilon() < 1.0
    algo.stop()


def test_learning_on_minibatches_steps_on_each_in_turn_and_keeps_the_rows_order():
    # Ape-X's replay requests bring several train batches; the learner steps on each in turn
    algo = Algorithm("dqn", env="CartPole-v1", **SMALL)
    algo.train()
    learner = algo.workers.learner["default"]
    batch = algo.workers.keep("replay", None).buffers["default"].sample(256)
    q, target = q_and_targets(
        learner.policy, learner.target, learner._tensors(batch), double_q=True
    )
    before = learner.num_updates
    stats = learner.learn_on_batch(batch, minibatch_size=64)
    assert learner.num_updates == before + 4
    assert stats["td_error"].shape == (256,) and isinstance(stats["loss"], float)
    # the first minibatch's errors come from the weights before any step, row by row
    np.testing.assert_allclose(stats["td_error"][:64], (q - target)[:64].detach(), rtol=1e-5)
    assert not np.allclose(stats["td_error"][64:], (q - target)[64:].detach())
    algo.stop()


@pytest.mark.parametrize("td_loss", ["huber", "mse"])
def test_the_loss_on_the_td_error_is_the_one_td_loss_names(td_loss):
    algo = Algorithm("dqn", env="CartPole-v1", td_loss=td_loss, **SMALL)
    algo.train()
    learner = algo.workers.learner["default"]
    batch = learner._tensors(algo.workers.keep("replay", None).buffers["default"].sample(64))
    loss, stats = learner.loss(batch)
    error = stats["td_error"].abs()
    squared = (error**2).mean()
    huber = torch.where(error < 1, 0.5 * error**2, error - 0.5).mean()
    torch.testing.assert_close(loss.detach(), squared if td_loss == "mse" else huber)
    algo.stop()


def test_adam_takes_the_config_s_epsilon():
    algo = Algorithm("dqn", env="CartPole-v1", adam_eps=1e-8, **SMALL)
    (optimizer,) = algo.workers.learner["default"].optimizers.values()
    assert optimizer.param_groups[0]["eps"] == 1e-8
    algo.stop()


def test_an_unknown_td_loss_is_a_config_error():
    with pytest.raises(ConfigError, match="td_loss must be one of huber, mse, got 'l1'"):
        Algorithm("dqn", env="CartPole-v1", td_loss="l1", **SMALL)


def test_dqn_round_robin_weight_follows_training_intensity():
    from flowrl.algorithms.dqn import DQNConfig

    cfg = DQNConfig(num_envs_per_worker=4, rollout_fragment_length=4, train_batch_size=64,
                    training_intensity=8.0)  # fmt: skip
    assert cfg.replay_weight == 2  # 8 * 16 sampled rows / 64 rows per SGD step


def test_dqn_checkpoint_keeps_target_net_and_exploration(tmp_path):
    algo = Algorithm("dqn", env="CartPole-v1", **SMALL)
    algo.train()
    clone = Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    a, b = algo.workers.learner["default"], clone.workers.learner["default"]
    for pa, pb in zip(a.target.parameters(), b.target.parameters(), strict=True):
        assert np.array_equal(pa.detach().numpy(), pb.detach().numpy())
    assert a.policy.timesteps == b.policy.timesteps
    algo.stop()
    clone.stop()


def test_epsilon_follows_an_exploration_schedule_across_a_resume(tmp_path):
    from flowrl.core.schedules import scheduled

    points = [[0, 1.0], [2000, 0.1], [4000, 0.5]]
    algo = Algorithm("dqn", env="CartPole-v1", exploration_eps=points, **SMALL)
    policy = algo.workers.local_worker.policy
    assert policy.epsilon() == 1.0
    algo.train()  # epsilon at the env steps this policy acted for (all of them, in-process)
    assert 0.1 < policy.epsilon() < 1.0
    assert policy.epsilon() == pytest.approx(
        scheduled(algo.config.exploration_eps, policy.timesteps)
    )
    clone = Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    assert clone.workers.local_worker.policy.epsilon() == pytest.approx(policy.epsilon())
    algo.stop()
    clone.stop()


def test_dqn_rejects_continuous_actions():
    with pytest.raises(ConfigError, match=r"dqn takes Discrete actions; .* Box\("):
        Algorithm("dqn", env="Pendulum-v1", num_workers=0)


@pytest.mark.parametrize("keep", [False, True])
def test_dqn_checkpoint_keeps_the_replay_buffer_when_asked(tmp_path, keep):
    algo = Algorithm("dqn", env="CartPole-v1", store_buffer_in_checkpoints=keep, **SMALL)
    algo.train()
    original = algo.plan.context.checkpointables.get("replay_buffer")
    clone = Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    clone.train()
    restored = clone.plan.context.checkpointables.get("replay_buffer")
    if keep:
        original, restored = original.buffers["default"], restored.buffers["default"]
        sampled = clone.last_result["env_steps_sampled"] - algo.last_result["env_steps_sampled"]
        # on top of the original's rows, what the clone stored (its reset steps are not rows)
        assert original.num_added < restored.num_added <= original.num_added + sampled
        assert np.array_equal(restored._columns["obs"][:100], original._columns["obs"][:100])
    else:
        assert original is None and restored is None
    algo.stop()
    clone.stop()


@pytest.mark.slow
def test_atari_frames_are_replayed_at_a_frame_per_row_and_resume_from_a_checkpoint(tmp_path):
    """Breakout's stacks of 4 frames go to the buffer's frame store (about 7 KB a row, not
    56), train, and come back whole from a checkpoint."""
    config = dict(SMALL, preset=False, num_envs_per_worker=2, rollout_fragment_length=4,
                  train_batch_size=8, training_intensity=1.0,
                  store_buffer_in_checkpoints=True)  # fmt: skip
    algo = Algorithm("dqn", env="ALE/Breakout-v5", **config)
    result = algo.train()
    assert result["env_steps_trained"] > 0
    buffer = algo.plan.context.checkpointables["replay_buffer"].buffers["default"]
    assert buffer._frames.keys == ("obs", "next_obs")
    assert buffer._frames.num_frames < 1.1 * len(buffer)
    clone = Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    clone.train()  # may report its first round's sampling alone: the rollouts report first
    assert clone.train()["env_steps_trained"] > result["env_steps_trained"]
    restored = clone.plan.context.checkpointables["replay_buffer"].buffers["default"]
    rows = np.arange(len(buffer))  # the rows before the checkpoint, in their slots
    for key in ("obs", "next_obs"):
        assert np.array_equal(restored._frames.read(rows)[key], buffer._frames.read(rows)[key])
    algo.stop()
    clone.stop()


def test_buffer_checkpoints_need_a_local_buffer():
    with pytest.raises(ConfigError, match="store_buffer_in_checkpoints needs replay_shards=0"):
        Algorithm("dqn", env="CartPole-v1", store_buffer_in_checkpoints=True, replay_shards=2)


@pytest.mark.ray
@pytest.mark.slow
def test_replay_buffer_survives_a_dead_rollout_worker(ray_session):
    from flowrl.run.runner import StopCriteria

    algo = Algorithm("dqn", env="CartPole-v1", seed=0, store_buffer_in_checkpoints=True,
                     **{**SMALL, "num_workers": 2})  # fmt: skip
    algo.train()
    buffer = algo.plan.context.checkpointables["replay_buffer"]
    stored = buffer.buffers["default"].num_added
    dead = algo.workers.remote_workers[0]
    ray_session.kill(dead)
    summary = algo.run(stop=StopCriteria(iters=3))
    assert summary["stopped_by"] == "iterations"
    assert algo.workers.remote_workers[0] is not dead  # the plan was rebuilt ...
    assert algo.plan.context.checkpointables["replay_buffer"] is buffer  # ... on the old rows
    assert buffer.buffers["default"].num_added > stored
    algo.stop()


def test_epsilon_reads_the_run_s_env_steps_as_last_heard_plus_this_copy_s_since():
    import gymnasium as gym

    from flowrl.algorithms.dqn import DQNConfig, DQNPolicy

    config = DQNConfig(num_workers=4, exploration_timesteps=10_000, exploration_final_eps=0.0)
    policy = DQNPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), config)
    policy.compute_actions(np.zeros((100, 2), np.float32))  # 100 steps, before hearing
    assert policy.epsilon() == pytest.approx(1 - 400 / 10_000)  # 4 copies sampled alike
    policy.set_env_steps_sampled(5_000)  # the plan's counter, each iteration
    assert policy.epsilon() == pytest.approx(0.5)
    policy.compute_actions(np.zeros((10, 2), np.float32))
    assert policy.epsilon() == pytest.approx(1 - 5_040 / 10_000)


def test_the_rollouts_report_while_the_buffer_fills_and_a_budget_is_met_there():
    """Before learning_starts, only the training branch reported: a run showed nothing
    for 100k env steps (DQN's Atari preset) and ran past a smaller budget to that point."""
    from flowrl.run.runner import StopCriteria

    algo = Algorithm("dqn", env="CartPole-v1", num_workers=0, seed=0, learning_starts=3000,
                     min_env_steps_per_iteration=500)  # fmt: skip
    with algo:
        first = algo.train()
        assert 500 <= first["env_steps_sampled"] < 1000 and first["env_steps_trained"] == 0
        assert not any(key.startswith("learner/") for key in first)
        summary = algo.run(stop=StopCriteria(timesteps=1500))
        assert summary["stopped_by"] == "timesteps" and summary["env_steps_sampled"] < 2000
        trained = algo.train()
        while trained["env_steps_trained"] == 0:
            trained = algo.train()
        assert trained["env_steps_sampled"] >= 3000 and "learner/loss" in trained
        assert algo.train()["env_steps_trained"] > trained["env_steps_trained"]


def test_a_resumed_run_refills_its_buffer_in_iterations_of_their_full_length(tmp_path):
    """A restored run starts with an empty buffer: its first result came after one
    fragment (16 env steps), the iteration's least env steps counted from zero."""
    config = {**SMALL, "learning_starts": 1000}
    with Algorithm("dqn", env="CartPole-v1", **config) as algo:
        before = algo.train()["env_steps_sampled"]
        path = algo.save(tmp_path / "c")
    with Algorithm.from_checkpoint(path) as clone:
        first = clone.train()
    assert first["env_steps_trained"] == 0  # warming up again
    assert first["env_steps_sampled"] - before >= SMALL["min_env_steps_per_iteration"]
