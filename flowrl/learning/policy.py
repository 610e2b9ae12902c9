"""Policy: what a rollout worker acts with. Its acting module
(``flowrl.learning.module``), the action distribution, the observation normaliser, exploration
and the postprocessing of sampled fragments; nothing that only learning needs (the loss,
optimisers and target networks are a ``Learner``'s).

Algorithms subclass ``Policy`` where they act or postprocess differently: an
epsilon-greedy Q-network, GAE advantages, sequences for V-trace. Weights travel as numpy
arrays, so they cross Ray's object store without pickling torch tensors.

Examples:
    >>> import gymnasium as gym
    >>> from flowrl.core.config import Config
    >>> policy = Policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), Config())
    >>> actions, extras = policy.compute_actions(np.zeros((3, 4), np.float32))
    >>> actions.shape, sorted(extras)
    ((3,), ['action_dist_inputs', 'vf_preds'])
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.core.config import Config, ConfigError
from flowrl.core.sample_batch import (
    ACTION_DIST_INPUTS,
    ACTIONS,
    STATE_OUT,
    VF_PREDS,
)
from flowrl.learning.acting import BasePolicy, Weights, action_start, without_mask
from flowrl.learning.distributions import (
    Distribution,
    DistributionClass,
    StateDependentNoise,
    distribution_for,
)
from flowrl.learning.models import ActorCritic, RecurrentActorCritic, check_gsde, is_image_space
from flowrl.learning.module import ActingModule, ActingOutput
from flowrl.learning.normalization import split_state
from flowrl.learning.numpy_acting import NumpyActing
from flowrl.learning.registry import build_module
from flowrl.learning.spaces import RecordLayout, is_composite, leaf_spaces, to_tensor


def resolve_device(device: str, observation_space: gym.Space) -> torch.device:
    """``auto`` is CUDA where torch sees a GPU and the observations hold an image, else the
    CPU: a CNN gains from the GPU, while an MLP's small batches lose more to transfers
    and kernel launches there than they gain (``benchmarks/device.py`` measures both).

    Examples:
        >>> resolve_device("auto", gym.spaces.Box(-1, 1, (4,))).type
        'cpu'
    """
    if device == "auto":
        space = observation_space
        leaves = [s for _, s in leaf_spaces(space)] if is_composite(space) else [space]
        image = any(is_image_space(leaf) for leaf in leaves)
        return torch.device("cuda" if image and torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device=cuda, but torch {torch.__version__} sees no CUDA GPU here")
    return torch.device(device)


def module_weights(module: nn.Module) -> Weights:
    """A module's state as numpy copies (they travel through Ray without torch pickling)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_module_weights(module: nn.Module, weights: Weights) -> None:
    """Load numpy weights; torch.tensor copies, since Ray's object-store arrays are read-only."""
    module.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})


#: what a masked action's distribution input becomes: far below any logit or Q-value, yet
#: finite in the products and sums of a loss (the lowest float is not, times 2)
MASKED = -1e9


def mask_inputs(inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Distribution inputs (logits or Q-values) with the invalid actions' entries (mask 0)
    at ``MASKED``: no probability, never the greedy choice, out of every max. A row
    whose mask allows nothing (a final observation's, say) is left as it is.

    Examples:
        >>> masked = mask_inputs(torch.zeros(1, 3), torch.tensor([[1, 0, 1]]))
        >>> torch.softmax(masked, -1).tolist()
        [[0.5, 0.0, 0.5]]
    """
    valid = mask.reshape(inputs.shape) != 0
    valid = valid | ~valid.any(-1, keepdim=True)
    return inputs.masked_fill(~valid, MASKED)


Method = TypeVar("Method", bound=Callable[..., Any])


def inference(method: Method) -> Method:
    """``torch.inference_mode`` around a policy method, entered only when it is not on
    already: the rollout loop turns it on once per fragment, where entering it per step
    would cost a share of a small env's step.

    Examples:
        >>> class MyPolicy(Policy):
        ...     @inference
        ...     def compute_actions(self, obs, *, explore=True): ...
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if torch.is_inference_mode_enabled():
            return method(*args, **kwargs)
        with torch.inference_mode():
            return method(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class Policy(BasePolicy):
    """The acting side of an algorithm: acting module, distribution, normaliser,
    exploration and postprocessing. Subclasses change how it acts or postprocesses."""

    #: the action spaces this policy acts in
    action_spaces: ClassVar[tuple[type[gym.Space], ...]] = (gym.spaces.Discrete,
        gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Box, gym.spaces.Tuple,
        gym.spaces.Dict)  # fmt: skip

    @classmethod
    def check_action_space(cls, space: gym.Space, config: Config) -> None:
        """A ConfigError naming the algorithm and the space unless this policy acts in it
        (the algorithm checks before any worker starts)."""
        if not isinstance(space, cls.action_spaces):
            names = ", ".join(t.__name__ for t in cls.action_spaces)
            algo = getattr(config, "algo_name", "") or cls.__name__
            raise ConfigError(f"{algo} takes {names} actions; the env's action space is {space}")
        check_gsde(space, getattr(config, "gsde", False))

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Config,
        *,
        device: str = "cpu",
        worker_index: int = 0,
    ) -> None:
        self.device = resolve_device(device, observation_space)
        self.check_action_space(action_space, config)
        super().__init__(observation_space, action_space, config, worker_index=worker_index)
        self.dist_cls = self.distribution_class()
        self.module = self.make_module().to(self.device)
        if getattr(config, "gsde", False) and not self.module.gsde:
            raise ConfigError("gsde explores with flowrl's networks, not a module of your own")
        #: gSDE's noise, held across steps, where the module explores so
        self.gsde = StateDependentNoise(config.gsde_steps) if self.module.gsde else None
        #: the module's forward and action draw in numpy, where one applies (an MLP)
        self.numpy_acting = NumpyActing.of(self) if config.numpy_acting else None

    def distribution_class(self) -> DistributionClass:
        """The action distribution over the module's ``dist_inputs``."""
        return distribution_for(self.action_space)[0]

    def make_module(self) -> ActingModule:
        """The acting module: flowrl's actor-critic (recurrent with ``use_lstm``), on your
        encoder, or your whole module (``flowrl.learning.registry``)."""
        cfg, obs_space, action_space = self.config, self.input_space, self.action_space
        default = functools.partial(actor_critic, cfg, obs_space, action_space)
        return build_module(cfg, obs_space, action_space, default)

    # -- acting --------------------------------------------------------------------------
    def inputs(self, obs: Any) -> tuple[Any, torch.Tensor | None]:
        """What the acting module reads of ``obs`` (the data path's tensor, a composite
        space's records as bytes, or the space's nest), and the action mask or None."""
        if self.obs_layout is not None and torch.is_tensor(obs):
            obs = self.obs_layout.unpack_tensor(obs)
        return without_mask(obs) if self.masked else (obs, None)

    def forward(
        self, obs: Any, state: Any = None, *, module: nn.Module | None = None, starts: Any = None
    ) -> ActingOutput:
        """The acting module (or ``module``, a target copy) on ``obs`` from ``state`` when
        recurrent, or over sequences when ``starts`` is given (``ActingModule.unroll``,
        ``state`` the one each step recorded); invalid actions masked (``mask_inputs``)."""
        inputs, mask = self.inputs(obs)
        module = self.module if module is None else module
        if starts is not None:
            return masked(module.unroll(inputs, state, starts), mask)
        return masked(module(inputs, state) if module.recurrent else module(inputs), mask)

    @property
    def recurrent(self) -> bool:
        return self.module.recurrent

    def initial_state(self, n: int) -> np.ndarray | None:
        """The recurrent state of ``n`` fresh episodes (None: the module has none)."""
        if not self.module.recurrent:
            return None
        return self._as_numpy(self.module.initial_state(n))

    def distribution(self, obs: Any) -> tuple[Distribution, torch.Tensor | None]:
        """The action distribution for ``obs`` and the values (None: no value head)."""
        out = self.forward(obs)
        return self.dist_cls(out.dist_inputs), out.value

    @inference
    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of observations, with the distribution inputs and value
        estimates that gave them (and a recurrent module's next state, ``state_out``);
        ``postprocess`` adds their log-probs per fragment, in one vectorised pass."""
        if self.numpy_acting is not None:  # the same in numpy, at a third of the cost
            return self.numpy_acting.compute_actions(obs, explore=explore, state=state)
        out = self.forward(self._as_tensor(obs), self._as_tensor(state))
        actions = self.draw(out, explore)
        extras = {ACTION_DIST_INPUTS: self._as_numpy(out.dist_inputs)}
        if out.value is not None:
            extras[VF_PREDS] = self._as_numpy(out.value)
        if out.state is not None:
            extras[STATE_OUT] = self._as_numpy(out.state)
        return self.actions_numpy(actions), extras

    def draw(self, out: ActingOutput, explore: bool) -> torch.Tensor:
        """The actions of the module's ``out``: drawn from its distribution (with gSDE's
        held noise where the module explores so), or its mode."""
        dist = self.dist_cls(out.dist_inputs)
        if not explore:
            return dist.mode()
        if self.gsde is None:
            return dist.sample()
        return dist.from_noise(self.gsde(out.noise_features, self.module.log_std))

    def actions_numpy(self, actions: torch.Tensor) -> np.ndarray:
        """Sampled actions for the data path: a Tuple or Dict space's as records."""
        array = self._as_numpy(actions)
        return array if self.action_layout is None else self.action_layout.as_records(array)

    # per-step conversions: on the CPU (every rollout worker) skip the no-op device moves,
    # which cost about as much as the conversion itself on a batch of 8 observations
    def _as_tensor(self, array: np.ndarray | None) -> torch.Tensor | None:
        if array is None:  # (no recurrent state)
            return None
        tensor = to_tensor(array)
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _as_numpy(self, tensor: torch.Tensor) -> np.ndarray:
        return tensor.numpy() if self.device.type == "cpu" else tensor.cpu().numpy()

    @inference
    def compute_values(self, obs: np.ndarray, state: np.ndarray | None = None) -> np.ndarray:
        return self._as_numpy(self.forward(self._as_tensor(obs), self._as_tensor(state)).value)

    def greedy_env_actions(self, obs: torch.Tensor, state: Any = None) -> Any:
        """``env_actions(compute_actions(obs, explore=False))`` in torch alone, which an
        exported model (``flowrl.apps.inference``) traces; ``obs`` already normalised. A
        recurrent module's also takes ``state`` and returns the actions and next state."""
        out = self.forward(obs, state)
        actions = greedy_actions(self.dist_cls(out.dist_inputs), self.action_space)
        return actions if state is None else (actions, out.state)

    # -- weights and state ---------------------------------------------------------------
    def get_weights(self) -> Weights:
        """The module's weights and normalisation statistics: what a worker acts with."""
        return {**module_weights(self.module), **self.normalizer.get_state()}

    def set_weights(self, weights: Weights) -> None:
        module, normalizer = split_state(weights)
        load_module_weights(self.module, module)
        self.weights_changed()
        self.normalizer.set_state(normalizer)

    def weights_changed(self) -> None:
        """The module's weights changed in place (a learner's step): numpy acting reloads."""
        if self.numpy_acting is not None:
            self.numpy_acting.stale = True

    def sampled_logp(self, columns: Mapping[str, np.ndarray]) -> np.ndarray | None:
        return sampled_logp(self.dist_cls, columns)


@inference
def sampled_logp(dist_cls: Any, columns: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Each sampled action's log-prob under the distribution inputs recorded when it was
    sampled; None for columns without them."""
    if ACTION_DIST_INPUTS not in columns:
        return None
    dist = dist_cls(torch.from_numpy(columns[ACTION_DIST_INPUTS]))
    return dist.log_prob(to_tensor(columns[ACTIONS])).numpy()


def actor_critic(
    cfg: Config, obs_space: gym.Space, action_space: gym.Space, trunk: nn.Module | None
) -> ActingModule:
    """flowrl's actor-critic (recurrent with ``use_lstm``), on ``trunk`` when given."""
    gaussian = {k: getattr(cfg, k) for k in ("log_std_init", "gsde") if hasattr(cfg, k)}
    if getattr(cfg, "use_lstm", False):
        return RecurrentActorCritic(
            obs_space, action_space, hiddens=cfg.model_hiddens, cell_size=cfg.lstm_cell_size,
            trunk=trunk, **gaussian,
        )  # fmt: skip
    return ActorCritic(obs_space, action_space, hiddens=cfg.model_hiddens, trunk=trunk, **gaussian)


def masked(out: ActingOutput, mask: torch.Tensor | None) -> ActingOutput:
    """``out`` with its distribution inputs masked (``mask_inputs``) when there is a mask."""
    if mask is None:
        return out
    return out._replace(dist_inputs=mask_inputs(out.dist_inputs, mask))


def greedy_actions(dist: Distribution, space: gym.Space) -> Any:
    """The mode of ``dist`` clipped to ``space``'s Box bounds, in torch: a Tuple or Dict
    space's as one tensor per leaf (not records' bytes), for exports to trace."""
    if not is_composite(space):
        return in_env_units(space, dist.mode())
    leaves = zip(RecordLayout(space).leaves, dist.parts, strict=True)
    return tuple(in_env_units(leaf.space, part.mode()) for leaf, part in leaves)


def in_env_units(space: gym.Space, actions: torch.Tensor) -> torch.Tensor:
    """Actions as the env takes them: Box actions clipped to their bounds, Discrete and
    MultiDiscrete ones from their ``action_start``; others as they are."""
    if isinstance(space, gym.spaces.Box):
        low, high = bounds(space, actions)
        return torch.minimum(torch.maximum(actions, low), high)
    start = action_start(space)
    return actions if start is None else actions + torch.as_tensor(start, device=actions.device)


def bounds(space: gym.spaces.Box, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Box's low and high as tensors of ``like``'s dtype and device."""
    low = torch.as_tensor(space.low, dtype=like.dtype, device=like.device)
    return low, torch.as_tensor(space.high, dtype=like.dtype, device=like.device)


class ActorCriticPolicy(Policy):
    """A policy whose fragments become GAE advantages and value targets (its config is an
    ``ActorCriticConfig``)."""

    postprocessing = "gae"
