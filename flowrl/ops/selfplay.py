"""Self-play for two-player games: a pool of frozen snapshots of the trained policy, the
opponent drawn from it, and win rates against a random player and the last snapshot
(``match``, which plays any two policies through the sampler's one loop).

Examples:
    >>> results = StandardMetricsReporting(train_op, workers, config)  # doctest: +SKIP
    >>> results = results.for_each(SelfPlay(workers, config, every=10))  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import contextlib
import copy
from typing import Any

import numpy as np

from flowrl.core.config import Config, ConfigError
from flowrl.core.context import PlanContext
from flowrl.core.iter import Operator
from flowrl.learning.acting import Acted
from flowrl.learning.spaces import ACTION_MASK
from flowrl.rollout.multi_agent import agent_env_maker, policy_mapping
from flowrl.rollout.sampler import Sampler
from flowrl.rollout.turns import TurnLanes
from flowrl.rollout.worker import WorkerSet


class RandomMoves:
    """A player that moves uniformly at random among each lane's legal moves (the
    ``action_mask`` of its observations); it acts as a policy does, for ``match``."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def initial_state(self, n: int) -> None:
        return None

    def act(self, obs: np.ndarray, *, explore: bool = True, state: Any = None) -> Acted:
        if ACTION_MASK not in (obs.dtype.names or ()):
            raise ConfigError("RandomMoves needs observations with an action_mask")
        legal = obs[ACTION_MASK].reshape(len(obs), -1) > 0
        scores = np.where(legal, self._rng.random(legal.shape), -1.0)
        return Acted(scores.argmax(axis=1), (), None)


def match(
    make_env: Any, player: Any, opponent: Any, games: int, *, seed: int = 0, copies: int = 8
) -> dict[str, float]:
    """``player`` against ``opponent`` (policies, greedy, or ``RandomMoves``) for ``games``
    games in each seat of a two-player turn-based game, ``copies`` at a time: its win,
    draw and loss rates over all of them, its rate of wins or draws in each seat
    (``win_or_draw_as_<agent>``), and its illegal moves.

    Examples:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> rates = match(tictactoe_v3.env, RandomMoves(1), RandomMoves(2), games=50)
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
    if games < 1:
        raise ConfigError(f"match needs at least one game a seat, got games={games}")
    outcomes, illegal, by_seat = [], 0, {}
    for seat, agent in enumerate(agents):
        other = agents[1 - seat]
        seats = policy_mapping({agent: "player", other: "opponent"})
        policies = {"player": player, "opponent": opponent}
        lanes = TurnLanes(make_env, num_envs=min(games, copies), policy_of=seats)
        with contextlib.closing(lanes):
            sampler = Sampler(lanes, policies, seed=seed + seat * games, where="match")
            episodes = sampler.episodes(games, explore=False)
        signs = np.sign([ep.agents[agent] - ep.agents[other] for ep in episodes])
        by_seat[f"win_or_draw_as_{agent}"] = float((signs >= 0).mean())
        illegal += lanes.illegal_moves["player"]
        outcomes += signs.tolist()
    outcomes = np.array(outcomes)
    return {
        "win": float((outcomes > 0).mean()),
        "draw": float((outcomes == 0).mean()),
        "loss": float((outcomes < 0).mean()),
        **by_seat,
        "illegal_moves": illegal,
    }


class SelfPlay(Operator):
    """Every ``every`` results: the weights of ``policy_id`` join a pool of its last
    ``pool_size`` snapshots; the frozen ``opponent_id`` policy (when the run has one, as
    the ``self_play`` mapping seats it) takes a snapshot drawn from the pool, on every
    worker; and the policy plays ``games`` greedy games in each seat against a uniformly
    random legal player and against the previous snapshot. The result gets
    ``selfplay/vs_random/...`` and ``selfplay/vs_snapshot/...`` (win, draw, loss, win or
    draw per seat, illegal moves). Checkpoints keep the pool.

    Examples:
        >>> plan = ppo.execution_plan(workers, config)  # doctest: +SKIP
        >>> plan.for_each(SelfPlay(workers, config, every=5))  # doctest: +SKIP
    """

    def __init__(
        self,
        workers: WorkerSet,
        config: Config,
        *,
        policy_id: str = "main",
        opponent_id: str = "opponent",
        every: int = 10,
        pool_size: int = 5,
        games: int = 100,
    ) -> None:
        self._workers = workers
        self._make_env = agent_env_maker(config.env, config.env_config)
        if self._make_env is None or not self._make_env.turn_based:
            raise ConfigError(f"SelfPlay plays turn-based two-player games, not {config.env}")
        self.policy_id, self.opponent_id = policy_id, opponent_id
        self.every, self.games = every, games
        self._pool: collections.deque[Any] = collections.deque(maxlen=pool_size)
        self._rng = np.random.default_rng(config.seed)
        self._results = 0

    def bind(self, context: PlanContext) -> None:
        super().bind(context)
        context.register_checkpointable("selfplay", self)

    def get_state(self) -> dict[str, Any]:
        return {"pool": list(self._pool), "results": self._results}

    def set_state(self, state: dict[str, Any]) -> None:
        self._pool.clear()
        self._pool.extend(state["pool"])
        self._results = state["results"]

    def __call__(self, result: dict[str, Any]) -> dict[str, Any]:
        self._results += 1
        if self._results % self.every:
            return result
        policies = self._workers.local_worker.policies
        policy = policies[self.policy_id]
        games = self.games
        rates = {"vs_random": match(self._make_env, policy, RandomMoves(self._results), games)}
        if self._pool:
            snapshot = copy.deepcopy(policy)
            snapshot.set_weights(self._pool[-1])
            rates["vs_snapshot"] = match(self._make_env, policy, snapshot, games)
        for against, values in rates.items():
            result.update({f"selfplay/{against}/{k}": v for k, v in values.items()})
        self._pool.append(policy.get_weights())
        if self.opponent_id in policies:
            drawn = self._pool[self._rng.integers(len(self._pool))]
            policies[self.opponent_id].set_weights(drawn)
            self._workers.sync_weights()
        result["selfplay/pool_size"] = len(self._pool)
        return result
