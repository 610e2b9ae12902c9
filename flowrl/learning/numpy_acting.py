"""Acting in numpy: flowrl's MLP actor-critic's forward pass and its action draw without
torch, for the per-step calls of sampling.

A rollout step runs the policy on a handful of rows (one per env), where torch's per-call
overhead is most of the cost: on CartPole's 8 envs, ``Policy.compute_actions`` takes about
44 us in torch and 16 us in numpy. ``NumpyActing.of(policy)`` acts with numpy views of the
policy's module's weights where one applies (flowrl's ``ActorCritic`` or, with
``use_lstm``, ``RecurrentActorCritic``: vector observations, MLPs, Discrete or Box
actions, no action mask, on the CPU), else None. The views follow the weights as they
change in place (a learner's step, ``set_weights``).

Examples:
    >>> from flowrl import Config, Policy
    >>> policy = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), Config())
    >>> acting = NumpyActing.of(policy)
    >>> actions, extras = acting.compute_actions(np.zeros((8, 4), np.float32), explore=True)
    >>> actions.shape, extras["action_dist_inputs"].shape, extras["vf_preds"].shape
    ((8,), (8, 2), (8,))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.core.sample_batch import ACTION_DIST_INPUTS, STATE_OUT, VF_PREDS
from flowrl.learning.distributions import Categorical, DiagGaussian
from flowrl.learning.models import MLP, ActorCritic, Flatten, RecurrentActorCritic, _Features

_ACTIVATIONS = {nn.Tanh: np.tanh, nn.ReLU: lambda x, out: np.maximum(x, 0, out=out)}


class NumpyActing:
    """An ``ActorCritic``'s or ``RecurrentActorCritic``'s forward pass in numpy (views of
    its weights), acting as ``Policy.compute_actions`` does: the same distribution
    inputs, values and next recurrent state (to float32 rounding), actions drawn from the
    same distribution with its own generator."""

    def __init__(self, module: nn.Module, discrete: bool, seed: Any) -> None:
        self.module, self.discrete = module, discrete
        self.recurrent = isinstance(module, RecurrentActorCritic)
        self.rng = np.random.default_rng(seed)
        #: the module's weights changed since the views were taken (``weights_changed``)
        self.stale = True
        self.body: list[Layer] = []  # the LSTM's features (the MLP's: none)
        self.lstm: tuple[np.ndarray, ...] = ()
        self.pi: list[Layer] = []
        self.vf: list[Layer] = []
        self.log_std: np.ndarray | None = None

    @classmethod
    def of(cls, policy: Any) -> NumpyActing | None:
        """``policy``'s numpy acting, or None where its module, spaces or device need
        torch (an image or custom module, a mask, composite spaces)."""
        module = policy.module
        plain_obs = isinstance(policy.input_space, gym.spaces.Box | gym.spaces.MultiBinary)
        if (
            not _supported(module)
            or not plain_obs
            or policy.masked
            or policy.obs_layout is not None
            or policy.device.type != "cpu"
            or policy.dist_cls not in (Categorical, DiagGaussian)
        ):
            return None
        seed = [torch.initial_seed() % 2**63, policy.worker_index]  # the worker's seed
        return cls(module, policy.dist_cls is Categorical, seed)

    def _refresh(self) -> None:
        """Views of the module's weights, taken once: they follow every change made in
        place (an optimiser's step, ``load_state_dict``). ``stale`` (``weights_changed``)
        takes them again, should a parameter have been replaced."""
        if not self.stale:
            return
        module = self.module
        if self.recurrent:
            self.body = _layers(module.trunk.body)
            self.lstm = tuple(_view(getattr(module.lstm, name)) for name in LSTM_WEIGHTS)
        self.pi, self.vf = _layers(module.pi), _layers(module.vf)
        self.log_std = None if module.log_std is None else _view(module.log_std)
        self.stale = False

    def compute_actions(
        self, obs: np.ndarray, *, explore: bool, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict]:
        """``Policy.compute_actions``: actions, with the distribution inputs and values
        (and the next recurrent state)."""
        actions, dist_inputs, values, state = self.act(obs, explore=explore, state=state)
        extras = {ACTION_DIST_INPUTS: dist_inputs, VF_PREDS: values}
        return actions, extras if state is None else {**extras, STATE_OUT: state}

    def act(
        self, obs: np.ndarray, *, explore: bool, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Actions, distribution inputs, values and the next state (None: no memory)."""
        self._refresh()
        x = obs.reshape(len(obs), -1).astype(np.float32, copy=False)
        if self.recurrent:
            x, state = self._lstm_step(np.tanh(_forward(x, self.body)), state)
        out, values = _forward(x, self.pi), _forward(x, self.vf)[:, 0]
        if self.discrete:
            if not explore:
                return out.argmax(-1), out, values, state
            gumbel = -np.log(self.rng.exponential(size=out.shape).astype(np.float32))
            return (out + gumbel).argmax(-1), out, values, state
        dist_inputs = np.concatenate([out, np.broadcast_to(self.log_std, out.shape)], -1)
        if explore:
            out = out + np.exp(self.log_std) * self.rng.standard_normal(out.shape, np.float32)
        return out, dist_inputs, values, state

    def _lstm_step(self, x: np.ndarray, state: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """``nn.LSTMCell`` (gates in torch's order: input, forget, cell, output) on ``x``
        from ``state`` ``[B, 2, cell]`` (h and c; zeros when None); ``h`` and the next state."""
        w_ih, w_hh, b_ih, b_hh = self.lstm
        if state is None:
            state = np.zeros((len(x), 2, w_hh.shape[0]), np.float32)
        h, c = state[:, 0], state[:, 1]
        gates = x @ w_ih
        gates += h @ w_hh
        gates += b_ih
        gates += b_hh
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        return h, np.stack([h, c], 1)


Layer = tuple[np.ndarray, np.ndarray, Any]
#: ``nn.LSTMCell``'s weights: as views, the two matrices transposed (``x @ w``)
LSTM_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _supported(module: nn.Module) -> bool:
    """flowrl's MLP actor-critic, or its LSTM one on MLP features: nothing of yours."""
    if type(module) is ActorCritic:
        heads = (module.pi, module.vf)
        return module.trunk is None and _flat(module.flatten) and all(map(_mlp, heads))
    if type(module) is RecurrentActorCritic:
        trunk = module.trunk
        return type(trunk) is _Features and _flat(trunk.flatten) and _mlp(trunk.body)
    return False


def _flat(flatten: Any) -> bool:  # Box or MultiBinary observations, flattened
    return isinstance(flatten, Flatten) and not flatten.sizes


def _mlp(head: nn.Module) -> bool:
    return isinstance(head, MLP | nn.Linear) and all(
        isinstance(layer, nn.Linear) or type(layer) in _ACTIVATIONS
        for layer in (head if isinstance(head, MLP) else [head])
    )


def _view(tensor: torch.Tensor) -> np.ndarray:
    array = tensor.detach().numpy()
    return array.T if array.ndim == 2 else array


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # one ufunc, no overflow


def _layers(head: MLP | nn.Linear) -> list[Layer]:
    """Each Linear's weight (transposed: ``x @ w``, which BLAS reads without a copy) and
    bias as numpy views of the torch parameters, with the activation after it."""
    layers: list[Layer] = []
    for layer in head if isinstance(head, MLP) else [head]:
        if isinstance(layer, nn.Linear):
            layers.append((_view(layer.weight), _view(layer.bias), None))
        else:
            weight, bias, _ = layers[-1]
            layers[-1] = (weight, bias, _ACTIVATIONS[type(layer)])
    return layers


def _forward(x: np.ndarray, layers: list[Layer]) -> np.ndarray:
    for weight, bias, activation in layers:
        x = x @ weight
        x += bias
        if activation is not None:
            activation(x, out=x)
    return x
