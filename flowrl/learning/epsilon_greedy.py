"""Epsilon-greedy exploration over Q-values, whatever computes them: DQN's schedule of
epsilon, Ape-X's epsilon per worker, and the rows a Q-learner trains on (n-step
transitions, with the TD errors that prioritise them where the workers send them).

None of it needs torch: DQN's and Ape-X's torch policies and their numpy twin on remote
workers (``flowrl.learning.numpy_policy.NumpyQPolicy``) share it, so both explore alike.

Examples:
    >>> from flowrl.algorithms.apex import ApexConfig, ApexPolicy
    >>> import gymnasium as gym
    >>> obs, act = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    >>> config = ApexConfig(num_workers=2, exploration_final_eps=0.1, worker_epsilon_alpha=1)
    >>> [ApexPolicy(obs, act, config, worker_index=i).final_epsilon() for i in (1, 2)]
    [0.1, 0.010000000000000002]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowrl.core.sample_batch import ACTIONS, OBS, REWARDS, TERMINATEDS, Fragment, SampleBatch
from flowrl.core.schedules import scheduled
from flowrl.learning.acting import BasePolicy
from flowrl.learning.postprocessing import DISCOUNTS, NEXT_OBS, NEXT_VALUES, n_step_transitions
from flowrl.replay import PRIORITIES

#: the Q-values of each step's observation, as acting computed them (``sends_priorities``)
Q_VALUES = "q_values"


class EpsilonGreedy(BasePolicy):
    """A policy that acts epsilon-greedily on Q-values (``compute_actions``, by the
    subclass): epsilon decays linearly over ``exploration_timesteps`` (or follows
    ``exploration_eps``) as the run's env steps grow, and fragments become n-step
    transitions."""

    #: Ape-X's exploration: remote worker i of N ends at ``exploration_final_eps ** (1 +
    #: worker_epsilon_alpha * i / (N - 1))`` for i = 0..N-1, as in the paper, and the local
    #: worker acts greedily while remote ones sample
    epsilon_per_worker: bool = False
    #: Ape-X's: new rows carry their TD errors as priorities (``td_errors``), where the
    #: config asks for ``worker_side_prioritization`` and ``prioritized_replay``
    priorities_on_workers: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timesteps = 0  # env steps this copy acted for
        #: the run's env steps sampled when last heard (``set_env_steps_sampled``: the plan's
        #: counter, every iteration), and this copy's ``timesteps`` then
        self.heard = (0, 0)

    def epsilon(self) -> float:
        """``exploration_eps`` at the run's env steps, or by default a linear decay over
        ``exploration_timesteps`` down to ``final_epsilon``: the plan's counter as last
        heard, plus this copy's steps since times the copies sampling."""
        cfg = self.config
        if self.epsilon_per_worker and self.worker_index == 0 and cfg.num_workers > 0:
            return 0.0
        run, mine = self.heard
        steps = run + (self.timesteps - mine) * max(cfg.num_workers, 1)
        if cfg.exploration_eps != -1.0:
            return scheduled(cfg.exploration_eps, steps)
        progress = min(1.0, steps / cfg.exploration_timesteps)
        start, end = cfg.exploration_initial_eps, self.final_epsilon()
        return start + progress * (end - start)

    def final_epsilon(self) -> float:
        """Where the linear decay ends: ``exploration_final_eps``, or this worker's share
        of it (``epsilon_per_worker``)."""
        cfg = self.config
        if not self.epsilon_per_worker or cfg.num_workers == 0:  # one epsilon for all
            return cfg.exploration_final_eps
        i = self.worker_index - 1
        exponent = 1 + cfg.worker_epsilon_alpha * i / max(cfg.num_workers - 1, 1)
        return cfg.exploration_final_eps**exponent

    def set_env_steps_sampled(self, steps: int) -> None:
        self.heard = (steps, self.timesteps)

    def metrics(self) -> dict[str, float]:
        return {"epsilon": self.epsilon()}

    @property
    def sends_priorities(self) -> bool:
        """Whether this copy's rows carry their TD errors (``priorities_on_workers``, and
        the config asks for ``worker_side_prioritization`` and ``prioritized_replay``):
        then its acting records the Q-values it computed (``Q_VALUES``), which give the
        TD errors without running the network over the fragment again."""
        cfg = self.config
        return (
            self.priorities_on_workers and cfg.worker_side_prioritization and cfg.prioritized_replay
        )

    def acting_extras(self, q_values: np.ndarray) -> dict[str, np.ndarray]:
        """What ``compute_actions`` records beside the actions when it explores."""
        return {Q_VALUES: q_values} if self.sends_priorities else {}

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        cfg = self.config
        if not self.sends_priorities:
            return n_step_transitions(fragment, n=cfg.n_step, gamma=cfg.gamma)
        acted = fragment.columns.get(Q_VALUES)  # (none where a policy's acting kept none)
        bootstrap = None
        if acted is not None:  # the value of the observation after each step, as acted on
            bootstrap = acted.max(-1), self.q_values(fragment.last_obs).max(-1)
        batch = n_step_transitions(fragment, n=cfg.n_step, gamma=cfg.gamma, next_values=bootstrap)
        batch[PRIORITIES] = self.td_errors(batch)
        for column in (Q_VALUES, NEXT_VALUES):  # not for the learner: it has its own
            if column in batch:
                del batch[column]
        return batch

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """This copy's Q-values of ``obs``, ``[rows, actions]`` (a masked action's at
        ``MASKED``)."""
        raise NotImplementedError

    def td_errors(self, batch: SampleBatch) -> np.ndarray:
        """The absolute TD errors of ``batch``'s n-step transitions under this copy's
        Q-values, which also give the bootstrap value (a worker holds no target network):
        the Q-values its acting recorded (``Q_VALUES``, ``NEXT_VALUES``) where the rows
        carry them, else the network's on ``obs`` and ``next_obs``."""
        q_values = batch[Q_VALUES] if Q_VALUES in batch else self.q_values(batch[OBS])
        if NEXT_VALUES in batch:
            next_q = batch[NEXT_VALUES]
        else:
            next_q = self.q_values(batch[NEXT_OBS]).max(-1)
        q = np.take_along_axis(q_values, batch[ACTIONS].astype(np.int64)[:, None], 1)[:, 0]
        alive = 1.0 - batch[TERMINATEDS].astype(np.float32)
        return np.abs(q - (batch[REWARDS] + batch[DISCOUNTS] * alive * next_q))

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "timesteps": self.timesteps}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.timesteps = state["timesteps"]
