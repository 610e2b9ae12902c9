"""Episodes on a worker: the running returns of sampled fragments (``EpisodeTracker``),
whole evaluation episodes (``run_episodes``), and rendering without a display for
recorded ones (``headless_rendering``).

Examples:
    >>> tracker = EpisodeTracker(num_envs=1)
    >>> rewards, done = np.ones((3, 1)), np.array([[False], [True], [False]])
    >>> tracker.add(rewards, done, valid=np.ones((3, 1), bool))
    >>> tracker.take()  # one episode of 2 steps ended; the third step starts the next
    [(2.0, 2)]
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from flowrl.core.callbacks import Callbacks, EpisodeInfo, checked_metrics, env_info, run_hook
from flowrl.core.sample_batch import STATE_IN, STATE_OUT

# (return, length), and what the callbacks reported of it when the run has callbacks
Episode = tuple[float, int] | tuple[float, int, dict[str, float]]


class EpisodeTracker:
    """Adds fragments' ``[T, N]`` steps to each env's running episode and records the
    episodes that end: once per fragment, running sums along time and a Python step per
    finished episode."""

    def __init__(self, num_envs: int) -> None:
        self._return = np.zeros(num_envs, dtype=np.float64)
        self._len = np.zeros(num_envs, dtype=np.int64)
        self._episodes: list[Episode] = []

    def add(self, rewards: np.ndarray, done: np.ndarray, valid: np.ndarray) -> None:
        returns = np.cumsum(rewards * valid, axis=0, dtype=np.float64)
        lengths = np.cumsum(valid, axis=0)
        start_return, start_len = np.zeros(done.shape[1]), np.zeros(done.shape[1], np.int64)
        for t, i in zip(*np.nonzero(done & valid), strict=True):
            ep_return = self._return[i] + returns[t, i] - start_return[i]
            ep_len = self._len[i] + lengths[t, i] - start_len[i]
            self._episodes.append((float(ep_return), int(ep_len)))
            self._return[i], self._len[i] = 0.0, 0
            start_return[i], start_len[i] = returns[t, i], lengths[t, i]
        self._return += returns[-1] - start_return
        self._len += lengths[-1] - start_len

    def take(self) -> list[Episode]:
        """The episodes that ended since the last call."""
        episodes, self._episodes = self._episodes, []
        return episodes


class EpisodeHooks:
    """The episode hooks of a worker's ``Callbacks``: an
    ``EpisodeInfo`` per env, started when the env begins an
    episode, stepped with the env's info, ended with its last; what the hooks reported of
    each ended episode waits for ``take``, in the order ``EpisodeTracker``
    records the episodes."""

    def __init__(self, callbacks: Callbacks, num_envs: int, worker_index: int) -> None:
        self.callbacks, self.worker_index = callbacks, worker_index
        self.episodes = [self._start(i) for i in range(num_envs)]
        self._ended: list[dict[str, float]] = []

    def _start(self, env_index: int) -> EpisodeInfo:
        episode = EpisodeInfo(env_index=env_index, worker_index=self.worker_index)
        run_hook(self.callbacks, "on_episode_start", episode=episode)
        return episode

    def step(self, rewards: np.ndarray, done: np.ndarray, valid: np.ndarray, infos: dict) -> None:
        """One step of every env: ``valid`` is False for an env's reset step (NEXT_STEP
        autoreset), which begins its next episode."""
        for i in range(len(done)):
            if not valid[i]:
                self.episodes[i] = self._start(i)
                continue
            episode, info = self.episodes[i], env_info(infos, i)
            episode.length += 1
            episode.total_reward += float(rewards[i])
            run_hook(self.callbacks, "on_episode_step", episode=episode, info=info)
            if done[i]:
                run_hook(self.callbacks, "on_episode_end", episode=episode, info=info)
                self._ended.append(checked_metrics(self.callbacks, episode.custom_metrics))

    def take(self) -> list[dict[str, float]]:
        """What the hooks reported of each episode that ended since the last call."""
        ended, self._ended = self._ended, []
        return ended


def run_episodes(
    policy: Any, env: Any, episodes: int, *, explore: bool, seed: int
) -> list[Episode]:
    """Exactly ``episodes`` fresh episodes of ``policy`` on the vector ``env`` (greedy
    actions unless ``explore``): env i runs episodes i, i + n, ... so the count is exact
    whatever the envs' episode lengths."""
    n = env.num_envs
    quota = np.array([len(range(i, episodes, n)) for i in range(n)])
    obs, _ = env.reset(seed=seed)
    ret, length = np.zeros(n), np.zeros(n, dtype=np.int64)
    needs_reset = np.zeros(n, dtype=bool)
    state = policy.initial_state(n)
    memory = None if state is None else Memory(policy, state, np.zeros(n, bool), needs_reset)
    results: list[Episode] = []
    while (quota > 0).any():
        act = policy.compute_actions if memory is None else memory.compute_actions
        actions, _ = act(policy.normalizer.observations(obs), explore=explore)
        obs, rewards, terminated, truncated, _ = env.step(policy.env_actions(actions))
        if memory is not None:
            memory.stepped(terminated | truncated)
        counting = ~needs_reset & (quota > 0)
        ret += rewards * counting
        length += counting
        finished = (terminated | truncated) & counting
        for i in np.flatnonzero(finished):
            results.append((float(ret[i]), int(length[i])))
            quota[i] -= 1
        ret[finished], length[finished] = 0.0, 0
        needs_reset = terminated | truncated
    return results


class Memory:
    """A recurrent policy's state across the steps of a vector env's envs: each step starts
    from the state the last one left, reset for the envs that begin an episode, and its
    extras record that state (``state_in``); a step that only resets its env (NEXT_STEP
    autoreset) makes the next one begin an episode.

    Examples:
        >>> memory = Memory(policy, policy.initial_state(8), starts, needs_reset)  # doctest: +SKIP
        >>> actions, extras = memory.compute_actions(obs)  # doctest: +SKIP
        >>> memory.stepped(terminated | truncated)  # doctest: +SKIP
    """

    def __init__(
        self, policy: Any, state: np.ndarray, starts: np.ndarray, needs_reset: np.ndarray
    ) -> None:
        self.policy, self.state = policy, state
        #: the envs whose next step begins an episode, and those whose next step resets
        self.starts, self.needs_reset = starts, needs_reset
        self.fresh = policy.initial_state(len(starts))

    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self.starts.any():
            rows = self.starts.reshape(-1, *[1] * (self.state.ndim - 1))
            self.state = np.where(rows, self.fresh, self.state)
        actions, extras = self.policy.compute_actions(obs, explore=explore, state=self.state)
        extras[STATE_IN] = self.state
        self.state = extras.pop(STATE_OUT)
        return actions, extras

    def stepped(self, done: np.ndarray) -> None:
        """The step ended the episodes of ``done``: their next step is a reset step."""
        self.starts, self.needs_reset = self.needs_reset, done


#: what recording needs of the rendering libraries: pygame (classic control) opens no
#: display or sound card, and MuJoCo renders off-screen through EGL when there is no display
_HEADLESS = {"SDL_AUDIODRIVER": "dummy", "SDL_VIDEODRIVER": "dummy"}


@contextlib.contextmanager
def headless_rendering() -> Iterator[None]:
    """Environment variables for rendering without a display, set while recording and
    restored after (a variable the user set stays as it was).

    Examples:
        >>> with headless_rendering():
        ...     os.environ["SDL_VIDEODRIVER"] != ""
        True
    """
    wanted = dict(_HEADLESS)
    if not os.environ.get("DISPLAY"):
        wanted["MUJOCO_GL"] = "egl"
    added = [k for k in wanted if k not in os.environ]
    for key in added:
        os.environ[key] = wanted[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def write_video(frames: list[np.ndarray], video_dir: str, index: int, fps: float) -> None:
    """``frames`` as ``video_dir/eval-episode-{index}.mp4`` (gymnasium's ``save_video``:
    moviepy, the ``video`` extra)."""
    from gymnasium.utils.save_video import save_video

    save_video(
        frames,
        video_dir,
        episode_trigger=lambda _: True,
        name_prefix="eval",
        episode_index=index,
        fps=fps,
    )
