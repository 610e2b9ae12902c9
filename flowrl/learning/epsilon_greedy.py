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

from flowrl.core.sample_batch import Fragment, SampleBatch
from flowrl.core.schedules import scheduled
from flowrl.learning.acting import BasePolicy
from flowrl.learning.postprocessing import n_step_transitions
from flowrl.replay import PRIORITIES


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

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        cfg = self.config
        batch = n_step_transitions(fragment, n=cfg.n_step, gamma=cfg.gamma)
        if self.priorities_on_workers and cfg.worker_side_prioritization and cfg.prioritized_replay:
            batch[PRIORITIES] = self.td_errors(batch)
        return batch

    def td_errors(self, batch: SampleBatch) -> np.ndarray:
        """The absolute TD errors of ``batch``'s transitions under this copy's Q-values,
        which also give the bootstrap value (a worker holds no target network)."""
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:
        return {**super().get_state(), "timesteps": self.timesteps}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.timesteps = state["timesteps"]
