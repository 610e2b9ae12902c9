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
