"""Behaviour cloning: a policy learns to take the actions of a recording (``record_experiences``)
by maximising their log-likelihood. The env only gives the spaces and the evaluation episodes
that judge the clone; nothing is sampled.

Examples:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> recording = tempfile.mkdtemp()
    >>> expert = Algorithm("ppo", env="CartPole-v1", num_workers=0, record_experiences=recording)
    >>> _ = expert.train(); expert.stop()
    >>> clone = Algorithm("bc", env="CartPole-v1", input=recording, updates_per_iteration=5)
    >>> "evaluation/episode_return_mean" in clone.train()
    True
    >>> clone.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from flowrl.core.config import Config, ConfigError, param
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import ACTIONS, OBS
from flowrl.learning.learner import Learner
from flowrl.learning.policy import Policy
from flowrl.ops import ReadExperiences, StandardMetricsReporting, TrainOneStep
from flowrl.rollout.worker import WorkerSet
from flowrl.run.spec import AlgorithmSpec


@dataclass
class BCConfig(Config):
    """Behaviour cloning settings: where the recording is, and how an iteration trains.

    Examples:
        >>> BCConfig(input="recorded/").evaluation_interval
        1
    """

    algo_name: ClassVar[str] = "bc"
    default_stop_timesteps: ClassVar[int] = 0  # nothing is sampled: stop on iterations
    default_stop_iters: ClassVar[int | None] = 100

    input: str = param("", "directory of the recording to learn from (record_experiences)")
    lr: float = 1e-3
    train_batch_size: int = param(512, "recorded steps per SGD step", ge=1)
    updates_per_iteration: int = param(100, "SGD steps per train() result", ge=1)
    entropy_coeff: float = param(0.0, "weight of the entropy bonus", ge=0)
    evaluation_interval: int = 1
    evaluation_episodes: int = 10
    num_workers: int = 0  # rollout workers sample nothing; evaluation has its own

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.normalize_observations:
            raise ConfigError("bc learns from raw observations: set normalize_observations=false")


class BCLearner(Learner):
    """The negative log-likelihood of the recorded actions (minus an entropy bonus)."""

    loss_columns = (OBS, ACTIONS)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        dist, _ = self.distribution(batch)
        log_likelihood = dist.log_prob(batch[ACTIONS]).mean()
        entropy = dist.entropy().mean()
        loss = -log_likelihood - self.scheduled("entropy_coeff") * entropy
        return loss, {"bc_loss": -log_likelihood.detach(), "entropy": entropy.detach()}


def execution_plan(workers: WorkerSet, config: BCConfig) -> LocalIterator[dict[str, Any]]:
    """ReadExperiences (the recording, checked against the env's spaces) -> TrainOneStep;
    each result after ``updates_per_iteration`` of them, with its evaluation."""
    env = workers.local_worker.env
    spaces = {pid: (env.observation_spaces[pid], env.action_spaces[pid]) for pid in env.policy_ids}
    batches = ReadExperiences(config.input, batch_size=config.train_batch_size,
                              seed=config.seed, spaces=spaces)  # fmt: skip
    train_op = batches.for_each(TrainOneStep(workers)).batch(config.updates_per_iteration)
    return StandardMetricsReporting(train_op, workers, config)


ALGORITHM = AlgorithmSpec(
    name="bc",
    summary="Behaviour cloning: the actions of a recording, by maximum likelihood",
    config_cls=BCConfig,
    policy_cls=Policy,
    learner_cls=BCLearner,
    execution_plan=execution_plan,
)
