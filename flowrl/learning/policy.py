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
from typing import Any, ClassVar, NamedTuple, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.core.config import Config, ConfigError
from flowrl.core.sample_batch import (
    ACTION_DIST_INPUTS,
    ACTIONS,
    LOGP,
    OBS,
    RAW_OBS,
    STATE_OUT,
    VF_PREDS,
    Fragment,
    SampleBatch,
)
from flowrl.learning.distributions import Distribution, DistributionClass, distribution_for
from flowrl.learning.models import ActorCritic, RecurrentActorCritic
from flowrl.learning.module import ActingModule, ActingOutput
from flowrl.learning.normalization import Normalizer, split_state
from flowrl.learning.numpy_acting import NumpyActing
from flowrl.learning.postprocessing import add_advantages, chunk_sequences
from flowrl.learning.registry import build_module
from flowrl.learning.spaces import ACTION_MASK, RecordLayout, field, is_composite, to_tensor

Weights = dict[str, np.ndarray]


def resolve_device(device: str) -> torch.device:
    """``auto`` is CUDA when torch sees a GPU, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device=cuda, but torch {torch.__version__} sees no CUDA GPU here")
    return torch.device(device)


def module_weights(module: nn.Module) -> Weights:
    """A module's state as numpy copies (they travel through Ray without torch pickling)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_module_weights(module: nn.Module, weights: Weights) -> None:
    """Load numpy weights; torch.tensor copies, since Ray's object-store arrays are read-only."""
    module.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})


def split_action_mask(space: gym.Space) -> tuple[gym.Space, gym.Space | None]:
    """The observation space the acting module sees, and the action mask's space (None
    without one): a Dict's ``action_mask`` entry is taken out, and a Dict left with one
    entry is that entry's space.

    Examples:
        >>> board = gym.spaces.Box(0, 1, (9,))
        >>> mask = gym.spaces.MultiBinary(9)
        >>> split_action_mask(gym.spaces.Dict({"observation": board, "action_mask": mask}))
        (Box(0.0, 1.0, (9,), float32), MultiBinary(9))
    """
    if not (isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces):
        return space, None
    if len(space.spaces) == 1:
        raise ConfigError(f"observation space {space} holds an action mask and nothing else")
    inputs, mask = without_mask(space.spaces)
    return (inputs if isinstance(inputs, gym.Space) else gym.spaces.Dict(inputs)), mask


def without_mask(entries: Mapping[str, Any]) -> tuple[Any, Any]:
    """A Dict's entries (spaces, or a batch's tensors) other than ``action_mask`` (the one
    entry itself when one is left) and the mask: what the acting module reads of them."""
    rest = {k: v for k, v in entries.items() if k != ACTION_MASK}
    return (next(iter(rest.values())) if len(rest) == 1 else rest), entries[ACTION_MASK]


def check_action_mask(mask: gym.Space, action_space: gym.Space) -> None:
    """A ConfigError unless ``mask`` has one entry per action (Discrete) or per choice of
    each sub-action, concatenated (MultiDiscrete)."""
    if isinstance(action_space, gym.spaces.Discrete):
        needed = int(action_space.n)
    elif isinstance(action_space, gym.spaces.MultiDiscrete):
        needed = int(action_space.nvec.sum())
    else:
        raise ConfigError(
            f"an action_mask masks Discrete or MultiDiscrete actions; the env's action space "
            f"is {action_space}"
        )
    size = int(np.prod(mask.shape)) if mask.shape else 0
    if size != needed:
        raise ConfigError(
            f"the observation's action_mask has {size} entries; {action_space} actions need "
            f"{needed} (one per action, or per choice of each sub-action, concatenated)"
        )


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
    already: the rollout loop turns it on once per fragment, and entering it costs about
    3 us, 1-2% of a CartPole rollout step.

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


class Acted(NamedTuple):
    """What ``Policy.act`` gives: the env's actions, the row to record (name, array pairs)
    and the next recurrent state (None without one)."""

    env_actions: Any
    row: tuple[tuple[str, np.ndarray], ...]
    state: np.ndarray | None


class Policy:
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

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Config,
        *,
        device: str = "cpu",
        worker_index: int = 0,
    ) -> None:
        self.config = config
        #: the worker this copy acts for: 0 is the local worker (the learner's), 1..N remote
        self.worker_index = worker_index
        self.observation_space, self.action_space = observation_space, action_space
        self.device = resolve_device(device)
        self.check_action_space(action_space, config)
        #: how composite observations lie in the data path's record arrays
        composite = is_composite(observation_space)
        self.obs_layout = RecordLayout(observation_space) if composite else None
        #: the observations the acting module sees: without the action mask, if any
        self.input_space, mask_space = split_action_mask(observation_space)
        self.masked = mask_space is not None
        #: how Tuple or Dict actions lie in the data path's record arrays
        self.action_layout = RecordLayout(action_space) if is_composite(action_space) else None
        self.box_actions = isinstance(action_space, gym.spaces.Box)  # clipped to bounds
        if mask_space is not None:
            check_action_mask(mask_space, action_space)
        self.dist_cls = self.distribution_class()
        self.module = self.make_module().to(self.device)
        #: the module's forward and action draw in numpy, where one applies (an MLP)
        self.numpy_acting = NumpyActing.of(self) if config.numpy_acting else None
        #: observation and reward statistics, which travel with the weights
        self.normalizer = Normalizer(observation_space, config)

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

    def initial_state(self, n: int) -> np.ndarray | None:
        """The recurrent state of ``n`` fresh episodes (None: the module has none)."""
        if not self.module.recurrent:
            return None
        return self._as_numpy(self.module.initial_state(n))

    def distribution(self, obs: Any) -> tuple[Distribution, torch.Tensor | None]:
        """The action distribution for ``obs`` and the values (None: no value head)."""
        out = self.forward(obs)
        return self.dist_cls(out.dist_inputs), out.value

    def act(
        self, obs: np.ndarray, *, explore: bool = True, state: np.ndarray | None = None
    ) -> Acted:
        """The one acting call (sampling, evaluation, ``load_policy`` and game players):
        raw observations (records for Dict and Tuple spaces, the action mask among them)
        and the recurrent state give the env's actions, the row to record (observations
        as the module saw them, and raw when normalised; actions; ``compute_actions``'s
        extras) and the next state.

        Examples:
            >>> policy = Policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), Config())
            >>> acted = policy.act(np.zeros((4, 3), np.float32), explore=False)
            >>> acted.env_actions.shape, [name for name, _ in acted.row]
            ((4,), ['obs', 'actions', 'action_dist_inputs', 'vf_preds'])
        """
        seen = self.normalizer.observations(obs) if self.normalizer.parts else obs
        if state is None:  # (a policy without memory may take no state)
            actions, extras = self.compute_actions(seen, explore=explore)
        else:
            actions, extras = self.compute_actions(seen, explore=explore, state=state)
        next_state = extras.pop(STATE_OUT, None)
        row = ((OBS, seen), (ACTIONS, actions), *extras.items())
        if seen is not obs:
            row += ((RAW_OBS, obs),)
        return Acted(self.env_actions(actions), row, next_state)

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
        dist = self.dist_cls(out.dist_inputs)
        actions = dist.sample() if explore else dist.mode()
        extras = {ACTION_DIST_INPUTS: self._as_numpy(out.dist_inputs)}
        if out.value is not None:
            extras[VF_PREDS] = self._as_numpy(out.value)
        if out.state is not None:
            extras[STATE_OUT] = self._as_numpy(out.state)
        return self.actions_numpy(actions), extras

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

    def metrics(self) -> dict[str, float]:
        """What this copy reports of its acting (an exploration rate, say); results show
        it per worker as ``worker_<index>/<name>``."""
        return {}

    def set_env_steps_sampled(self, steps: int) -> None:
        """The run has sampled ``steps`` env steps in all: a worker that starts mid-run (a
        replacement, a restored run's) hears it before it samples, so a schedule of its
        acting (DQN's epsilon) goes on from there. Nothing by default."""

    @inference
    def compute_values(self, obs: np.ndarray, state: np.ndarray | None = None) -> np.ndarray:
        return self._as_numpy(self.forward(self._as_tensor(obs), self._as_tensor(state)).value)

    def env_actions(self, actions: np.ndarray) -> Any:
        """What the env receives: ``action_array``; a Tuple or Dict's records as its nest."""
        layout = self.action_layout
        if layout is None:
            return self.action_array(actions)
        return layout.build([clip_to_box(x.space, field(actions, x.path)) for x in layout.leaves])

    def action_array(self, actions: np.ndarray) -> np.ndarray:
        """The sampled actions in the action space's own units, as one array (what a
        recording keeps): Box actions clipped to their bounds; others as they are."""
        return clip_to_box(self.action_space, actions) if self.box_actions else actions

    def greedy_env_actions(self, obs: torch.Tensor, state: Any = None) -> Any:
        """``env_actions(compute_actions(obs, explore=False))`` in torch alone, which an
        exported model (``flowrl.apps.inference``) traces; ``obs`` already normalised. A
        recurrent module's also takes ``state`` and returns the actions and next state."""
        out = self.forward(obs, state)
        actions = greedy_actions(self.dist_cls(out.dist_inputs), self.action_space)
        return actions if state is None else (actions, out.state)

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        """Turn a sampled fragment into training rows (returns, advantages, ...)."""
        return self.add_action_logp(fragment).to_batch()

    def add_action_logp(self, fragment: Fragment) -> Fragment:
        """Adds ``action_logp`` where the fragment has the distribution inputs for it."""
        if (logp := sampled_logp(self.dist_cls, fragment.columns)) is not None:
            fragment.columns[LOGP] = logp
        return fragment

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

    def get_state(self) -> dict[str, Any]:
        """What a restore needs: the weights (a subclass adds its exploration's state)."""
        return {"weights": self.get_weights()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state["weights"])


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
    if getattr(cfg, "use_lstm", False):
        return RecurrentActorCritic(
            obs_space, action_space, hiddens=cfg.model_hiddens, cell_size=cfg.lstm_cell_size,
            trunk=trunk,
        )  # fmt: skip
    return ActorCritic(obs_space, action_space, hiddens=cfg.model_hiddens, trunk=trunk)


def masked(out: ActingOutput, mask: torch.Tensor | None) -> ActingOutput:
    """``out`` with its distribution inputs masked (``mask_inputs``) when there is a mask."""
    if mask is None:
        return out
    return out._replace(dist_inputs=mask_inputs(out.dist_inputs, mask))


def clip_to_box(space: gym.Space, actions: np.ndarray) -> np.ndarray:
    """Box actions clipped to their bounds (numpy); others as they are."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(actions, space.low, space.high)
    return actions


def greedy_actions(dist: Distribution, space: gym.Space) -> Any:
    """The mode of ``dist`` clipped to ``space``'s Box bounds, in torch: a Tuple or Dict
    space's as one tensor per leaf (not records' bytes), for exports to trace."""
    if not is_composite(space):
        return clip_box(space, dist.mode())
    leaves = zip(RecordLayout(space).leaves, dist.parts, strict=True)
    return tuple(clip_box(leaf.space, part.mode()) for leaf, part in leaves)


def clip_box(space: gym.Space, actions: torch.Tensor) -> torch.Tensor:
    """Box actions clipped to their bounds; others as they are."""
    if not isinstance(space, gym.spaces.Box):
        return actions
    low, high = bounds(space, actions)
    return torch.minimum(torch.maximum(actions, low), high)


def bounds(space: gym.spaces.Box, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Box's low and high as tensors of ``like``'s dtype and device."""
    low = torch.as_tensor(space.low, dtype=like.dtype, device=like.device)
    return low, torch.as_tensor(space.high, dtype=like.dtype, device=like.device)


class ActorCriticPolicy(Policy):
    """A policy whose fragments become GAE advantages and value targets (its config is an
    ``ActorCriticConfig``)."""

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        last_values = self.compute_values(fragment.last_obs, fragment.last_state)
        add_advantages(
            self.add_action_logp(fragment),
            last_values,
            gamma=self.config.gamma,
            lam=self.config.gae_lambda,
        )
        if self.module.recurrent:  # whole sequences, from the state each started from
            return chunk_sequences(fragment, self.config.max_seq_len)
        return fragment.to_batch()
