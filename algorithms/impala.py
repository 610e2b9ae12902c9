"""IMPALA: Importance Weighted Actor-Learner Architecture (Espeholt et al. 2018,
https://arxiv.org/abs/1802.01561).

Workers sample without waiting for learning: fragments arrive as they complete, are
concatenated into train batches and handed to a learner thread, which trains on them with
V-trace, an off-policy correction for the lag between the workers' policy and its own.
After each update the learner's weights go to the worker whose fragment arrives next.
Fragments travel as whole time-major sequences (``flowrl.learning.postprocessing.to_sequences``).

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("impala", env="CartPole-v1", num_workers=0)
    >>> algo.train()["env_steps_trained"] > 0
    True
    >>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from flowrl.core.config import ActorCriticConfig, param
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import (
    ACTIONS,
    LOGP,
    OBS,
    REWARDS,
    TERMINATEDS,
    TRUNCATEDS,
)
from flowrl.learning.learner import Learner
from flowrl.learning.losses import masked_mean
from flowrl.learning.policy import Policy
from flowrl.learning.postprocessing import VALID, vtrace
from flowrl.ops import (
    AggregatedRollouts,
    BroadcastWeights,
    ConcatBatches,
    Concurrently,
    Dequeue,
    Enqueue,
    LearnerThread,
    MixInReplay,
    ParallelRollouts,
    StandardMetricsReporting,
)
from flowrl.rollout.worker import WorkerSet
from flowrl.run.presets import ATARI, Preset
from flowrl.run.spec import AlgorithmSpec


@dataclass
class IMPALAConfig(ActorCriticConfig):
    """IMPALA settings; the defaults reach 450 on CartPole-v1 within 500k env steps.

    Examples:
        >>> IMPALAConfig(num_aggregation_workers=1).num_aggregation_workers
        1
    """

    algo_name: ClassVar[str] = "impala"
    default_stop_timesteps: ClassVar[int] = 2_000_000

    rollout_fragment_length: int = 50
    lr: float = 2e-3
    grad_clip: float = 10.0  # 40 let the policy collapse (defaults.md)
    gae_lambda: float = 1.0  # V-trace's lambda (c_t = lambda min(c-bar, rho_t))
    entropy_coeff: float = 0.01
    normalize_rewards: bool = True  # returns near unit scale (defaults.md)
    min_time_s_per_iteration: float = 1.0
    train_batch_size: int = param(1600, "env steps per learner batch", ge=1)
    # 2 passes beat 1 (benchmarks/results/defaults.md)
    num_sgd_iter: int = param(2, "passes of the learner over each batch", ge=1)
    sgd_minibatch_size: int = param(0, "rows per minibatch (whole sequences); 0: all", ge=0)
    vtrace_clip_rho_threshold: float = param(1.0, "V-trace rho-bar (importance weights)", gt=0)
    vtrace_clip_c_threshold: float = param(1.0, "V-trace c-bar (trace coefficients)", gt=0)
    learner_queue_size: int = param(
        4, "batches waiting for the learner thread at most (IMPALA in process: 1)", ge=1
    )
    broadcast_interval: int = param(1, "a worker's fragments between weight pushes to it", ge=1)
    replay_proportion: float = param(0.0, "replayed batches mixed in per new batch", ge=0)
    replay_buffer_num_slots: int = param(100, "batches kept for replay", ge=1)
    num_aggregation_workers: int = param(
        0, "actors that take the remote workers' fragments in for the plan (many workers)", ge=0
    )


# Settings known to learn these env families, under the user's own values (flowrl.run.presets)
PRESETS = (
    Preset(
        ATARI,
        "RLlib's tuned pong-impala example (after the IMPALA paper): 50-step fragments, "
        "500-row batches, lr 5e-4 (decayed there), entropy 0.01, grad clip 40, one pass",
        {
            "rollout_fragment_length": 50,
            "train_batch_size": 500,
            "num_envs_per_worker": 5,
            "lr": 5e-4,
            "entropy_coeff": 0.01,
            "vf_loss_coeff": 0.5,
            "grad_clip": 40.0,
            "num_sgd_iter": 1,
        },
    ),
)


class IMPALAPolicy(Policy):
    """The actor-critic; each fragment becomes env-major sequences of its steps and the
    bootstrap step after them."""

    postprocessing = "sequences"


class IMPALALearner(Learner):
    """The V-trace actor-critic loss on time-major sequences."""

    loss_columns = (OBS, ACTIONS, LOGP, REWARDS, TERMINATEDS, TRUNCATEDS, VALID)

    @property
    def sequence_length(self) -> int:
        return self.config.rollout_fragment_length + 1  # the fragment and its bootstrap step

    def time_major(self, x: torch.Tensor) -> torch.Tensor:
        """Env-major rows ``[B * (T + 1), ...]`` as ``[T + 1, B, ...]``."""
        return x.reshape(-1, self.sequence_length, *x.shape[1:]).transpose(0, 1)

    def vtrace_targets(
        self, batch: dict[str, torch.Tensor], values: torch.Tensor, target_logp: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """V-trace value targets and advantages ``[T, B]`` of the policy that gives
        ``target_logp``, and the mask of the steps to learn from."""
        cfg, tm = self.config, self.time_major
        with torch.no_grad():
            vs, advantages = vtrace(
                tm(target_logp - batch[LOGP])[:-1],
                tm(batch[REWARDS])[:-1],
                tm(values),
                tm(batch[TERMINATEDS])[:-1],
                tm(batch[TRUNCATEDS])[:-1],
                gamma=cfg.gamma,
                lam=cfg.gae_lambda,
                clip_rho=cfg.vtrace_clip_rho_threshold,
                clip_c=cfg.vtrace_clip_c_threshold,
            )
        return vs, advantages, tm(batch[VALID])[:-1].float()

    def value_and_entropy_terms(
        self, dist: Any, values: torch.Tensor, vs: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The value loss against ``vs`` and the mean entropy, over the masked steps."""
        vf_loss = 0.5 * masked_mean((self.time_major(values)[:-1] - vs).pow(2), mask)
        return vf_loss, masked_mean(self.time_major(dist.entropy())[:-1], mask)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg = self.config
        dist, values = self.distribution(batch)
        logp = dist.log_prob(batch[ACTIONS])
        vs, advantages, mask = self.vtrace_targets(batch, values.detach(), logp.detach())
        pi_loss = -masked_mean(self.time_major(logp)[:-1] * advantages, mask)
        vf_loss, entropy = self.value_and_entropy_terms(dist, values, vs, mask)
        loss = pi_loss + cfg.vf_loss_coeff * vf_loss - self.scheduled("entropy_coeff") * entropy
        stats = {"policy_loss": pi_loss, "vf_loss": vf_loss, "entropy": entropy}
        return loss, {k: v.detach() for k, v in stats.items()}


def learner_thread(
    workers: WorkerSet, config: IMPALAConfig, *, one_ahead: bool = False
) -> LearnerThread:
    """The thread that trains on the batches the plan enqueues (IMPALA's and APPO's);
    ``one_ahead``: its inbox takes one batch (see ``enqueue_rollouts``)."""
    return LearnerThread(
        workers.local_worker,
        inbox_size=1 if one_ahead else config.learner_queue_size,
        num_sgd_iter=config.num_sgd_iter,
        sgd_minibatch_size=config.sgd_minibatch_size,
    )


def enqueue_rollouts(
    workers: WorkerSet, config: IMPALAConfig, learner: LearnerThread, *, one_ahead: bool = False
) -> LocalIterator[Any]:
    """rollouts(async) -> BroadcastWeights -> [MixInReplay] -> ConcatBatches -> Enqueue;
    with aggregation workers, they gather and concatenate the fragments and pass the
    weights on (AggregatedRollouts). ``one_ahead``: the rollouts are pulled only while the
    learner's inbox has room, so the plan samples the next batch while the learner trains
    one, and no further ahead."""
    aggregated = config.num_aggregation_workers > 0 and bool(workers.remote_workers)
    if aggregated:  # one request per worker: the weights an aggregator forwards act sooner
        rollouts = AggregatedRollouts(
            workers,
            num_aggregators=config.num_aggregation_workers,
            min_batch_size=config.train_batch_size,
            num_async=1,
        )
    else:
        rollouts = ParallelRollouts(workers, mode="async")
    if one_ahead:
        rollouts = rollouts.gate(learner.has_room)
    rollouts = rollouts.for_each(
        BroadcastWeights(learner, broadcast_interval=config.broadcast_interval)
    )
    if config.replay_proportion > 0:
        replay = MixInReplay(
            capacity=config.replay_buffer_num_slots,
            replay_proportion=config.replay_proportion,
            seed=config.seed,
        )
        rollouts = rollouts.combine(replay)
    if not aggregated:  # aggregated batches come whole
        rollouts = rollouts.combine(ConcatBatches(config.train_batch_size))
    return rollouts.for_each(Enqueue(learner))


def execution_plan(workers: WorkerSet, config: IMPALAConfig) -> LocalIterator[dict[str, Any]]:
    """rollouts(async) -> BroadcastWeights -> [MixInReplay] -> ConcatBatches -> Enqueue into
    the learner thread; Dequeue -> report, the two branches side by side. In process (no
    remote workers) sampling shares the process with the learner and, unchecked, ran
    batches ahead of it, a lag IMPALA's update does not survive (APPO's clipped one
    does): there it samples one batch ahead at most."""
    one_ahead = not workers.remote_workers
    learner = learner_thread(workers, config, one_ahead=one_ahead)
    train_op = Concurrently(
        [enqueue_rollouts(workers, config, learner, one_ahead=one_ahead), Dequeue(learner)],
        mode="async",
        output_indexes=[1],
    )
    return StandardMetricsReporting(train_op, workers, config)


ALGORITHM = AlgorithmSpec(
    name="impala",
    summary="IMPALA: asynchronous sampling, a learner thread, V-trace off-policy correction",
    config_cls=IMPALAConfig,
    policy_cls=IMPALAPolicy,
    learner_cls=IMPALALearner,
    execution_plan=execution_plan,
    presets=PRESETS,
)
