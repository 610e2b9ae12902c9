"""One sampler over lanes: the loop that steps every kind of env with a worker's policies,
for training (``Sampler.sample``: fragments of a fixed length) and for evaluation
(``Sampler.episodes``: an exact number of whole episodes, greedy or exploring).

An env is *lanes*: per policy id, arrays over the lanes that policy acts for. A gymnasium
vector env is the lanes of one policy (``VectorLanes``, one lane per env); a Parallel
multi-agent env gives a lane per agent and copy (``AgentLanes`` in multi_agent.py), a
turn-based game a lane per seat and copy, moving in turn (``TurnLanes`` in turns.py).
Lanes have ``policy_ids``, ``num_envs``, ``observation_spaces`` and ``action_spaces`` by
policy, ``active`` (which lanes act at the next step: a new dict of new arrays after every
step, never changed in place), and

- ``reset(seed)``: each policy's first observations;
- ``step(actions)``: each policy's next observations, rewards, terminated and truncated
  flags; a lane that was not active in the step gives a row that is not learned from;
- ``take_episodes()``: the episodes finished since the last call, and ``episode_copies``,
  the copy (env) each ran in.

Lanes with ``in_turns`` (a turn-based game's) write a lane's row only at the steps it is
``present`` in, add each step's outcome to the lane's last row, and align each lane's rows
in its fragments (``TurnRows``): a move's reward arrives as the others move.

The sampler owns what is the same for every kind: each policy acts for all its lanes in one
batched forward pass, its observations normalised (the raw ones of valid rows update the
statistics), a recurrent policy's state kept per lane (``LaneMemory``), each step's row
written into time-major columns, and each policy's fragment checked (non-finite values,
masks, bounds) as it is finished. The lanes own what differs: how an env steps and what
makes an episode (its hooks and records).

Examples:
    >>> from flowrl.core.config import Config
    >>> from flowrl.learning.multi import PolicyMap
    >>> from flowrl.learning.policy import Policy
    >>> from flowrl.rollout.envs import make_vector_env
    >>> lanes = VectorLanes(make_vector_env("CartPole-v1", num_envs=2, seed=0))
    >>> policy = Policy(lanes.observation_spaces[SINGLE], lanes.action_spaces[SINGLE], Config())
    >>> sampler = Sampler(lanes, PolicyMap({SINGLE: policy}), seed=0, where="CartPole-v1")
    >>> sampler.sample(8)[SINGLE].valid.shape
    (8, 2)
    >>> len(sampler.episodes(3, explore=False))
    3
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.callbacks import Callbacks
from flowrl.core.sample_batch import (
    ACTIONS,
    RAW_OBS,
    REWARDS,
    SINGLE,
    STATE_IN,
    STATE_STARTS,
    TERMINATEDS,
    TRUNCATEDS,
    ArrayPool,
    Fragment,
)
from flowrl.learning.acting import Acted, inference_mode
from flowrl.learning.multi import PolicyMap
from flowrl.rollout.envs import EPISODE_ENDS, EndlessEpisodes, EnvError, env_fault
from flowrl.rollout.episodes import Episode, EpisodeHooks
from flowrl.rollout.experiences import ExperienceWriter
from flowrl.rollout.fragments import finish_fragment, write_row
from flowrl.rollout.turns import TurnRows


class VectorLanes:
    """A gymnasium vector env (NEXT_STEP autoreset) as the lanes of one policy, lane ``i``
    being env ``i``: a step that only resets an env (the one after its episode ended) is not
    active. Keeps each env's running return and length (``count``: the sampler gives it a
    fragment's rewards and flags at once, and it counts with running sums along time
    rather than a Python step per env step), and runs the episode hooks of ``callbacks``
    with each env's info. An env whose infos carry ``EPISODE_ENDS`` (``LifeLossTerminals``:
    a lost life is terminal for learning) has its episodes counted from those ends
    alone: whole games, every step of them."""

    def __init__(
        self,
        env: gym.vector.VectorEnv,
        *,
        callbacks: Callbacks | None = None,
        worker_index: int = 0,
        policy_id: str = SINGLE,
    ) -> None:
        self.env, self.pid, n = env, policy_id, env.num_envs
        self.names_policies = False  # what the env gives goes to its one policy
        self.num_envs, self.policy_ids = n, [policy_id]
        self.observation_spaces = {policy_id: env.single_observation_space}
        self.action_spaces = {policy_id: env.single_action_space}
        self._hooks = None if callbacks is None else EpisodeHooks(callbacks, n, worker_index)
        self._return, self._length = np.zeros(n), np.zeros(n, np.int64)
        #: whether each env's last step ended its episode (its next step only resets it)
        self._done = np.zeros(n, bool)
        self._active: dict[str, np.ndarray] | None = None  # from _done, when asked
        self._ended: tuple[np.ndarray, np.ndarray] | None = None  # the last step's flags
        #: the ends of the last step ``count`` was given
        self._last_done = np.zeros(n, bool)
        #: each step's ``EPISODE_ENDS`` since ``count`` was last given steps (if the env
        #: gives them), the last step's, and the last ones ``count`` was given
        self._ends: list[np.ndarray] = []
        self._game_over: np.ndarray | None = None
        self._last_end = np.zeros(n, bool)
        self._episodes: list[Episode] = []
        self._copies: list[int] = []

    def reset(self, seed: int | None = None) -> dict[str, np.ndarray]:
        try:
            obs, _ = self.env.reset(seed=seed)
        except Exception as e:  # the env's fault, as in a step (a misshapen observation named)
            raise EnvError(env_fault(e, self.env), -1) from e
        self._ended, self._active, self._ends, self._game_over = None, None, [], None
        self._done[:], self._last_done[:], self._last_end[:] = False, False, False
        self._return[:], self._length[:] = 0.0, 0
        return {self.pid: obs}

    @property
    def active(self) -> dict[str, np.ndarray]:
        """Which envs act at the next step: those whose last step did not end an episode
        (worked out when asked: the sampler asks only when it needs it)."""
        if self._active is None:
            if self._ended is not None:
                self._done = np.logical_or(*self._ended)
                self._ended = None
            self._active = {self.pid: ~self._done}
        return self._active

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, np.ndarray], ...]:
        pid = self.pid
        if self._hooks is not None:  # a reset step (not valid) begins the env's next episode
            valid = self.active[pid] if self._game_over is None else ~self._game_over
        try:  # (step_env, inlined: this is the loop's hottest call)
            obs, rewards, terminated, truncated, infos = self.env.step(actions[pid])
        except Exception as e:
            raise EnvError(env_fault(e, self.env), -1) from e
        self._ended, self._active = (terminated, truncated), None
        ends = infos.get(EPISODE_ENDS) if infos else None
        if ends is not None:
            self._ends.append(ends)
            self._game_over = ends
        if self._hooks is not None:
            done = np.logical_or(terminated, truncated) if ends is None else ends
            self._hooks.step(rewards, done, valid, infos)
        return {pid: obs}, {pid: rewards}, {pid: terminated}, {pid: truncated}

    def count(
        self, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> np.ndarray:
        """Add ``[T, N]`` steps (the env's rewards and flags, as sampled since the last
        call) to each env's running episode, recording the episodes that ended (in the
        order they ended) with array operations alone; returns which steps were valid
        (a step after an episode's end only resets its env)."""
        done = terminated | truncated
        valid = np.empty_like(done)
        valid[0], valid[1:] = ~self._last_done, ~done[:-1]
        self._last_done = done[-1].copy()
        ends, counted = done, valid
        if self._ends:  # the episodes are whole games: every step up to the game's end
            ends, self._ends = np.stack(self._ends), []
            counted = np.empty_like(ends)
            counted[0], counted[1:] = ~self._last_end, ~ends[:-1]
            self._last_end = ends[-1].copy()
        returns = np.cumsum(rewards * counted, axis=0, dtype=np.float64)  # (int rewards too)
        lengths = np.cumsum(counted, axis=0)
        end_t, end_i = np.nonzero(ends & counted)  # in the order the episodes ended
        by_env = np.lexsort((end_t, end_i))  # env by env, in time within each
        t, i = end_t[by_env], end_i[by_env]
        first = np.ones(len(i), bool)  # an env's first end in these steps
        first[1:] = i[1:] != i[:-1]
        ep_return, ep_length = returns[t, i], lengths[t, i]
        # minus the sums at the env's previous end; plus, at its first, what went before
        ep_return[1:] -= np.where(first[1:], 0.0, returns[t[:-1], i[:-1]])
        ep_length[1:] -= np.where(first[1:], 0, lengths[t[:-1], i[:-1]])
        ep_return[first] += self._return[i[first]]
        ep_length[first] += self._length[i[first]]
        ended_return, ended_length = np.empty_like(ep_return), np.empty_like(ep_length)
        ended_return[by_env], ended_length[by_env] = ep_return, ep_length
        self._episodes += map(Episode, ended_return.tolist(), ended_length.tolist())
        self._copies += end_i.tolist()
        last = np.ones(len(i), bool)  # an env's last end: its running episode starts there
        last[:-1] = i[:-1] != i[1:]
        self._return += returns[-1]
        self._length += lengths[-1]
        self._return[i[last]] = returns[-1, i[last]] - returns[t[last], i[last]]
        self._length[i[last]] = lengths[-1, i[last]] - lengths[t[last], i[last]]
        return valid

    @property
    def episode_copies(self) -> list[int]:
        """The env of each episode ``take_episodes`` gives next."""
        return self._copies

    def take_episodes(self) -> list[Episode]:
        """The episodes counted since the last call, with what the hooks reported of each
        when there are callbacks."""
        episodes, self._episodes, self._copies = self._episodes, [], []
        if self._hooks is not None:
            custom = self._hooks.take()
            episodes = [ep._replace(custom=c) for ep, c in zip(episodes, custom, strict=True)]
        return episodes

    def close(self) -> None:
        """Close the env and let it go: a native env (ale-py's Atari vector env) is then
        freed at once, not in the interpreter's last collection, which the ``flowrl``
        command skips (``console_main``), where nanobind warned of it as leaked."""
        env, self.env = self.env, None
        if env is not None:
            env.close()


class LaneMemory:
    """A recurrent policy's state per lane: each row starts from the state the lane's
    last row left, fresh where that row was not valid (a reset step, an agent that did
    not act: the lane's next valid row begins an episode); its extras record the state it
    started from (``state_in``) and whether that was a fresh one (``state_starts``),
    where the learner's unroll takes the recorded state again. Lanes that write no row at
    a step (``present`` False: a turn-based game's waiting agents) keep their state.

    Examples:
        >>> memory = LaneMemory(policy, lanes=8)  # doctest: +SKIP
        >>> acted = memory.act(obs, valid)  # doctest: +SKIP
    """

    def __init__(self, policy: Any, lanes: int) -> None:
        self.policy = policy
        self.fresh = self.state = policy.initial_state(lanes)
        self.last_valid = np.ones(lanes, bool)

    def act(
        self, obs: Any, valid: np.ndarray, *, explore: bool = True, present: Any = None
    ) -> Acted:
        """``Policy.act`` from each lane's state; its row records that state and where it
        was fresh."""
        starts = ~self.last_valid
        if starts.any():
            self.state = np.where(self._rows(starts), self.fresh, self.state)
        state_in = self.state
        acted = self.policy.act(obs, explore=explore, state=state_in)
        if present is None:
            self.state, self.last_valid = acted.state, valid
        else:
            self.state = np.where(self._rows(present), acted.state, self.state)
            self.last_valid = np.where(present, valid, self.last_valid)
        row = (*acted.row, (STATE_IN, state_in), (STATE_STARTS, starts))
        return Acted(acted.env_actions, row, acted.state)

    def _rows(self, lanes: np.ndarray) -> np.ndarray:
        return lanes.reshape(-1, *[1] * (self.state.ndim - 1))


#: steps an evaluation takes without any episode ending before it gives up: longer than
#: any time limit in use (Atari's is 27,000), so only an env whose episodes never end
#: (no time limit, no terminal state) reaches it, where the evaluation waited forever
MAX_EPISODE_STEPS = 1_000_000
NO_END = (
    "no episode ended in {:,} steps: evaluation plays whole episodes, so give the env a "
    "time limit (gymnasium.wrappers.TimeLimit(env, max_episode_steps=N), or "
    "env_config.max_episode_steps=N for a registered id)"
)


class Sampler:
    """Steps ``lanes`` with ``policies`` (a policy per id of the lanes): fragments for
    training, whole episodes for evaluation; see the module's docstring."""

    def __init__(
        self,
        lanes: Any,
        policies: PolicyMap,
        *,
        seed: int | None,
        where: str,
        writer: ExperienceWriter | None = None,
    ) -> None:
        self.lanes, self.policies, self.where = lanes, policies, where
        #: where the fragments' steps are recorded (``record_experiences``), if anywhere
        self.writer = writer
        self.obs = lanes.reset(seed=seed)
        self.memory = {
            pid: LaneMemory(policy, len(self.obs[pid]))
            for pid, policy in policies.items()
            if policy.initial_state(1) is not None
        }
        self.pool = ArrayPool()  # fragment memory, reused once a fragment has been copied out
        #: a turn-based game's lanes: each policy's rows kept for its next fragment
        self.in_turns = getattr(lanes, "in_turns", False)
        self._carried: dict[str, Any] = {}
        #: a vector env's lanes count episodes from the steps' columns (``VectorLanes.count``)
        self._count = getattr(lanes, "count", None)
        #: per policy, looked up once: its memory (None: not recurrent)
        self._acting = [(pid, p, self.memory.get(pid)) for pid, p in policies.items()]

    def _act(self, explore: bool, active: dict[str, np.ndarray], present: Any = None):
        """Every policy's actions for all its lanes (``active``: which act; ``present``,
        in turn-based games: which write a row), and each policy's row (``Policy.act``)."""
        actions, rows = {}, {}
        for pid, policy, memory in self._acting:
            if memory is None:
                acted = policy.act(self.obs[pid], explore=explore)
            else:
                here = None if present is None else present[pid]
                acted = memory.act(self.obs[pid], active[pid], explore=explore, present=here)
            actions[pid], rows[pid] = acted.env_actions, acted.row
        return actions, rows

    def sample(self, steps: int) -> dict[str, Fragment]:
        """``steps`` steps of every lane, one fragment per policy (time-major, ``valid``
        False for the rows not to learn from)."""
        lanes, pool, policies = self.lanes, self.pool, self.policies
        cols: dict[str, dict[str, np.ndarray]] = {pid: {} for pid in policies}
        valid = {pid: np.empty((steps, len(o)), bool) for pid, o in self.obs.items()}
        turns = {}  # a turn-based game's rows, each lane's own turns
        if self.in_turns:
            turns = {pid: TurnRows(len(o), steps, self._carried.get(pid))
                     for pid, o in self.obs.items()}  # fmt: skip
        # lanes that count episodes from the fragment's columns give its validity after it
        per_step = self._count is None or bool(self.memory)
        with inference_mode():  # entered once per fragment, not once per step
            for t in range(steps):
                active = lanes.active if per_step else None  # replaced, not changed, by a step
                present = lanes.present if self.in_turns else None
                actions, rows = self._act(True, active, present)
                self.obs, rewards, terminated, truncated = lanes.step(actions)
                for pid, row in rows.items():
                    if present is not None:  # a turn's row, and what came after it
                        outcome = (rewards[pid], terminated[pid], truncated[pid])
                        turns[pid].add(row, outcome, active[pid], present[pid])
                        continue
                    row += ((REWARDS, rewards[pid]), (TERMINATEDS, terminated[pid]),
                            (TRUNCATEDS, truncated[pid]))  # fmt: skip
                    write_row(cols[pid], pool, t, steps, row, prefix=pid)
                    if self._count is None:
                        valid[pid][t] = active[pid]
        if self._count is not None:
            for pid, c in cols.items():
                valid[pid] = self._count(c[REWARDS], c[TERMINATEDS], c[TRUNCATEDS])
        return {pid: self._fragment(pid, cols[pid], valid[pid], turns.get(pid)) for pid in policies}

    def _fragment(self, pid: str, cols: dict, valid: np.ndarray, turns: Any) -> Fragment:
        last_obs, pool = self.obs[pid], self.pool
        if turns is not None:
            (cols, valid, last_obs), pool = turns.finish(last_obs), None
            self._carried[pid] = turns.carried
        if self.writer is not None:
            agents = [agent for _, agent in getattr(self.lanes, "lanes", {}).get(pid, [])]
            policy = self.policies[pid]
            logp = policy.sampled_logp(cols)
            taken = {**cols, ACTIONS: policy.action_array(cols[ACTIONS])}  # in the env's units
            self.writer.record(pid, taken, valid, last_obs, logp, agents or [""] * valid.shape[1])
        raw = cols.pop(RAW_OBS, None)
        return finish_fragment(
            self.policies[pid],
            cols,
            valid,
            last_obs,
            raw_obs=None if raw is None else raw[valid],
            pool=pool,
            where=f"{self.where} (policy {pid})" if self.lanes.names_policies else self.where,
            last_state=self.memory[pid].state if pid in self.memory else None,
        )

    def episodes(
        self, count: int, *, explore: bool, after_step: Callable[[list], None] | None = None
    ) -> list[Any]:
        """Exactly ``count`` episodes from the lanes' current start (greedy actions unless
        ``explore``): copy ``i`` runs episodes ``i, i + n, ...``, so the count is exact
        whatever the episodes' lengths. ``after_step(finished)`` is called after every step
        with the episodes that step counted."""
        n = self.lanes.num_envs
        quota = [len(range(i, count, n)) for i in range(n)]
        done: list[Any] = []
        stalled = 0  # steps since an episode of any copy last ended
        with inference_mode():
            while len(done) < count:
                stalled += 1
                if stalled > MAX_EPISODE_STEPS:
                    raise EndlessEpisodes(NO_END.format(MAX_EPISODE_STEPS), -1)
                present = self.lanes.present if self.in_turns else None
                actions, _ = self._act(explore, self.lanes.active, present)
                self.obs, rewards, terminated, truncated = self.lanes.step(actions)
                if self._count is not None:
                    for pid in rewards:
                        self._count(rewards[pid][None], terminated[pid][None], truncated[pid][None])
                copies = self.lanes.episode_copies[:]
                finished = []
                for episode, copy in zip(self.lanes.take_episodes(), copies, strict=True):
                    stalled = 0
                    if quota[copy] > 0:
                        quota[copy] -= 1
                        finished.append(episode)
                done += finished
                if after_step is not None:
                    after_step(finished)
        return done
