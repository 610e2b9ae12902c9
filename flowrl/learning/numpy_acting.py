"""Acting in numpy: flowrl's MLP actor-critic's forward pass and its action draw without
torch, for the per-step calls of sampling.

A rollout step runs the policy on a handful of rows (one per env), where torch's per-call
overhead is most of the cost: on CartPole's 8 envs, ``Policy.compute_actions`` takes about
44 us in torch and 16 us in numpy. ``NumpyActing.of(policy)`` acts with numpy views of
the policy's module's weights where one applies (the default ``ActorCritic``: vector
observations, MLP heads, Discrete or Box actions, no action mask, on the CPU), else None.
The views follow the weights as they change in place (a learner's step, ``set_weights``).

Examples:
    >>> from flowrl import Config, Policy
    >>> policy = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), Config())
    >>> acting = NumpyActing.of(policy)
    >>> actions, dist_inputs, values = acting.act(np.zeros((8, 4), np.float32), explore=True)
    >>> actions.shape, dist_inputs.shape, values.shape
    ((8,), (8, 2), (8,))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.core.sample_batch import ACTION_DIST_INPUTS, VF_PREDS
from flowrl.learning.distributions import Categorical, DiagGaussian
from flowrl.learning.models import MLP, ActorCritic, Flatten

_ACTIVATIONS = {nn.Tanh: np.tanh, nn.ReLU: lambda x, out: np.maximum(x, 0, out=out)}


class NumpyActing:
    """An ``ActorCritic``'s heads in numpy (views of its weights), acting as
    ``Policy.compute_actions`` does: the same distribution inputs and values (to float32
    rounding), actions drawn from the same distribution with its own generator."""

    def __init__(self, module: ActorCritic, discrete: bool, seed: Any) -> None:
        self.module, self.discrete = module, discrete
        self.rng = np.random.default_rng(seed)
        self._params = list(module.parameters())
        self._versions: tuple[int, ...] = ()
        #: the module's weights changed since the views were taken (``weights_changed``)
        self.stale = True
        self.pi: list[tuple[np.ndarray, np.ndarray, Any]] = []
        self.vf: list[tuple[np.ndarray, np.ndarray, Any]] = []
        self.log_std: np.ndarray | None = None

    @classmethod
    def of(cls, policy: Any) -> NumpyActing | None:
        """``policy``'s numpy acting, or None where its module, spaces or device need
        torch (a recurrent or image or custom module, a mask, composite spaces)."""
        module = policy.module
        plain_obs = isinstance(policy.input_space, gym.spaces.Box | gym.spaces.MultiBinary)
        if (
            type(module) is not ActorCritic
            or module.trunk is not None
            or not isinstance(module.flatten, Flatten)
            or module.flatten.sizes
            or not plain_obs
            or policy.masked
            or policy.obs_layout is not None
            or policy.device.type != "cpu"
            or policy.dist_cls not in (Categorical, DiagGaussian)
            or not all(_supported(head) for head in (module.pi, module.vf))
        ):
            return None
        seed = [torch.initial_seed() % 2**63, policy.worker_index]  # the worker's seed
        return cls(module, policy.dist_cls is Categorical, seed)

    def _refresh(self) -> None:
        """Views of the module's weights: they follow every change in place (an
        optimiser's step, ``load_state_dict``); taken again when told the weights changed
        (``stale``: a learner's step, ``set_weights``) or when torch counted a change in
        their ``_version``, should a parameter have been replaced instead."""
        versions = tuple(p._version for p in self._params)
        if not self.stale and versions == self._versions:
            return
        self.pi, self.vf = _layers(self.module.pi), _layers(self.module.vf)
        log_std = self.module.log_std
        self.log_std = None if log_std is None else log_std.detach().numpy()
        self._versions, self.stale = versions, False

    def compute_actions(self, obs: np.ndarray, *, explore: bool) -> tuple[np.ndarray, dict]:
        """``Policy.compute_actions``: actions, with the distribution inputs and values."""
        actions, dist_inputs, values = self.act(obs, explore=explore)
        return actions, {ACTION_DIST_INPUTS: dist_inputs, VF_PREDS: values}

    def act(self, obs: np.ndarray, *, explore: bool) -> tuple[np.ndarray, ...]:
        """Actions, distribution inputs and values for a batch of observations."""
        self._refresh()
        features = obs.reshape(len(obs), -1).astype(np.float32, copy=False)
        out, values = _forward(features, self.pi), _forward(features, self.vf)[:, 0]
        if self.discrete:
            if not explore:
                return out.argmax(-1), out, values
            gumbel = -np.log(self.rng.exponential(size=out.shape).astype(np.float32))
            return (out + gumbel).argmax(-1), out, values
        std = np.exp(self.log_std)
        dist_inputs = np.concatenate([out, np.broadcast_to(self.log_std, out.shape)], -1)
        if not explore:
            return out, dist_inputs, values
        noise = self.rng.standard_normal(out.shape, dtype=np.float32)
        return out + std * noise, dist_inputs, values


def _supported(head: nn.Module) -> bool:
    return isinstance(head, MLP) and all(
        isinstance(layer, nn.Linear) or type(layer) in _ACTIVATIONS for layer in head
    )


def _layers(head: MLP) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    """Each Linear's weight (transposed: ``x @ w``, which BLAS reads without a copy) and
    bias as numpy views of the torch parameters, with the activation after it."""
    layers: list[tuple[np.ndarray, np.ndarray, Any]] = []
    for layer in head:
        if isinstance(layer, nn.Linear):
            layers.append((layer.weight.detach().numpy().T, layer.bias.detach().numpy(), None))
        else:
            weight, bias, _ = layers[-1]
            layers[-1] = (weight, bias, _ACTIVATIONS[type(layer)])
    return layers


def _forward(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray, Any]]) -> np.ndarray:
    for weight, bias, activation in layers:
        x = x @ weight
        x += bias
        if activation is not None:
            activation(x, out=x)
    return x
