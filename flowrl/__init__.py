"""flowrl: distributed reinforcement learning as a dataflow of small iterator operators.

Examples:
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
    from flowrl.apps.inference import export_policy, load_policy
    from flowrl.core.callbacks import Callbacks, EpisodeInfo
    from flowrl.core.config import Config, ConfigError, param
    from flowrl.core.context import PlanContext
    from flowrl.core.iter import LocalIterator, NotReady, Operator, ParallelIterator
    from flowrl.core.sample_batch import MultiAgentBatch, SampleBatch
    from flowrl.learning.learner import Learner
    from flowrl.learning.module import ActingModule, ActingOutput
    from flowrl.learning.policy import Policy
    from flowrl.learning.registry import register_model
    from flowrl.rollout.envs import register_env
    from flowrl.rollout.worker import RolloutWorker, WorkerSet
    from flowrl.run.algorithm import Algorithm
    from flowrl.run.ray_start import init_ray
    from flowrl.run.runner import StopCriteria
    from flowrl.run.spec import AlgorithmSpec, get_algorithm, list_algorithms

# name -> the module that defines it, imported on first use: a process that needs only a
# light part (a replay shard actor: numpy and its buffer) never imports torch
_HOMES = {
    "Algorithm": "flowrl.run.algorithm",
    "get_algorithm": "flowrl.run.spec",
    "list_algorithms": "flowrl.run.spec",
    "Config": "flowrl.core.config",
    "ConfigError": "flowrl.core.config",
    "param": "flowrl.core.config",
    "Callbacks": "flowrl.core.callbacks",
    "EpisodeInfo": "flowrl.core.callbacks",
    "PlanContext": "flowrl.core.context",
    "register_env": "flowrl.rollout.envs",
    "export_policy": "flowrl.apps.inference",
    "load_policy": "flowrl.apps.inference",
    "init_ray": "flowrl.run.ray_start",
    "StopCriteria": "flowrl.run.runner",
    "LocalIterator": "flowrl.core.iter",
    "NotReady": "flowrl.core.iter",
    "Operator": "flowrl.core.iter",
    "ParallelIterator": "flowrl.core.iter",
    "Learner": "flowrl.learning.learner",
    "ActingModule": "flowrl.learning.module",
    "ActingOutput": "flowrl.learning.module",
    "Policy": "flowrl.learning.policy",
    "register_model": "flowrl.learning.registry",
    "SampleBatch": "flowrl.core.sample_batch",
    "MultiAgentBatch": "flowrl.core.sample_batch",
    "AlgorithmSpec": "flowrl.run.spec",
    "RolloutWorker": "flowrl.rollout.worker",
    "WorkerSet": "flowrl.rollout.worker",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        from flowrl.algorithms import NAMES

        if name.lower() in NAMES and name != name.lower():
            # ``from flowrl import PPO``, as Stable-Baselines3 and RLlib have it: Python
            # would say only "cannot import name"; an ImportError of our own goes through
            # the import whole, and says flowrl's way
            raise ImportError(
                f"flowrl has no {name} class: an algorithm is built by its name, "
                f"flowrl.Algorithm({name.lower()!r}, env=...)",
                name="flowrl",
            )
        raise AttributeError(f"module 'flowrl' has no attribute '{name}'")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    """The public names (not this module's own imports)."""
    return sorted({*__all__, "__version__"})


__version__ = "0.2.0"

__all__ = [
    "ActingModule",
    "ActingOutput",
    "Algorithm",
    "AlgorithmSpec",
    "Callbacks",
    "Config",
    "ConfigError",
    "EpisodeInfo",
    "Learner",
    "LocalIterator",
    "MultiAgentBatch",
    "NotReady",
    "Operator",
    "ParallelIterator",
    "PlanContext",
    "Policy",
    "RolloutWorker",
    "SampleBatch",
    "StopCriteria",
    "WorkerSet",
    "export_policy",
    "get_algorithm",
    "init_ray",
    "list_algorithms",
    "load_policy",
    "param",
    "register_env",
    "register_model",
]
