"""Action distributions, small and fast (no argument validation on the sampling hot path).

Examples:
    >>> d = Categorical(torch.zeros(2, 3))
    >>> d.sample().shape, round(float(d.entropy()[0]), 4)  # log(3)
    (torch.Size([2]), 1.0986)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from functools import cached_property

import gymnasium as gym
import torch
import torch.nn.functional as F

from flowrl.learning.draws import HeldDraws
from flowrl.learning.spaces import RecordLayout, action_kind, is_composite, leaf_spaces


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

    def from_noise(self, noise: torch.Tensor) -> torch.Tensor:
        """The action the mean plus ``noise`` makes (gSDE's, ``StateDependentNoise``)."""
        return self.mean + noise

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)


class StateDependentNoise:
    """gSDE's exploration noise for a batch of lanes: ``features @ W``, with one ``W`` per
    lane drawn from N(0, exp(log_std)^2) and held for ``steps`` calls (drawn anew when the
    number of lanes changes), so a lane's noise changes smoothly with its state, not at
    random every step (``flowrl.learning.models.head_outputs``).

    Examples:
        >>> noise = StateDependentNoise(steps=4)
        >>> features, log_std = torch.ones(3, 8), torch.zeros(8, 2)
        >>> first = noise(features, log_std)
        >>> first.shape, bool((noise(features, log_std) == first).all())  # held
        (torch.Size([3, 2]), True)
    """

    def __init__(self, steps: int) -> None:
        self.steps, self.draws = steps, HeldDraws(steps)

    def __call__(self, features: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
        def draw(lanes: int) -> torch.Tensor:  # only when one is due
            return log_std.detach().exp() * torch.randn(lanes, *log_std.shape)

        matrices = self.draws(len(features), draw)
        return (features.unsqueeze(1) @ matrices).squeeze(1)


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

    def from_noise(self, noise: torch.Tensor) -> torch.Tensor:
        """The action the mean plus ``noise`` makes, squashed (gSDE's)."""
        return torch.tanh(self.mean + noise)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        eps = torch.finfo(actions.dtype).eps
        return self._log_prob_pre_tanh(torch.atanh(actions.clamp(-1 + eps, 1 - eps)))

    def _log_prob_pre_tanh(self, u: torch.Tensor) -> torch.Tensor:
        z = (u - self.mean) / self.std
        gaussian = -0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2 * math.pi)
        # log(1 - tanh(u)^2), in a form that stays finite for large |u|
        log_det = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
        return (gaussian - log_det).sum(-1)


class MultiCategorical:
    """Independent categoricals over ``nvec`` choices (a MultiDiscrete action): ``inputs``
    hold each one's unnormalised log-probabilities in turn; an action holds one choice per
    categorical, and its log-prob and entropy are the sums over them.

    Examples:
        >>> d = MultiCategorical(torch.zeros(4, 5), nvec=(2, 3))
        >>> d.sample().shape, round(float(d.entropy()[0]), 4)  # log 2 + log 3
        (torch.Size([4, 2]), 1.7918)
    """

    def __init__(self, inputs: torch.Tensor, *, nvec: tuple[int, ...]) -> None:
        self.parts = [Categorical(x) for x in inputs.split(list(nvec), dim=-1)]

    def sample(self) -> torch.Tensor:
        return torch.stack([p.sample() for p in self.parts], dim=-1)

    def mode(self) -> torch.Tensor:
        return torch.stack([p.mode() for p in self.parts], dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(p.log_prob(actions[..., i]) for i, p in enumerate(self.parts))

    def entropy(self) -> torch.Tensor:
        return sum(p.entropy() for p in self.parts)


class Bernoulli:
    """Independent binary choices (a MultiBinary action) with logits ``inputs[..., n]``;
    log-prob and entropy are sums over the ``n`` choices.

    Examples:
        >>> d = Bernoulli(torch.zeros(3, 4))
        >>> d.mode().tolist()[0], round(float(d.entropy()[0]), 4)  # 4 log 2
        ([0, 0, 0, 0], 2.7726)
    """

    def __init__(self, inputs: torch.Tensor) -> None:
        self.logits = inputs

    def sample(self) -> torch.Tensor:
        return (torch.rand_like(self.logits) < torch.sigmoid(self.logits)).long()

    def mode(self) -> torch.Tensor:
        return (self.logits > 0).long()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        targets = actions.to(self.logits.dtype)
        nll = F.binary_cross_entropy_with_logits(self.logits, targets, reduction="none")
        return -nll.sum(-1)

    def entropy(self) -> torch.Tensor:
        p = torch.sigmoid(self.logits)
        return F.binary_cross_entropy_with_logits(self.logits, p, reduction="none").sum(-1)


class Composite:
    """Independent distributions over the leaves of a Tuple or Dict action space
    (``flowrl.learning.spaces``): ``inputs`` hold each leaf's inputs in turn, log-probs
    and entropies are the sums over the leaves, and an action is a record of one value
    per leaf, as its bytes (``[B, itemsize]`` uint8), the form the data path carries.

    Examples:
        >>> space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))))
        >>> cls, n = distribution_for(space)
        >>> d = cls(torch.zeros(4, n))
        >>> actions = d.sample()
        >>> actions.dtype, d.log_prob(actions).shape, n
        (torch.uint8, torch.Size([4]), 7)
    """

    def __init__(
        self,
        inputs: torch.Tensor,
        *,
        parts: list[tuple[DistributionClass, int]],
        layout: RecordLayout,
    ) -> None:
        split = inputs.split([n for _, n in parts], dim=-1)
        self.parts = [cls(x) for (cls, _), x in zip(parts, split, strict=True)]
        self.layout = layout

    def sample(self) -> torch.Tensor:
        return self.layout.pack_tensor([p.sample() for p in self.parts])

    def mode(self) -> torch.Tensor:
        return self.layout.pack_tensor([p.mode() for p in self.parts])

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        values = self.layout.leaf_tensors(actions)
        return sum(p.log_prob(a) for p, a in zip(self.parts, values, strict=True))

    def entropy(self) -> torch.Tensor:
        return sum(p.entropy() for p in self.parts)


Distribution = (
    Categorical | DiagGaussian | SquashedGaussian | MultiCategorical | Bernoulli | Composite
)
DistributionClass = Callable[[torch.Tensor], Distribution]


#: the action spaces flowrl's distributions take, for error messages
def distribution_for(space: gym.Space) -> tuple[DistributionClass, int]:
    """The distribution for an action space (a class, or one with the space's sizes bound)
    and the number of inputs it takes."""
    if is_composite(space):
        parts = [distribution_for(leaf) for _, leaf in leaf_spaces(space)]
        dist = functools.partial(Composite, parts=parts, layout=RecordLayout(space))
        return dist, sum(n for _, n in parts)
    kind = action_kind(space)
    if kind == "categorical":
        return Categorical, int(space.n)
    if kind == "multi_categorical":
        nvec = tuple(int(n) for n in space.nvec)
        return functools.partial(MultiCategorical, nvec=nvec), sum(nvec)
    if kind == "bernoulli":
        return Bernoulli, int(space.n)
    return DiagGaussian, 2 * int(space.shape[0])
