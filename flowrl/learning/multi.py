"""A run's policies by id: a ``PolicyMap`` of acting policies (what every rollout worker
holds; a single-agent run's has the one id ``SINGLE``) and ``Learners``, which trains each
trainable one on its own rows of a ``MultiAgentBatch``.

Weights, state and statistics are keyed by policy id, whether a run has one policy or
several, so no plan or operator asks how many there are. Statistics come back per policy
(``PolicyStats``) and reach results as ``policy/<id>/<name>``, or ``<name>`` for ``SINGLE``.

Examples:
    >>> import gymnasium as gym, numpy as np
    >>> from flowrl.algorithms.ppo import PPOConfig, PPOLearner, PPOPolicy
    >>> obs, act, config = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), PPOConfig()
    >>> policies = PolicyMap({pid: PPOPolicy(obs, act, config) for pid in ("a", "b")})
    >>> learner = Learners({pid: PPOLearner(p, config) for pid, p in policies.items()})
    >>> sorted(policies.get_weights()), learner.policy_ids
    (['a', 'b'], ['a', 'b'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flowrl.core.config import Config
from flowrl.core.sample_batch import SINGLE, MultiAgentBatch, SampleBatch, check_batch

if TYPE_CHECKING:  # a rollout worker that acts in numpy holds a PolicyMap without torch
    from flowrl.learning.acting import BasePolicy as Policy
    from flowrl.learning.learner import Learner

#: results of one policy are ``policy/<id>/<name>``
POLICY_PREFIX = "policy/"


@dataclass(frozen=True)
class PolicySpec:
    """One policy of a multi-agent run: the classes it acts and learns with, its config,
    and whether it trains (a fixed opponent does not: its weights change only when a plan
    sets them)."""

    policy_cls: type[Policy]
    learner_cls: type[Learner] | None
    config: Config
    trainable: bool = True


class PolicyStats(dict):
    """A learner's statistics by policy id (``{"a": {"loss": ...}, ...}``)."""

    def flat(self) -> dict[str, Any]:
        """One level, as results have them: ``policy/<id>/<name>``, and ``<name>`` for the
        one policy of a single-agent run.

        Examples:
            >>> PolicyStats(a={"loss": 0.5}, default={"loss": 0.25}).flat()
            {'policy/a/loss': 0.5, 'loss': 0.25}
        """
        return {policy_key(pid, k): v for pid, s in self.items() for k, v in s.items()}


def scalar_stats(stats: PolicyStats) -> dict[str, Any]:
    """The learner statistics that go into results, flat (``PolicyStats.flat``): per-row
    ones (a DQN's ``td_error``, for priorities) stay out.

    Examples:
        >>> scalar_stats(PolicyStats(default={"loss": 0.5, "td_error": np.zeros(3)}))
        {'loss': 0.5}
    """
    return {k: v for k, v in PolicyStats(stats).flat().items() if np.ndim(v) == 0}


def policy_key(policy_id: str, name: str) -> str:
    """Policy ``policy_id``'s result ``name``: ``policy/<id>/<name>``, or ``name`` alone for
    ``SINGLE``."""
    return name if policy_id == SINGLE else f"{POLICY_PREFIX}{policy_id}/{name}"


class PolicyMap(dict):
    """Acting policies by id, with the one-policy calls a worker makes of them: weights
    and state are dicts by id, metrics are ``policy/<id>/<name>``."""

    def get_weights(self) -> dict[str, Any]:
        return {pid: policy.get_weights() for pid, policy in self.items()}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        for pid, w in weights.items():
            self[pid].set_weights(w)

    def get_state(self) -> dict[str, Any]:
        return {pid: policy.get_state() for pid, policy in self.items()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        for pid, s in state.items():
            self[pid].set_state(s)

    def metrics(self) -> dict[str, float]:
        return PolicyStats({pid: p.metrics() for pid, p in self.items()}).flat()

    def postprocess(self, fragments: Mapping[str, Any], env_steps: int) -> MultiAgentBatch:
        """Each policy's fragment post-processed by its policy (GAE, n-step, sequences); a
        policy all of whose agents sat the fragment out has no rows."""
        parts = {pid: self[pid].postprocess(f) for pid, f in fragments.items() if f.valid.any()}
        return MultiAgentBatch(parts, env_steps)

    def set_env_steps_sampled(self, steps: int) -> None:
        for policy in self.values():
            policy.set_env_steps_sampled(steps)

    def take_unsent(self) -> dict[str, Any]:
        """Each policy's normalisation statistics added since the last call."""
        unsent = {pid: p.normalizer.take_unsent() for pid, p in self.items()}
        return {pid: u for pid, u in unsent.items() if u}

    def merge(self, unsent: Mapping[str, Any]) -> None:
        for pid, u in unsent.items():
            self[pid].normalizer.merge(u)


class Learners:
    """A run's learners by policy id, each trained on its own policy's rows.

    ``learn_on_batch`` takes a ``MultiAgentBatch`` and trains every policy of it that is
    trainable and has rows; statistics come back as ``PolicyStats``, gradients and state
    keyed by policy id.
    """

    def __init__(self, learners: Mapping[str, Learner]) -> None:
        self.learners = dict(learners)

    @property
    def policy_ids(self) -> list[str]:
        return list(self.learners)

    def __getitem__(self, policy_id: str) -> Learner:
        return self.learners[policy_id]

    @property
    def optimizers(self) -> dict[str, Any]:
        return {pid: learner.optimizers for pid, learner in self.learners.items()}

    def _parts(self, batch: MultiAgentBatch) -> dict[str, SampleBatch]:
        check_batch(batch, "learning")
        return {pid: b for pid, b in batch.policy_batches.items() if pid in self.learners and b}

    def learn_on_batch(self, batch: MultiAgentBatch, **kwargs: Any) -> PolicyStats:
        parts = self._parts(batch)
        return PolicyStats(
            {pid: self.learners[pid].learn_on_batch(b, **kwargs) for pid, b in parts.items()}
        )

    def compute_gradients(self, batch: MultiAgentBatch) -> tuple[dict[str, Any], PolicyStats]:
        out = {
            pid: self.learners[pid].compute_gradients(b) for pid, b in self._parts(batch).items()
        }
        return {pid: g for pid, (g, _) in out.items()}, PolicyStats(
            {pid: s for pid, (_, s) in out.items()}
        )

    def apply_gradients(self, grads: Mapping[str, list[np.ndarray]]) -> None:
        for pid, g in grads.items():
            self.learners[pid].apply_gradients(g)

    def set_env_steps(self, env_steps: float) -> None:
        for learner in self.learners.values():
            learner.set_env_steps(env_steps)

    def update_targets(self, tau: float = 1.0, *, policy_id: str | None = None) -> None:
        """Every learner's targets (``Learner.update_targets``), or ``policy_id``'s only."""
        for pid, learner in self.learners.items():
            if learner.targets and policy_id in (None, pid):
                learner.update_targets(tau)

    def check_finite_weights(self) -> None:
        for learner in self.learners.values():
            learner.check_finite_weights()

    def get_state(self) -> dict[str, Any]:
        return {pid: learner.get_state() for pid, learner in self.learners.items()}

    def set_state(self, state: Mapping[str, Any]) -> None:
        for pid, s in state.items():
            if pid in self.learners:
                self.learners[pid].set_state(s)
