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

from flowrl.rollout.toy_envs import MaskedChoice

#: Exists once an env has hung: the first worker's env hangs, its replacement does not.
HANG_MARKER = Path(tempfile.gettempdir()) / f"flowrl_hang_marker_{os.getuid()}"
#: Exists once a RaiseOnce env has raised: the first one to reach its limit raises.
RAISE_MARKER = Path(tempfile.gettempdir()) / f"flowrl_raise_marker_{os.getuid()}"


class NanReward(CartPoleEnv):
    """CartPole whose 50th step (counted over its episodes, so whatever the policy does)
    returns a NaN reward."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps = 0

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


class ArrayReward(CartPoleEnv):
    """CartPole whose reward is an array of one number (a reward computed with numpy)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, np.array([reward]), terminated, truncated, info


class OldGymStep(CartPoleEnv):
    """CartPole with the old gym API's step: obs, reward, done, info."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class RaisesWhenRendered(CartPoleEnv):
    """CartPole whose step() raises when it renders: only where evaluation records videos."""

    def step(self, action):
        if self.render_mode is not None:
            raise ValueError("the renderer is broken")
        return super().step(action)


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


class RaiseAfter(CartPoleEnv):
    """CartPole whose step() raises once the env has taken :attr:`LIMIT` steps (counted
    over its episodes), in every process: a simulator that crashes."""

    LIMIT = 3000

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.total_steps = 0

    def step(self, action):
        self.total_steps += 1
        if self.total_steps >= self.LIMIT and self._crashes():
            raise ValueError("the simulator crashed")
        return super().step(action)

    def _crashes(self) -> bool:
        return True


class RaiseOnce(RaiseAfter):
    """RaiseAfter in the first env to reach its limit after :data:`RAISE_MARKER` was
    removed; every other env (those of the worker that replaces it too) goes on."""

    def _crashes(self) -> bool:
        try:
            RAISE_MARKER.touch(exist_ok=False)
        except FileExistsError:
            return False
        return True


for _cls in (NanReward, NanObservation, HangOnce, RaiseAfter, RaiseOnce):
    gym.register(f"{_cls.__name__}-v0", entry_point=f"{__name__}:{_cls.__name__}")


def _raises_once(limit: int) -> type:
    """A mixin for any env: its step() raises once the env has taken ``limit`` steps, in
    the first env to reach it after :data:`RAISE_MARKER` was removed."""

    class RaisesOnce:
        def step(self, action):
            self.total_steps = getattr(self, "total_steps", 0) + 1
            if self.total_steps >= limit:
                try:
                    RAISE_MARKER.touch(exist_ok=False)
                except FileExistsError:
                    pass
                else:
                    raise ValueError("the simulator crashed")
            return super().step(action)

    return RaisesOnce


def _parallel_base() -> type:
    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    return IndependentCartPoles


def _game_base() -> type:
    from pettingzoo.classic.tictactoe.tictactoe import raw_env

    return raw_env


class CartPolesRaiseOnce(_raises_once(1000), _parallel_base()):
    """Two CartPoles (a Parallel env) whose step raises once."""


class TicTacToeRaiseOnce(_raises_once(300), _game_base()):
    """Tic-tac-toe (a turn-based AEC game) whose step raises once."""


class CartPolesWithAStranger(_parallel_base()):
    """Two CartPoles whose step rewards an agent that is not among its possible agents."""

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = super().step(actions)
        return obs, {**rewards, "stranger": 1.0}, terminated, truncated, infos


class CartPolesThatForget(_parallel_base()):
    """Two CartPoles whose step leaves an acting agent without its observation."""

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = super().step(actions)
        obs.pop("cartpole_1", None)
        return obs, rewards, terminated, truncated, infos


class HalfAllowed(MaskedChoice):
    """MaskedChoice whose mask is a float Box, one of its entries 0.5."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        spaces = dict(self.observation_space.spaces)
        spaces["action_mask"] = gym.spaces.Box(0.0, 1.0, spaces["action_mask"].shape, np.float32)
        self.observation_space = gym.spaces.Dict(spaces)

    def _draw(self):
        obs = super()._draw()
        mask = obs["action_mask"].astype(np.float32)
        mask[mask.argmax()] = 0.5
        return {**obs, "action_mask": mask}


class NothingAllowed(MaskedChoice):
    """MaskedChoice whose mask allows nothing from its fifth step on, mid-episode."""

    def _draw(self):
        obs = super()._draw()
        if getattr(self, "t", 0) >= 5:
            obs["action_mask"] = np.zeros_like(obs["action_mask"])
        return obs


class ShortMask(MaskedChoice):
    """MaskedChoice whose mask is one entry short from its fifth step on."""

    def _draw(self):
        obs = super()._draw()
        if getattr(self, "t", 0) >= 5:
            obs["action_mask"] = obs["action_mask"][:-1]
        return obs


class ShortMaskAtReset(MaskedChoice):
    """MaskedChoice whose mask is one entry short from its first observation, reset's."""

    def _draw(self):
        obs = super()._draw()
        obs["action_mask"] = obs["action_mask"][:-1]
        return obs


class OutOfBounds(MaskedChoice):
    """MaskedChoice whose target feature reads 2 (its space allows [0, 1])."""

    def _draw(self):
        obs = super()._draw()
        obs["observation"] = obs["observation"] * 2
        return obs


class TicTacToeShortMask(_game_base()):
    """Tic-tac-toe (a turn-based game) whose masks are one entry short from move 3 on."""

    def observe(self, agent):
        obs = super().observe(agent)
        if sum(1 for v in self.board.squares if v) >= 3:
            obs = {**obs, "action_mask": obs["action_mask"][:-1]}
        return obs
