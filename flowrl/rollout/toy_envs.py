"""Small envs that each need one feature to be learned: memory, action masks, a Dict
observation. Tests, the notebooks and the benchmarks train on them; name one as
``flowrl.rollout.toy_envs:NAME`` (``--env`` on the command line).

Examples:
    >>> env = MaskedChoice()
    >>> obs, _ = env.reset(seed=0)
    >>> sorted(obs), int(obs["action_mask"].sum())
    (['action_mask', 'observation'], 3)
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class StatelessCartPole(CartPoleEnv):
    """CartPole-v1 with the velocities hidden: the observation is the cart's position and
    the pole's angle only (RLlib's StatelessCartPole), so a policy has to remember the
    last observations to balance the pole. An env of its own, not a wrapper, so it can be
    made again from its class alone (gymnasium's ``check_env`` does); it truncates at
    CartPole-v1's 500 steps."""

    max_episode_steps = 500

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        high = self.observation_space.high[[0, 2]]
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, info = super().reset(seed=seed, options=options)
        self._steps = 0
        return obs[[0, 2]], info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        self._steps += 1
        truncated = truncated or self._steps >= self.max_episode_steps
        return obs[[0, 2]], reward, terminated, truncated, info


class _Drawn(gym.Env):
    """An env that draws a fresh observation every step (``_draw``) and ends after
    ``self.length`` steps unless its ``step`` ends it sooner."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    length: int

    def _draw(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}


class MaskedChoice(_Drawn):
    """Each step shows a target action and allows ``valid`` of the ``n`` actions (the target
    among them). The target earns 1, another allowed action 0, and a forbidden one ends
    the episode with a reward of -1; the best return is ``length``.

    With ``masked`` (the default) the observation is a Dict of the target (one-hot,
    ``observation``) and the allowed actions (``action_mask``, the convention flowrl
    masks by); without it the allowed actions are plain features beside the target, which
    a policy sees but is not held to. ``invalid_actions`` counts the forbidden actions
    taken in this process.
    """

    #: forbidden actions taken by every MaskedChoice of this process
    invalid_actions: ClassVar[int] = 0

    def __init__(self, n: int = 6, valid: int = 3, length: int = 20, masked: bool = True) -> None:
        self.n, self.valid, self.length, self.masked = n, valid, length, masked
        self.action_space = gym.spaces.Discrete(n)
        target = gym.spaces.Box(0.0, 1.0, (n,), np.float32)
        if masked:
            mask = gym.spaces.Box(0, 1, (n,), np.int8)
            self.observation_space = gym.spaces.Dict({"observation": target, "action_mask": mask})
        else:
            self.observation_space = gym.spaces.Dict(
                {"observation": gym.spaces.Box(0.0, 1.0, (2 * n,), np.float32)}
            )

    def _draw(self) -> dict[str, np.ndarray]:
        self.target = int(self.np_random.integers(self.n))
        others = self.np_random.permutation([a for a in range(self.n) if a != self.target])
        self.allowed = np.zeros(self.n, np.int8)
        self.allowed[[self.target, *others[: self.valid - 1]]] = 1
        target = np.eye(self.n, dtype=np.float32)[self.target]
        if self.masked:
            return {"observation": target, "action_mask": self.allowed.copy()}
        return {"observation": np.concatenate([target, self.allowed.astype(np.float32)])}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        action = int(action)
        if not self.allowed[action]:
            type(self).invalid_actions += 1
            return self._draw(), -1.0, True, False, {}
        reward = 1.0 if action == self.target else 0.0
        return self._draw(), reward, False, self.t >= self.length, {}


class MaskedRecall(_Drawn):
    """A cue (one of ``n``) is shown at the first step only; ``delay`` steps later the
    agent is asked to name it. Every step allows ``valid`` of the ``n`` actions
    (``action_mask``), the cue among them when asked. Naming the cue earns 1; another
    allowed action earns 0; a forbidden action ends the episode with -1. The best return
    is 1. A policy without memory guesses among the allowed actions when asked (1 /
    ``valid`` on average); one that acts unmasked also loses episodes to forbidden
    actions. Memory and masks together are needed for 1.

    Examples:
        >>> env = MaskedRecall()
        >>> obs, _ = env.reset(seed=0)
        >>> obs["observation"].shape, int(obs["action_mask"].sum())
        ((5,), 2)
    """

    def __init__(self, n: int = 4, valid: int = 2, delay: int = 4) -> None:
        self.n, self.valid, self.delay, self.length = n, valid, delay, delay + 1
        self.action_space = gym.spaces.Discrete(n)
        self.observation_space = gym.spaces.Dict({
            "observation": gym.spaces.Box(0.0, 1.0, (n + 1,), np.float32),  # cue, asked
            "action_mask": gym.spaces.Box(0, 1, (n,), np.int8),
        })  # fmt: skip

    def _draw(self) -> dict[str, np.ndarray]:
        if self.t == 0:
            self.cue = int(self.np_random.integers(self.n))
        asked = self.t == self.delay
        obs = np.zeros(self.n + 1, np.float32)
        if self.t == 0:
            obs[self.cue] = 1.0
        obs[-1] = float(asked)
        others = [a for a in range(self.n) if not (asked and a == self.cue)]
        picked = self.np_random.permutation(others)[: self.valid - asked]
        self.allowed = np.zeros(self.n, np.int8)
        self.allowed[[*picked, *([self.cue] if asked else [])]] = 1
        return {"observation": obs, "action_mask": self.allowed.copy()}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        action, asked = int(action), self.t == self.delay
        self.t += 1
        if not self.allowed[action]:
            return self._draw(), -1.0, True, False, {}
        if asked:
            return self._draw(), float(action == self.cue), True, False, {}
        return self._draw(), 0.0, False, False, {}


class ImageAndVector(_Drawn):
    """A Dict observation of a small image and a vector, both needed: the image (8x8, one
    channel, uint8) lights one column, the vector holds a sign; action 1 is right when the
    lit column is in the right half and the sign is positive, or neither; action 0
    otherwise. Each right action earns 1 over ``length`` steps (a guess earns half)."""

    def __init__(self, length: int = 16) -> None:
        self.length = length
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (8, 8, 1), np.uint8),
                "vector": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            }
        )

    def _draw(self) -> dict[str, np.ndarray]:
        column = int(self.np_random.integers(8))
        sign = float(self.np_random.choice([-1.0, 1.0]))
        self.answer = int((column >= 4) == (sign > 0))
        image = np.zeros((8, 8, 1), np.uint8)
        image[:, column] = 255
        noise = float(self.np_random.uniform(-1, 1))
        return {"image": image, "vector": np.array([sign, noise], np.float32)}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        reward = float(int(action) == self.answer)
        return self._draw(), reward, False, self.t >= self.length, {}


def cartpole_vector(num_envs: int) -> gym.vector.VectorEnv:
    """CartPole-v1's numpy vector env as a vector env of your own would come: a creator
    taking ``num_envs`` (``--env flowrl.rollout.toy_envs:cartpole_vector``), which flowrl
    steps as it is (``benchmarks/sampling.py`` has a row for it)."""
    return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")


class SleepyVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` envs stepped at once by sleeping ``step_s`` seconds: an env bound by
    I/O (a simulator behind a socket, say), which costs its worker almost no CPU, so a
    2-core machine can host hundreds of workers (``benchmarks/scaling.py`` measures the
    driver with it). Observations are 4 random floats, every step earns 1 and episodes
    last ``length`` steps; ``env_config={"step_s": 0.05}`` sets the sleep.

    Examples:
        >>> env = SleepyVectorEnv(num_envs=2, step_s=0.0, length=2)
        >>> _ = env.reset(seed=0)
        >>> [env.step(np.zeros(2, np.int64))[3].tolist() for _ in range(3)]
        [[False, False], [True, True], [False, False]]
    """

    metadata: ClassVar[dict[str, Any]] = {
        "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP,
        "render_modes": [],
    }

    def __init__(self, num_envs: int, step_s: float = 0.02, length: int = 100) -> None:
        self.num_envs, self.step_s, self.length = num_envs, step_s, length
        self.single_observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self._rng = np.random.default_rng()
        self._t = np.zeros(num_envs, np.int64)
        self._resetting = np.zeros(num_envs, bool)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self._rng = np.random.default_rng(seed)
        self._t[:] = 0
        self._resetting[:] = False
        return self._draw(), {}

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        time.sleep(self.step_s)
        resetting = self._resetting
        self._t = np.where(resetting, 0, self._t + 1)
        truncated = self._t >= self.length
        self._resetting = truncated
        rewards = np.where(resetting, 0.0, 1.0).astype(np.float32)
        return self._draw(), rewards, np.zeros(self.num_envs, bool), truncated, {}

    def _draw(self) -> np.ndarray:
        return self._rng.uniform(-1, 1, (self.num_envs, 4)).astype(np.float32)
