"""Execution plans that several algorithms share, parametrised by what differs.

Examples:
    >>> print(replay_plan.__doc__.splitlines()[0])
    Concurrently(round_robin): rollouts -> store, and replay -> train -> priorities ->
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowrl.core.config import OfflineConfig
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import SampleBatch
from flowrl.ops import (
    Concurrently,
    ParallelRollouts,
    ReadExperiences,
    Replay,
    StandardMetricsReporting,
    StoreToReplayBuffer,
    TrainOneStep,
    UpdatePriorities,
    UpdateTargets,
)
from flowrl.replay import ReplayConfig, make_replay
from flowrl.rollout.experiences import spaces_of
from flowrl.rollout.worker import WorkerSet


def replay_plan(
    workers: WorkerSet, config: ReplayConfig, update_targets: UpdateTargets
) -> LocalIterator[dict[str, Any]]:
    """Concurrently(round_robin): rollouts -> store, and replay -> train -> priorities ->
    targets; the training branch reports, the rollouts until training starts (while the
    buffer fills to ``learning_starts``). ``update_targets`` is the algorithm's own (hard
    copies every so many steps, or soft updates after every SGD step).

    Examples:
        >>> from flowrl.algorithms.dqn import DQNConfig, DQNLearner, DQNPolicy
        >>> config = DQNConfig(learning_starts=100, min_env_steps_per_iteration=200)
        >>> workers = WorkerSet(policy_cls=DQNPolicy, learner_cls=DQNLearner, config=config)
        >>> update = UpdateTargets(workers.learner.update_targets, period=500)
        >>> plan = replay_plan(workers, config, update)
        >>> next(plan)["env_steps_trained"] > 0
        True
    """
    # kept: the buffer survives a plan rebuild
    buffer = workers.keep("replay", lambda: make_replay(config))
    store_op = ParallelRollouts(workers, mode="bulk_sync").for_each(
        StoreToReplayBuffer(buffer, seed=config.seed, checkpoint=config.store_buffer_in_checkpoints)
    )
    replay_op = Replay(
        buffer, batch_size=config.train_batch_size, learning_starts=config.learning_starts
    ).for_each(TrainOneStep(workers))
    if config.prioritized_replay:
        replay_op = replay_op.for_each(UpdatePriorities(buffer))
    train_op = Concurrently(
        [store_op, replay_op.for_each(update_targets)],
        mode="round_robin",
        output_indexes=[1],
        round_robin_weights=[1, config.replay_weight],
        warm_up_indexes=[0],
    )
    return StandardMetricsReporting(train_op, workers, config)


def offline_plan(
    workers: WorkerSet,
    config: OfflineConfig,
    *,
    prepare: Callable[[SampleBatch], SampleBatch] | None = None,
    update_targets: UpdateTargets | None = None,
) -> LocalIterator[dict[str, Any]]:
    """ReadExperiences (``config.input``, checked against the env's spaces; ``prepare``
    adds what the loss reads, once) -> TrainOneStep [-> UpdateTargets]; a result after
    every ``updates_per_iteration`` SGD steps, with its evaluation episodes.

    Examples:
        >>> from flowrl.algorithms.bc import BCConfig, BCLearner
        >>> from flowrl.learning.policy import Policy
        >>> config = BCConfig()  # no input: the plan is drawn, and refuses to run
        >>> workers = WorkerSet(policy_cls=Policy, learner_cls=BCLearner, config=config)
        >>> print(offline_plan(workers, config))  # doctest: +ELLIPSIS
        ReadExperiences(batch_size=512)
        ...
        >>> workers.stop()
    """
    spaces = spaces_of(workers.local_worker.env)
    batches = ReadExperiences(config.input, batch_size=config.train_batch_size, seed=config.seed,
                              spaces=spaces, prepare=prepare,
                              stream=config.input_stream,
                              readers=config.input_readers)  # fmt: skip
    train_op = batches.for_each(TrainOneStep(workers))
    if update_targets is not None:
        train_op = train_op.for_each(update_targets)
    return StandardMetricsReporting(train_op.batch(config.updates_per_iteration), workers, config)
