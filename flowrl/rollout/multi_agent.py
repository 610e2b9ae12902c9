"""Multi-agent envs as lanes: copies of a PettingZoo ParallelEnv stepped together, each
agent of each copy a lane of the policy it is mapped to, so that every policy sees its
lanes as flowrl's single-agent vector envs look (time-major arrays, a ``valid`` mask,
NEXT_STEP resets) and its fragments go through the same postprocessing.

Only the Parallel API's duck type is used here (``possible_agents``, ``agents``,
``observation_space(agent)``, ``reset``, ``step``); PettingZoo itself is the
``multiagent`` extra.

Example:
    >>> from flowrl.rollout.toy_multi_agent import IndependentCartPoles
    >>> lanes = AgentLanes(lambda: IndependentCartPoles(agents=2), num_envs=3,
    ...                    policy_of=lambda agent: "shared")  # fmt: skip
    >>> obs = lanes.reset(seed=0)
    >>> obs["shared"].shape, lanes.active["shared"].all()
    ((6, 4), np.True_)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.config import ConfigError
from flowrl.learning.spaces import RecordLayout, is_composite

PolicyOf = Callable[[str], str]


class AgentLanes:
    """``num_envs`` copies of a Parallel-API env stepped together, their agents grouped
    into lanes by policy: lane ``i`` of policy ``p`` is one agent of one copy (copy by
    copy, agents in ``possible_agents`` order), and every observation, reward and flag
    comes as an array over a policy's lanes.

    Per lane, the semantics of flowrl's NEXT_STEP vector envs:

    - a lane is *active* at a step when its agent acts in it; the actions of inactive
      lanes are ignored, their rewards are 0 and their rows are not learned from;
    - an agent that finishes (terminated or truncated) leaves its copy: that step's flags
      say so, the lane's next observation is the agent's final one (a truncated episode
      bootstraps from it), and the lane stays inactive until its copy starts over;
    - a copy whose agents have all left spends its next step resetting (all its lanes
      inactive), as NEXT_STEP autoreset does; an agent that joins later is active from
      its first observation.

    Agents mapped to one policy must share their observation and action spaces.
    """

    def __init__(self, make_env: Callable[[], Any], *, num_envs: int, policy_of: PolicyOf) -> None:
        self.envs = [make_env() for _ in range(num_envs)]
        first = self.envs[0]
        self.lanes: dict[str, list[tuple[int, str]]] = {}
        for copy in range(num_envs):
            for agent in first.possible_agents:
                self.lanes.setdefault(policy_of(agent), []).append((copy, agent))
        self.policy_ids = list(self.lanes)
        self.observation_spaces: dict[str, gym.Space] = {}
        self.action_spaces: dict[str, gym.Space] = {}
        for pid, lanes in self.lanes.items():
            agents = list(dict.fromkeys(agent for _, agent in lanes))
            self.observation_spaces[pid] = _shared(first.observation_space, agents, pid, "obs")
            self.action_spaces[pid] = _shared(first.action_space, agents, pid, "action")
        #: each copy's lanes: (policy id, lane index, agent)
        self._of_copy: list[list[tuple[str, int, str]]] = [[] for _ in self.envs]
        for pid, lanes in self.lanes.items():
            for i, (copy, agent) in enumerate(lanes):
                self._of_copy[copy].append((pid, i, agent))
        self._layouts = {
            pid: RecordLayout(space) if is_composite(space) else None
            for pid, space in self.observation_spaces.items()
        }
        self.obs = {pid: self._empty_obs(pid) for pid in self.policy_ids}
        #: which lanes act at the next step
        self.active = {pid: np.zeros(len(lanes), bool) for pid, lanes in self.lanes.items()}
        self._resetting = [False] * num_envs

    def _empty_obs(self, pid: str) -> np.ndarray:
        n, layout = len(self.lanes[pid]), self._layouts[pid]
        if layout is not None:
            return layout.empty((n,))
        space = self.observation_spaces[pid]
        return np.zeros((n, *space.shape), space.dtype)

    def _observe(self, pid: str, lane: int, obs: Any) -> None:
        layout = self._layouts[pid]
        self.obs[pid][lane] = obs if layout is None else layout.pack_one(obs)[0]

    def reset(self, seed: int | None = None) -> dict[str, np.ndarray]:
        """Start every copy (copy ``i`` seeded ``seed + i``); each policy's observations."""
        for copy, env in enumerate(self.envs):
            self._start(copy, env.reset(seed=None if seed is None else seed + copy)[0])
        return {pid: obs.copy() for pid, obs in self.obs.items()}

    def _start(self, copy: int, observations: dict[str, Any]) -> None:
        self._resetting[copy] = False
        for pid, lane, agent in self._of_copy[copy]:
            self.active[pid][lane] = agent in observations
            if agent in observations:
                self._observe(pid, lane, observations[agent])

    def step(self, actions: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], ...]:
        """One step of every copy with each policy's actions (one per lane; inactive
        lanes' are ignored). Returns, per policy id: the next observations, the rewards,
        terminated and truncated flags of this step, and which lanes it was a real step
        for (``valid``, the rows to learn from)."""
        valid = {pid: active.copy() for pid, active in self.active.items()}
        rewards = {pid: np.zeros(len(v), np.float32) for pid, v in valid.items()}
        terminated = {pid: np.zeros(len(v), bool) for pid, v in valid.items()}
        truncated = {pid: np.zeros(len(v), bool) for pid, v in valid.items()}
        for copy, env in enumerate(self.envs):
            if self._resetting[copy]:  # this step only starts the copy's next episode
                self._start(copy, env.reset()[0])
                continue
            lanes = self._of_copy[copy]
            acting = {agent: actions[pid][i] for pid, i, agent in lanes if valid[pid][i]}
            obs, rew, term, trunc, _ = env.step(acting)
            for pid, i, agent in lanes:
                if agent in obs:
                    self._observe(pid, i, obs[agent])
                rewards[pid][i] = rew.get(agent, 0.0)
                terminated[pid][i] = bool(term.get(agent, False))
                truncated[pid][i] = bool(trunc.get(agent, False))
                self.active[pid][i] = agent in env.agents
            self._resetting[copy] = not env.agents
        obs = {pid: o.copy() for pid, o in self.obs.items()}
        return obs, rewards, terminated, truncated, valid

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _shared(space_of: Callable[[str], gym.Space], agents: list[str], pid: str, what: str) -> Any:
    """The one space the ``agents`` of policy ``pid`` share, or a ConfigError naming them."""
    spaces = [space_of(agent) for agent in agents]
    for agent, space in zip(agents[1:], spaces[1:], strict=True):
        if space != spaces[0]:
            raise ConfigError(
                f"policy {pid!r} acts for agents with different {what} spaces: "
                f"{agents[0]} has {spaces[0]}, {agent} has {space}; map them to different "
                "policies"
            )
    return spaces[0]
