"""SAC: the entropy terms against plain reference loops, the plan in both action modes,
checkpoints, and clear errors for the wrong action space."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flowrl import Algorithm, ConfigError
from flowrl.algorithms.sac import soft_q_target
from flowrl.learning.distributions import SquashedGaussian

SMALL = dict(num_workers=0, learning_starts=64, min_env_steps_per_iteration=200,
             train_batch_size=32, training_intensity=32, model_hiddens=(32, 32))  # fmt: skip


def test_squashed_gaussian_log_prob_matches_a_reference_loop():
    torch.manual_seed(0)
    inputs = torch.randn(5, 6) * 0.5  # 3 action dims: mean, then log std
    dist = SquashedGaussian(inputs)
    actions, logp = dist.rsample()
    mean, log_std = inputs[:, :3].tolist(), inputs[:, 3:].tolist()
    for i in range(5):
        expected = 0.0
        for d in range(3):
            a = float(actions[i, d])
            u = math.atanh(a)
            std = math.exp(log_std[i][d])
            gaussian = -0.5 * ((u - mean[i][d]) / std) ** 2 - math.log(std * math.sqrt(2 * math.pi))
            expected += gaussian - math.log(1 - math.tanh(u) ** 2)
        assert logp[i].item() == pytest.approx(expected, rel=1e-3, abs=1e-3)
    assert torch.allclose(dist.log_prob(actions), logp, atol=1e-3)
    assert (actions.abs() < 1).all()


def test_squashed_log_prob_stays_finite_far_in_the_tails():
    dist = SquashedGaussian(torch.tensor([[30.0, 0.0]]))
    _, logp = dist.rsample()
    assert torch.isfinite(logp).all()


def test_soft_q_target_matches_a_reference_loop():
    rng = np.random.default_rng(0)
    n, k, alpha = 6, 3, 0.2
    batch = {
        "rewards": torch.tensor(rng.normal(size=n), dtype=torch.float32),
        "discounts": torch.full((n,), 0.99**2),
        "terminateds": torch.tensor([False, True, False, False, True, False]),
    }
    # Box actions: one sampled next action per row
    next_q = torch.tensor(rng.normal(size=n), dtype=torch.float32)
    next_logp = torch.tensor(rng.normal(size=n), dtype=torch.float32)
    got = soft_q_target(batch, next_q, next_logp, torch.tensor(alpha))
    for i in range(n):
        bootstrap = 0.0 if batch["terminateds"][i] else 0.99**2 * (next_q[i] - alpha * next_logp[i])
        assert got[i].item() == pytest.approx(float(batch["rewards"][i] + bootstrap), rel=1e-5)
    # Discrete actions: the exact expectation over the next policy
    q = torch.tensor(rng.normal(size=(n, k)), dtype=torch.float32)
    logits = torch.tensor(rng.normal(size=(n, k)), dtype=torch.float32)
    logp = torch.log_softmax(logits, -1)
    got = soft_q_target(batch, q, logp, torch.tensor(alpha), logp.exp())
    for i in range(n):
        value = sum(math.exp(logp[i, a]) * (q[i, a] - alpha * logp[i, a]) for a in range(k))
        bootstrap = 0.0 if batch["terminateds"][i] else 0.99**2 * value
        assert got[i].item() == pytest.approx(float(batch["rewards"][i] + bootstrap), rel=1e-4)


@pytest.mark.parametrize(
    ("env", "extra"), [("Pendulum-v1", {}), ("CartPole-v1", {"discrete": True})]
)
def test_sac_trains_and_soft_updates_targets(env, extra):
    algo = Algorithm("sac", env=env, **SMALL, **extra)
    learner = algo.workers.learner["default"]
    target_before = [p.clone() for p in learner.q_target.parameters()]
    first, second = algo.train(), algo.train()
    assert second["env_steps_trained"] > first["env_steps_trained"] > 0
    for key in ("learner/critic_loss", "learner/actor_loss", "learner/alpha", "learner/entropy"):
        assert key in second
    assert "learner/td_error" not in second
    moved = [
        not torch.equal(a, b)
        for a, b in zip(target_before, learner.q_target.parameters(), strict=True)
    ]
    assert all(moved), "soft updates move every target parameter"
    algo.stop()


def test_sac_with_gsde_holds_its_draws_and_trains_the_log_std():
    """SAC explores with gSDE as the actor-critics do: squashed, each draw held for
    ``gsde_steps`` calls; its log std (one per feature) is the actor's parameter, trained
    through the reparameterised actor loss."""
    algo = Algorithm("sac", env="Pendulum-v1", gsde=True, gsde_steps=3, log_std_init=-1.0,
                     **SMALL)  # fmt: skip
    policy = algo.workers.local_worker.policy
    log_std = policy.module.log_std
    assert log_std.shape == (32, 1) and float(log_std.mean()) == -1.0
    obs = np.ones((2, 3), np.float32)  # one state in two lanes
    actions = [policy.compute_actions(obs)[0] for _ in range(4)]
    assert np.array_equal(actions[0], actions[2]) and not np.array_equal(actions[0], actions[3])
    assert np.abs(actions[0]).max() < 1 and not np.allclose(*actions[0])  # a draw per lane
    algo.train()
    assert float(log_std.mean()) != -1.0
    with pytest.raises(ConfigError, match=r"^gsde explores Box actions"):
        Algorithm("sac", env="CartPole-v1", discrete=True, gsde=True, num_workers=0)
    algo.stop()


def test_temperature_rises_when_entropy_is_below_target():
    algo = Algorithm("sac", env="Pendulum-v1", target_entropy=10.0, **SMALL)
    algo.train()
    algo.train()
    assert algo.last_result["learner/alpha"] > 1.0
    algo.stop()


def test_a_temperature_with_alpha_lr_0_stays_where_it_starts():
    """RL Zoo's fixed ``ent_coef`` (its continuous car's 0.1) is ``alpha_lr=0``."""
    algo = Algorithm("sac", env="Pendulum-v1", initial_alpha=0.1, alpha_lr=0.0, **SMALL)
    algo.train()
    algo.train()
    assert algo.last_result["learner/alpha"] == pytest.approx(0.1)
    algo.stop()


def test_box_actions_are_rescaled_to_the_bounds():
    algo = Algorithm("sac", env="Pendulum-v1", **SMALL)
    policy = algo.workers.local_worker.policy
    assert np.allclose(policy.env_actions(np.array([[-1.0], [0.0], [1.0]])), [[-2], [0], [2]])
    algo.stop()


def test_sac_checkpoint_keeps_critics_targets_and_temperature(tmp_path):
    algo = Algorithm("sac", env="Pendulum-v1", **SMALL)
    algo.train()
    clone = Algorithm.from_checkpoint(algo.save(tmp_path / "c"))
    a, b = algo.workers.learner["default"], clone.workers.learner["default"]
    for module in ("module", "q", "q_target"):
        for pa, pb in zip(
            getattr(a, module).parameters(), getattr(b, module).parameters(), strict=True
        ):
            assert torch.equal(pa, pb)
    log_alpha = float(a.temperature.log_alpha.detach())
    assert log_alpha == float(b.temperature.log_alpha.detach()) != 0.0
    algo.stop()
    clone.stop()


def test_sac_action_space_errors():
    with pytest.raises(ConfigError, match="set discrete=true"):
        Algorithm("sac", env="CartPole-v1", num_workers=0)
    with pytest.raises(ConfigError, match="needs a Discrete action space"):
        Algorithm("sac", env="Pendulum-v1", num_workers=0, discrete=True)
