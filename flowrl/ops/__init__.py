"""The operators execution plans are made of. Names are part of the public API."""

from flowrl.ops.concurrency import (
    BroadcastWeights,
    Concurrently,
    Dequeue,
    Enqueue,
    LearnerThread,
    LearnerThreadError,
)
from flowrl.ops.metrics import CollectMetrics, OncePerIteration, StandardMetricsReporting
from flowrl.ops.replay_ops import (
    MixInReplay,
    Replay,
    SamplingLead,
    StoreToReplayBuffer,
    TrainingIntensity,
    UpdatePriorities,
)
from flowrl.ops.rollouts import (
    AggregatedRollouts,
    AsyncGradients,
    ComputeGradients,
    ConcatBatches,
    ParallelRollouts,
    ReadExperiences,
    SelectExperiences,
    StandardizeFields,
)
from flowrl.ops.selfplay import SelfPlay
from flowrl.ops.train import ApplyGradients, TrainOneStep, UpdateTargets

__all__ = [
    "AggregatedRollouts",
    "ApplyGradients",
    "AsyncGradients",
    "BroadcastWeights",
    "CollectMetrics",
    "ComputeGradients",
    "ConcatBatches",
    "Concurrently",
    "Dequeue",
    "Enqueue",
    "LearnerThread",
    "LearnerThreadError",
    "MixInReplay",
    "OncePerIteration",
    "ParallelRollouts",
    "ReadExperiences",
    "Replay",
    "SamplingLead",
    "SelectExperiences",
    "SelfPlay",
    "StandardMetricsReporting",
    "StandardizeFields",
    "StoreToReplayBuffer",
    "TrainOneStep",
    "TrainingIntensity",
    "UpdatePriorities",
    "UpdateTargets",
]
