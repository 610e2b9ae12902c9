"""Self-play for two-player games: a pool of frozen snapshots of the trained policy, the
opponent drawn from it, and win rates against a random player and the last snapshot.

Examples:
    >>> results = StandardMetricsReporting(train_op, workers, config)  # doctest: +SKIP
    >>> results = results.for_each(SelfPlay(workers, config, every=10))  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import copy
from typing import Any

import numpy as np

from flowrl.core.config import Config
from flowrl.core.context import PlanContext
from flowrl.core.iter import Operator
from flowrl.rollout.multi_agent import agent_env_maker
from flowrl.rollout.turns import match, policy_player, random_player
from flowrl.rollout.worker import WorkerSet


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
            raise ValueError(f"SelfPlay plays turn-based two-player games, not {config.env}")
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
        player, games = policy_player(policy), self.games
        rates = {"vs_random": match(self._make_env, player, random_player(self._results), games)}
        if self._pool:
            snapshot = copy.deepcopy(policy)
            snapshot.set_weights(self._pool[-1])
            rates["vs_snapshot"] = match(self._make_env, player, policy_player(snapshot), games)
        for against, values in rates.items():
            result.update({f"selfplay/{against}/{k}": v for k, v in values.items()})
        self._pool.append(policy.get_weights())
        if self.opponent_id in policies:
            drawn = self._pool[self._rng.integers(len(self._pool))]
            policies[self.opponent_id].set_weights(drawn)
            self._workers.sync_weights()
        result["selfplay/pool_size"] = len(self._pool)
        return result
