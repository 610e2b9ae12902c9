"""Acting in numpy: flowrl's MLP actor-critic's forward pass and its action draw, and its
MLP Q-network's Q-values, without torch, for the per-step calls of sampling.

A rollout step runs the policy on a handful of rows (one per env), where torch's per-call
overhead is most of the cost (``benchmarks/sampling.py`` measures both).
``ActingPlan.of(policy)`` names the weights (by their state-dict keys) that make up the
forward pass where one applies (flowrl's ``ActorCritic`` or, with ``use_lstm``,
``RecurrentActorCritic``: vector observations, MLPs, Discrete or Box actions, no action
mask), else None; ``ActingPlan.of_q_network`` does the same for flowrl's MLP ``QNetwork``
(dueling or not). ``NumpyActing`` runs a plan on arrays: numpy views of the torch module's
weights (``NumpyActing.of``; they follow the weights as they change in place) or the arrays
a rollout worker without torch was sent (``flowrl.learning.numpy_policy``), each matrix
copied once per weights into the layout its product reads (``copy``). This module imports
torch only to read a module.

Examples:
    >>> from flowrl import Config, Policy
    >>> policy = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), Config())
    >>> acting = NumpyActing.of(policy)
    >>> actions, extras = acting.compute_actions(np.zeros((8, 4), np.float32), explore=True)
    >>> actions.shape, extras["action_dist_inputs"].shape, extras["vf_preds"].shape
    ((8,), (8, 2), (8,))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.sample_batch import ACTION_DIST_INPUTS, STATE_OUT, VF_PREDS
from flowrl.learning.draws import HeldDraws

#: a Linear layer: its weight's and bias's names, and the activation after it (or None)
Layer = tuple[str, str, str | None]
ACTIVATIONS: dict[str, Callable[..., Any]] = {
    "tanh": np.tanh,
    "relu": lambda x, out: np.maximum(x, 0, out=out),
}


@dataclass(frozen=True)
class ActingPlan:
    """Which weights, by state-dict name, make up an actor-critic's forward pass (the
    policy and value heads, an LSTM's features and cell, a Gaussian's log std) or a
    Q-network's (its MLP trunk as ``body``, its advantage head as ``pi``, its dueling
    value head, if any, as ``vf``)."""

    pi: tuple[Layer, ...]
    vf: tuple[Layer, ...]
    discrete: bool
    log_std: str | None = None
    body: tuple[Layer, ...] = ()  # the LSTM's features, a Q-network's trunk (none: the MLP's)
    #: ``nn.LSTMCell``'s weight_ih, weight_hh, bias_ih and bias_hh
    lstm: tuple[str, ...] = ()
    cell_size: int = 0
    #: the steps a gSDE draw is held for (0: no gSDE; ``flowrl.learning.models.head_outputs``)
    gsde_steps: int = 0

    @classmethod
    def of(cls, policy: Any) -> ActingPlan | None:
        """The plan of a torch ``Policy``'s module, or None where acting needs torch (an
        image or custom module, a mask, composite spaces)."""
        from flowrl.learning.distributions import Categorical, DiagGaussian
        from flowrl.learning.models import RecurrentActorCritic

        module = policy.module
        plain_obs = isinstance(policy.input_space, gym.spaces.Box | gym.spaces.MultiBinary)
        if (
            not _supported(module)
            or not plain_obs
            or policy.masked
            or policy.obs_layout is not None
            or policy.dist_cls not in (Categorical, DiagGaussian)
        ):
            return None
        names = {id(p): name for name, p in module.named_parameters()}
        heads = dict(pi=_plan(module.pi, names), vf=_plan(module.vf, names))
        log_std = None if module.log_std is None else names[id(module.log_std)]
        gaussian = dict(discrete=policy.dist_cls is Categorical, log_std=log_std,
                        gsde_steps=policy.gsde.steps if module.gsde else 0)  # fmt: skip
        if not isinstance(module, RecurrentActorCritic):
            return cls(**heads, **gaussian)
        lstm = tuple(names[id(getattr(module.lstm, w))] for w in LSTM_WEIGHTS)
        body = _plan(module.trunk.body, names)
        return cls(**heads, **gaussian, body=body, lstm=lstm, cell_size=module.cell_size)

    @classmethod
    def of_q_network(cls, policy: Any) -> ActingPlan | None:
        """The plan of a policy's flowrl ``QNetwork`` on vector observations, or None
        where its Q-values need torch (an image or custom module, a mask, composite
        spaces)."""
        from flowrl.learning.models import QNetwork

        module = policy.module
        if (
            type(module) is not QNetwork
            or not _flat(module.flatten)
            or not isinstance(policy.input_space, gym.spaces.Box | gym.spaces.MultiBinary)
            or policy.masked
            or policy.obs_layout is not None
        ):
            return None
        names = {id(p): name for name, p in module.named_parameters()}
        mlp, relu = module.trunk  # the MLP, then a ReLU on its last layer
        *body, (weight, bias, _) = _plan(mlp, names)
        value = () if module.value is None else _plan(module.value, names)
        return cls(pi=_plan(module.advantage, names), vf=value, discrete=True,
                   body=(*body, (weight, bias, _activation(relu))))  # fmt: skip


class NumpyActing:
    """An ``ActingPlan`` run on numpy arrays, acting as ``Policy.compute_actions`` does:
    the same distribution inputs, values and next recurrent state (to float32 rounding),
    actions drawn from the same distribution with its own generator."""

    def __init__(
        self,
        plan: ActingPlan,
        seed: Any,
        arrays: Callable[[], Mapping[str, np.ndarray]],
        *,
        copy: bool = False,
    ) -> None:
        self.plan, self.arrays, self.copy = plan, arrays, copy
        self.discrete, self.recurrent = plan.discrete, bool(plan.lstm)
        self.rng = np.random.default_rng(seed)
        #: the weights changed since they were read (``Policy.weights_changed``)
        self.stale = True
        self.body: list[tuple[np.ndarray, np.ndarray, Any]] = []
        self.lstm: tuple[np.ndarray, ...] = ()
        self.pi: list[tuple[np.ndarray, np.ndarray, Any]] = []
        self.vf: list[tuple[np.ndarray, np.ndarray, Any]] = []
        self.log_std: np.ndarray | None = None
        self.gsde_draws = HeldDraws(plan.gsde_steps or 1)

    @classmethod
    def of(cls, policy: Any) -> NumpyActing | None:
        """``policy``'s numpy acting on views of its torch module's weights, or None where
        it needs torch (``ActingPlan.of``, or a module on a GPU)."""
        import torch

        plan = ActingPlan.of(policy)
        if plan is None or policy.device.type != "cpu":
            return None
        module = policy.module
        seed = [torch.initial_seed() % 2**63, policy.worker_index]  # the worker's seed

        def views() -> dict[str, np.ndarray]:  # they follow every change made in place
            return {name: p.detach().numpy() for name, p in module.named_parameters()}

        return cls(plan, seed, views)

    def _refresh(self) -> None:
        """The arrays of the plan's weights, read once: views follow every change made
        in place (an optimiser's step, ``load_state_dict``); ``stale`` reads them again,
        should they have been replaced (``set_weights`` without torch)."""
        if not self.stale:
            return
        self.stale = False  # before the read: a learner thread's step meanwhile marks it again
        plan, arrays, copy = self.plan, self.arrays(), self.copy
        self.body = _layers(plan.body, arrays, copy)
        if self.recurrent:
            self.lstm = _lstm_weights(*(arrays[name] for name in plan.lstm), copy=copy)
        self.pi, self.vf = _layers(plan.pi, arrays, copy), _layers(plan.vf, arrays, copy)
        self.log_std = None if plan.log_std is None else arrays[plan.log_std]

    def compute_actions(
        self, obs: np.ndarray, *, explore: bool, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict]:
        """``Policy.compute_actions``: actions, with the distribution inputs and values
        (and the next recurrent state)."""
        actions, dist_inputs, values, state = self.act(obs, explore=explore, state=state)
        extras = {ACTION_DIST_INPUTS: dist_inputs, VF_PREDS: values}
        return actions, extras if state is None else {**extras, STATE_OUT: state}

    def features(
        self, obs: np.ndarray, state: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """What the heads read of ``obs`` (the LSTM's output when recurrent), and the next
        state (None: no memory)."""
        self._refresh()
        x = obs.reshape(len(obs), -1).astype(np.float32, copy=False)
        if self.recurrent:
            return self._lstm_step(np.tanh(_forward(x, self.body)), state)
        return _forward(x, self.body), None

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """A Q-network's Q-values of ``obs`` (its ``dist_inputs``), dueling or not."""
        x = self.features(obs, None)[0]
        advantage = _forward(x, self.pi)
        if not self.vf:
            return advantage
        mean = advantage.sum(-1, keepdims=True) / advantage.shape[-1]  # (ndarray.mean: 3x)
        return _forward(x, self.vf) + advantage - mean

    def values(self, obs: np.ndarray, state: np.ndarray | None = None) -> np.ndarray:
        """The value head on ``obs`` (from ``state`` when recurrent)."""
        return _forward(self.features(obs, state)[0], self.vf)[:, 0]

    def act(
        self, obs: np.ndarray, *, explore: bool, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Actions, distribution inputs, values and the next state (None: no memory)."""
        x, state = self.features(obs, state)
        values = _forward(x, self.vf)[:, 0]
        if self.plan.gsde_steps:
            return (*self._gsde_act(x, explore), values, state)
        out = _forward(x, self.pi)
        if self.discrete:
            if not explore:
                return out.argmax(-1), out, values, state
            gumbel = -np.log(self.rng.exponential(size=out.shape).astype(np.float32))
            return (out + gumbel).argmax(-1), out, values, state
        dist_inputs = np.concatenate([out, np.broadcast_to(self.log_std, out.shape)], -1)
        if explore:
            out = out + np.exp(self.log_std) * self.rng.standard_normal(out.shape, np.float32)
        return out, dist_inputs, values, state

    def _gsde_act(self, x: np.ndarray, explore: bool) -> tuple[np.ndarray, np.ndarray]:
        """gSDE's actions and distribution inputs, as ``head_outputs`` and
        ``StateDependentNoise`` give them in torch (with this generator's draws)."""
        features = _forward(x, self.pi[:-1])
        mean = _forward(features, self.pi[-1:])
        variance = np.exp(2 * self.log_std)  # [features, actions]
        log_std = 0.5 * np.log(np.square(features) @ variance + 1e-6)
        dist_inputs = np.concatenate([mean, log_std], -1)
        if not explore:
            return mean, dist_inputs
        matrices = self.gsde_draws(len(features), self._gsde_matrices)
        return mean + (features[:, None] @ matrices)[:, 0], dist_inputs

    def _gsde_matrices(self, lanes: int) -> np.ndarray:
        """A draw of gSDE's ``W`` per lane, from N(0, exp(log_std)^2): only when one is due."""
        std = np.sqrt(np.exp(2 * self.log_std))  # (as the variance's root, to the bit)
        return std * self.rng.standard_normal((lanes, *std.shape), np.float32)

    def _lstm_step(self, x: np.ndarray, state: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """``nn.LSTMCell`` on ``x`` from ``state`` ``[B, 2, cell]`` (h and c; zeros when
        None), its gates in ``_lstm_weights``' order; ``h`` and the next state."""
        w_ih, w_hh, bias = self.lstm
        n = w_hh.shape[0]
        if state is None:
            state = np.zeros((len(x), 2, n), np.float32)
        gates = x @ w_ih
        gates += state[:, 0] @ w_hh
        gates += bias
        sig = _sigmoid(gates[:, : 3 * n])  # the input, forget and output gates in one call
        out = np.empty_like(state)  # the next h and c, written in place
        h, c = out[:, 0], out[:, 1]
        np.multiply(sig[:, n : 2 * n], state[:, 1], out=c)
        c += sig[:, :n] * np.tanh(gates[:, 3 * n :])
        np.tanh(c, out=h)
        h *= sig[:, 2 * n :]
        return h, out


def logp(discrete: bool, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """The log-probs of ``actions`` under a Categorical's logits or a diagonal Gaussian's
    mean and log std (``dist_inputs``): ``Distribution.log_prob`` in numpy.

    Examples:
        >>> round(float(logp(True, np.zeros((1, 4), np.float32), np.array([2]))[0]), 4)
        -1.3863
    """
    if discrete:
        shifted = dist_inputs - dist_inputs.max(-1, keepdims=True)
        log_z = np.log(np.exp(shifted).sum(-1))
        taken = np.take_along_axis(shifted, actions.astype(np.int64)[..., None], -1)[..., 0]
        return (taken - log_z).astype(np.float32)
    mean, log_std = np.split(dist_inputs, 2, axis=-1)
    z = (actions - mean) / np.exp(log_std)
    return (-0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1).astype(np.float32)


#: ``nn.LSTMCell``'s weights: the two matrices are transposed when read (``x @ w``)
LSTM_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def _supported(module: Any) -> bool:
    """flowrl's MLP actor-critic, or its LSTM one on MLP features: nothing of yours."""
    from flowrl.learning.models import ActorCritic, RecurrentActorCritic, _Features

    if type(module) is ActorCritic:
        heads = (module.pi, module.vf)
        return module.trunk is None and _flat(module.flatten) and all(map(_mlp, heads))
    if type(module) is RecurrentActorCritic:
        trunk = module.trunk
        return type(trunk) is _Features and _flat(trunk.flatten) and _mlp(trunk.body)
    return False


def _flat(flatten: Any) -> bool:  # Box or MultiBinary observations, flattened
    from flowrl.learning.models import Flatten

    return isinstance(flatten, Flatten) and not flatten.sizes


def _activation(layer: Any) -> str | None:
    return {"Tanh": "tanh", "ReLU": "relu"}.get(type(layer).__name__)


def _mlp(head: Any) -> bool:
    from torch import nn

    from flowrl.learning.models import MLP

    layers = head if isinstance(head, MLP) else [head]
    return isinstance(head, MLP | nn.Linear) and all(
        isinstance(layer, nn.Linear) or type(layer) in (nn.Tanh, nn.ReLU) for layer in layers
    )


def _plan(head: Any, names: Mapping[int, str]) -> tuple[Layer, ...]:
    """Each Linear's weight and bias names, with the activation after it."""
    from torch import nn

    layers: list[Layer] = []
    for layer in head if isinstance(head, nn.Sequential) else [head]:
        if isinstance(layer, nn.Linear):
            layers.append((names[id(layer.weight)], names[id(layer.bias)], None))
        else:
            weight, bias, _ = layers[-1]
            layers[-1] = (weight, bias, _activation(layer))
    return tuple(layers)


#: the largest matrix ``_matrix`` copies: a bigger one's copy costs more than it saves
COPY_ENTRIES = 2**18


def _matrix(array: np.ndarray, copy: bool) -> np.ndarray:
    """A weight as ``x @ w`` reads it: a matrix transposed, as a view or, with ``copy``
    (up to ``COPY_ENTRIES``), a contiguous copy: OpenBLAS multiplies a few rows by a
    transposed view several times slower."""
    if array.ndim != 2:
        return array
    return np.ascontiguousarray(array.T) if copy and array.size <= COPY_ENTRIES else array.T


def _lstm_weights(
    w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray, *, copy: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``nn.LSTMCell``'s weights as ``_lstm_step`` reads them: the gates reordered from
    torch's (input, forget, cell, output) to input, forget, output, cell, so the three
    sigmoids are one call, and the two biases summed."""
    n = w_hh.shape[1]
    order = np.r_[0 : 2 * n, 3 * n : 4 * n, 2 * n : 3 * n]
    return _matrix(w_ih[order], copy), _matrix(w_hh[order], copy), (b_ih + b_hh)[order]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # one ufunc, no overflow


def _layers(plan: tuple[Layer, ...], arrays: Mapping[str, np.ndarray], copy: bool) -> list[tuple]:
    return [(_matrix(arrays[w], copy), arrays[b], act and ACTIVATIONS[act]) for w, b, act in plan]


def _forward(x: np.ndarray, layers: list[tuple]) -> np.ndarray:
    for weight, bias, activation in layers:
        x = x @ weight
        x += bias
        if activation is not None:
            activation(x, out=x)
    return x
