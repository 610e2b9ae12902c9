"""APPO: Asynchronous PPO, IMPALA's dataflow with PPO's clipped surrogate (as in RLlib;
the surrogate is Schulman et al. 2017, https://arxiv.org/abs/1707.06347, on V-trace
advantages from Espeholt et al. 2018, https://arxiv.org/abs/1802.01561).

The plan is IMPALA's, with two updates after each trained batch. The loss takes a target
copy of the policy, refreshed every ``target_update_frequency`` trained batches, as PPO's
old policy: V-trace corrects from the workers' behaviour policy to it, and the
surrogate's ratio is the current policy over it, clipped; an adaptive KL penalty to it is
optional. The learner makes ``num_sgd_iter`` passes over each batch.

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("appo", env="CartPole-v1", num_workers=0)
    >>> algo.train()["env_steps_trained"] > 0
    True
    >>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from flowrl.algorithms.impala import (
    IMPALAConfig,
    IMPALALearner,
    IMPALAPolicy,
    enqueue_rollouts,
    learner_thread,
)
from flowrl.core.config import ClippedSurrogateConfig, param
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import ACTIONS
from flowrl.learning.losses import AdaptiveKL, clipped_surrogate, masked_mean
from flowrl.learning.policy import Policy
from flowrl.ops import Concurrently, Dequeue, StandardMetricsReporting, UpdateTargets
from flowrl.rollout.worker import WorkerSet
from flowrl.run.presets import ATARI, Preset
from flowrl.run.spec import AlgorithmSpec


@dataclass
class APPOConfig(IMPALAConfig, ClippedSurrogateConfig):
    """APPO settings; the defaults reach 450 on CartPole-v1 within 500k env steps.

    Examples:
        >>> APPOConfig().clip_param
        0.3
    """

    algo_name: ClassVar[str] = "appo"

    lr: float = 1e-3
    # PPO's minibatch epochs: a full-batch step a pass barely learned a game's self-play
    # (tic-tac-toe); these learn it, memory and CartPole in fewer env steps (defaults.md)
    train_batch_size: int = 1600
    num_sgd_iter: int = 4
    sgd_minibatch_size: int = 400
    grad_clip: float = 40.0  # IMPALA's is 10 (benchmarks/results/defaults.md)
    clip_param: float = 0.3  # around the target policy
    target_update_frequency: int = param(2, "trained batches between target copies", ge=1)


# Settings known to learn these env families, under the user's own values (flowrl.run.presets)
PRESETS = (
    Preset(
        ATARI,
        "RLlib's tuned pong-appo example: V-trace, no KL term, 50-step fragments, "
        "4000-row batches, lr 6e-4, 8 envs per worker",
        {
            "rollout_fragment_length": 50,
            "train_batch_size": 4000,
            "num_envs_per_worker": 8,
            "lr": 6e-4,
            "kl_coeff": 0.0,
            "num_sgd_iter": 2,  # two full-batch passes, as it was measured with
            "sgd_minibatch_size": 0,
        },
    ),
)


class APPOLearner(IMPALALearner):
    """The PPO-clip loss on V-trace advantages, around a target copy of the policy."""

    def __init__(self, policy: Policy, config: APPOConfig) -> None:
        super().__init__(policy, config)
        self.target = self.target_of(self.module)
        self.kl = self.adapted["kl"] = AdaptiveKL(coeff=config.kl_coeff, target=config.kl_target)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg, policy = self.config, self.policy
        dist, values = self.distribution(batch)
        logp = dist.log_prob(batch[ACTIONS])
        with torch.no_grad():
            old_inputs = self.forward(batch, module=self.target).dist_inputs
            old_logp = policy.dist_cls(old_inputs).log_prob(batch[ACTIONS])
        vs, advantages, mask = self.vtrace_targets(batch, values.detach(), old_logp)
        log_ratio = self.time_major(logp - old_logp)[:-1]
        loss, stats = clipped_surrogate(
            log_ratio,
            advantages,
            clip=cfg.clip_param,
            kl_coeff=self.kl.coeff,
            mean=lambda x: masked_mean(x, mask),
        )
        vf_loss, entropy = self.value_and_entropy_terms(dist, values, vs, mask)
        loss = loss + cfg.vf_loss_coeff * vf_loss - self.scheduled("entropy_coeff") * entropy
        stats.update(vf_loss=vf_loss, entropy=entropy)
        return loss, {k: v.detach() for k, v in stats.items()}


def execution_plan(workers: WorkerSet, config: APPOConfig) -> LocalIterator[dict[str, Any]]:
    """IMPALA's plan; after each trained batch, UpdateTargets (a copy every
    ``target_update_frequency`` batches), between two of the learner's updates (the learner
    adapts its KL weight after each batch)."""
    learner, thread = workers.learner, learner_thread(workers, config)
    period = config.target_update_frequency * config.train_batch_size  # env steps trained
    update_op = Dequeue(thread).for_each(
        UpdateTargets(thread.between_updates(learner.update_targets), period=period)
    )
    train_op = Concurrently(
        [enqueue_rollouts(workers, config, thread), update_op], mode="async", output_indexes=[1]
    )
    return StandardMetricsReporting(train_op, workers, config)


ALGORITHM = AlgorithmSpec(
    name="appo",
    summary="Asynchronous PPO: IMPALA's learner thread and V-trace, a clipped surrogate",
    config_cls=APPOConfig,
    policy_cls=IMPALAPolicy,
    learner_cls=APPOLearner,
    execution_plan=execution_plan,
    presets=PRESETS,
)
