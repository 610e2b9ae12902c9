"""IQL: Implicit Q-learning (Kostrikov et al. 2021, https://arxiv.org/abs/2110.06169), offline
RL that never asks Q about an action the recording does not hold.

Three networks learn from the recorded steps alone. Twin Q-networks learn
``r + gamma * V(s')`` (no maximum over actions, so no unseen action's value is ever
bootstrapped); V learns an upper expectile of the target critics' ``Q(s, a)`` over the
recorded actions, which approaches the value of the best actions the data holds as the
expectile nears 1; the policy then learns the recorded actions, each weighted by
``exp(temperature * (Q(s, a) - V(s)))``. So it keeps the better actions of a recording of
mixed quality where behaviour cloning (``bc``) averages them all, and, unlike MARWIL, it can
stitch the good parts of different episodes. Discrete and Box actions alike.

Examples:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> recording = tempfile.mkdtemp()
    >>> expert = Algorithm("ppo", env="CartPole-v1", num_workers=0, record_experiences=recording)
    >>> _ = expert.train(); expert.stop()
    >>> algo = Algorithm("iql", env="CartPole-v1", input=recording, updates_per_iteration=5)
    >>> "learner/value_loss" in algo.train()
    True
    >>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from flowrl.core.config import OfflineConfig, param
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import ACTIONS, OBS, REWARDS, TERMINATEDS
from flowrl.learning.learner import Learner, Optimized
from flowrl.learning.models import TwinQ, features, mlp
from flowrl.learning.policy import Policy
from flowrl.learning.postprocessing import NEXT_OBS
from flowrl.ops import UpdateTargets
from flowrl.ops.plans import offline_plan
from flowrl.rollout.worker import WorkerSet
from flowrl.run.spec import AlgorithmSpec


@dataclass
class IQLConfig(OfflineConfig):
    """IQL settings: the paper's for its locomotion datasets (expectile 0.7, temperature 3,
    256x256 networks, lr 3e-4, soft target updates of 0.005, batches of 256).

    Examples:
        >>> IQLConfig(input="recorded/").expectile
        0.7
    """

    algo_name: ClassVar[str] = "iql"

    expectile: float = param(0.7, "V's expectile of Q over the recorded actions", gt=0, le=1)
    temperature: float = param(3.0, "inverse temperature of the advantage weights", ge=0)
    critic_lr: float = param(3e-4, "Q- and V-network learning rate (Adam)", gt=0)
    tau: float = param(5e-3, "soft target update rate per SGD step", gt=0, le=1)
    model_hiddens: tuple[int, ...] = (256, 256)  # the policy's and each critic's
    lr: float = 3e-4
    train_batch_size: int = 256


class ValueNetwork(nn.Module):
    """V(s): the observation's features through an MLP to one value."""

    def __init__(self, obs_space: Any, hiddens: tuple[int, ...]) -> None:
        super().__init__()
        self.flatten = features(obs_space)
        sizes = [self.flatten.out_features, *hiddens, 1]
        self.body = mlp(sizes, out_gain=1.0, activation=nn.ReLU)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.body(self.flatten(obs)).squeeze(-1)


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """The asymmetric square ``|expectile - 1(diff < 0)| * diff^2``, averaged: its minimiser
    over a constant is the ``expectile`` of ``diff``'s distribution (0.5: the mean)."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.pow(2)).mean()


class IQLLearner(Learner):
    """Twin critics with soft-updated targets towards ``r + gamma * V(s')``, V towards
    their expectile, the policy's recorded actions weighted by the exponentiated
    advantage (clipped at 100); each with its own optimiser."""

    loss_columns = (OBS, ACTIONS, REWARDS, NEXT_OBS, TERMINATEDS)
    shuffle = False  # the recording's batches are drawn at random already
    disjoint_losses = True  # each loss reaches its own network's parameters alone

    def __init__(self, policy: Policy, config: IQLConfig) -> None:
        super().__init__(policy, config)
        hiddens, space = config.model_hiddens, policy.input_space
        self.q = TwinQ(space, policy.action_space, hiddens=hiddens).to(self.device)
        self.q_target = self.target_of(self.q)
        self.value = ValueNetwork(space, hiddens).to(self.device)

    def optimized(self) -> dict[str, Optimized]:
        cfg = self.config
        return {
            "critic": Optimized(list(self.q.parameters()), cfg.critic_lr),
            "value": Optimized(list(self.value.parameters()), cfg.critic_lr),
            "actor": Optimized(list(self.module.parameters()), cfg.lr),
        }

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict]:
        cfg = self.config
        obs = self.policy.inputs(batch[OBS])[0]
        with torch.no_grad():
            q_data = self.q_target.taken(obs, batch[ACTIONS]).min(0).values
            next_v = self.value(self.policy.inputs(batch[NEXT_OBS])[0])
            alive = 1.0 - batch[TERMINATEDS].float()
            target = batch[REWARDS] + cfg.gamma * alive * next_v
        value = self.value(obs)
        advantage = q_data - value
        value_loss = expectile_loss(advantage, cfg.expectile)
        q1, q2 = self.q.taken(obs, batch[ACTIONS])
        critic_loss = 0.5 * ((q1 - target).pow(2) + (q2 - target).pow(2)).mean()
        weight = torch.exp(cfg.temperature * advantage.detach()).clamp(max=100.0)
        dist, _ = self.distribution(batch)
        actor_loss = -(weight * dist.log_prob(batch[ACTIONS])).mean()
        losses = {"critic": critic_loss, "value": value_loss, "actor": actor_loss}
        stats = {f"{k}_loss": v.detach() for k, v in losses.items()}
        stats.update(q_mean=q1.detach().mean(), v_mean=value.detach().mean(),
                     weight_mean=weight.mean())  # fmt: skip
        return losses, stats


def execution_plan(workers: WorkerSet, config: IQLConfig) -> LocalIterator[dict[str, Any]]:
    """The offline plan (ReadExperiences -> TrainOneStep, ``updates_per_iteration`` of them
    a result, with its evaluation), the critics' targets blended in after every step."""
    update_targets = UpdateTargets(workers.learner.update_targets, tau=config.tau)
    return offline_plan(workers, config, update_targets=update_targets)


ALGORITHM = AlgorithmSpec(
    name="iql",
    summary="Implicit Q-learning: offline RL from a recording, Discrete or Box actions",
    config_cls=IQLConfig,
    policy_cls=Policy,
    learner_cls=IQLLearner,
    execution_plan=execution_plan,
)
