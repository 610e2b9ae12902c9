"""The operators execution plans are made of. Names are part of the public API."""

from flowrl.ops.concurrency import Concurrently
from flowrl.ops.metrics import CollectMetrics, OncePerIteration, StandardMetricsReporting
from flowrl.ops.replay import (
    Replay,
    StoreToReplayBuffer,
    UpdatePriorities,
    UpdateTargets,
)
from flowrl.ops.rollouts import (
    AsyncGradients,
    ComputeGradients,
    ConcatBatches,
    ParallelRollouts,
    StandardizeFields,
)
from flowrl.ops.train import ApplyGradients, TrainOneStep

__all__ = [
    "ApplyGradients",
    "AsyncGradients",
    "CollectMetrics",
    "ComputeGradients",
    "ConcatBatches",
    "Concurrently",
    "OncePerIteration",
    "ParallelRollouts",
    "Replay",
    "StandardMetricsReporting",
    "StandardizeFields",
    "StoreToReplayBuffer",
    "TrainOneStep",
    "UpdatePriorities",
    "UpdateTargets",
]
