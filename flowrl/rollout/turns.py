"""Turn-based games (PettingZoo's AEC API: tic-tac-toe, connect four) as lanes of
policies: copies of the game played side by side, one move of every copy per step.

In a turn-based game an agent's reward arrives while the others move: a loss is known
only after the opponent's winning move. So each agent's rows are its own turns. A row
(its observation, its move and what the policy recorded) stays open until the agent is to
move again, or its game ends; then it takes the reward the agent earned since it moved
(PettingZoo's cumulative reward) and the game's end flags, and joins the agent's finished
rows. A game's end is followed by one row that is not learned from, holding the agent's
final observation, as NEXT_STEP resets are (a truncated game bootstraps from it).

A fragment of a policy is each of its lanes' finished rows, right-aligned in time
(``[T, lanes]``, ``T`` the most any lane finished; shorter lanes start with rows that are
not valid). Every lane's last row is then the fragment's last step, and bootstraps from
the observation of the lane's open row, as single-agent fragments do from ``last_obs``.
Open rows carry over to the next fragment.

Examples:
    >>> from pettingzoo.classic import tictactoe_v3
    >>> turns = TurnLanes(tictactoe_v3.env, num_envs=2, policy_of=lambda agent: "shared")
    >>> turns.observation_spaces["shared"]["action_mask"]
    Box(0, 1, (9,), int8)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from flowrl.core.config import ConfigError
from flowrl.core.sample_batch import (
    ACTIONS,
    OBS,
    REWARDS,
    TERMINATEDS,
    TRUNCATEDS,
    VF_PREDS,
    Fragment,
)
from flowrl.learning.multi import PolicyMap
from flowrl.learning.spaces import RecordLayout, is_composite
from flowrl.rollout.envs import step_env
from flowrl.rollout.episodes import Episode, write_video
from flowrl.rollout.fragments import finish_fragment
from flowrl.rollout.multi_agent import (
    Lanes,
    agent_episode,
    lane_action,
    lane_mapping,
)

Row = dict[str, Any]
Lane = tuple[str, int]  # (policy id, lane index)


class TurnLanes(Lanes):
    """``num_envs`` copies of an AEC game, each agent of each copy a lane of the policy
    ``policy_of(agent, copy)`` names. ``sample`` plays one move in every copy per
    step (a finished game starts over in place) and returns each policy's fragment;
    ``illegal_moves`` counts moves an action mask forbade."""

    def __init__(
        self, make_env: Callable[[], Any], *, num_envs: int, policy_of: Callable[..., str]
    ) -> None:
        super().__init__(make_env, num_envs=num_envs, policy_of=policy_of)
        self._finished: dict[Lane, list[Row]] = {lane: [] for lane in self.lane_of.values()}
        self._open: dict[Lane, Row] = {}
        self._ready: dict[int, tuple[str, int, np.ndarray]] = {}  # a copy's next mover
        self._returns: list[dict[str, float]] = [{} for _ in self.envs]
        self._moves = [0] * num_envs
        self.episodes: list[Episode] = []
        self.illegal_moves = 0

    def reset(self, seed: int | None = None) -> None:
        self._ready.clear()
        for copy, env in enumerate(self.envs):
            env.reset(seed=None if seed is None else seed + copy)

    def _next_turn(self, copy: int) -> tuple[str, int, np.ndarray]:
        """Settle copy ``copy`` up to its next move: close the rows of the agents that
        earned rewards or finished, take finished agents out, start a finished game over.
        Returns the mover's policy id, lane and observation."""
        env = self.envs[copy]
        while True:
            if not env.agents:
                self._finish_game(copy)
                env.reset()
                continue
            agent = env.agent_selection
            obs, reward, terminated, truncated, _ = env.last()
            pid, lane = self.lane_of[copy, agent]
            returns = self._returns[copy]
            returns[agent] = returns.get(agent, 0.0) + float(reward)
            row = self._open.pop((pid, lane), None)
            if row is not None:
                row.update({REWARDS: reward, TERMINATEDS: terminated, TRUNCATEDS: truncated})
                self._finished[pid, lane].append(row)
            if not (terminated or truncated):
                return pid, lane, self.pack(pid, obs, agent)
            if row is not None:  # the game's end: its final observation, not learned from
                self._finished[pid, lane].append({OBS: self.pack(pid, obs, agent), "_final": True})
            env.step(None)

    def _finish_game(self, copy: int) -> None:
        returns = self._returns[copy]
        seats = {agent: self.lane_of[copy, agent][0] for agent in returns}
        self.episodes.append(agent_episode(returns, self._moves[copy], seats))
        self._returns[copy], self._moves[copy] = {}, 0

    def take_episodes(self) -> list[Episode]:
        episodes, self.episodes = self.episodes, []
        return episodes

    def sample(self, policies: PolicyMap, steps: int, *, where: str) -> dict[str, Fragment]:
        """``steps`` moves of every copy; each policy's fragment of the rows finished."""
        with torch.inference_mode():
            for _ in range(steps):
                movers: dict[str, list[tuple[int, int, np.ndarray]]] = {}
                for copy in range(self.num_envs):
                    pid, lane, obs = self._ready.pop(copy, None) or self._next_turn(copy)
                    movers.setdefault(pid, []).append((copy, lane, obs))
                for pid, moves in movers.items():
                    self._move(policies[pid], pid, moves)
        for copy in range(self.num_envs):  # settled now: a game just won ends in this fragment
            self._ready[copy] = self._next_turn(copy)
        return {pid: self._fragment(pid, policies[pid], where) for pid in policies}

    def _move(self, policy: Any, pid: str, moves: list[tuple[int, int, np.ndarray]]) -> None:
        obs = np.stack([o for _, _, o in moves])
        actions, extras = policy.compute_actions(obs)
        env_actions = policy.env_actions(actions)
        masks = None  # moves the mask forbade are counted (Discrete actions)
        if isinstance(policy.action_space, gym.spaces.Discrete) and obs.dtype.names:
            masks = obs["action_mask"] if "action_mask" in obs.dtype.names else None
        for j, (copy, lane, _) in enumerate(moves):
            row = {OBS: obs[j], ACTIONS: actions[j], **{k: v[j] for k, v in extras.items()}}
            self._open[pid, lane] = row
            if masks is not None and not masks[j].reshape(-1)[int(actions[j])]:
                self.illegal_moves += 1
            step_env(self.envs[copy], lane_action(env_actions, j))
            self._moves[copy] += 1

    def _fragment(self, pid: str, policy: Any, where: str) -> Fragment:
        """Policy ``pid``'s finished rows, right-aligned, as a time-major fragment."""
        lanes = [self._finished[pid, i] for i in range(len(self.lanes[pid]))]
        length = max(1, *map(len, lanes))
        template = next((r for rows in lanes for r in rows if "_final" not in r), None)
        if template is None:  # no move finished: an empty fragment
            template = {OBS: self.pack(pid, self.observation_spaces[pid].sample())}
        cols = {
            k: np.zeros((length, len(lanes), *np.shape(v)), np.asarray(v).dtype)
            for k, v in {**template, REWARDS: 0.0, TERMINATEDS: False, TRUNCATEDS: False}.items()
        }
        cols[REWARDS] = cols[REWARDS].astype(np.float32)
        valid = np.zeros((length, len(lanes)), bool)
        last_obs = np.zeros_like(cols[OBS][0])
        finals = []
        for i, rows in enumerate(lanes):
            start = length - len(rows)
            for t, row in enumerate(rows, start):
                for k, v in row.items():
                    if k != "_final":
                        cols[k][t, i] = v
                valid[t, i] = "_final" not in row
                if "_final" in row:
                    finals.append((t, i))
            lane_open = self._open.get((pid, i))
            if lane_open is not None:
                last_obs[i] = lane_open[OBS]
            elif rows:
                last_obs[i] = rows[-1][OBS]
            rows.clear()
        if finals and VF_PREDS in cols:  # a truncated game bootstraps from its final row
            t, i = map(np.array, zip(*finals, strict=True))
            cols[VF_PREDS][t, i] = policy.compute_values(cols[OBS][t, i])
        return finish_fragment(policy, cols, valid, last_obs, raw_obs=None, pool=None, where=where)


class TurnSampler:
    """``TurnLanes`` played by a worker's policies (what ``Sampler`` is to other lanes)."""

    def __init__(self, lanes: TurnLanes, policies: PolicyMap, *, seed: int, where: str) -> None:
        self.lanes, self.policies, self.where = lanes, policies, where
        lanes.reset(seed=seed)

    def sample(self, steps: int) -> dict[str, Fragment]:
        return self.lanes.sample(self.policies, steps, where=self.where)


def check_turn_config(config: Any) -> None:
    """What turn-based games do not take yet, in one line."""
    if getattr(config, "use_lstm", False):
        raise ConfigError("use_lstm is not supported with turn-based (AEC) envs yet")
    if getattr(config, "normalize_observations", False):
        raise ConfigError("normalize_observations is not supported with turn-based (AEC) envs")


Player = Callable[[Any], Any]  # an agent's observation -> its move


def random_player(seed: int = 0) -> Player:
    """A player that moves uniformly at random among the legal moves (all of them when
    the observation has no ``action_mask``)."""
    rng = np.random.default_rng(seed)

    def move(obs: Any) -> int:
        mask = obs.get("action_mask") if isinstance(obs, dict) else None
        if mask is None:
            raise ConfigError("random_player needs observations with an action_mask")
        return int(rng.choice(np.flatnonzero(mask)))

    return move


def policy_player(policy: Any, *, explore: bool = False) -> Player:
    """A player moved by ``policy`` (greedy unless ``explore``)."""
    space = policy.observation_space
    layout = RecordLayout(space) if is_composite(space) else None

    def move(obs: Any) -> Any:
        batch = np.asarray(obs)[None] if layout is None else layout.pack_one(obs)
        actions, _ = policy.compute_actions(policy.normalizer.observations(batch), explore=explore)
        return lane_action(policy.env_actions(actions), 0)

    return move


def play_games(
    make_env: Callable[[], Any],
    players: dict[str, Player],
    games: int,
    *,
    seed: int = 0,
    video_dir: str | None = None,
) -> list[dict[str, Any]]:
    """``games`` games of a turn-based env, each agent moved by its player; each game's
    returns by agent, ``illegal`` moves (a mask forbade them) by agent, and its moves.
    With ``video_dir`` (``make_env`` rendering ``rgb_array`` frames), each game is written
    there as ``eval-episode-{i}.mp4``."""
    env, results = make_env(), []
    with torch.inference_mode():
        for game in range(games):
            env.reset(seed=seed + game)
            frames = [env.render()] if video_dir else None
            returns = dict.fromkeys(env.agents, 0.0)
            illegal, moves = dict.fromkeys(env.agents, 0), 0
            for agent in env.agent_iter():
                obs, reward, terminated, truncated, _ = env.last()
                returns[agent] += float(reward)
                if terminated or truncated:
                    env.step(None)
                    continue
                move = players[agent](obs)
                mask = obs.get("action_mask") if isinstance(obs, dict) else None
                if mask is not None and not mask[int(move)]:
                    illegal[agent] += 1
                env.step(move)
                moves += 1
                if frames is not None:
                    frames.append(env.render())
            if frames is not None:
                write_video(frames, video_dir, game, env.metadata.get("render_fps", 1))
            results.append({"returns": returns, "illegal": illegal, "moves": moves})
    env.close()
    return results


def match(
    make_env: Callable[[], Any], player: Player, opponent: Player, games: int, *, seed: int = 0
) -> dict[str, float]:
    """``player`` against ``opponent`` for ``games`` games in each seat of a two-player
    game: its win, draw and loss rates over all of them, its rate of wins or draws in
    each seat (``win_or_draw_as_<agent>``), and its illegal moves.

    Examples:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> rates = match(tictactoe_v3.env, random_player(1), random_player(2), games=50)
        >>> round(rates["win"] + rates["draw"] + rates["loss"], 6), rates["illegal_moves"]
        (1.0, 0)
        >>> rates["win_or_draw_as_player_1"] > rates["win_or_draw_as_player_2"]  # moves first
        True
    """
    env = make_env()
    agents = list(env.possible_agents)
    env.close()
    if len(agents) != 2:
        raise ConfigError(f"match needs a two-player game, got agents {agents}")
    outcomes, illegal, by_seat = [], 0, {}
    for seat, agent in enumerate(agents):
        other = agents[1 - seat]
        players = {agent: player, other: opponent}
        signs = []
        for game in play_games(make_env, players, games, seed=seed + seat * games):
            signs.append(np.sign(game["returns"][agent] - game["returns"][other]))
            illegal += game["illegal"][agent]
        by_seat[f"win_or_draw_as_{agent}"] = float((np.array(signs) >= 0).mean())
        outcomes += signs
    outcomes = np.array(outcomes)
    return {
        "win": float((outcomes > 0).mean()),
        "draw": float((outcomes == 0).mean()),
        "loss": float((outcomes < 0).mean()),
        **by_seat,
        "illegal_moves": illegal,
    }


def play_turns(
    policies: PolicyMap,
    make_env: Callable[[], Any],
    policy_of: Callable[..., str],
    games: int,
    *,
    explore: bool,
    seed: int,
    video_dir: str | None = None,
) -> list[Episode]:
    """``games`` games with each agent moved by the policy it maps to (in env copy 0),
    written to ``video_dir`` when given (``play_games``)."""
    env = make_env()
    agents = list(env.possible_agents)
    env.close()
    seats = {agent: lane_mapping(policy_of)(agent, 0, agents) for agent in agents}
    players = {agent: policy_player(policies[pid], explore=explore) for agent, pid in seats.items()}
    played = play_games(make_env, players, games, seed=seed, video_dir=video_dir)
    return [agent_episode(game["returns"], game["moves"], seats) for game in played]
