"""Episodes on a worker: the episode hooks of a run's callbacks (``EpisodeHooks``), and
rendering without a display for recorded ones (``headless_rendering``, ``write_video``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from flowrl.core.callbacks import Callbacks, EpisodeInfo, checked_metrics, env_info, run_hook


class Episode(NamedTuple):
    """A finished episode, of any kind of env: its return (summed over its agents) and env
    steps; in a multi-agent env each agent's return and each policy's mean over its agents;
    what the episode hooks reported of it.

    Examples:
        >>> Episode(3.0, 2, agents={"a": 1.0, "b": 2.0}).length
        2
    """

    episode_return: float
    length: int
    agents: Mapping[str, float] = {}
    policies: Mapping[str, float] = {}
    custom: Mapping[str, float] = {}


def as_episode(saved: Any) -> Episode:
    """An episode as a checkpoint gives it back (a list), including the shorter tuples of
    checkpoints written before ``Episode``: ``(return, length)``, with the hooks' report
    third, or with agents and policies third and fourth."""
    if len(saved) == 3:
        return Episode(saved[0], saved[1], custom=saved[2])
    return Episode(*saved)


class EpisodeHooks:
    """The episode hooks of a worker's ``Callbacks``: an
    ``EpisodeInfo`` per env, started when the env begins an
    episode, stepped with the env's info, ended with its last; what the hooks reported of
    each ended episode waits for ``take``, in the order the episodes end (that of
    ``VectorLanes``' records). Every env begins an episode at once unless ``begun`` is
    False (then ``start`` begins each)."""

    def __init__(
        self, callbacks: Callbacks, num_envs: int, worker_index: int, *, begun: bool = True
    ) -> None:
        self.callbacks, self.worker_index = callbacks, worker_index
        self.episodes: list[Any] = [self._start(i) if begun else None for i in range(num_envs)]
        self._ended: list[dict[str, float]] = []

    def _start(self, env_index: int) -> EpisodeInfo:
        episode = EpisodeInfo(env_index=env_index, worker_index=self.worker_index)
        run_hook(self.callbacks, "on_episode_start", episode=episode)
        return episode

    def start(self, env_index: int) -> None:
        """Env ``env_index`` begins an episode."""
        self.episodes[env_index] = self._start(env_index)

    def step_one(self, env_index: int, reward: float, info: Any) -> None:
        """Env ``env_index`` took a step of its episode, earning ``reward``."""
        episode = self.episodes[env_index]
        episode.length += 1
        episode.total_reward += reward
        run_hook(self.callbacks, "on_episode_step", episode=episode, info=info)

    def end(self, env_index: int, info: Any) -> dict[str, float]:
        """Env ``env_index``'s episode ended: what its hooks reported."""
        episode = self.episodes[env_index]
        run_hook(self.callbacks, "on_episode_end", episode=episode, info=info)
        return checked_metrics(self.callbacks, episode.custom_metrics)

    def step(self, rewards: np.ndarray, done: np.ndarray, valid: np.ndarray, infos: dict) -> None:
        """One step of every env: ``valid`` is False for an env's reset step (NEXT_STEP
        autoreset), which begins its next episode."""
        for i in range(len(done)):
            if not valid[i]:
                self.start(i)
                continue
            info = env_info(infos, i)
            self.step_one(i, float(rewards[i]), info)
            if done[i]:
                self._ended.append(self.end(i, info))

    def take(self) -> list[dict[str, float]]:
        """What the hooks reported of each episode that ended since the last call."""
        ended, self._ended = self._ended, []
        return ended


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
