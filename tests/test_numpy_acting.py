"""Acting in numpy (flowrl.learning.numpy_acting): the same distribution inputs, values and
action distribution as the torch module, following its weights; torch where it must."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl import Config, Policy
from flowrl.core.config import ActorCriticConfig
from flowrl.learning.numpy_acting import NumpyActing

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)


def twins(action_space, **config):
    """A policy acting in numpy and one acting in torch, with the same weights."""
    fast = Policy(OBS, action_space, Config(**config))
    slow = Policy(OBS, action_space, Config(numpy_acting=False, **config))
    slow.set_weights(fast.get_weights())
    assert fast.numpy_acting is not None and slow.numpy_acting is None
    return fast, slow


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-2, 2, (2,))])
def test_numpy_acting_matches_torch(action_space):
    fast, slow = twins(action_space)
    obs = np.random.default_rng(0).uniform(-1, 1, (20_000, 4)).astype(np.float32)
    greedy, fast_extras = fast.compute_actions(obs, explore=False)
    torch_greedy, slow_extras = slow.compute_actions(obs, explore=False)
    for name, value in fast_extras.items():
        np.testing.assert_allclose(value, slow_extras[name], rtol=1e-4, atol=1e-5)
    sampled, _ = fast.compute_actions(obs, explore=True)
    assert sampled.dtype == slow.compute_actions(obs[:2])[0].dtype
    if isinstance(action_space, gym.spaces.Discrete):
        assert (greedy == torch_greedy).mean() > 0.999  # (ties of float32 rounding aside)
        probs = torch.softmax(torch.from_numpy(fast_extras["action_dist_inputs"]), -1).numpy()
        freq = np.bincount(sampled, minlength=3) / len(obs)
        np.testing.assert_allclose(freq, probs.mean(0), atol=0.01)
    else:
        np.testing.assert_allclose(greedy, torch_greedy, rtol=1e-4, atol=1e-5)
        noise = (sampled - greedy) / np.exp(fast_extras["action_dist_inputs"][:, 2:])
        assert abs(noise.mean()) < 0.02 and abs(noise.std() - 1) < 0.02


def test_numpy_acting_follows_the_module_s_weights():
    """An optimiser's step in place (a learner in this process) and set_weights both
    reach the numpy copy."""
    fast, slow = twins(gym.spaces.Discrete(2))
    obs = np.ones((3, 4), np.float32)
    before = fast.compute_actions(obs, explore=False)[1]["vf_preds"]
    with torch.no_grad():
        for p in fast.module.parameters():
            p.add_(0.1)
    moved = fast.compute_actions(obs, explore=False)[1]["vf_preds"]
    assert not np.allclose(before, moved)
    fast.set_weights(slow.get_weights())
    np.testing.assert_allclose(fast.compute_actions(obs, explore=False)[1]["vf_preds"], before)


def test_numpy_acting_steps_the_lstm_as_torch_does():
    """With use_lstm: the same outputs and next state, step after step from zeros."""
    config = ActorCriticConfig(use_lstm=True, lstm_cell_size=16)
    fast = Policy(OBS, gym.spaces.Discrete(3), config)
    slow = Policy(
        OBS, gym.spaces.Discrete(3), ActorCriticConfig(**{**vars(config), "numpy_acting": False})
    )
    slow.set_weights(fast.get_weights())
    assert fast.numpy_acting is not None and slow.numpy_acting is None
    rng = np.random.default_rng(0)
    fast_state = slow_state = fast.initial_state(6)
    for _ in range(5):
        obs = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
        _, fast_extras = fast.compute_actions(obs, explore=False, state=fast_state)
        _, slow_extras = slow.compute_actions(obs, explore=False, state=slow_state)
        for name, value in fast_extras.items():
            np.testing.assert_allclose(value, slow_extras[name], rtol=1e-4, atol=1e-5)
        fast_state, slow_state = fast_extras["state_out"], slow_extras["state_out"]


def test_torch_acts_where_numpy_does_not_apply():
    """An action mask, image observations or MultiDiscrete actions keep torch."""
    discrete = gym.spaces.Discrete(2)
    masked = gym.spaces.Dict({"observation": OBS, "action_mask": gym.spaces.MultiBinary(2)})
    assert Policy(masked, discrete, Config()).numpy_acting is None
    image = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert Policy(image, discrete, Config()).numpy_acting is None
    assert NumpyActing.of(Policy(OBS, gym.spaces.MultiDiscrete([2, 3]), Config())) is None


def test_in_process_acting_follows_the_learner_s_steps():
    """With no remote workers the learner steps the acting module itself, with fused Adam
    (which torch's version counters miss): the numpy copy acts with every update."""
    from flowrl import Algorithm

    with Algorithm("ppo", env="CartPole-v1", num_workers=0, train_batch_size=512) as algo:
        policy = algo.workers.local_worker.policies["default"]
        obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
        for _ in range(2):
            algo.train()
            values = policy.compute_actions(obs, explore=False)[1]["vf_preds"]
            with torch.no_grad():
                torch_values = policy.module(torch.from_numpy(obs)).value.numpy()
            np.testing.assert_allclose(values, torch_values, rtol=1e-4, atol=1e-5)
