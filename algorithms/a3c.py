"""A3C: Asynchronous Advantage Actor-Critic (Mnih et al. 2016, https://arxiv.org/abs/1602.01783).

Every remote worker samples a fragment and computes a policy gradient on it; the learner
applies gradients as they arrive and sends new weights back only to the worker that sent
each one. Nobody waits for the slowest worker.

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("a3c", env="CartPole-v1", num_workers=0)
    >>> algo.train()["env_steps_trained"] > 0
    True
    >>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from flowrl.core.config import ActorCriticConfig
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import ACTIONS, ADVANTAGES, OBS, VALUE_TARGETS
from flowrl.learning.learner import Learner
from flowrl.learning.losses import valid_mean
from flowrl.learning.policy import ActorCriticPolicy
from flowrl.ops import ApplyGradients, AsyncGradients, StandardMetricsReporting
from flowrl.rollout.worker import WorkerSet
from flowrl.run.presets import ATARI, Preset
from flowrl.run.spec import AlgorithmSpec


@dataclass
class A3CConfig(ActorCriticConfig):
    """A3C settings; the defaults reach 150 on CartPole-v1 well within 200k env steps.

    Examples:
        >>> A3CConfig().entropy_coeff
        0.01
    """

    algo_name: ClassVar[str] = "a3c"
    default_stop_timesteps: ClassVar[int] = 2_000_000

    lr: float = 1e-3
    rollout_fragment_length: int = 16  # steps per env in each gradient's fragment
    fragments_per_call: int = 1  # a gradient per fragment, however many workers
    gae_lambda: float = 1.0
    entropy_coeff: float = 0.01
    grad_clip: float = 40.0
    min_time_s_per_iteration: float = 0.5


# Settings known to learn these env families, under the user's own values (flowrl.run.presets)
PRESETS = (
    Preset(
        ATARI,
        "RLlib's tuned pong-a3c example (after Mnih et al. 2016): 20-step fragments, "
        "lr 1e-4, entropy 0.01, grad clip 40",
        {
            "rollout_fragment_length": 20,
            "num_envs_per_worker": 1,
            "lr": 1e-4,
            "entropy_coeff": 0.01,
            "grad_clip": 40.0,
        },
    ),
)


class A3CLearner(Learner):
    """The advantage policy-gradient loss, a value loss and an entropy bonus."""

    loss_columns = (OBS, ACTIONS, ADVANTAGES, VALUE_TARGETS)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg, mean = self.config, valid_mean(batch)
        dist, values = self.distribution(batch)
        pi_loss = -mean(dist.log_prob(batch[ACTIONS]) * batch[ADVANTAGES])
        vf_loss = 0.5 * mean((values - batch[VALUE_TARGETS]).pow(2))
        entropy = mean(dist.entropy())
        loss = pi_loss + cfg.vf_loss_coeff * vf_loss - self.scheduled("entropy_coeff") * entropy
        stats = {"policy_loss": pi_loss, "vf_loss": vf_loss, "entropy": entropy}
        return loss, {k: v.detach() for k, v in stats.items()}


def execution_plan(workers: WorkerSet, config: A3CConfig) -> LocalIterator[dict[str, Any]]:
    """AsyncGradients -> ApplyGradients(update_all=False) -> report."""
    grads = AsyncGradients(workers)
    train_op = grads.for_each(ApplyGradients(workers, update_all=False))
    return StandardMetricsReporting(train_op, workers, config)


ALGORITHM = AlgorithmSpec(
    name="a3c",
    summary="Asynchronous Advantage Actor-Critic: gradients computed on workers, applied async",
    config_cls=A3CConfig,
    policy_cls=ActorCriticPolicy,
    workers_learn=True,
    learner_cls=A3CLearner,
    execution_plan=execution_plan,
    presets=PRESETS,
)
