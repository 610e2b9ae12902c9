"""A user's own envs, for the custom-env tests: a class, a factory and spaces flowrl's
policies do not take. Importable as ``custom_envs`` in the driver and in Ray workers (the
tests directory is on their path), so ``custom_envs:Corridor`` names an env anywhere.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right (action 1) from cell 0 to cell ``length - 1``: reward -0.1 a step, +1 at
    the goal; episodes end at the goal or after ``4 * length`` steps. Renders the corridor
    as a grey strip with the walker's cell white."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, length: int = 5, render_mode: str | None = None) -> None:
        self.length, self.render_mode = length, render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        return np.array([self.pos / (self.length - 1)], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.steps = 0, 0
        return self._obs(), {}

    def step(self, action):
        self.pos = max(0, min(self.length - 1, self.pos + (1 if action == 1 else -1)))
        self.steps += 1
        at_goal = self.pos == self.length - 1
        reward = 1.0 if at_goal else -0.1
        return self._obs(), reward, at_goal, self.steps >= 4 * self.length, {}

    def render(self) -> np.ndarray:
        frame = np.full((16, 16 * self.length, 3), 64, dtype=np.uint8)
        frame[:, 16 * self.pos : 16 * (self.pos + 1)] = 255
        return frame


class LargeFrames(Corridor):
    """The corridor seen in frames of ``height`` x ``width`` (PettingZoo's cooperative_pong
    gives 280x480), the walker's column lit."""

    def __init__(self, height: int = 280, width: int = 480) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)

    def _obs(self) -> np.ndarray:
        frame = np.zeros(self.observation_space.shape, np.uint8)
        frame[:, self.pos * frame.shape[1] // self.length] = 255
        return frame


def make_corridor(length: int = 5) -> gym.Env:
    """A factory, as users write them: a Corridor in a gymnasium wrapper."""
    return gym.wrappers.RecordEpisodeStatistics(Corridor(length))


def rllib_corridor(config: dict) -> gym.Env:
    """A creator in RLlib's style: env_config comes as one dict (RLlib's EnvContext)."""
    return Corridor(config.get("length", 5), render_mode=config.get("render_mode"))


class CoinCorridor(Corridor):
    """A Corridor whose info holds the coins picked up so far: one per step right."""

    def reset(self, *, seed=None, options=None):
        self.coins = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.coins += int(action == 1)
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"coins": self.coins}


class TextObservation(Corridor):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Dict({"note": gym.spaces.Text(5)})


class MultiDiscreteActions(Corridor):
    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.MultiDiscrete([[2, 2], [2, 2]])  # a 2-D nvec


class UnboundedActions(Corridor):
    """Box actions without bounds, which PPO's Gaussian takes and SAC cannot squash into."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def step(self, action):
        return super().step(int(np.asarray(action).reshape(-1)[0] > 0))


class MatchTargets(gym.Env):
    """Each step shows one target per sub-action (one-hot, concatenated); the reward is the
    share of sub-actions that hit theirs, so the best return is ``length`` (20). Actions
    are MultiDiscrete(``nvec``), or MultiBinary(``binary``) when it is set; with
    ``encoded`` the observation is the targets themselves, in the action's space."""

    def __init__(
        self,
        nvec: tuple[int, ...] = (3, 4),
        binary: int = 0,
        length: int = 20,
        encoded: bool = False,
    ):
        if binary:
            self.sizes = [2] * binary
            self.action_space = gym.spaces.MultiBinary(binary)
        else:
            self.sizes = list(nvec)
            self.action_space = gym.spaces.MultiDiscrete(nvec)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (sum(self.sizes),), np.float32)
        if encoded:
            self.observation_space = self.action_space
        self.length, self.encoded = length, encoded

    def _draw(self) -> np.ndarray:
        self.targets = np.array([self.np_random.integers(n) for n in self.sizes])
        if self.encoded:
            dtype = self.observation_space.dtype
            return self.targets.astype(dtype)
        return np.concatenate(
            [np.eye(n, dtype=np.float32)[t] for n, t in zip(self.sizes, self.targets, strict=True)]
        )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        hits = float(np.mean(np.asarray(action).reshape(-1) == self.targets))
        self.t += 1
        return self._draw(), hits, False, self.t >= self.length, {}


def not_an_env() -> str:
    return "a string"


class SlowCorridor(Corridor):
    """A Corridor whose every step takes ``delay_s`` (an expensive simulator)."""

    def __init__(self, length: int = 5, delay_s: float = 0.002, render_mode=None) -> None:
        super().__init__(length, render_mode)
        self.delay_s = delay_s

    def step(self, action):
        time.sleep(self.delay_s)
        return super().step(action)


class ChooseAndAim(gym.Env):
    """A Dict action: each step shows a target choice (one-hot) and a target amount; the
    action's ``choice`` earns 0.5 when it hits the target, and its ``amount`` up to 0.5 by
    how close it comes. The best return is ``length`` (20); random play returns about 8."""

    def __init__(self, length: int = 20) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Dict(
            {"choice": gym.spaces.Discrete(3), "amount": gym.spaces.Box(-1.0, 1.0, (1,))}
        )

    def _draw(self) -> np.ndarray:
        self.choice = int(self.np_random.integers(3))
        self.amount = float(self.np_random.uniform(-1, 1))
        return np.array([*np.eye(3)[self.choice], self.amount], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        self.t += 1
        hit = 0.5 * (int(action["choice"]) == self.choice)
        close = 0.5 * (
            1 - abs(float(np.asarray(action["amount"]).reshape(-1)[0]) - self.amount) / 2
        )
        return self._draw(), hit + close, False, self.t >= self.length, {}


class OffsetActions(gym.Env):
    """Actions numbered from other than 0 (gymnasium's ``start``): ``Discrete(3,
    start=-1)``, which earns 1 for the sign (-1, 0 or 1) the observation shows; with
    ``composite``, a Dict with a ``MultiDiscrete([2, 2], start=[1, 1])`` part beside it,
    which earns 1 for (2, 2) too. An action outside the space raises."""

    def __init__(self, composite: bool = False, length: int = 20) -> None:
        self.composite, self.length = composite, length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        sign = gym.spaces.Discrete(3, start=-1)
        gears = gym.spaces.MultiDiscrete([2, 2], start=[1, 1])
        self.action_space = gym.spaces.Dict({"sign": sign, "gears": gears}) if composite else sign

    def _draw(self) -> np.ndarray:
        self.sign = int(self.np_random.integers(-1, 2))
        return np.array([self.sign], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"{action!r} is not an action of {self.action_space}")
        sign = action["sign"] if self.composite else action
        reward = float(sign == self.sign)
        if self.composite:
            reward += float(np.all(action["gears"] == 2))
        self.t += 1
        return self._draw(), reward, False, self.t >= self.length, {}


class MaskedBox(Corridor):
    """An action mask beside Box actions, which no mask can mask."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Dict(
            {"pos": gym.spaces.Box(0, 5, (1,)), "action_mask": gym.spaces.MultiBinary(2)}
        )
        self.action_space = gym.spaces.Box(-1, 1, (2,))


def cartpole_vector(num_envs: int, autoreset: str = "NEXT_STEP", extra: int = 0):
    """A user's own vector env: CartPole's numpy implementation, made whole (``extra``
    envs more than asked, or another ``autoreset`` mode, to be refused)."""
    if autoreset != "NEXT_STEP":
        mode = gym.vector.AutoresetMode[autoreset]
        return gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1")] * num_envs, autoreset_mode=mode
        )
    return gym.make_vec(
        "CartPole-v1", num_envs=num_envs + extra, vectorization_mode="vector_entry_point"
    )


class ScriptedVectorEnv(gym.vector.VectorEnv):
    """A vector env that plays back given rewards and ends (``[T, N]`` arrays) and, when
    given, each step's infos; an observation is the number of steps taken. For the tests
    of episode bookkeeping, which need ends at known steps."""

    def __init__(self, rewards: np.ndarray, done: np.ndarray, infos: list | None = None) -> None:
        self.num_envs = rewards.shape[1]
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.rewards, self.done, self.infos, self.t = rewards, done, infos, 0

    def _obs(self) -> np.ndarray:
        return np.full((self.num_envs, 1), self.t, np.float32)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, actions):
        t, self.t = self.t, self.t + 1
        info = self.infos[t] if self.infos else {}
        return self._obs(), self.rewards[t], self.done[t], np.zeros(self.num_envs, bool), info


class PairOf:
    """Two agents in PettingZoo's Parallel API, each its own copy of a single-agent env
    (``make()``); an agent whose episode ends leaves while the other goes on."""

    metadata: ClassVar[dict[str, Any]] = {"name": "pair_of_v0"}

    def __init__(self, make: Any) -> None:
        self.possible_agents = ["a", "b"]
        self._envs = {agent: make() for agent in self.possible_agents}
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> gym.Space:
        return self._envs[agent].observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self._envs[agent].action_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.agents = list(self.possible_agents)
        seeds = [None, None] if seed is None else [seed, seed + 1]
        obs = {a: self._envs[a].reset(seed=s)[0] for a, s in zip(self.agents, seeds, strict=True)}
        return obs, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]):
        results = {a: self._envs[a].step(actions[a]) for a in self.agents}
        obs, rewards, terminated, truncated, infos = (
            {a: r[i] for a, r in results.items()} for i in range(5)
        )
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        pass


class MaskedChoices(PairOf):
    """``MaskedChoice`` for two agents (a Dict observation with an ``action_mask``); an
    agent that takes a forbidden action leaves while the other goes on."""

    metadata: ClassVar[dict[str, Any]] = {"name": "masked_choices_v0"}

    def __init__(self, length: int = 10) -> None:
        from flowrl.rollout.toy_envs import MaskedChoice

        super().__init__(lambda: MaskedChoice(length=length))


def pendulum_pair() -> PairOf:
    """Two pendulums, one per agent: a Parallel env with Box actions."""
    return PairOf(lambda: gym.make("Pendulum-v1"))


def float_tictactoe(**kwargs: Any) -> Any:
    """Tic-tac-toe whose board comes as float32 (PettingZoo's is int8), so that a turn-based
    game has an observation to normalise."""
    from pettingzoo.classic import tictactoe_v3
    from pettingzoo.utils import BaseWrapper

    class FloatBoard(BaseWrapper):
        def observation_space(self, agent: str) -> gym.Space:
            space = super().observation_space(agent)
            board = gym.spaces.Box(0.0, 1.0, space["observation"].shape, np.float32)
            return gym.spaces.Dict({"action_mask": space["action_mask"], "observation": board})

        def observe(self, agent: str) -> Any:
            obs = super().observe(agent)
            return {**obs, "observation": obs["observation"].astype(np.float32)}

    return FloatBoard(tictactoe_v3.env(**kwargs))
