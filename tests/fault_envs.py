"""Envs that misbehave on purpose, for the fault tests; registered on import, so an env id
``fault_envs:NanReward-v0`` works in Ray workers too (the tests directory is on their path).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

#: Exists once an env has hung: the first worker's env hangs, its replacement does not.
HANG_MARKER = Path(tempfile.gettempdir()) / f"flowrl_hang_marker_{os.getuid()}"


class NanReward(CartPoleEnv):
    """CartPole whose 50th step returns a NaN reward."""

    def reset(self, **kwargs):
        self.steps = 0
        return super().reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        return obs, np.nan if self.steps == 50 else reward, terminated, truncated, info


class NanObservation(NanReward):
    """CartPole whose 50th observation holds an infinity."""

    def step(self, action):
        obs, reward, terminated, truncated, info = CartPoleEnv.step(self, action)
        self.steps += 1
        if self.steps == 50:
            obs = np.array([np.inf, 0, 0, 0], dtype=np.float32)
        return obs, reward, terminated, truncated, info


class HangOnce(CartPoleEnv):
    """CartPole whose step() hangs for an hour in the first process that steps it after
    :data:`HANG_MARKER` was removed."""

    def step(self, action):
        try:
            HANG_MARKER.touch(exist_ok=False)
        except FileExistsError:
            return super().step(action)
        time.sleep(3600)
        raise AssertionError("unreachable")


for _cls in (NanReward, NanObservation, HangOnce):
    gym.register(f"{_cls.__name__}-v0", entry_point=f"{__name__}:{_cls.__name__}")
