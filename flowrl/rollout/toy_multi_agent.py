"""Small multi-agent envs in PettingZoo's Parallel API (the ``multiagent`` extra:
``pip install "flowrl-ray[multiagent]"``), for tests, notebooks and benchmarks.

Examples:
    >>> env = IndependentCartPoles(agents=2)
    >>> obs, infos = env.reset(seed=0)
    >>> sorted(obs), env.action_space("cartpole_0")
    (['cartpole_0', 'cartpole_1'], Discrete(2))
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv


class IndependentCartPoles(ParallelEnv):
    """``agents`` CartPole-v1 poles side by side, one per agent, each with its own
    observation, action and reward. An agent whose pole falls (or reaches 500 steps)
    leaves while the others go on; the episode ends when every agent has left. Each agent
    should reach the single-agent thresholds on its own env steps."""

    metadata: ClassVar[dict[str, Any]] = {"name": "independent_cartpoles_v0", "render_modes": []}

    def __init__(self, agents: int = 2) -> None:
        self.possible_agents = [f"cartpole_{i}" for i in range(agents)]
        self._poles = {a: gym.make("CartPole-v1") for a in self.possible_agents}
        self.agents: list[str] = []
        self.render_mode = None  # it does not render

    def observation_space(self, agent: str) -> gym.Space:
        return self._poles[agent].observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self._poles[agent].action_space

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self.agents = list(self.possible_agents)
        observations = {}
        for i, agent in enumerate(self.agents):
            obs, _ = self._poles[agent].reset(seed=None if seed is None else seed + i)
            observations[agent] = obs
        return observations, {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for agent in self.agents:
            result = self._poles[agent].step(actions[agent])
            obs[agent], rewards[agent], terminations[agent], truncations[agent], infos[agent] = (
                result
            )
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return obs, rewards, terminations, truncations, infos

    def close(self) -> None:
        for pole in self._poles.values():
            pole.close()


class RememberCues(ParallelEnv):
    """A memory task for several agents, each seeing only its own part: at its first step
    agent ``i`` sees a cue (one of ``cues``, one-hot), then ``delay + i`` blank steps, then
    a query flag; its answer to the query (an action) earns 1 when it names the cue. Only
    memory does better than chance (``1 / cues``): the cue is gone from the observation
    when the answer is due. Agents finish at different steps, so an agent's lane waits,
    not acting, for its copy's next episode.

    Examples:
        >>> env = RememberCues(agents=2, delay=1)
        >>> obs, _ = env.reset(seed=0)
        >>> obs["agent_0"].shape, env.action_space("agent_0")
        ((3,), Discrete(2))
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "remember_cues_v0", "render_modes": []}

    def __init__(self, agents: int = 2, delay: int = 3, cues: int = 2) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(agents)]
        self.delay, self.cues = delay, cues
        self.agents: list[str] = []
        self.render_mode = None  # it does not render
        self._rng = np.random.default_rng()
        self._space = gym.spaces.Box(0.0, 1.0, (cues + 1,), np.float32)  # cue one-hot, query

    def observation_space(self, agent: str) -> gym.Space:
        return self._space

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(self.cues)

    def _length(self, agent: str) -> int:  # steps until the query, the last one
        return self.delay + self.possible_agents.index(agent) + 1

    def _obs(self, agent: str) -> np.ndarray:
        obs = np.zeros(self.cues + 1, np.float32)
        if self._t == 0:
            obs[self._cue[agent]] = 1.0
        if self._t == self._length(agent):
            obs[-1] = 1.0
        return obs

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents, self._t = list(self.possible_agents), 0
        self._cue = {a: int(self._rng.integers(self.cues)) for a in self.agents}
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        answering = {a for a in self.agents if self._t == self._length(a)}
        rewards = {a: float(a in answering and int(actions[a]) == self._cue[a])
                   for a in self.agents}  # fmt: skip
        self._t += 1
        obs = {a: self._obs(a) for a in self.agents}
        terminations = {a: a in answering for a in self.agents}
        truncations = {a: False for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if a not in answering]
        return obs, rewards, terminations, truncations, infos
