"""Turn-based games (PettingZoo's AEC API: tic-tac-toe, connect four) as lanes of
policies: copies of the game played side by side, one move of every copy per step, each
agent of each copy a lane of the policy it is mapped to (``TurnLanes``).

In a turn-based game an agent's reward arrives while the others move: a loss is known
only after the opponent's winning move. So a lane's rows are its own turns
(``TurnRows``): a row is written at each step the lane is *present* in (it moves, or
records its final observation after its game), and what the steps after it bring the
agent (PettingZoo's cumulative reward, the game's end flags) is added to it until the
agent's next row. A finished game spends its next step resetting, each seat writing a
row of its final observation that is not learned from, as NEXT_STEP vector envs do (a
truncated game bootstraps from it).

A fragment of a policy is each of its lanes' rows, right-aligned in time (``[T, lanes]``,
``T`` the most any lane wrote; shorter lanes start with rows that are not valid), so every
lane's last row is the fragment's last step and bootstraps from ``last_obs``. A lane's
last row, still waiting for the other agents' moves, opens the next fragment.

Examples:
    >>> from pettingzoo.classic import tictactoe_v3
    >>> turns = TurnLanes(tictactoe_v3.env, num_envs=2, policy_of=lambda agent: "shared")
    >>> turns.observation_spaces["shared"]["action_mask"]
    Box(0, 1, (9,), int8)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowrl.core.sample_batch import OBS, RAW_OBS, REWARDS, TERMINATEDS, TRUNCATEDS
from flowrl.learning.spaces import ACTION_MASK
from flowrl.rollout.envs import step_env
from flowrl.rollout.multi_agent import Lanes, lane_action


class TurnLanes(Lanes):
    """``num_envs`` copies of an AEC game, each agent of each copy a lane of the policy
    ``policy_of(agent, copy)`` names, stepped by ``Sampler`` one move of every copy at a
    time: ``active`` lanes move, ``present`` ones write a row (the movers, and the seats
    of a game that ended, which reset). ``illegal_moves`` counts, by policy, the moves an
    action mask forbade."""

    in_turns = True  # a lane's rows are its own turns (``TurnRows``)

    def __init__(self, make_env: Callable[[], Any], **lanes: Any) -> None:
        super().__init__(make_env, **lanes)
        self.present = {pid: active.copy() for pid, active in self.active.items()}
        self._mover: list[tuple[str, int]] = [("", 0)] * self.num_envs
        self.illegal_moves = dict.fromkeys(self.policy_ids, 0)

    def reset(self, seed: int | None = None) -> dict[str, np.ndarray]:
        """Start every copy (copy ``i`` seeded ``seed + i``); each policy's observations."""
        outcome = self._outcome()
        for copy, env in enumerate(self.envs):
            env.reset(seed=None if seed is None else seed + copy)
            self._start(copy, outcome)
        return {pid: obs.copy() for pid, obs in self.obs.items()}

    def _start(self, copy: int, outcome: tuple[dict[str, np.ndarray], ...]) -> None:
        self._resetting[copy] = False
        if self._hooks is not None:
            self._hooks.start(copy)
        self._settle(copy, *outcome)

    def step(self, actions: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], ...]:
        """One move of every copy (a copy whose game ended resets instead); per policy,
        the lanes' observations and what the step brought each lane's last row."""
        self.active = {pid: np.zeros_like(a) for pid, a in self.active.items()}
        self.present = {pid: np.zeros_like(a) for pid, a in self.active.items()}
        outcome = self._outcome()
        for copy, env in enumerate(self.envs):
            if self._resetting[copy]:
                env.reset()
                self._start(copy, outcome)
                continue
            pid, lane = self._mover[copy]
            move = lane_action(actions[pid], lane)
            self._check_move(pid, lane, move)
            step_env(env, move)
            self._length[copy] += 1
            if self._hooks is not None:  # the info of a move is each agent's
                self._hooks.step_one(copy, float(sum(env.rewards.values())), dict(env.infos))
            self._settle(copy, *outcome)
        return ({pid: obs.copy() for pid, obs in self.obs.items()}, *outcome)

    def _check_move(self, pid: str, lane: int, move: Any) -> None:
        obs = self.obs[pid][lane]
        if obs.dtype.names and ACTION_MASK in obs.dtype.names and np.ndim(move) == 0:
            self.illegal_moves[pid] += not obs[ACTION_MASK].reshape(-1)[int(move)]

    def _settle(self, copy: int, rewards: dict, terminated: dict, truncated: dict) -> None:
        """Play copy ``copy`` up to its next move: each agent selected on the way is given
        what it earned since it moved, and one that finished is taken out; a finished
        game's seats are present at the next step, which resets it."""
        env, returns = self.envs[copy], self._returns[copy]
        while env.agents:
            agent = env.agent_selection
            obs, reward, term, trunc, _ = env.last()
            pid, lane = self.lane_of[copy, agent]
            self._observe(pid, lane, obs, agent)
            rewards[pid][lane] += reward
            returns[agent] = returns.get(agent, 0.0) + float(reward)
            terminated[pid][lane] |= term
            truncated[pid][lane] |= trunc
            if not (term or trunc):
                self._mover[copy] = (pid, lane)
                self.active[pid][lane] = self.present[pid][lane] = True
                return
            env.step(None)
        self._finish_episode(copy, dict(env.infos))
        self._resetting[copy] = True
        for pid, lane, _ in self._of_copy[copy]:
            self.present[pid][lane] = True


class TurnRows:
    """One policy's rows of a fragment of ``TurnLanes`` (see the module's docstring):
    ``add`` each step's row and outcome, ``finish`` for the right-aligned columns; a
    lane's last row is kept back for the next fragment's (``carried``)."""

    def __init__(self, lanes: int, steps: int, carried: dict[str, Any] | None) -> None:
        self.cols: dict[str, np.ndarray] = {}
        self.valid = np.zeros((steps + 1, lanes), bool)  # a carried row, then a row a step
        self.rows = np.zeros(lanes, np.int64)  # each lane's rows so far
        self.carried = carried  # the last fragment's: {"lanes": ..., column: rows}

    def _make(self, row: Sequence[tuple[str, Any]]) -> None:
        shape = self.valid.shape
        for k, v in row:
            self.cols[k] = np.zeros((*shape, *np.shape(v)[1:]), np.asarray(v).dtype)
        self.cols[REWARDS] = np.zeros(shape, np.float32)
        self.cols[TERMINATEDS], self.cols[TRUNCATEDS] = np.zeros((2, *shape), bool)
        if self.carried is not None:
            lanes = self.carried.pop("lanes")
            for k, v in self.carried.items():
                self.cols[k][0, lanes] = v
            self.valid[0, lanes], self.rows[lanes] = True, 1

    def add(self, row: Sequence[tuple[str, Any]], outcome: Sequence[np.ndarray],
            active: np.ndarray, present: np.ndarray) -> None:  # fmt: skip
        """A step's ``row`` (arrays over all lanes) for the ``present`` lanes (learned
        from where ``active``), then its outcome (rewards, terminated, truncated) added
        to each lane's last row."""
        if not self.cols:
            self._make(row)
        lanes = np.flatnonzero(present)
        at = self.rows[lanes]
        for k, v in row:
            self.cols[k][at, lanes] = v[lanes]
        self.valid[at, lanes] = active[lanes]
        self.rows[lanes] += 1
        seen = np.flatnonzero(self.rows)
        last = self.rows[seen] - 1
        rewards, terminated, truncated = outcome
        self.cols[REWARDS][last, seen] += rewards[seen]
        self.cols[TERMINATEDS][last, seen] |= terminated[seen]
        self.cols[TRUNCATEDS][last, seen] |= truncated[seen]

    def finish(self, obs: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """The columns, each lane's rows right-aligned, ``valid``, and the observations
        each lane's last row bootstraps from: its carried row's, else ``obs`` (the
        lanes' last)."""
        rows, n = self.rows.copy(), len(self.rows)
        lanes = np.arange(n)
        keep = np.flatnonzero(self.valid[np.maximum(rows - 1, 0), lanes] & (rows > 0))
        rows[keep] -= 1
        self.carried = {"lanes": keep, **{k: c[rows[keep], keep] for k, c in self.cols.items()}}
        last_obs = obs.copy()
        last_obs[keep] = self.carried.get(RAW_OBS, self.carried[OBS])
        length = max(1, int(rows.max()))
        lane = np.repeat(lanes, rows)  # each row kept: its lane, its row, its new row
        src = np.arange(len(lane)) - np.repeat(np.cumsum(rows) - rows, rows)
        dst = src + np.repeat(length - rows, rows)
        cols = {}
        for k, c in self.cols.items():
            cols[k] = np.zeros((length, *c.shape[1:]), c.dtype)
            cols[k][dst, lane] = c[src, lane]
        valid = np.zeros((length, n), bool)
        valid[dst, lane] = self.valid[src, lane]
        return cols, valid, last_obs
