"""Action distributions, small and fast (no argument validation on the sampling hot path).

Example:
    >>> d = Categorical(torch.zeros(2, 3))
    >>> d.sample().shape, round(float(d.entropy()[0]), 4)  # log(3)
    (torch.Size([2]), 1.0986)
"""

from __future__ import annotations

import math
from functools import cached_property

import gymnasium as gym
import torch
import torch.nn.functional as F

from flowrl.core.config import ConfigError


class Categorical:
    """A categorical distribution over unnormalised ``inputs[..., n]``; ``logits`` are the
    normalised log-probabilities, computed when first needed (sampling does not)."""

    def __init__(self, inputs: torch.Tensor) -> None:
        self.inputs = inputs

    @cached_property
    def logits(self) -> torch.Tensor:
        return F.log_softmax(self.inputs, dim=-1)

    def sample(self) -> torch.Tensor:
        # Gumbel-max: argmax(inputs + Gumbel noise), with -log(Exp(1)) as the Gumbel draw;
        # a third of torch.multinomial's time on the per-step batches of a rollout
        noise = torch.empty_like(self.inputs).exponential_().log_()
        return (self.inputs - noise).argmax(dim=-1)

    def mode(self) -> torch.Tensor:
        return self.inputs.argmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)


class DiagGaussian:
    """Diagonal Gaussian: ``inputs[..., :d]`` is the mean, ``inputs[..., d:]`` the log std."""

    def __init__(self, inputs: torch.Tensor) -> None:
        self.mean, self.log_std = inputs.chunk(2, dim=-1)
        self.std = self.log_std.exp()

    def sample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)


class SquashedGaussian:
    """``tanh`` of a diagonal Gaussian (SAC's policy): actions in (-1, 1). ``inputs`` hold the
    mean and the log std (clamped to [-20, 2]); log-probs include the change of variables,
    ``log p(a) = log N(u) - sum log(1 - tanh(u)^2)`` for ``a = tanh(u)``."""

    def __init__(self, inputs: torch.Tensor) -> None:
        self.mean, log_std = inputs.chunk(2, dim=-1)
        self.log_std = log_std.clamp(-20.0, 2.0)
        self.std = self.log_std.exp()

    def rsample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action (gradients flow to the inputs) and its log-prob."""
        u = self.mean + self.std * torch.randn_like(self.mean)
        return torch.tanh(u), self._log_prob_pre_tanh(u)

    def sample(self) -> torch.Tensor:
        return self.rsample()[0]

    def mode(self) -> torch.Tensor:
        return torch.tanh(self.mean)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        eps = torch.finfo(actions.dtype).eps
        return self._log_prob_pre_tanh(torch.atanh(actions.clamp(-1 + eps, 1 - eps)))

    def _log_prob_pre_tanh(self, u: torch.Tensor) -> torch.Tensor:
        z = (u - self.mean) / self.std
        gaussian = -0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)
        # log(1 - tanh(u)^2), in a form that stays finite for large |u|
        log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return (gaussian - log_det).sum(-1)


Distribution = Categorical | DiagGaussian | SquashedGaussian


def distribution_for(space: gym.Space) -> tuple[type[Distribution], int]:
    """The distribution class for an action space and the number of inputs it takes."""
    if isinstance(space, gym.spaces.Discrete):
        return Categorical, int(space.n)
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return DiagGaussian, 2 * int(space.shape[0])
    raise ConfigError(
        f"unsupported action space {space}: flowrl's policies take Discrete or 1-D Box actions"
    )
