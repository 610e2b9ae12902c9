"""Torch models: MLPs for vector observations, the Nature CNN for image observations.

Examples:
    >>> space = gym.spaces.Box(-1, 1, (4,))
    >>> model = ActorCritic(space, gym.spaces.Discrete(2), hiddens=(64, 64))
    >>> out = model(torch.zeros(3, 4))
    >>> out.dist_inputs.shape, out.value.shape
    (torch.Size([3, 2]), torch.Size([3]))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from flowrl.core.config import ConfigError
from flowrl.learning.distributions import distribution_for
from flowrl.learning.module import ActingModule, ActingOutput, restart
from flowrl.learning.spaces import check_obs_space, get, is_composite, leaf_spaces


def _init(layer: nn.Module, gain: float) -> nn.Module:
    if isinstance(layer, nn.Linear | nn.Conv2d):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


_FUNCTIONAL = {nn.Tanh: torch.tanh, nn.ReLU: torch.relu}


class MLP(nn.Sequential):
    """An ``nn.Sequential`` of Linear and activation layers whose forward calls the torch
    functions directly: a rollout step runs the policy on a handful of rows, where the
    per-module call overhead is about a third of the forward pass."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_layers(self, x)


def run_layers(layers: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """``x`` through ``layers`` in turn, as ``MLP`` runs them."""
    for layer in layers:
        if isinstance(layer, nn.Linear):
            x = F.linear(x, layer.weight, layer.bias)
        else:
            x = _FUNCTIONAL.get(type(layer), layer)(x)
    return x


def mlp(sizes: Sequence[int], *, out_gain: float, activation: type[nn.Module] = nn.Tanh) -> MLP:
    """Linear layers of ``sizes`` with ``activation`` between them, orthogonally initialised."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        last = i == len(sizes) - 2
        layers.append(_init(nn.Linear(sizes[i], sizes[i + 1]), out_gain if last else np.sqrt(2)))
        if not last:
            layers.append(activation())
    return MLP(*layers)


def is_image_space(space: gym.Space) -> bool:
    """A Box of rank 3 (height, width and channels, either way round) is an image."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


class InputMajorLinear(nn.Module):
    """A linear layer with its weight stored ``[in, out]`` (``nn.Linear`` stores
    ``[out, in]``), orthogonally initialised. On the few rows of a rollout step the matmul
    then reads the weight in memory order, faster for a layer as large as the Nature CNN's."""

    def __init__(self, n_in: int, n_out: int, *, gain: float) -> None:
        super().__init__()
        weight = torch.empty(n_out, n_in)
        nn.init.orthogonal_(weight, gain)
        self.weight = nn.Parameter(weight.t().contiguous())
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.weight)


class NatureCNN(nn.Module):
    """The DQN Nature convolutional trunk: uint8 frames in, a 512-d feature out.

    The forward pass calls the torch functions directly, with in-place ReLUs, and scales
    the first layer's weight by 1/255 instead of the frames: a rollout step runs it on a
    few frames, where the pass over the pixels and the module calls cost about a tenth.
    """

    def __init__(self, obs_shape: Sequence[int]) -> None:
        super().__init__()
        self.channels_last = obs_shape[-1] < obs_shape[0]
        channels = obs_shape[-1] if self.channels_last else obs_shape[0]
        self.convs = nn.ModuleList(
            _init(nn.Conv2d(n_in, n_out, kernel, stride=stride), np.sqrt(2))
            for n_in, n_out, kernel, stride in [
                (channels, 32, 8, 4),
                (32, 64, 4, 2),
                (64, 64, 3, 1),
            ]
        )
        with torch.no_grad():
            n_flat = self._conv_features(torch.zeros(1, *obs_shape, dtype=torch.uint8)).shape[1]
        self.obs_shape = tuple(obs_shape)
        self.fc = InputMajorLinear(n_flat, 512, gain=np.sqrt(2))
        self.out_features = 512

    def _conv_features(self, obs: torch.Tensor) -> torch.Tensor:
        x = (obs.permute(0, 3, 1, 2) if self.channels_last else obs).float()
        for i, conv in enumerate(self.convs):
            weight = conv.weight * (1 / 255.0) if i == 0 else conv.weight
            x = F.conv2d(x, weight, conv.bias, stride=conv.stride).relu_()
        return x.flatten(1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self._conv_features(obs)).relu_()


class SmallCNN(nn.Module):
    """Images too small for the Nature CNN (its kernels need 36 pixels a side): two 3x3
    convolutions, the second with stride 2, and a linear layer to 256 features. uint8
    images are scaled to [0, 1]; others are taken as they are.

    Examples:
        >>> SmallCNN((8, 8, 3))(torch.zeros(2, 8, 8, 3, dtype=torch.uint8)).shape
        torch.Size([2, 256])
    """

    def __init__(self, obs_shape: Sequence[int]) -> None:
        super().__init__()
        self.channels_last = obs_shape[-1] < obs_shape[0]
        channels = obs_shape[-1] if self.channels_last else obs_shape[0]
        self.convs = nn.Sequential(
            _init(nn.Conv2d(channels, 16, 3, padding=1), np.sqrt(2)),
            nn.ReLU(),
            _init(nn.Conv2d(16, 32, 3, stride=2, padding=1), np.sqrt(2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.convs(self._as_channels_first(torch.zeros(1, *obs_shape))).shape[1]
        self.fc = _init(nn.Linear(n_flat, 256), np.sqrt(2))
        self.out_features = 256

    def _as_channels_first(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs.float()
        return x.permute(0, 3, 1, 2) if self.channels_last else x

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(self.convs(self._as_channels_first(obs))))


#: the inputs of the Nature CNN's linear layer on an 84x84 frame (64 channels of 7x7)
FRAME_84_FEATURES = 3136


def large_images(module: nn.Module) -> list[str]:
    """A line for each Nature CNN in ``module`` whose images give its linear layer over ten
    times the inputs an 84x84 frame does: sampling and learning slow down with them.

    Examples:
        >>> [line] = large_images(NatureCNN((280, 480, 3)))  # PettingZoo's cooperative_pong
        >>> line.split(" (")[0]
        "images of 280x480x3 give the Nature CNN's linear layer 111,104 inputs"
        >>> large_images(NatureCNN((84, 84, 4)))
        []
    """
    return [
        f"images of {'x'.join(map(str, m.obs_shape))} give the Nature CNN's linear layer "
        f"{n_in:,} inputs ({m.fc.weight.numel() / 1e6:.0f}M weights, "
        f"{n_in / FRAME_84_FEATURES:.0f} times an 84x84 frame's)"
        for m in module.modules()
        if isinstance(m, NatureCNN) and (n_in := m.fc.weight.shape[0]) > 10 * FRAME_84_FEATURES
    ]


def image_encoder(shape: Sequence[int]) -> nn.Module:
    """The Nature CNN for images of 36 pixels a side or more, else ``SmallCNN``."""
    channels_last = shape[-1] < shape[0]
    side = min(shape[:2]) if channels_last else min(shape[1:])
    return NatureCNN(shape) if side >= 36 else SmallCNN(shape)


class CompositeEncoder(nn.Module):
    """A Dict or Tuple observation (``flowrl.learning.spaces``) as one feature vector:
    a CNN for each image leaf, the other leaves flattened as ``Flatten`` does,
    concatenated in the space's order.

    Examples:
        >>> space = gym.spaces.Dict(
        ...     {"frame": gym.spaces.Box(0, 255, (8, 8, 1), np.uint8), "n": gym.spaces.Discrete(3)}
        ... )
        >>> encoder = CompositeEncoder(space)
        >>> obs = {"frame": torch.zeros(2, 8, 8, 1, dtype=torch.uint8), "n": torch.tensor([0, 2])}
        >>> encoder(obs).shape, encoder.out_features
        (torch.Size([2, 259]), 259)
    """

    def __init__(self, space: gym.Space) -> None:
        super().__init__()
        self.paths = []
        self.parts: list[Any] = []
        self.cnns = nn.ModuleList()
        self.out_features = 0
        for path, leaf in leaf_spaces(space):
            if is_image_space(leaf):
                part: Any = image_encoder(leaf.shape)
                self.cnns.append(part)
            else:
                part = Flatten(leaf)
            self.paths.append(path)
            self.parts.append(part)
            self.out_features += part.out_features

    def forward(self, obs: Any) -> torch.Tensor:
        parts = [part(get(obs, path)) for path, part in zip(self.paths, self.parts, strict=True)]
        return torch.cat(parts, dim=-1)


def features(space: gym.Space) -> Flatten | CompositeEncoder:
    """Non-image observations as a feature vector of ``out_features``: a Dict or Tuple
    through a ``CompositeEncoder``, any other space through ``Flatten``."""
    return CompositeEncoder(space) if is_composite(space) else Flatten(space)


class ActorCritic(ActingModule):
    """Policy and value heads. Vector observations get two separate MLPs; images share a CNN,
    and a ``trunk`` (your encoder, ``flowrl.learning.registry``) replaces both.

    ``forward(obs)`` returns the distribution inputs and the values. Box actions use a
    learned, state-independent log standard deviation (``log_std_init`` at first), or with
    ``gsde`` one that depends on the state (``head_outputs``).
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        *,
        hiddens: Sequence[int],
        trunk: nn.Module | None = None,
        log_std_init: float = 0.0,
        gsde: bool = False,
    ) -> None:
        super().__init__()
        check_obs_space(obs_space)
        if trunk is None and is_image_space(obs_space):
            trunk = image_encoder(obs_space.shape)
        latent = trunk.out_features if trunk is not None else hiddens[-1]
        n_out, log_std = policy_head(action_space, log_std_init, latent if gsde else 0)
        self.gsde = gsde
        if trunk is not None:  # an encoder shared by both heads (yours, or the CNN)
            self.trunk: nn.Module | None = trunk
            self.pi = _init(nn.Linear(self.trunk.out_features, n_out), 0.01)
            self.vf = _init(nn.Linear(self.trunk.out_features, 1), 1.0)
        else:
            self.trunk = None
            self.flatten = features(obs_space)
            n_obs = self.flatten.out_features
            self.pi = mlp([n_obs, *hiddens, n_out], out_gain=0.01)
            self.vf = mlp([n_obs, *hiddens, 1], out_gain=1.0)
        self.log_std = log_std  # last: the parameters' order (optimiser states) as before

    def forward(self, obs: torch.Tensor, state: None = None) -> ActingOutput:
        features = self.trunk(obs) if self.trunk is not None else self.flatten(obs)
        out, noise_features = head_outputs(self.pi, features, self.log_std, self.gsde)
        return ActingOutput(out, self.vf(features).squeeze(-1), None, noise_features)


def policy_head(
    action_space: gym.Space, log_std_init: float = 0.0, gsde_features: int = 0
) -> tuple[int, nn.Parameter | None]:
    """The outputs of a policy head for ``action_space`` and, for Box actions, the learned
    log standard deviation (``log_std_init`` at first): one per action dimension, which
    ``with_log_std`` appends to them, or with ``gsde_features`` one per feature and
    dimension (``head_outputs``)."""
    _, n_inputs = distribution_for(action_space)
    check_gsde(action_space, bool(gsde_features))
    if not isinstance(action_space, gym.spaces.Box):
        return n_inputs, None
    shape = (gsde_features, n_inputs // 2) if gsde_features else (n_inputs // 2,)
    return n_inputs // 2, nn.Parameter(torch.full(shape, float(log_std_init)))


def check_gsde(action_space: gym.Space, gsde: bool) -> None:
    """A ConfigError where ``gsde`` is asked for actions other than a Box."""
    if gsde and not isinstance(action_space, gym.spaces.Box):
        raise ConfigError(f"gsde explores Box actions; the env's action space is {action_space}")


def head_outputs(
    pi: nn.Module,
    x: torch.Tensor,
    log_std: torch.Tensor | None,
    gsde: bool,
    *,
    learn_features: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The policy head ``pi`` on ``x``: its distribution inputs, and gSDE's noise features
    (None without ``gsde``).

    With gSDE (generalised state-dependent exploration, Raffin et al. 2022) an action's
    noise is ``features @ W``: ``features`` the input of ``pi``'s last layer, ``W`` drawn
    from N(0, exp(log_std)^2) and held for some steps (``StateDependentNoise``). Given the
    state the action is then Gaussian with the variance ``features^2 @ exp(log_std)^2``,
    whose log std the inputs carry, so the distribution, its log-probs and entropy are
    DiagGaussian's. The variance's gradient reaches the features only with
    ``learn_features`` (SAC's actor, as Stable-Baselines3 has it; its actor-critic holds
    them out).
    """
    if not gsde:
        return with_log_std(pi(x), log_std), None
    *body, last = pi if isinstance(pi, nn.Sequential) else (pi,)
    features = run_layers(body, x)
    mean = F.linear(features, last.weight, last.bias)
    held = features.detach()
    variance = (features if learn_features else held).pow(2) @ (2 * log_std).exp()
    return torch.cat([mean, 0.5 * torch.log(variance + 1e-6)], dim=-1), held


def with_log_std(out: torch.Tensor, log_std: torch.Tensor | None) -> torch.Tensor:
    """A policy head's output with the log std beside it (Box actions), as DiagGaussian
    reads its inputs."""
    return out if log_std is None else torch.cat([out, log_std.expand_as(out)], dim=-1)


class RecurrentActorCritic(ActingModule):
    """An LSTM actor-critic: observation features (an MLP on vectors, a CNN on images, or
    your ``trunk``) feed an LSTM cell whose output the policy and value heads read. The
    state is ``[B, 2, cell_size]`` (the LSTM's h and c).

    Examples:
        >>> module = RecurrentActorCritic(
        ...     gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), hiddens=(16,), cell_size=8
        ... )
        >>> out = module(torch.zeros(3, 2), module.initial_state(3))
        >>> out.dist_inputs.shape, out.state.shape
        (torch.Size([3, 2]), torch.Size([3, 2, 8]))
    """

    recurrent = True

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        *,
        hiddens: Sequence[int],
        cell_size: int,
        trunk: nn.Module | None = None,
        log_std_init: float = 0.0,
        gsde: bool = False,
    ) -> None:
        super().__init__()
        check_obs_space(obs_space)
        n_out, log_std = policy_head(action_space, log_std_init, cell_size if gsde else 0)
        self.gsde = gsde
        if trunk is None and is_image_space(obs_space):
            trunk = image_encoder(obs_space.shape)
        if trunk is None:
            flatten = features(obs_space)
            body = mlp([flatten.out_features, *hiddens], out_gain=np.sqrt(2))
            trunk = _Features(flatten, body, hiddens[-1])
        self.trunk = trunk
        self.cell_size = cell_size
        self.lstm = nn.LSTMCell(trunk.out_features, cell_size)
        self.pi = _init(nn.Linear(cell_size, n_out), 0.01)
        self.vf = _init(nn.Linear(cell_size, 1), 1.0)
        self.log_std = log_std

    def initial_state(self, batch_size: int) -> torch.Tensor:
        return torch.zeros(batch_size, 2, self.cell_size, device=self.pi.weight.device)

    def _heads(self, h: torch.Tensor, state: torch.Tensor) -> ActingOutput:
        out, noise_features = head_outputs(self.pi, h, self.log_std, self.gsde)
        return ActingOutput(out, self.vf(h).squeeze(-1), state, noise_features)

    def forward(self, obs: Any, state: torch.Tensor | None = None) -> ActingOutput:
        x = self.trunk(obs)
        if state is None:
            state = self.initial_state(x.shape[0])
        h, c = self.lstm(x, (state[:, 0], state[:, 1]))
        return self._heads(h, torch.stack([h, c], 1))

    def unroll(self, obs: Any, states: torch.Tensor, starts: torch.Tensor) -> ActingOutput:
        """The features of every step in one pass, the LSTM step by step, the heads in
        one pass (see ``ActingModule.unroll``)."""
        batch, length = starts.shape
        x = self.trunk(obs).unflatten(0, (batch, length))
        state, hs = states[:, 0], []
        for t in range(length):
            state = restart(state, states[:, t], starts[:, t])
            h, c = self.lstm(x[:, t], (state[:, 0], state[:, 1]))
            hs.append(h)
            state = torch.stack([h, c], 1)
        return self._heads(torch.stack(hs, 1).flatten(0, 1), state)


class _Features(nn.Module):
    """Flattened observations through an MLP, with a tanh on its output."""

    def __init__(self, flatten: Any, body: nn.Module, out_features: int) -> None:
        super().__init__()
        self.flatten, self.body, self.out_features = flatten, body, out_features

    def forward(self, obs: Any) -> torch.Tensor:
        return torch.tanh(self.body(self.flatten(obs)))


class ActorNetwork(ActingModule):
    """An actor alone: an MLP (ReLU) from vector observations to ``n_outputs``
    distribution inputs, no value head (SAC's actor). With ``gsde`` (Box actions: means
    and log stds) the log std is gSDE's (``head_outputs``, ``log_std_init`` at first),
    whose gradient trains the features too, and the means are clipped to [-2, 2], as
    Stable-Baselines3 clips them, short of where tanh saturates.

    Examples:
        >>> actor = ActorNetwork(gym.spaces.Box(-1, 1, (3,)), 2, hiddens=(16,))
        >>> actor(torch.zeros(5, 3)).dist_inputs.shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        obs_space: gym.Space,
        n_outputs: int,
        *,
        hiddens: Sequence[int],
        trunk: nn.Module | None = None,
        log_std_init: float = 0.0,
        gsde: bool = False,
    ) -> None:
        super().__init__()
        self.trunk, self.gsde = trunk, gsde  # your encoder, with a linear head on it
        latent = trunk.out_features if trunk is not None else hiddens[-1]
        n_outputs, shape = (n_outputs // 2, (latent, n_outputs // 2)) if gsde else (n_outputs, ())
        self.log_std = nn.Parameter(torch.full(shape, float(log_std_init))) if gsde else None
        if trunk is not None:
            self.pi: nn.Module = _init(nn.Linear(trunk.out_features, n_outputs), 0.01)
        else:
            self.flatten = features(obs_space)
            n_obs = self.flatten.out_features
            self.pi = mlp([n_obs, *hiddens, n_outputs], out_gain=0.01, activation=nn.ReLU)

    def forward(self, obs: torch.Tensor, state: None = None) -> ActingOutput:
        x = self.trunk(obs) if self.trunk is not None else self.flatten(obs)
        if not self.gsde:
            return ActingOutput(self.pi(x))
        out, noise_features = head_outputs(self.pi, x, self.log_std, True, learn_features=True)
        mean, log_std = out.chunk(2, dim=-1)
        return ActingOutput(
            torch.cat([mean.clamp(-2.0, 2.0), log_std], -1), None, None, noise_features
        )


class QNetwork(ActingModule):
    """Q-values for Discrete actions (as ``dist_inputs``): an MLP (vector observations) or
    the Nature CNN (images) trunk, with dueling value/advantage heads when ``dueling``."""

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        *,
        hiddens: Sequence[int],
        dueling: bool,
        trunk: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(f"a Q-network needs a Discrete action space, got {action_space}")
        check_obs_space(obs_space)
        n_actions = int(action_space.n)
        self.flatten: Flatten | CompositeEncoder | None = None
        if trunk is not None or is_image_space(obs_space):  # yours, or the CNN
            self.trunk: nn.Module = trunk if trunk is not None else image_encoder(obs_space.shape)
            n_features = self.trunk.out_features
        else:
            self.flatten = features(obs_space)
            self.trunk = nn.Sequential(
                mlp([self.flatten.out_features, *hiddens], out_gain=np.sqrt(2), activation=nn.ReLU),
                nn.ReLU(),
            )
            n_features = hiddens[-1]
        self.dueling = dueling
        self.advantage = _init(nn.Linear(n_features, n_actions), 0.01)
        self.value = _init(nn.Linear(n_features, 1), 1.0) if dueling else None

    def forward(self, obs: torch.Tensor, state: None = None) -> ActingOutput:
        if self.flatten is not None:
            features = self.trunk(self.flatten(obs))
        else:
            features = self.trunk(obs if obs.dtype == torch.uint8 else obs.float())
        advantage = self.advantage(features)
        if self.value is None:
            return ActingOutput(advantage)
        value = self.value(features)
        return ActingOutput(value + advantage - advantage.mean(dim=-1, keepdim=True))


class TwinQ(nn.Module):
    """Two independent Q-networks for clipped double-Q learning (TD3, SAC) on vector
    observations, evaluated together as one batched matmul per layer. Box actions:
    ``forward(obs, actions)`` gives Q-values ``[2, B]``; Discrete actions: ``forward(obs)``
    gives the Q-values of every action, ``[2, B, n]``.

    Examples:
        >>> q = TwinQ(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,)), hiddens=(64,))
        >>> q(torch.zeros(5, 3), torch.zeros(5, 1)).shape
        torch.Size([2, 5])
    """

    def __init__(
        self, obs_space: gym.Space, action_space: gym.Space, *, hiddens: Sequence[int]
    ) -> None:
        super().__init__()
        self.flatten = features(obs_space)
        n_obs = self.flatten.out_features
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            n_in, n_out = n_obs, int(action_space.n)
        else:
            n_in, n_out = n_obs + int(np.prod(action_space.shape)), 1
        sizes = [n_in, *hiddens, n_out]
        gains = [np.sqrt(2)] * len(hiddens) + [1.0]
        self.layers = nn.ModuleList(
            _TwinLinear(a, b, gain=g) for a, b, g in zip(sizes[:-1], sizes[1:], gains, strict=True)
        )

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        x = self.flatten(obs)
        if not self.discrete:
            x = torch.cat([x, actions], dim=-1)
        x = x.expand(2, *x.shape)
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        out = self.layers[-1](x)
        return out if self.discrete else out.squeeze(-1)

    def taken(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Both networks' Q of ``actions`` (one per row), ``[2, B]``, Box or Discrete."""
        if not self.discrete:
            return self(obs, actions.float())
        return self(obs).gather(2, actions.long()[:, None].expand(2, -1, -1)).squeeze(2)


class _TwinLinear(nn.Module):
    """Two independent linear layers applied to ``[2, B, n_in]`` with one ``baddbmm``."""

    def __init__(self, n_in: int, n_out: int, *, gain: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(2, n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(2, 1, n_out))
        for w in self.weight.data:
            nn.init.orthogonal_(w, gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


def vector_obs_size(space: gym.Space) -> int:
    """The size of a non-image observation as features (``Flatten``), or a
    ConfigError for images and spaces flowrl does not take."""
    check_obs_space(space)
    if is_image_space(space) or is_composite(space):
        raise ConfigError(
            f"this network takes vector observations (a twin Q-network: no bare images), not "
            f"{space}: flatten them in an env creator of yours "
            "(gymnasium.wrappers.FlattenObservation), or make them an entry of a Dict"
        )
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(space.nvec.sum())
    return int(np.prod(space.shape))


class Flatten:
    """Observations ``[B, ...]`` as float features ``[B, vector_obs_size]``: Box and
    MultiBinary flattened, Discrete one-hot, MultiDiscrete one one-hot per entry (each
    counted from its space's ``start``).

    Examples:
        >>> Flatten(gym.spaces.Discrete(3))(torch.tensor([2, 0])).tolist()
        [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
        >>> Flatten(gym.spaces.MultiDiscrete([2, 2], start=[1, -1]))(torch.tensor([[2, -1]]))
        tensor([[0., 1., 1., 0.]])
    """

    def __init__(self, space: gym.Space) -> None:
        self.out_features = vector_obs_size(space)
        self.sizes: list[int] = []
        self.start: int | torch.Tensor = 0
        if isinstance(space, gym.spaces.Discrete):
            self.sizes, self.start = [int(space.n)], int(space.start)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.sizes = [int(n) for n in space.nvec.reshape(-1)]
            if np.any(space.start):
                self.start = torch.as_tensor(space.start.reshape(-1), dtype=torch.long)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.sizes:  # Box, MultiBinary
            return obs.reshape(obs.shape[0], -1).float()
        start = self.start if isinstance(self.start, int) else self.start.to(obs.device)
        columns = (obs.reshape(obs.shape[0], -1).long() - start).unbind(-1)
        one_hots = [F.one_hot(c, n) for c, n in zip(columns, self.sizes, strict=True)]
        return torch.cat(one_hots, dim=-1).float()
