"""Action distributions: the fast samplers draw from the distribution they describe."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl.learning.distributions import Categorical, DiagGaussian, StateDependentNoise
from flowrl.learning.models import ActorCritic, ActorNetwork


def test_categorical_samples_follow_the_softmax_probabilities():
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0], [3.0, 0.0, 0.0, 0.0]])
    dist = Categorical(logits.repeat(50_000, 1))
    samples = dist.sample().view(50_000, 2)
    probs = torch.softmax(logits, -1)
    for row in range(2):
        freq = torch.bincount(samples[:, row], minlength=4).double() / 50_000
        # 4 standard errors of a frequency estimated from 50k draws
        tolerance = 4 * (probs[row] * (1 - probs[row]) / 50_000).sqrt()
        assert ((freq - probs[row]).abs() <= tolerance).all(), (freq, probs[row])


def test_categorical_log_prob_and_mode():
    dist = Categorical(torch.tensor([[0.0, 2.0, 1.0]]))
    expected = torch.log_softmax(torch.tensor([0.0, 2.0, 1.0]), -1)
    assert dist.mode().tolist() == [1]
    assert torch.allclose(dist.log_prob(torch.tensor([2])), expected[2:3])


def test_gsde_noise_is_held_for_its_steps_and_spread_as_the_reported_std():
    """gSDE's actions are ``mean + features @ W``: the draw ``W`` holds for ``gsde_steps``
    calls, and across lanes the noise has the std the module reports for the log-probs."""
    torch.manual_seed(0)
    space = gym.spaces.Box(-1, 1, (3,))
    module = ActorCritic(space, gym.spaces.Box(-1, 1, (2,)), hiddens=(16,), gsde=True,
                         log_std_init=-1.0)  # fmt: skip
    out = module(torch.randn(1, 3).repeat(20_000, 1))  # one state, 20k lanes
    noise = StateDependentNoise(steps=2)
    first = noise(out.noise_features, module.log_std)
    assert torch.equal(noise(out.noise_features, module.log_std), first)  # held
    assert not torch.equal(noise(out.noise_features, module.log_std), first)  # drawn anew
    reported = DiagGaussian(out.dist_inputs).std[0]
    assert torch.allclose(first.std(0), reported, rtol=0.03), (first.std(0), reported)


def test_gsde_log_probs_train_its_log_std_and_not_the_features():
    module = ActorCritic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)),
                        hiddens=(8,), gsde=True)  # fmt: skip
    out = module(torch.randn(5, 3))
    assert module.log_std.shape == (8, 2) and not out.noise_features.requires_grad
    DiagGaussian(out.dist_inputs).log_prob(torch.zeros(5, 2)).sum().backward()
    assert module.log_std.grad.abs().sum() > 0


def test_gsde_s_std_trains_the_features_of_sac_s_actor_not_the_actor_critic_s():
    """As Stable-Baselines3 has it (``learn_features``): SAC's actor lets the gradient of
    its state-dependent std reach its features; the actor-critic holds them out. SAC on the
    continuous car stood still on seed 0 without it (benchmarks/results/gsde.json)."""
    obs, actions = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))
    for module, learns in (
        (ActorCritic(obs, actions, hiddens=(8,), gsde=True), False),
        (ActorNetwork(obs, 4, hiddens=(8,), gsde=True), True),
    ):
        out = module(torch.randn(5, 3))
        out.dist_inputs[:, 2:].sum().backward()  # the log stds alone
        first = module.pi[0].weight.grad  # the first layer of the features
        assert (first is not None and bool(first.abs().sum() > 0)) == learns, module
        assert module.log_std.grad.abs().sum() > 0 and not out.noise_features.requires_grad


def test_gsde_on_discrete_actions_or_a_module_of_yours_is_one_line():
    import flowrl
    from algorithms.ppo import PPOConfig
    from flowrl.core.config import ConfigError
    from flowrl.learning.module import ActingModule, ActingOutput
    from flowrl.learning.policy import ActorCriticPolicy

    obs = gym.spaces.Box(-1, 1, (3,))
    discrete = r"^gsde explores Box actions; the env's action space is Discrete\(2\)$"
    with pytest.raises(ConfigError, match=discrete):
        ActorCriticPolicy(obs, gym.spaces.Discrete(2), PPOConfig(gsde=True))

    class Linear(ActingModule):
        def __init__(self, observation_space, action_space):
            super().__init__()
            self.pi = torch.nn.Linear(3, 2 * action_space.shape[0])

        def forward(self, obs, state=None):
            return ActingOutput(self.pi(obs))

    flowrl.register_model("linear_gaussian", Linear)
    yours = PPOConfig(gsde=True, model="linear_gaussian")
    with pytest.raises(ConfigError, match=r"^gsde explores with flowrl's networks, not a"):
        ActorCriticPolicy(obs, gym.spaces.Box(-1, 1, (1,)), yours)


@pytest.mark.parametrize("numpy_acting", [True, False])
def test_gsde_holds_each_lane_s_draw_for_its_steps(numpy_acting):
    """A lane in the same state acts the same while a draw holds, and differently after,
    whether the policy acts in numpy or in torch."""
    from algorithms.ppo import PPOConfig
    from flowrl.learning.policy import ActorCriticPolicy

    obs, box = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-5, 5, (2,))
    config = PPOConfig(gsde=True, gsde_steps=3, numpy_acting=numpy_acting)
    policy = ActorCriticPolicy(obs, box, config)
    assert (policy.numpy_acting is not None) == numpy_acting
    lanes = np.random.default_rng(0).uniform(-1, 1, (2, 3)).astype(np.float32)
    actions = [policy.compute_actions(lanes)[0] for _ in range(4)]
    assert np.array_equal(actions[0], actions[1]) and np.array_equal(actions[0], actions[2])
    assert not np.allclose(actions[0], actions[3]) and not np.allclose(*actions[0])
