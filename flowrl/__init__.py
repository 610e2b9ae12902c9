"""flowrl: distributed reinforcement learning as a dataflow of small iterator operators.

Example:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0)
    >>> algo.train()["env_steps_sampled"] >= algo.config.train_batch_size
    True
    >>> algo.stop()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowrl.algorithm import Algorithm, get_algorithm, list_algorithms
    from flowrl.config import Config, ConfigError, param
    from flowrl.context import PlanContext
    from flowrl.envs import register_env
    from flowrl.inference import export_policy, load_policy
    from flowrl.iter import LocalIterator, NotReady, Operator, ParallelIterator
    from flowrl.learner import Learner
    from flowrl.module import ActingModule, ActingOutput
    from flowrl.policy import Policy
    from flowrl.sample_batch import SampleBatch
    from flowrl.spec import AlgorithmSpec
    from flowrl.worker import RolloutWorker, WorkerSet

# name -> the module that defines it, imported on first use: a process that needs only a
# light part (a replay shard actor: numpy and its buffer) never imports torch
_HOMES = {
    "Algorithm": "flowrl.algorithm",
    "get_algorithm": "flowrl.algorithm",
    "list_algorithms": "flowrl.algorithm",
    "Config": "flowrl.config",
    "ConfigError": "flowrl.config",
    "param": "flowrl.config",
    "PlanContext": "flowrl.context",
    "register_env": "flowrl.envs",
    "export_policy": "flowrl.inference",
    "load_policy": "flowrl.inference",
    "LocalIterator": "flowrl.iter",
    "NotReady": "flowrl.iter",
    "Operator": "flowrl.iter",
    "ParallelIterator": "flowrl.iter",
    "Learner": "flowrl.learner",
    "ActingModule": "flowrl.module",
    "ActingOutput": "flowrl.module",
    "Policy": "flowrl.policy",
    "SampleBatch": "flowrl.sample_batch",
    "AlgorithmSpec": "flowrl.spec",
    "RolloutWorker": "flowrl.worker",
    "WorkerSet": "flowrl.worker",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'flowrl' has no attribute '{name}'")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__version__ = "0.1.0"

__all__ = [
    "ActingModule",
    "ActingOutput",
    "Algorithm",
    "AlgorithmSpec",
    "Config",
    "ConfigError",
    "Learner",
    "LocalIterator",
    "NotReady",
    "Operator",
    "ParallelIterator",
    "PlanContext",
    "Policy",
    "RolloutWorker",
    "SampleBatch",
    "WorkerSet",
    "export_policy",
    "get_algorithm",
    "list_algorithms",
    "load_policy",
    "param",
    "register_env",
]
