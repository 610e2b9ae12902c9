"""What every policy shares, whatever computes its actions: the spaces and their record
layouts, the action mask, the observation normaliser, the one acting call (``act``), the
env's actions and the post-processing of fragments into rows.

None of it needs torch. ``flowrl.learning.policy.Policy`` acts with a torch module on top
of it; ``flowrl.learning.numpy_policy.NumpyPolicy`` acts with numpy arrays alone, so a
rollout worker that holds one never imports torch.

Examples:
    >>> box = gym.spaces.Box(-1, 1, (2,))
    >>> clip_to_box(box, np.array([[3.0, -0.5]])).tolist()
    [[1.0, -0.5]]
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import gymnasium as gym
import numpy as np

from flowrl.core.config import Config, ConfigError
from flowrl.core.sample_batch import ACTIONS, LOGP, OBS, RAW_OBS, STATE_OUT, Fragment, SampleBatch
from flowrl.learning.normalization import Normalizer
from flowrl.learning.postprocessing import add_advantages, chunk_sequences, to_sequences
from flowrl.learning.spaces import ACTION_MASK, RecordLayout, field, is_composite, space_parts

Weights = dict[str, np.ndarray]


class Acted(NamedTuple):
    """What ``Policy.act`` gives: the env's actions, the row to record (name, array pairs)
    and the next recurrent state (None without one)."""

    env_actions: Any
    row: tuple[tuple[str, np.ndarray], ...]
    state: np.ndarray | None


def worker_seed(config: Config, worker_index: int) -> int:
    """The seed of worker ``worker_index``'s envs, torch and numpy acting."""
    return config.seed + 10_007 * worker_index


def inference_mode() -> contextlib.AbstractContextManager:
    """``torch.inference_mode()`` where this process has loaded torch (a policy acts in
    torch); nothing where it has not (every policy acts in numpy)."""
    torch = sys.modules.get("torch")
    return contextlib.nullcontext() if torch is None else torch.inference_mode()


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


def clip_to_box(space: gym.Space, actions: np.ndarray) -> np.ndarray:
    """Box actions clipped to their bounds (numpy); others as they are."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(actions, space.low, space.high)
    return actions


def action_start(space: gym.Space) -> Any:
    """The env's first action of a Discrete or MultiDiscrete space whose actions do not
    start at 0 (gymnasium's ``start``: Discrete(3, start=-1) takes -1, 0, 1), which
    policies number from 0; None for any other space."""
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete) and np.any(space.start):
        return space.start
    return None


def shift_actions(space: gym.Space, actions: np.ndarray, sign: int) -> np.ndarray:
    """``actions`` of ``space`` (records for a Tuple or Dict) with the ``action_start`` of
    each part added (``sign`` 1: as the env takes them) or taken off (-1: as policies
    number them, from 0); the same array when no part has one.

    Examples:
        >>> shift_actions(gym.spaces.Discrete(3, start=-1), np.array([0, 2]), 1).tolist()
        [-1, 1]
    """
    parts = space_parts(space)
    starts = [(path, start) for path, s in parts if (start := action_start(s)) is not None]
    if not starts:
        return actions
    out = np.array(actions, copy=True)
    for path, start in starts:
        part = field(out, path) if path else out
        part += sign * start  # in place: a record's field is a view
    return out


class BasePolicy:
    """The torch-free half of a policy: spaces, layouts, mask, normaliser, ``act`` and
    post-processing. A subclass computes the actions (``compute_actions``), the
    recurrent state (``initial_state``), the values (``compute_values``) and the
    log-probs (``sampled_logp``)."""

    #: how fragments become training rows: ``logp`` (the sampled actions' log-probs
    #: added), ``gae`` (and GAE advantages and value targets; whole sequences when
    #: recurrent) or ``sequences`` (env-major sequences and their bootstrap step, V-trace's)
    postprocessing: ClassVar[str] = "logp"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Config,
        *,
        worker_index: int = 0,
    ) -> None:
        self.config = config
        #: the worker this copy acts for: 0 is the local worker (the learner's), 1..N remote
        self.worker_index = worker_index
        self.observation_space, self.action_space = observation_space, action_space
        #: how composite observations lie in the data path's record arrays
        composite = is_composite(observation_space)
        self.obs_layout = RecordLayout(observation_space) if composite else None
        #: the observations the acting module sees: without the action mask, if any
        self.input_space, mask_space = split_action_mask(observation_space)
        self.masked = mask_space is not None
        #: how Tuple or Dict actions lie in the data path's record arrays
        self.action_layout = RecordLayout(action_space) if is_composite(action_space) else None
        self.box_actions = isinstance(action_space, gym.spaces.Box)  # clipped to bounds
        #: whether the env numbers some actions from other than 0 (``action_start``)
        self.starts = any(action_start(s) is not None for _, s in space_parts(action_space))
        if mask_space is not None:
            check_action_mask(mask_space, action_space)
        #: observation and reward statistics, which travel with the weights
        self.normalizer = Normalizer(observation_space, config)

    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions for a batch of observations, with the distribution inputs and values
        that gave them (and a recurrent module's next state, ``state_out``)."""
        raise NotImplementedError

    def initial_state(self, n: int) -> np.ndarray | None:
        """The recurrent state of ``n`` fresh episodes (None: no memory)."""
        raise NotImplementedError

    def compute_values(self, obs: np.ndarray, state: np.ndarray | None = None) -> np.ndarray:
        """The value estimates of ``obs`` (from ``state`` when recurrent)."""
        raise NotImplementedError

    @property
    def recurrent(self) -> bool:
        """Whether the policy carries a recurrent state from step to step."""
        raise NotImplementedError

    def sampled_logp(self, columns: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """Each sampled action's log-prob under the distribution inputs recorded when it
        was sampled; None for columns without them."""
        raise NotImplementedError

    def act(
        self, obs: np.ndarray, *, explore: bool = True, state: np.ndarray | None = None
    ) -> Acted:
        """The one acting call (sampling, evaluation, ``load_policy`` and game players):
        raw observations (records for Dict and Tuple spaces, the action mask among them)
        and the recurrent state give the env's actions, the row to record (observations
        as the module saw them, and raw when normalised; actions; ``compute_actions``'s
        extras) and the next state.

        Examples:
            >>> from flowrl.learning.policy import Policy
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

    def env_actions(self, actions: np.ndarray) -> Any:
        """What the env receives: ``action_array`` with each part's ``action_start``
        added; a Tuple or Dict's records as its nest."""
        layout, starts = self.action_layout, self.starts
        if layout is None:
            actions = self.action_array(actions)
            return shift_actions(self.action_space, actions, 1) if starts else actions
        leaves = [(x.space, clip_to_box(x.space, field(actions, x.path))) for x in layout.leaves]
        return layout.build([shift_actions(s, a, 1) if starts else a for s, a in leaves])

    def action_array(self, actions: np.ndarray) -> np.ndarray:
        """The sampled actions as one array (what a recording keeps): Box actions clipped
        to their bounds; others as policies number them, from 0 (see ``action_start``)."""
        return clip_to_box(self.action_space, actions) if self.box_actions else actions

    def metrics(self) -> dict[str, float]:
        """What this copy reports of its acting (an exploration rate, say); results show
        it per worker as ``worker_<index>/<name>``."""
        return {}

    def set_env_steps_sampled(self, steps: int) -> None:
        """The run has sampled ``steps`` env steps in all: a worker that starts mid-run (a
        replacement, a restored run's) hears it before it samples, so a schedule of its
        acting (DQN's epsilon) goes on from there. Nothing by default."""

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        """Turn a sampled fragment into training rows, as ``postprocessing`` says."""
        fragment = self.add_action_logp(fragment)
        if self.postprocessing == "sequences":
            return to_sequences(fragment, self.config.rollout_fragment_length)
        if self.postprocessing == "gae":
            last_values = self.compute_values(fragment.last_obs, fragment.last_state)
            cfg = self.config
            add_advantages(fragment, last_values, gamma=cfg.gamma, lam=cfg.gae_lambda)
            if self.recurrent:  # whole sequences, from the state each started from
                return chunk_sequences(fragment, cfg.max_seq_len)
        return fragment.to_batch()

    def add_action_logp(self, fragment: Fragment) -> Fragment:
        """Adds ``action_logp`` where the fragment has the distribution inputs for it."""
        if (logp := self.sampled_logp(fragment.columns)) is not None:
            fragment.columns[LOGP] = logp
        return fragment

    def get_weights(self) -> Weights:
        """The acting weights and normalisation statistics: what a worker acts with."""
        raise NotImplementedError

    def set_weights(self, weights: Weights) -> None:
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:
        """What a restore needs: the weights (a subclass adds its exploration's state)."""
        return {"weights": self.get_weights()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state["weights"])
