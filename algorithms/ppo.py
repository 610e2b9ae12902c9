"""PPO: Proximal Policy Optimization (Schulman et al. 2017, https://arxiv.org/abs/1707.06347).

Synchronous sampling on all workers, GAE advantages (bootstrapping on truncation), a
clipped surrogate objective, a value loss, an entropy bonus and an optional adaptive KL
penalty; several epochs of minibatch SGD per batch. Discrete and Box action spaces.

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("ppo", env="CartPole-v1", num_workers=0)
    >>> algo.train()["env_steps_trained"] >= algo.config.train_batch_size
    True
    >>> algo.stop()
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from flowrl.core.config import ActorCriticConfig, ClippedSurrogateConfig, param
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import (
    ACTIONS,
    ADVANTAGES,
    LOGP,
    OBS,
    VALUE_TARGETS,
    VF_PREDS,
    SampleBatch,
)
from flowrl.learning.learner import Learner
from flowrl.learning.losses import (
    AdaptiveKL,
    clipped_surrogate,
    explained_variance,
    valid_mean,
)
from flowrl.learning.policy import ActorCriticPolicy, Policy
from flowrl.ops import (
    ConcatBatches,
    ParallelRollouts,
    StandardizeFields,
    StandardMetricsReporting,
    TrainOneStep,
)
from flowrl.rollout.worker import WorkerSet
from flowrl.run.presets import (
    ATARI,
    BIPEDAL_WALKER,
    CONTINUOUS_MOUNTAIN_CAR,
    LUNAR_LANDER,
    MOUNTAIN_CAR,
    MUJOCO,
    PENDULUM,
    Preset,
)
from flowrl.run.spec import AlgorithmSpec


@dataclass
class PPOConfig(ActorCriticConfig, ClippedSurrogateConfig):
    """PPO settings; the defaults solve CartPole-v1 in well under 150k env steps.

    Examples:
        >>> PPOConfig(lr=1e-3).lr, PPOConfig().num_sgd_iter
        (0.001, 3)
    """

    algo_name: ClassVar[str] = "ppo"
    default_stop_timesteps: ClassVar[int] = 1_000_000

    # three epochs at a higher rate: half the learner's time per env step (defaults.md)
    lr: float = 3e-3
    # one bulk_sync round of 2 workers x 8 envs fills a train batch (defaults.md)
    rollout_fragment_length: int = 128
    # a round's fragments share one weights version anyway: more per call would only grow
    # the SGD batch (at 64 workers 4 per call: 1.3x the env steps/s, 4x the rows; scaling.py)
    fragments_per_call: int = 1
    train_batch_size: int = param(2048, "env steps per SGD phase", ge=1)
    sgd_minibatch_size: int = param(256, "rows per SGD minibatch", ge=1)
    num_sgd_iter: int = param(3, "epochs over each train batch", ge=1)
    sample_ahead: bool = param(
        False,
        "remote workers sample the next round while the learner trains, with the weights "
        "one update behind (Cleanba's PPO): the SGD phase no longer stalls sampling",
    )

    @property
    def min_fragment_length(self) -> int:
        """A horizon and a half of GAE, ``1 / (1 - gamma * gae_lambda)`` steps a horizon: a
        fragment's end cuts the advantages of its last steps short (the value stands in for
        the rest), so an automatic layout keeps fragments long enough that most steps see
        their horizon whole (docs/benchmarks.md: the lunar lander, at gamma 0.999).

        Examples:
            >>> PPOConfig().min_fragment_length, PPOConfig(gamma=0.999).min_fragment_length
            (26, 30)
        """
        discount = self.gamma * self.gae_lambda
        return 2**31 if discount >= 1 else math.ceil(1.5 / (1 - discount))


# Settings known to learn these env families, under the user's own values (flowrl.run.presets)
PRESETS = (
    Preset(
        ATARI,
        "the PPO paper's Atari settings (Schulman et al. 2017, Table 5) as RL Baselines3 "
        "Zoo's ppo.yml has them: 8 envs x 128 steps, 4 epochs of 256-row minibatches, "
        "lr 2.5e-4 and clip 0.1 (both decayed linearly there), entropy 0.01",
        {
            "num_envs_per_worker": 8,
            "rollout_fragment_length": 128,
            "train_batch_size": 2048,  # 2 workers x 8 envs x 128 steps
            "sgd_minibatch_size": 256,
            "num_sgd_iter": 4,
            "lr": 2.5e-4,
            "clip_param": 0.1,
            "entropy_coeff": 0.01,
            "vf_loss_coeff": 0.5,
            "gae_lambda": 0.95,
            "grad_clip": 0.5,
        },
    ),
    Preset(
        MUJOCO,
        "the PPO paper's MuJoCo settings (Schulman et al. 2017, Table 3) as CleanRL's "
        "ppo_continuous_action has them: 2048 steps per update, 10 epochs of 64-row "
        "minibatches, lambda 0.95, clip 0.2, observations and rewards normalised, lr 3e-4 "
        "annealed to 0 over PPO's default 1M env steps (set lr for a longer run); at 1M "
        "it matched CleanRL's returns on Hopper, HalfCheetah and Walker2d where a constant "
        "lr without observation normalisation fell short on two (docs/benchmarks.md)",
        {
            "num_workers": 0,
            "num_envs_per_worker": 4,
            "rollout_fragment_length": 512,
            "train_batch_size": 2048,
            "sgd_minibatch_size": 64,
            "num_sgd_iter": 10,
            "lr": [[0, 3e-4], [1_000_000, 0.0]],
            "gae_lambda": 0.95,
            "clip_param": 0.2,
            "entropy_coeff": 0.0,
            "grad_clip": 0.5,
            "normalize_rewards": True,
            "normalize_observations": True,
        },
    ),
    Preset(
        LUNAR_LANDER,
        "RL Baselines3 Zoo's ppo.yml for LunarLander: 16 envs x 1024 steps per update, 4 "
        "epochs of 64-row minibatches, gamma 0.999, lambda 0.98, entropy 0.01, lr 3e-4; "
        "in process, with its 1024-step fragments: shorter ones cut GAE's long horizon "
        "short and learnt slower (docs/benchmarks.md)",
        {
            "num_workers": 0,
            "num_envs_per_worker": 16,
            "rollout_fragment_length": 1024,
            "train_batch_size": 16384,
            "sgd_minibatch_size": 64,
            "num_sgd_iter": 4,
            "lr": 3e-4,
            "gamma": 0.999,
            "gae_lambda": 0.98,
            "entropy_coeff": 0.01,
        },
    ),
    Preset(
        BIPEDAL_WALKER,
        "RL Baselines3 Zoo's ppo.yml for BipedalWalker-v3: 32 envs x 2048 steps per update, "
        "in process, 10 epochs of 64-row minibatches, gamma 0.999, lambda 0.95, clip 0.18, "
        "lr 3e-4, no entropy bonus, observations and rewards normalised; 3M env steps "
        "unless told (RL Zoo's 5M; at 3M seeds 0-2 walked, 290-298 greedy: docs/benchmarks.md)",
        {
            "num_workers": 0,
            "num_envs_per_worker": 32,
            "rollout_fragment_length": 2048,
            "train_batch_size": 65536,
            "sgd_minibatch_size": 64,
            "num_sgd_iter": 10,
            "lr": 3e-4,
            "gamma": 0.999,
            "gae_lambda": 0.95,
            "clip_param": 0.18,
            "entropy_coeff": 0.0,
            "normalize_observations": True,
            "normalize_rewards": True,
        },
        budget=3_000_000,
    ),
    Preset(
        PENDULUM,
        "RL Baselines3 Zoo's ppo.yml for Pendulum-v1 without its gSDE exploration (these "
        "settings learn without it: docs/benchmarks.md): 4 envs x "
        "1024 steps per update, 10 epochs of 64-row minibatches, gamma 0.9, lambda 0.95, "
        "lr 1e-3, no entropy bonus; 200k env steps unless told (the env has no threshold "
        "to stop at)",
        {
            "num_workers": 0,
            "num_envs_per_worker": 4,
            "rollout_fragment_length": 1024,
            "train_batch_size": 4096,
            "sgd_minibatch_size": 64,
            "num_sgd_iter": 10,
            "lr": 1e-3,
            "gamma": 0.9,
            "gae_lambda": 0.95,
            "clip_param": 0.2,
            "entropy_coeff": 0.0,
        },
        budget=200_000,
    ),
    Preset(
        MOUNTAIN_CAR,
        "RL Baselines3 Zoo's ppo.yml for MountainCar-v0: 16 envs x 16 steps per update, 4 "
        "epochs of 64-row minibatches, lambda 0.98, lr 3e-4, no entropy bonus, "
        "observations and rewards normalised",
        {
            "num_workers": 0,
            "num_envs_per_worker": 16,
            "rollout_fragment_length": 16,
            "train_batch_size": 256,
            "sgd_minibatch_size": 64,
            "num_sgd_iter": 4,
            "lr": 3e-4,
            "gamma": 0.99,
            "gae_lambda": 0.98,
            "entropy_coeff": 0.0,
            "normalize_observations": True,
            "normalize_rewards": True,
        },
    ),
    Preset(
        CONTINUOUS_MOUNTAIN_CAR,
        "RL Baselines3 Zoo's ppo.yml for MountainCarContinuous-v0: gSDE exploration (a draw "
        "held for each 8-step update), log std -3.29 at first, 1 env x 8 steps per update, "
        "10 epochs, gamma 0.9999, lambda 0.9, lr 7.77e-5, clip 0.1, entropy 0.00429, value "
        "loss 0.19, gradients clipped at 5, observations and rewards normalised; its 20k env "
        "steps unless told. Without gSDE the car stood still (docs/benchmarks.md)",
        {
            "num_workers": 0,
            "num_envs_per_worker": 1,
            "rollout_fragment_length": 8,
            "train_batch_size": 8,
            "sgd_minibatch_size": 8,
            "num_sgd_iter": 10,
            "lr": 7.77e-5,
            "gamma": 0.9999,
            "gae_lambda": 0.9,
            "clip_param": 0.1,
            "entropy_coeff": 0.00429,
            "vf_loss_coeff": 0.19,
            "grad_clip": 5.0,
            "gsde": True,
            "gsde_steps": 8,
            "log_std_init": -3.29,
            "normalize_observations": True,
            "normalize_rewards": True,
        },
        budget=20_000,
    ),
)


PPOPolicy = ActorCriticPolicy  # acts with the actor-critic; fragments get GAE advantages


class PPOLearner(Learner):
    """The PPO-clip loss, a value loss and an entropy bonus, with an adaptive KL penalty."""

    loss_columns = (OBS, ACTIONS, LOGP, ADVANTAGES, VALUE_TARGETS)

    def __init__(self, policy: Policy, config: PPOConfig) -> None:
        super().__init__(policy, config)
        self.kl = self.adapted["kl"] = AdaptiveKL(coeff=config.kl_coeff, target=config.kl_target)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        cfg, mean = self.config, valid_mean(batch)
        dist, values = self.distribution(batch)
        log_ratio = dist.log_prob(batch[ACTIONS]) - batch[LOGP]
        loss, stats = clipped_surrogate(
            log_ratio, batch[ADVANTAGES], clip=cfg.clip_param, kl_coeff=self.kl.coeff, mean=mean
        )
        vf_loss = 0.5 * mean((values - batch[VALUE_TARGETS]).pow(2))
        entropy = mean(dist.entropy())
        loss = loss + cfg.vf_loss_coeff * vf_loss
        entropy_coeff = self.scheduled("entropy_coeff")
        if entropy_coeff > 0:  # a zero-weight term stays out of backward
            loss = loss - entropy_coeff * entropy
        stats.update(vf_loss=vf_loss, entropy=entropy)
        return loss, {k: v.detach() for k, v in stats.items()}

    def batch_stats(self, batch: SampleBatch) -> dict[str, float]:
        return {"explained_variance": explained_variance(batch[VF_PREDS], batch[VALUE_TARGETS])}


def execution_plan(workers: WorkerSet, config: PPOConfig) -> LocalIterator[dict[str, Any]]:
    """rollouts(bulk_sync) -> ConcatBatches -> StandardizeFields -> TrainOneStep -> report
    (the learner adapts its KL weight after each batch; ``sample_ahead``: the next round
    is sampled while this one trains)."""
    train = TrainOneStep(
        workers, num_sgd_iter=config.num_sgd_iter, sgd_minibatch_size=config.sgd_minibatch_size
    )
    train_op = (
        ParallelRollouts(workers, mode="bulk_sync", ahead=config.sample_ahead)
        .combine(ConcatBatches(min_batch_size=config.train_batch_size))
        .for_each(StandardizeFields([ADVANTAGES]))
        .for_each(train)
    )
    return StandardMetricsReporting(train_op, workers, config)


ALGORITHM = AlgorithmSpec(
    name="ppo",
    summary="Proximal Policy Optimization: synchronous sampling, clipped surrogate, GAE",
    config_cls=PPOConfig,
    policy_cls=PPOPolicy,
    learner_cls=PPOLearner,
    execution_plan=execution_plan,
    presets=PRESETS,
)
