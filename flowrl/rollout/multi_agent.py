"""Multi-agent envs as lanes: copies of a PettingZoo ParallelEnv stepped together, each
agent of each copy a lane of the policy it is mapped to, so that every policy sees its
lanes as flowrl's single-agent vector envs look (time-major arrays, a ``valid`` mask,
NEXT_STEP resets) and its fragments go through the same postprocessing.

Only the Parallel API's duck type is used here (``possible_agents``, ``agents``,
``observation_space(agent)``, ``reset``, ``step``); PettingZoo itself is the
``multiagent`` extra.

Examples:
    >>> from flowrl.rollout.toy_multi_agent import IndependentCartPoles
    >>> lanes = AgentLanes(lambda: IndependentCartPoles(agents=2), num_envs=3,
    ...                    policy_of=lambda agent: "shared")  # fmt: skip
    >>> obs = lanes.reset(seed=0)
    >>> obs["shared"].shape, lanes.active["shared"].all()
    ((6, 4), np.True_)
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.callbacks import Callbacks
from flowrl.core.config import ConfigError
from flowrl.learning.spaces import RecordLayout, is_composite
from flowrl.rollout.envs import (
    EnvError,
    call_creator,
    creator_arguments,
    makes_vector_envs,
    render_refused,
    resolve_env,
    step_env,
)
from flowrl.rollout.episodes import Episode, EpisodeHooks, write_video

#: agent id -> policy id; or (agent id, env copy), or (agent id, env copy, the env's
#: possible agents) -> policy id, to seat policies differently in different copies
PolicyOf = Callable[..., str]
LaneMapping = Callable[[str, int, list[str]], str]


def lane_mapping(policy_of: PolicyOf) -> LaneMapping:
    """``policy_of`` as a function of (agent, copy, agents), whichever it takes."""
    for args in (("agent", 0, []), ("agent", 0)):
        try:
            inspect.signature(policy_of).bind(*args)
        except TypeError:
            continue
        if len(args) == 3:
            return policy_of
        return lambda agent, copy, agents: policy_of(agent, copy)
    return lambda agent, copy, agents: policy_of(agent)


def self_play(agent: str, copy: int, agents: list[str]) -> str:
    """The ``self_play`` mapping: in even env copies the policy ``main`` plays every
    seat; in odd ones it plays one seat (the first, then the second, ... from copy to
    copy) against ``opponent``, a frozen snapshot (``flowrl.ops.SelfPlay``).

    Examples:
        >>> agents = ["player_1", "player_2"]
        >>> [self_play(a, copy, agents) for copy in (0, 1, 3) for a in agents]
        ['main', 'main', 'main', 'opponent', 'opponent', 'main']
    """
    if copy % 2 == 0:
        return "main"
    return "main" if agents.index(agent) == (copy // 2) % len(agents) else "opponent"


def policy_mapping(mapping: Mapping[str, str] | str, policy_ids: list[str] = ()) -> PolicyOf:
    """The agent -> policy id function of a config's ``policy_mapping``: ``shared`` (the
    one id of ``policy_ids`` when there is one, else ``"shared"``), ``independent`` (each
    agent its own id), ``self_play`` (``self_play``), a dict, or ``module:function``
    (of the agent, and optionally the env copy and the env's agents).

    Examples:
        >>> policy_mapping("independent")("player_1"), policy_mapping("shared")("player_1")
        ('player_1', 'shared')
    """
    if mapping == "shared":
        shared = policy_ids[0] if len(policy_ids) == 1 else "shared"
        return lambda agent: shared
    if mapping == "independent":
        return lambda agent: agent
    if mapping == "self_play":
        return self_play
    if isinstance(mapping, Mapping):
        table = dict(mapping)
        for agent, pid in table.items():
            _check_policy_id(pid, agent, policy_ids)

        def mapped(agent: str) -> str:
            if agent not in table:
                raise ConfigError(f"policy_mapping has no policy for agent {agent!r}: {table}")
            return table[agent]

        return mapped
    module_name, _, name = mapping.rpartition(":")
    try:
        function = getattr(importlib.import_module(module_name), name, None)
    except ImportError as e:
        raise ConfigError(f"cannot import {module_name} for policy_mapping: {e}") from None
    if not callable(function):
        raise ConfigError(f"policy_mapping {mapping} is not a function")

    @functools.wraps(function)  # its signature too: lane_mapping reads how it is called
    def checked(agent: str, *more: Any) -> str:
        pid = function(agent, *more)
        _check_policy_id(pid, agent, policy_ids, f" (from {mapping})")
        return pid

    return checked


def _check_policy_id(pid: Any, agent: str, policy_ids: Sequence[str], source: str = "") -> None:
    """A ConfigError unless ``pid`` is a policy id (a str) the config's ``policies`` has
    (when it names any): a typo must not train a policy nobody configured."""
    if not isinstance(pid, str) or not pid:
        raise ConfigError(
            f"policy_mapping{source} gave agent {agent!r} the policy {pid!r}: "
            "a policy id is a non-empty str"
        )
    if policy_ids and pid not in policy_ids:
        raise ConfigError(
            f"policy_mapping{source} sends agent {agent!r} to policy {pid!r}, which policies "
            f"does not configure (it has {', '.join(sorted(policy_ids))})"
        )


_AGENT_ENVS: dict[str, str] = {}  # env and its config -> "parallel", "turns" or ""


def agent_env_maker(
    env: str, env_config: Mapping[str, Any] | None = None, *, render: str | None = None
) -> Callable[[], Any] | None:
    """A function making one copy of ``env`` when it is a multi-agent env, else None (a
    creator function is called once per process to tell). A Parallel-API env comes as it
    is, an AEC env that PettingZoo can make parallel through ``aec_to_parallel``, and a
    turn-based AEC game as it is, for ``TurnLanes`` (the
    function's ``turn_based`` says so). With ``render`` (a render mode: ``rgb_array``
    frames to record, ``human`` for a window), copies render so, or making one is a
    ConfigError."""
    target, kwargs = resolve_env(env), dict(env_config or {})
    if isinstance(target, gym.envs.registration.EnvSpec):
        return None
    key = f"{env} {json.dumps(kwargs, sort_keys=True, default=str)}"
    if key not in _AGENT_ENVS:
        kind = ""
        single = isinstance(target, type) and issubclass(target, gym.Env)
        if not (single or makes_vector_envs(target)):
            args, kw = creator_arguments(env, target, kwargs)
            probe = call_creator(env, target, args, kw, kwargs)
            if _is_agent_env(probe):
                kind = "turns" if is_turn_based(probe) else "parallel"
            if callable(getattr(probe, "close", None)):
                probe.close()
        _AGENT_ENVS[key] = kind
    if not _AGENT_ENVS[key]:
        return None

    args, kw = creator_arguments(env, target, kwargs, render_mode=render)  # when it takes it

    def make() -> Any:
        one = call_creator(env, target, args, kw, kwargs)
        if render and (got := getattr(one, "render_mode", None)) != render:
            raise render_refused(env, render, got)
        if hasattr(one, "agent_iter") and not make.turn_based:  # AEC, parallel inside
            from pettingzoo.utils.conversions import aec_to_parallel

            return aec_to_parallel(one)
        return one

    make.turn_based = _AGENT_ENVS[key] == "turns"
    return make


def _is_agent_env(env: Any) -> bool:
    return all(hasattr(env, name) for name in ("possible_agents", "observation_space", "step"))


def is_turn_based(env: Any) -> bool:
    """An AEC env that PettingZoo cannot step in parallel (a board game, say)."""
    aec = hasattr(env, "agent_iter")  # (agent_selection exists only once it is reset)
    return aec and not env.metadata.get("is_parallelizable", False)


class Lanes:
    """``num_envs`` copies of a multi-agent env whose agents are grouped into lanes by
    policy: lane ``i`` of policy ``p`` is one agent of one copy (copy by copy, agents in
    ``possible_agents`` order). Agents mapped to one policy must share their observation
    and action spaces. Keeps each lane's last observation (``obs``), each copy's running
    episode, and runs the episode hooks of ``callbacks``, an episode being a copy's."""

    def __init__(
        self,
        make_env: Callable[[], Any],
        *,
        num_envs: int,
        policy_of: PolicyOf,
        callbacks: Callbacks | None = None,
        worker_index: int = 0,
    ) -> None:
        policy_of = lane_mapping(policy_of)
        self.names_policies = True  # a fault names the policy whose lanes it is in
        self.envs = [make_env() for _ in range(num_envs)]
        self.num_envs = num_envs
        first = self.envs[0]
        agents = list(first.possible_agents)
        self.lanes: dict[str, list[tuple[int, str]]] = {}
        #: (copy, agent) -> (policy id, lane index)
        self.lane_of: dict[tuple[int, str], tuple[str, int]] = {}
        #: each copy's lanes: (policy id, lane index, agent)
        self._of_copy: list[list[tuple[str, int, str]]] = [[] for _ in self.envs]
        for copy in range(num_envs):
            for agent in agents:
                pid = policy_of(agent, copy, agents)
                lane = len(self.lanes.setdefault(pid, []))
                self.lane_of[copy, agent] = (pid, lane)
                self._of_copy[copy].append((pid, lane, agent))
                self.lanes[pid].append((copy, agent))
        self.policy_ids = list(self.lanes)
        self.observation_spaces: dict[str, gym.Space] = {}
        self.action_spaces: dict[str, gym.Space] = {}
        for pid, lanes in self.lanes.items():
            mapped = list(dict.fromkeys(agent for _, agent in lanes))
            self.observation_spaces[pid] = shared_space(first.observation_space, mapped, pid, "obs")
            self.action_spaces[pid] = shared_space(first.action_space, mapped, pid, "action")
        self._layouts = {
            pid: RecordLayout(space) if is_composite(space) else None
            for pid, space in self.observation_spaces.items()
        }
        self.obs = {pid: self._empty_obs(pid) for pid in self.policy_ids}
        #: which lanes act at the next step
        self.active = {pid: np.zeros(len(lanes), bool) for pid, lanes in self.lanes.items()}
        #: the copies whose next step starts their next episode
        self._resetting = [False] * num_envs
        #: each copy's running episode: its env steps and each agent's return
        self._length = [0] * num_envs
        self._returns: list[dict[str, float]] = [{} for _ in self.envs]
        #: episodes finished since the last ``take_episodes``, and the copy of each
        self.episodes: list[Episode] = []
        self.episode_copies: list[int] = []
        self._hooks = None
        if callbacks is not None:  # a copy's episode begins with its reset
            self._hooks = EpisodeHooks(callbacks, num_envs, worker_index, begun=False)

    def _empty_obs(self, pid: str) -> np.ndarray:
        n, layout = len(self.lanes[pid]), self._layouts[pid]
        if layout is not None:
            return layout.empty((n,))
        space = self.observation_spaces[pid]
        return np.zeros((n, *space.shape), space.dtype)

    def pack(self, pid: str, obs: Any, agent: str = "") -> np.ndarray:
        """One agent's observation as policy ``pid``'s rows hold it (a record when composite);
        one that does not fit the space is the env's fault (an EnvError naming ``agent``)."""
        layout = self._layouts[pid]
        if layout is None:
            return np.asarray(obs)
        try:
            return layout.pack_one(obs)[0]
        except ValueError as e:
            misfit = ValueError(f"{e} (agent {agent})")
            raise EnvError(f"ValueError: {misfit}", -1) from misfit

    def _observe(self, pid: str, lane: int, obs: Any, agent: str) -> None:
        self.obs[pid][lane] = self.pack(pid, obs, agent)

    def _outcome(self) -> tuple[dict[str, np.ndarray], ...]:
        """Per policy, a step's rewards, terminated and truncated flags, all 0 so far."""
        rewards = {pid: np.zeros(len(v), np.float32) for pid, v in self.active.items()}
        terminated = {pid: np.zeros(len(v), bool) for pid, v in self.active.items()}
        return rewards, terminated, {pid: t.copy() for pid, t in terminated.items()}

    def _finish_episode(self, copy: int, infos: Any) -> None:
        seats = {agent: self.lane_of[copy, agent][0] for agent in self._returns[copy]}
        episode = agent_episode(self._returns[copy], self._length[copy], seats)
        if self._hooks is not None:
            episode = episode._replace(custom=self._hooks.end(copy, infos))
        self.episodes.append(episode)
        self.episode_copies.append(copy)
        self._returns[copy], self._length[copy] = {}, 0

    def take_episodes(self) -> list[Episode]:
        """The episodes finished since the last call."""
        episodes, self.episodes, self.episode_copies = self.episodes, [], []
        return episodes

    def close(self) -> None:
        for env in self.envs:
            env.close()


class AgentLanes(Lanes):
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

    def __init__(self, make_env: Callable[[], Any], **lanes: Any) -> None:
        super().__init__(make_env, **lanes)
        self._agents = [frozenset(agent for _, _, agent in lanes) for lanes in self._of_copy]

    def reset(self, seed: int | None = None) -> dict[str, np.ndarray]:
        """Start every copy (copy ``i`` seeded ``seed + i``); each policy's observations."""
        for copy, env in enumerate(self.envs):
            self._start(copy, env.reset(seed=None if seed is None else seed + copy)[0])
        return {pid: obs.copy() for pid, obs in self.obs.items()}

    def _start(self, copy: int, observations: dict[str, Any]) -> None:
        self._resetting[copy] = False
        if self._hooks is not None:
            self._hooks.start(copy)
        for pid, lane, agent in self._of_copy[copy]:
            self.active[pid][lane] = agent in observations
            if agent in observations:
                self._observe(pid, lane, observations[agent], agent)

    def step(self, actions: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], ...]:
        """One step of every copy with each policy's actions (one per lane; the lanes not
        ``active`` before the step are ignored, their rows not learned from). Returns, per
        policy id: the next observations, the rewards, terminated and truncated flags."""
        valid = self.active
        self.active = {pid: active.copy() for pid, active in valid.items()}  # the next step's
        rewards, terminated, truncated = self._outcome()
        for copy, env in enumerate(self.envs):
            if self._resetting[copy]:  # this step only starts the copy's next episode
                self._start(copy, env.reset()[0])
                continue
            lanes = self._of_copy[copy]
            acting = {
                agent: lane_action(actions[pid], i) for pid, i, agent in lanes if valid[pid][i]
            }
            obs, rew, term, trunc, infos = step_env(env, acting)
            check_agents(env, self._agents[copy], obs, rew)
            returns = self._returns[copy]
            for pid, i, agent in lanes:
                if agent in obs:
                    self._observe(pid, i, obs[agent], agent)
                if agent in rew:
                    rewards[pid][i] = rew[agent]
                    returns[agent] = returns.get(agent, 0.0) + float(rew[agent])
                terminated[pid][i] = bool(term.get(agent, False))
                truncated[pid][i] = bool(trunc.get(agent, False))
                self.active[pid][i] = agent in env.agents
            self._length[copy] += 1
            self._resetting[copy] = not env.agents
            if self._hooks is not None:  # the info of a step is each agent's
                self._hooks.step_one(copy, float(sum(rew.values())), infos)
            if not env.agents:
                self._finish_episode(copy, infos)
        obs = {pid: o.copy() for pid, o in self.obs.items()}
        return obs, rewards, terminated, truncated


def check_agents(env: Any, known: frozenset[str], obs: dict, rewards: dict) -> None:
    """A ConfigError naming the env and the agent when a step gives an observation or a
    reward to an agent not among the ``known`` possible agents (its reward would be
    dropped), or leaves an agent that still acts (in ``env.agents``) without an
    observation (its last one would be acted on again)."""
    stray = sorted((obs.keys() | rewards.keys()) - known)
    if stray:
        raise ConfigError(
            f"env {_env_name(env)} gave agent {stray[0]!r}, which is not among its possible_agents "
            f"({', '.join(sorted(known))}), an observation or a reward"
        )
    blind = [agent for agent in env.agents if agent not in obs]
    if blind:
        raise ConfigError(
            f"env {_env_name(env)} left agent {blind[0]!r} without an observation, though it still "
            "acts (it is in env.agents)"
        )


def _env_name(env: Any) -> str:
    return env.metadata.get("name", type(env).__name__)


def lane_action(actions: Any, i: int) -> Any:
    """Lane ``i``'s action of a policy's (a nest of arrays for Dict and Tuple actions)."""
    if isinstance(actions, Mapping):
        return {k: lane_action(v, i) for k, v in actions.items()}
    if isinstance(actions, tuple):
        return tuple(lane_action(v, i) for v in actions)
    return actions[i]


def shared_space(
    space_of: Callable[[str], gym.Space], agents: list[str], pid: str, what: str
) -> Any:
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


class EpisodeFrames:
    """Records the episodes ``Sampler.episodes`` runs on lanes of one copy that renders
    ``rgb_array``: called after every step with the episodes it finished, it writes each
    to ``video_dir`` as ``eval-episode-{i}.mp4`` (a reset step's frame starts the next)."""

    def __init__(self, env: Any, video_dir: str) -> None:
        self.env, self.video_dir, self.written = env, video_dir, 0
        self.frames = [env.render()]

    def __call__(self, finished: list) -> None:
        self.frames.append(self.env.render())
        for _ in finished:
            fps = self.env.metadata.get("render_fps", 30)
            write_video(self.frames, self.video_dir, self.written, fps)
            self.written += 1
            self.frames = []


def agent_episode(returns: dict[str, float], length: int, seats: Mapping[str, str]) -> Episode:
    """An ``Episode`` of each agent's return, its policy's being ``seats[agent]``."""
    by_policy: dict[str, list[float]] = {}
    for agent, value in returns.items():
        by_policy.setdefault(seats[agent], []).append(value)
    means = {pid: sum(v) / len(v) for pid, v in by_policy.items()}
    return Episode(sum(returns.values()), length, dict(returns), means)
