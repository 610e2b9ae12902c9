"""Offline pre-training, then online fine-tuning of the same policy: behaviour cloning on a
recording until ``pretrain_updates`` SGD steps are done, then PPO in the env. Run it with

    flowrl train ppo --env CartPole-v1 --record-experiences recorded/
    flowrl train examples/offline_to_online.py:plan --env CartPole-v1 --set input=recorded/
"""

from dataclasses import dataclass

from flowrl.algorithms.bc import BCConfig, BCLearner
from flowrl.algorithms.ppo import PPOConfig
from flowrl.algorithms.ppo import PPOLearner as Learner
from flowrl.algorithms.ppo import PPOPolicy as Policy
from flowrl.core.config import param
from flowrl.core.sample_batch import ADVANTAGES
from flowrl.learning.multi import Learners
from flowrl.ops import (
    ConcatBatches,
    Concurrently,
    ParallelRollouts,
    ReadExperiences,
    StandardizeFields,
    StandardMetricsReporting,
    TrainOneStep,
)  # fmt: skip

__all__ = ["Config", "Learner", "Policy", "plan"]  # the classes flowrl train runs the plan with


@dataclass
class Config(PPOConfig):
    input: str = param("", "the recording to pre-train on (record_experiences)")
    pretrain_updates: int = param(1000, "behaviour cloning SGD steps before PPO", ge=0)
    pretrain_batch_size: int = param(512, "recorded steps per cloning SGD step", ge=1)


class Pretraining:
    """Open for ``updates`` items of the offline branch, then for the online one."""

    def __init__(self, updates: int) -> None:
        self.left = updates

    def offline(self) -> bool:
        return self.left > 0

    def online(self) -> bool:
        return self.left <= 0

    def count(self, item):
        self.left -= 1
        return item


def plan(workers, config):
    """ReadExperiences -> TrainOneStep(cloning) while pre-training; then rollouts ->
    ConcatBatches -> StandardizeFields -> TrainOneStep(PPO), on the same policy."""
    policies = workers.local_worker.policies
    bc = BCConfig(input=config.input, train_batch_size=config.pretrain_batch_size)
    cloning = Learners({pid: BCLearner(policy, bc) for pid, policy in policies.items()})
    pretraining = Pretraining(config.pretrain_updates)
    read = {"batch_size": bc.train_batch_size, "seed": config.seed}
    offline = (
        ReadExperiences(config.input, **read)
        .gate(pretraining.offline)
        .for_each(TrainOneStep(workers, learner=cloning))
        .for_each(pretraining.count)
    )
    sgd = {"num_sgd_iter": config.num_sgd_iter, "sgd_minibatch_size": config.sgd_minibatch_size}
    online = (
        ParallelRollouts(workers, mode="bulk_sync")
        .gate(pretraining.online)
        .combine(ConcatBatches(min_batch_size=config.train_batch_size))
        .for_each(StandardizeFields([ADVANTAGES]))
        .for_each(TrainOneStep(workers, **sgd))
    )
    both = Concurrently([offline, online], mode="round_robin", output_indexes=[1])
    return StandardMetricsReporting(both, workers, config)
