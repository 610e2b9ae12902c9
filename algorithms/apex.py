"""Ape-X: distributed prioritized experience replay (Horgan et al. 2018,
https://arxiv.org/abs/1803.00933), with DQN's policy and loss.

Many rollout workers, each exploring with its own epsilon, feed prioritized replay shards
held by Ray actors; a learner thread trains on batches replayed from the shards while
sampling goes on. Workers compute the TD errors of the transitions they send, so new rows
enter the shards with real priorities. A worker gets the learner's weights again once it
has sampled ``max_weight_sync_delay`` env steps with the ones it has.

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("apex", env="CartPole-v1", num_workers=0, replay_shards=0)
    >>> algo.train()["env_steps_sampled"] > 0
    True
    >>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from flowrl.algorithms.dqn import DQNConfig, DQNLearner, DQNPolicy
from flowrl.core.config import param
from flowrl.core.iter import LocalIterator
from flowrl.ops import (
    BroadcastWeights,
    Concurrently,
    Dequeue,
    Enqueue,
    LearnerThread,
    ParallelRollouts,
    Replay,
    SamplingLead,
    StandardMetricsReporting,
    StoreToReplayBuffer,
    TrainingIntensity,
    UpdatePriorities,
    UpdateTargets,
)
from flowrl.ops.rollouts import replies_fit_channels
from flowrl.replay import make_replay
from flowrl.rollout.worker import WorkerSet
from flowrl.run.presets import ATARI, Preset
from flowrl.run.spec import AlgorithmSpec


@dataclass
class ApexConfig(DQNConfig):
    """Ape-X settings: DQN's, with 2 workers, 2 prioritized replay shards, per-worker
    exploration and rewards scaled to unit returns; the defaults reach 450 on CartPole-v1
    within 400k env steps (measured: benchmarks/results/defaults.md).

    Examples:
        >>> ApexConfig().replay_shards
        2
    """

    algo_name: ClassVar[str] = "apex"
    # workers exploring at their own epsilons are the algorithm (defaults.md)
    auto_min_workers: ClassVar[int] = 2

    num_workers: int = 2
    # the learner thread and the plan share the driver's CPU with workers (defaults.md)
    learner_threads: int = 1
    # 512 rows a fragment in half the calls of 8 x 64 (defaults.md)
    num_envs_per_worker: int = 16
    rollout_fragment_length: int = 32
    replay_shards: int = 2
    prioritized_replay: bool = True
    # Q targets near unit scale: unscaled ones collapsed or stalled (defaults.md)
    normalize_rewards: bool = True
    # a learner that keeps up with the sampling at little more cost per step (defaults.md)
    train_batch_size: int = 128
    lr: float = 1.5e-3
    learning_starts: int = 2_000
    min_env_steps_per_iteration: int = 0
    min_time_s_per_iteration: float = 1.0
    # SamplingLead holds sampling to this pace whatever the machine's load (defaults.md)
    training_intensity: float = 3.0
    target_network_update_freq: int = 8_000
    worker_epsilon_alpha: float = param(
        7.0, "worker i of N ends at exploration_final_eps ** (1 + alpha * i / (N - 1))", ge=0
    )
    worker_side_prioritization: bool = param(
        True, "workers send initial priorities (their TD errors) with new transitions"
    )
    max_weight_sync_delay: int = param(400, "a worker's env steps between weight pushes", ge=0)
    max_sampling_lead: int = param(
        4096, "env steps sampling may run ahead of training_intensity's pace; 0: no limit", ge=0
    )
    replay_requests_in_flight: int = param(2, "sample requests per replay shard", ge=1)
    batches_per_replay: int = param(
        4, "train batches one replay request brings (fewer Ray calls per SGD step)", ge=1
    )
    learner_queue_size: int = param(4, "replayed batches waiting for the learner", ge=1)


# Settings known to learn these env families, under the user's own values (flowrl.run.presets)
PRESETS = (
    Preset(
        ATARI,
        "the Ape-X paper's Atari settings (Horgan et al. 2018): 3-step returns, batch 512, "
        "lr 6.25e-5 (0.00025 / 4), target copy every 2500 updates, grad clip 40; "
        "buffer 200k here (the paper's 2M frames need ~55 GB stored this way)",
        {
            "n_step": 3,
            "train_batch_size": 512,
            "batches_per_replay": 1,  # 512 rows of frames per request is plenty
            "lr": 6.25e-5,
            "grad_clip": 40.0,
            "target_network_update_freq": 2_500 * 512,
            "buffer_size": 200_000,
            "learning_starts": 50_000,
            "rollout_fragment_length": 50,
            "num_envs_per_worker": 4,
        },
    ),
)


class ApexPolicy(DQNPolicy):
    """DQN's policy with a final epsilon per worker (worker i of N at ``eps ** (1 + alpha *
    i / (N - 1))``, as in the paper; the local worker greedy) and the TD errors of what it
    samples as initial priorities (``EpsilonGreedy``)."""

    epsilon_per_worker = True
    priorities_on_workers = True


def execution_plan(workers: WorkerSet, config: ApexConfig) -> LocalIterator[dict[str, Any]]:
    """Concurrently(async): rollouts(async) -> store in the replay shards -> weights to the
    worker; replay -> Enqueue into the learner thread; Dequeue -> priorities -> targets. The
    Dequeue branch reports, the rollouts until it first does."""
    shards = workers.keep("replay", lambda: make_replay(config))
    learner = LearnerThread(workers.local_worker, inbox_size=config.learner_queue_size,
                            sgd_minibatch_size=config.train_batch_size)  # fmt: skip
    update_targets = learner.between_updates(workers.learner.update_targets)
    store_op = (
        ParallelRollouts(workers, mode="async")
        .gate(SamplingLead(config.training_intensity, lead=config.max_sampling_lead or None,
                           learning_starts=config.learning_starts))  # waits for a slow learner
        .for_each(StoreToReplayBuffer(shards, seed=config.seed))
        .for_each(BroadcastWeights(learner, min_env_steps=config.max_weight_sync_delay))
    )  # fmt: skip
    batch_size = config.train_batch_size * config.batches_per_replay
    replay_op = (
        Replay(shards, batch_size=batch_size, learning_starts=config.learning_starts,
               num_async=config.replay_requests_in_flight,
               channels=replies_fit_channels(workers, batch_size))
        .gate(TrainingIntensity(config.training_intensity))  # CPU left for sampling
        .gate(learner.has_room)  # no replay requests the learner cannot take yet
        .for_each(Enqueue(learner))
    )  # fmt: skip
    update_op = Dequeue(learner)
    if config.prioritized_replay:
        update_op = update_op.for_each(UpdatePriorities(shards))
    update_op = update_op.for_each(
        UpdateTargets(update_targets, period=config.target_network_update_freq)
    )
    train_op = Concurrently(
        [store_op, replay_op, update_op], mode="async", output_indexes=[2], warm_up_indexes=[0]
    )
    return StandardMetricsReporting(train_op, workers, config)


ALGORITHM = AlgorithmSpec(
    name="apex",
    summary="Ape-X: distributed prioritized replay, per-worker epsilons, a learner thread",
    config_cls=ApexConfig,
    policy_cls=ApexPolicy,
    learner_cls=DQNLearner,
    execution_plan=execution_plan,
    presets=PRESETS,
)
