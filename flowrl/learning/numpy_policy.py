"""NumpyPolicy: a policy that acts with numpy arrays alone, so the rollout worker that holds
it never imports torch.

A rollout worker with a torch policy holds torch (about 120 MB of private memory per
process) to run a forward pass that ``flowrl.learning.numpy_acting`` runs in numpy. Where
the driver's policy acts in numpy and post-processes as ``BasePolicy`` does (PPO, A3C's
acting, IMPALA, APPO with flowrl's MLP or LSTM actor-critic), ``NumpyPolicy.remote_of``
gives what a remote worker builds instead: the same acting plan on the weights it is sent,
the same log-probs, values and GAE, the same random stream (the worker's seed). DQN's and
Ape-X's MLP Q-network acts as ``NumpyQPolicy``: epsilon-greedy as ``EpsilonGreedy`` says,
drawn with the worker's numpy generator, and the same n-step rows and TD errors.

Examples:
    >>> from flowrl import Config, Policy
    >>> obs, act = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    >>> make = NumpyPolicy.remote_of(Policy(obs, act, Config()))
    >>> light = make(obs, act, Config(), worker_index=1)
    >>> light.set_weights(Policy(obs, act, Config()).get_weights())
    >>> light.act(np.zeros((3, 4), np.float32)).env_actions.shape
    (3,)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.config import Config
from flowrl.core.sample_batch import (
    ACTION_DIST_INPUTS,
    ACTIONS,
)
from flowrl.learning.acting import BasePolicy, Weights, worker_seed
from flowrl.learning.epsilon_greedy import EpsilonGreedy
from flowrl.learning.normalization import split_state
from flowrl.learning.numpy_acting import ActingPlan, NumpyActing, logp

#: what a policy class may not override for its remote workers to act in numpy: its
#: acting, values, log-probs and post-processing are then ``Policy``'s
SAME_AS_POLICY = (
    "act", "compute_actions", "compute_values", "initial_state", "sampled_logp",
    "postprocess", "add_action_logp", "env_actions", "action_array", "metrics",
    "set_env_steps_sampled", "get_state", "set_state",
)  # fmt: skip
#: and what an ``EpsilonGreedy`` one may not override: its epsilon, rows and TD errors
SAME_AS_Q_POLICY = (
    "act", "compute_actions", "initial_state", "epsilon", "final_epsilon", "postprocess",
    "q_values", "acting_extras", "td_errors", "env_actions", "action_array", "metrics",
    "set_env_steps_sampled", "get_state", "set_state",
)  # fmt: skip


class NumpyPolicy(BasePolicy):
    """A ``Policy``'s acting, values, log-probs and post-processing (``postprocessing``)
    on numpy copies of its weights, following an ``ActingPlan``."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Config,
        *,
        plan: ActingPlan,
        postprocessing: str,
        device: str = "cpu",
        worker_index: int = 0,
    ) -> None:
        super().__init__(observation_space, action_space, config, worker_index=worker_index)
        self.plan, self.postprocessing = plan, postprocessing
        #: the module's weights by state-dict name, as last sent (``set_weights``)
        self.weights: Weights = {}
        seed = [worker_seed(config, worker_index), worker_index]  # as a torch worker's
        # its weights change only by set_weights: laid out for the product once each
        self.acting = NumpyActing(plan, seed, lambda: self.weights, copy=True)

    @classmethod
    def remote_of(cls, policy: Any) -> Callable[..., NumpyPolicy] | None:
        """What a remote worker builds in place of ``policy`` (a picklable constructor
        that takes a policy class's arguments), or None where it needs torch: numpy acting
        turned off or not applying (``ActingPlan.of``), or a class of its own acting or
        post-processing. An ``EpsilonGreedy`` policy's is a ``NumpyQPolicy``."""
        from flowrl.learning.policy import Policy

        if isinstance(policy, EpsilonGreedy):
            return NumpyQPolicy.remote_of(policy)
        own = any(getattr(type(policy), n) is not getattr(Policy, n) for n in SAME_AS_POLICY)
        if own or not policy.config.numpy_acting or (plan := ActingPlan.of(policy)) is None:
            return None
        return functools.partial(cls, plan=plan, postprocessing=policy.postprocessing)

    @property
    def recurrent(self) -> bool:
        return self.acting.recurrent

    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self.acting.compute_actions(obs, explore=explore, state=state)

    def initial_state(self, n: int) -> np.ndarray | None:
        return np.zeros((n, 2, self.plan.cell_size), np.float32) if self.recurrent else None

    def compute_values(self, obs: np.ndarray, state: np.ndarray | None = None) -> np.ndarray:
        return self.acting.values(obs, state)

    def sampled_logp(self, columns: Mapping[str, np.ndarray]) -> np.ndarray | None:
        if ACTION_DIST_INPUTS not in columns:
            return None
        return logp(self.plan.discrete, columns[ACTION_DIST_INPUTS], columns[ACTIONS])

    def get_weights(self) -> Weights:
        return {**self.weights, **self.normalizer.get_state()}

    def set_weights(self, weights: Weights) -> None:
        module, normalizer = split_state(weights)
        self.weights = dict(module)
        self.acting.stale = True
        self.normalizer.set_state(normalizer)

    def weight_count(self) -> int:
        """How many weights the acting module has (``RolloutWorker.parameter_count``)."""
        return sum(int(np.size(w)) for w in self.weights.values())


class NumpyQPolicy(EpsilonGreedy, NumpyPolicy):
    """DQN's and Ape-X's acting on numpy copies of an MLP Q-network's weights: greedy in
    its Q-values, or a uniform action with ``EpsilonGreedy``'s epsilon, drawn with the
    worker's numpy generator; n-step rows, and their TD errors where Ape-X's workers
    prioritise them."""

    def __init__(
        self, *args: Any, epsilon_per_worker: bool, priorities_on_workers: bool, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.epsilon_per_worker = epsilon_per_worker  # as the torch policy's class says
        self.priorities_on_workers = priorities_on_workers

    @classmethod
    def remote_of(cls, policy: Any) -> Callable[..., NumpyQPolicy] | None:
        """What a remote worker builds in place of the ``EpsilonGreedy`` torch ``policy``,
        or None where it needs torch: numpy acting turned off, no MLP ``QNetwork``
        (``ActingPlan.of_q_network``; an image, a mask), or acting, epsilon, rows or TD
        errors of a class of your own (defined outside flowrl)."""
        kind = type(policy)
        own = any(not getattr(kind, n).__module__.startswith("flowrl.") for n in SAME_AS_Q_POLICY)
        if own or not policy.config.numpy_acting:
            return None
        if (plan := ActingPlan.of_q_network(policy)) is None:
            return None
        return functools.partial(cls, plan=plan, postprocessing=policy.postprocessing,
                                 epsilon_per_worker=kind.epsilon_per_worker,
                                 priorities_on_workers=kind.priorities_on_workers)  # fmt: skip

    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        q_values = self.acting.q_values(obs)
        greedy = q_values.argmax(-1)
        if not explore:
            return greedy, {}
        n, rng = len(greedy), self.acting.rng
        # (a third of the cost of rng.integers, a Python-level call, on a few lanes)
        random_actions = (rng.random(n) * int(self.action_space.n)).astype(np.int64)
        actions = np.where(rng.random(n) < self.epsilon(), random_actions, greedy)
        self.timesteps += n
        return actions, self.acting_extras(q_values)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        return self.acting.q_values(obs)
