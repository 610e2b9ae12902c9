"""Observation and reward normalisation: running statistics kept by the workers, merged on
the learner and sent back with the weights.

With ``normalize_observations``, a policy sees ``clip((obs - mean) / std)`` where mean and
std are those of every observation sampled so far; with ``normalize_rewards``, rewards are
divided by the running std of the discounted return (as SB3's ``VecNormalize`` does), which
keeps value targets near unit scale whatever the env's reward scale. Episode returns in the
results stay the env's own.

The statistics live in the policy's ``Normalizer``, so they travel with its weights
(``get_weights``), are saved in checkpoints and applied when
evaluating. Each rollout worker adds what it samples to its own copy and keeps the same
additions apart (``unsent``); its fragments bring them to the plan, which merges them into
the learner's copy (``WorkerReports``: a worker whose fragments bring none is asked once per
iteration), and the next weights carry them back. Statistics are frozen while a fragment is
sampled and updated at its end.

Examples:
    >>> rms = RunningMeanStd(())
    >>> rms.update(np.array([1.0, 2.0, 3.0]))
    >>> other = RunningMeanStd(())
    >>> other.update(np.array([4.0, 5.0]))
    >>> rms.merge(other)
    >>> float(rms.count), float(rms.mean), round(float(rms.var), 3)
    (5.0, 3.0, 2.0)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from flowrl.core.config import Config, ConfigError
from flowrl.learning.spaces import Path, field, is_composite, leaf_spaces

PREFIX = "normalizer/"
EPSILON = 1e-8


def moments(rows: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Count, mean and variance of ``rows`` along the first axis (no rows: count 0)."""
    if not len(rows):
        return 0, np.zeros(rows.shape[1:]), np.ones(rows.shape[1:])
    return len(rows), rows.mean(axis=0), rows.var(axis=0)


class RunningMeanStd:
    """Count, mean and (population) variance of everything added, in float64; two of them
    merge exactly (Chan et al.'s parallel update)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.count = 0.0
        self.mean = np.zeros(shape)
        self.var = np.ones(shape)

    def update(self, rows: np.ndarray) -> None:
        """Add ``rows`` (a batch along the first axis)."""
        self.add_moments(*moments(rows))

    def add_moments(self, count: float, mean: np.ndarray, var: np.ndarray) -> None:
        """Add ``count`` samples with this mean and variance."""
        if count <= 0:
            return
        total = self.count + count
        delta = mean - self.mean
        m2 = self.var * self.count + var * count + delta**2 * self.count * count / total
        self.mean = self.mean + delta * count / total
        self.var = m2 / total
        self.count = total

    def merge(self, other: RunningMeanStd) -> None:
        self.add_moments(other.count, other.mean, other.var)

    def std(self) -> np.ndarray:
        return np.sqrt(self.var + EPSILON)

    def state(self, prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}count": np.array(self.count),
            f"{prefix}mean": self.mean.copy(),
            f"{prefix}var": self.var.copy(),
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], prefix: str) -> RunningMeanStd:
        rms = cls(np.shape(state[f"{prefix}mean"]))
        rms.count = float(state[f"{prefix}count"])
        rms.mean = np.array(state[f"{prefix}mean"], dtype=np.float64)
        rms.var = np.array(state[f"{prefix}var"], dtype=np.float64)
        return rms


def normalized_leaves(space: gym.Space) -> list[tuple[str, Path, tuple[int, ...]]]:
    """What ``normalize_observations`` normalises, as (statistics name, record path,
    shape): a Box observation whole, or each floating-point Box leaf of a Dict or Tuple."""
    if not is_composite(space):
        return [("obs", (), space.shape)] if isinstance(space, gym.spaces.Box) else []
    return [
        ("obs." + ".".join(path), path, leaf.shape)
        for path, leaf in leaf_spaces(space)
        if isinstance(leaf, gym.spaces.Box) and np.issubdtype(leaf.dtype, np.floating)
    ]


class Normalizer:
    """A policy's observation and reward statistics (either may be off) and what this
    process added since it last reported them (``unsent``). A Dict or Tuple observation
    has statistics per floating-point Box leaf (``obs.<path>``); its images, integers and
    action mask stay as they are.

    Examples:
        >>> from flowrl.core.config import Config
        >>> space = gym.spaces.Box(-10, 10, (2,))
        >>> norm = Normalizer(space, Config(normalize_observations=True))
        >>> norm.observe_fragment(np.array([[[1.0, 10.0]], [[3.0, 30.0]]]))
        >>> norm.observations(np.array([[2.0, 20.0]]))
        array([[0., 0.]], dtype=float32)
    """

    def __init__(self, observation_space: gym.Space, config: Config) -> None:
        self.clip, self.gamma = config.normalize_clip, config.gamma
        self.clip_rewards = config.clip_rewards
        #: (statistics name, record path) of each normalised part of an observation
        leaves = normalized_leaves(observation_space) if config.normalize_observations else []
        if config.normalize_observations and not leaves:
            raise ConfigError(
                "normalize_observations takes Box observations or Dict/Tuple observations "
                f"with float Box entries; the env's are {observation_space}"
            )
        self.parts: list[tuple[str, Path]] = [(name, path) for name, path, _ in leaves]
        #: running statistics by name: ``obs`` (or ``obs.<path>`` per leaf) and ``ret``
        self.stats = {name: RunningMeanStd(shape) for name, _, shape in leaves}
        if config.normalize_rewards:
            self.stats["ret"] = RunningMeanStd(())
        self._unsent = self._empty()
        self._returns: np.ndarray | None = None  # each env's discounted return so far
        self._obs_scale: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _empty(self) -> dict[str, RunningMeanStd]:
        return {k: RunningMeanStd(v.mean.shape) for k, v in self.stats.items()}

    @property
    def obs(self) -> RunningMeanStd | None:
        """The statistics of a Box observation (None when off, or per leaf)."""
        return self.stats.get("obs")

    @property
    def ret(self) -> RunningMeanStd | None:
        return self.stats.get("ret")

    @property
    def enabled(self) -> bool:
        return bool(self.stats)

    # -- applying ---------------------------------------------------------------------
    def scale(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The mean and 1/std of statistics ``name`` as float32 (computed once per change
        of the statistics, not per step)."""
        if name not in self._obs_scale:
            rms = self.stats[name]
            self._obs_scale[name] = (
                rms.mean.astype(np.float32),
                1 / rms.std().astype(np.float32),
            )
        return self._obs_scale[name]

    def observations(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` normalised and clipped (float32; records: a copy with each float Box
        leaf normalised); unchanged when observations are off."""
        if not self.parts:
            return obs
        if obs.dtype.names:
            out = obs.copy()
            for name, path in self.parts:
                field(out, path)[...] = self._normalize(name, field(obs, path))
            return out
        return self._normalize("obs", obs)

    def _normalize(self, name: str, x: np.ndarray) -> np.ndarray:
        mean, inv_std = self.scale(name)
        out = (x - mean) * inv_std
        return np.clip(out, -self.clip, self.clip, out=out).astype(np.float32, copy=False)

    # -- learning the statistics ------------------------------------------------------
    def observe_fragment(self, raw_obs: np.ndarray) -> None:
        """Add a fragment's raw ``[T, N, ...]`` observations."""
        for name, path in self.parts:
            part = field(raw_obs, path)
            self._add(name, part.reshape(-1, *self.stats[name].mean.shape))
        self._obs_scale = {}

    def _add(self, name: str, rows: np.ndarray) -> None:
        """``rows`` into the statistics and into what is unsent, summarised once."""
        summary = moments(rows)
        self.stats[name].add_moments(*summary)
        self._unsent[name].add_moments(*summary)

    def scale_rewards(self, rewards: np.ndarray, done: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """A fragment's ``[T, N]`` rewards to learn from: clipped to their sign with
        ``clip_rewards``, then divided by the running std of the discounted return (whose
        statistics its valid steps join) with ``normalize_rewards``. The episodes were
        counted with the env's own."""
        if self.clip_rewards:
            rewards = np.sign(rewards)
        if self.ret is None:
            return rewards
        if self._returns is None:
            self._returns = np.zeros(rewards.shape[1])
        returns = np.empty(rewards.shape)
        for t in range(len(rewards)):
            self._returns = self._returns * self.gamma + rewards[t]
            returns[t] = self._returns
            self._returns[done[t]] = 0.0
        self._add("ret", returns[valid])
        scaled = rewards / self.ret.std()
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    # -- moving the statistics between processes --------------------------------------
    def take_unsent(self) -> dict[str, np.ndarray]:
        """What was added here since the last call (empty when off), then forget it."""
        out = {}
        for name, rms in self._unsent.items():
            out.update(rms.state(f"{PREFIX}{name}_"))
        self._unsent = self._empty()
        return out

    def merge(self, unsent: dict[str, np.ndarray]) -> None:
        """Add another process's ``take_unsent`` (the learner merges the workers')."""
        for name, rms in self.stats.items():
            if f"{PREFIX}{name}_count" in unsent:
                rms.merge(RunningMeanStd.from_state(unsent, f"{PREFIX}{name}_"))
        self._obs_scale = {}

    def get_state(self) -> dict[str, np.ndarray]:
        """The statistics as ``normalizer/...`` arrays (empty when off)."""
        out = {}
        for name, rms in self.stats.items():
            out.update(rms.state(f"{PREFIX}{name}_"))
        return out

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Take the learner's statistics, plus what was added here and not yet sent."""
        for name in self.stats:
            if f"{PREFIX}{name}_count" in state:
                rms = RunningMeanStd.from_state(state, f"{PREFIX}{name}_")
                rms.merge(self._unsent[name])
                self.stats[name] = rms
        self._obs_scale = {}


def split_state(weights: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """``(model weights, normalizer state)`` of a ``Policy.get_weights`` dict."""
    model = {k: v for k, v in weights.items() if not k.startswith(PREFIX)}
    return model, {k: v for k, v in weights.items() if k.startswith(PREFIX)}
