"""MARWIL: monotonic advantage re-weighted imitation learning (Wang et al. 2018,
https://papers.nips.cc/paper/7866). A policy learns the actions of a recording, each
weighted by ``exp(beta * advantage / c)``: the advantage is the step's discounted return in
its episode minus the value the network predicts, ``c`` the running root mean square of the
advantages. Actions that went better than the policy expects count for more, so it learns
from a recording of mixed quality what behaviour cloning (``beta = 0``: ``bc``) averages.

Examples:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> recording = tempfile.mkdtemp()
    >>> expert = Algorithm("ppo", env="CartPole-v1", num_workers=0, record_experiences=recording)
    >>> _ = expert.train(); expert.stop()
    >>> algo = Algorithm("marwil", env="CartPole-v1", input=recording, updates_per_iteration=5)
    >>> "learner/vf_loss" in algo.train()
    True
    >>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from flowrl.core.config import ConfigError, OfflineConfig, param
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import ACTIONS, OBS, REWARDS, SampleBatch
from flowrl.learning.learner import Learner
from flowrl.learning.policy import Policy
from flowrl.learning.postprocessing import episode_returns
from flowrl.ops.plans import offline_plan
from flowrl.rollout.experiences import EPS_ID
from flowrl.rollout.worker import WorkerSet
from flowrl.run.spec import AlgorithmSpec

RETURNS = "returns"


@dataclass
class MARWILConfig(OfflineConfig):
    """MARWIL settings: the recording, the advantage weighting, and how an iteration trains.

    Examples:
        >>> MARWILConfig(input="recorded/").beta
        1.0
    """

    algo_name: ClassVar[str] = "marwil"

    beta: float = param(1.0, "advantage weighting: 0 is behaviour cloning", ge=0)
    vf_coeff: float = param(1.0, "weight of the value loss (the advantages' baseline)", ge=0)
    adv_norm_rate: float = param(1e-2, "update rate of the advantages' running RMS", gt=0, le=1)
    lr: float = 1e-3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.input_stream:
            raise ConfigError("marwil's returns need every recorded step: input_stream=false")


class AdvantageNorm:
    """``c``, the running root mean square of the advantages a learner weights by; adapts
    after every batch (a learner's ``adapted`` part, checkpointed with it)."""

    def __init__(self, *, rate: float) -> None:
        self.mean_square, self.rate = 1.0, rate

    def after_batch(self, stats: dict[str, Any]) -> dict[str, float]:
        self.mean_square += self.rate * (float(stats["advantage_square"]) - self.mean_square)
        return {"advantage_rms": self.mean_square**0.5}

    def get_state(self) -> dict[str, float]:
        return {"mean_square": self.mean_square}

    def set_state(self, state: dict[str, float]) -> None:
        self.mean_square = state["mean_square"]


class MARWILLearner(Learner):
    """The recorded actions' negative log-likelihood, each weighted by its exponentiated
    normalised advantage (clipped at 20), plus the value loss against the returns."""

    loss_columns = (OBS, ACTIONS, RETURNS)

    def __init__(self, policy: Policy, config: MARWILConfig) -> None:
        super().__init__(policy, config)
        self.norm = self.adapted["advantage_norm"] = AdvantageNorm(rate=config.adv_norm_rate)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg = self.config
        dist, value = self.distribution(batch)
        logp = dist.log_prob(batch[ACTIONS])
        advantage = (batch[RETURNS] - value).detach()
        weight = torch.exp(cfg.beta * advantage / self.norm.mean_square**0.5).clamp(max=20.0)
        policy_loss = -(weight * logp).mean()
        vf_loss = 0.5 * (value - batch[RETURNS]).pow(2).mean()
        stats = {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(),
                 "advantage_square": advantage.pow(2).mean()}  # fmt: skip
        return policy_loss + cfg.vf_coeff * vf_loss, stats


def with_returns(gamma: float):
    """Adds each recorded step's discounted return in its episode (``returns``)."""

    def add(rows: SampleBatch) -> SampleBatch:
        rows[RETURNS] = episode_returns(rows[EPS_ID], rows[REWARDS], gamma).astype("float32")
        return rows

    return add


def execution_plan(workers: WorkerSet, config: MARWILConfig) -> LocalIterator[dict[str, Any]]:
    """The offline plan (ReadExperiences -> TrainOneStep, ``updates_per_iteration`` of them
    a result, with its evaluation) on the recording's rows with their returns."""
    return offline_plan(workers, config, prepare=with_returns(config.gamma))


ALGORITHM = AlgorithmSpec(
    name="marwil",
    summary="MARWIL: the actions of a recording, weighted by their advantage",
    config_cls=MARWILConfig,
    policy_cls=Policy,
    learner_cls=MARWILLearner,
    execution_plan=execution_plan,
)
