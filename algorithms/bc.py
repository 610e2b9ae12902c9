"""Behaviour cloning: a policy learns to take the actions of a recording (``record_experiences``)
by maximising their log-likelihood: MARWIL's ``beta = 0`` case without its value loss. The env only
gives the spaces and the evaluation episodes that judge the clone; nothing is sampled.

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

from flowrl.core.config import OfflineConfig
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import ACTIONS, OBS
from flowrl.learning.learner import Learner
from flowrl.learning.policy import Policy
from flowrl.ops.plans import offline_plan
from flowrl.rollout.worker import WorkerSet
from flowrl.run.spec import AlgorithmSpec


@dataclass
class BCConfig(OfflineConfig):
    """Behaviour cloning settings: the recording and how an iteration trains.

    Examples:
        >>> BCConfig(input="recorded/").lr, BCConfig().evaluation_interval
        (0.001, 1)
    """

    algo_name: ClassVar[str] = "bc"

    lr: float = 1e-3


class BCLearner(Learner):
    """The recorded actions' negative log-likelihood: MARWIL's loss with every weight 1 and
    no value term, so it reads no returns (and streams, ``input_stream``)."""

    loss_columns = (OBS, ACTIONS)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        dist, _ = self.distribution(batch)
        loss = -dist.log_prob(batch[ACTIONS]).mean()
        return loss, {"policy_loss": loss.detach()}


def execution_plan(workers: WorkerSet, config: BCConfig) -> LocalIterator[dict[str, Any]]:
    """The offline plan: ReadExperiences -> TrainOneStep, ``updates_per_iteration`` of them
    a result, with its evaluation."""
    return offline_plan(workers, config)


ALGORITHM = AlgorithmSpec(
    name="bc",
    summary="Behaviour cloning: the actions of a recording, by maximum likelihood",
    config_cls=BCConfig,
    policy_cls=Policy,
    learner_cls=BCLearner,
    execution_plan=execution_plan,
)
