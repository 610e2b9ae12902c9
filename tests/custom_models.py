"""A user's own torch models, for the custom-model tests: an encoder flowrl puts its heads
on, and a whole acting module. Importable as ``custom_models`` in the driver and in Ray
workers (the tests directory is on their path)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl import ActingModule, ActingOutput


class TinyEncoder(nn.Module):
    """Observations to ``width`` ReLU features through one hidden layer."""

    def __init__(self, observation_space: gym.Space, width: int = 64) -> None:
        super().__init__()
        self.out_features = width
        n_obs = int(np.prod(observation_space.shape))
        self.net = nn.Sequential(nn.Linear(n_obs, width), nn.Tanh(), nn.Linear(width, width))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs.reshape(obs.shape[0], -1).float()))


class LinearActorCritic(ActingModule):
    """A whole acting module: linear policy logits and a linear value."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        n_obs = int(np.prod(observation_space.shape))
        self.pi = nn.Linear(n_obs, int(action_space.n))
        self.vf = nn.Linear(n_obs, 1)

    def forward(self, obs: torch.Tensor, state=None) -> ActingOutput:
        x = obs.reshape(obs.shape[0], -1).float()
        return ActingOutput(self.pi(x), self.vf(x).squeeze(-1))


class WrongWidth(TinyEncoder):
    """Claims more features than it returns."""

    def __init__(self, observation_space: gym.Space) -> None:
        super().__init__(observation_space, width=8)
        self.out_features = 9


class TooWideActorCritic(LinearActorCritic):
    """A whole acting module whose logits are one wider than the actions."""

    def __init__(self, observation_space, action_space):
        super().__init__(observation_space, gym.spaces.Discrete(int(action_space.n) + 1))
