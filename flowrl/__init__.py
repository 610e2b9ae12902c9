"""flowrl: distributed reinforcement learning as a dataflow of small iterator operators.

Example:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0)
    >>> algo.train()["env_steps_sampled"] >= algo.config.train_batch_size
    True
    >>> algo.stop()
"""

from flowrl.algorithm import Algorithm, get_algorithm, list_algorithms
from flowrl.config import Config, ConfigError, param
from flowrl.context import PlanContext
from flowrl.envs import register_env
from flowrl.inference import export_policy, load_policy
from flowrl.iter import LocalIterator, NotReady, Operator, ParallelIterator
from flowrl.policy import Policy
from flowrl.sample_batch import SampleBatch
from flowrl.spec import AlgorithmSpec
from flowrl.worker import RolloutWorker, WorkerSet

__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "AlgorithmSpec",
    "Config",
    "ConfigError",
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
