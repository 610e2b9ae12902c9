"""SAC: Soft Actor-Critic (Haarnoja et al. 2018, https://arxiv.org/abs/1812.05905), and its
discrete-action variant (Christodoulou 2019, https://arxiv.org/abs/1910.07207).

A stochastic actor maximises Q plus an entropy bonus; twin Q-networks with soft-updated
targets (clipped double Q) learn the soft value; the temperature alpha is learned so the
policy's entropy tracks ``target_entropy``. Box actions use a tanh-squashed Gaussian
(``SACPolicy``, ``SACLearner``); ``discrete=True`` selects the variant for
Discrete action spaces (``SACDiscretePolicy``, ``SACDiscreteLearner``), which
takes exact expectations over the actions. Rollout workers hold the actor alone; the
critics, their targets and the temperature are the learner's. Like DQN, the plan runs a
rollout branch into a replay buffer and a training branch side by side.

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("sac", env="Pendulum-v1", min_env_steps_per_iteration=400)
    >>> algo.train()["env_steps_sampled"] >= 400
    True
    >>> algo.stop()
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.core.config import Config, ConfigError, GaussianConfig, param
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import ACTIONS, OBS, REWARDS, TERMINATEDS, Fragment, SampleBatch
from flowrl.learning.distributions import (
    Categorical,
    Distribution,
    SquashedGaussian,
    distribution_for,
)
from flowrl.learning.learner import Learner, Optimized
from flowrl.learning.models import ActorNetwork, TwinQ, check_gsde
from flowrl.learning.module import ActingModule
from flowrl.learning.policy import Policy, bounds, inference
from flowrl.learning.postprocessing import DISCOUNTS, NEXT_OBS, n_step_transitions
from flowrl.learning.registry import build_module
from flowrl.ops import UpdateTargets
from flowrl.ops.plans import replay_plan
from flowrl.replay import WEIGHTS, ReplayConfig
from flowrl.rollout.worker import WorkerSet
from flowrl.run.presets import CONTINUOUS_MOUNTAIN_CAR, MUJOCO, PENDULUM, Preset
from flowrl.run.spec import AlgorithmSpec


@dataclass
class SACConfig(ReplayConfig, GaussianConfig):
    """SAC settings. The defaults take one SGD step per env step in one process (no Ray
    start-up) and reach -250 on Pendulum-v1 within 20k env steps.

    Examples:
        >>> SACConfig(discrete=True).discrete
        True
    """

    algo_name: ClassVar[str] = "sac"
    default_stop_timesteps: ClassVar[int] = 100_000

    env: str = "Pendulum-v1"  # continuous control is what SAC is for
    num_workers: int = 0
    num_envs_per_worker: int = 1
    rollout_fragment_length: int = 1
    discrete: bool = param(False, "the discrete-action variant, for Discrete action spaces")
    lr: float = 3e-4  # the actor's; the critics and the temperature have their own
    critic_lr: float = param(3e-4, "Q-network learning rate (Adam)", gt=0)
    alpha_lr: float = param(
        3e-4, "temperature learning rate (Adam; 0: it stays at initial_alpha)", ge=0
    )
    initial_alpha: float = param(1.0, "temperature at the start", gt=0)
    target_entropy: float | None = param(
        None, "entropy the temperature aims for; None: -action dims (Box), 0.98 log n (Discrete)"
    )
    tau: float = param(5e-3, "soft target update rate per SGD step", gt=0, le=1)
    grad_clip: float = 0.0
    model_hiddens: tuple[int, ...] = (128, 128)  # the actor's and each critic's
    buffer_size: int = 100_000
    learning_starts: int = 256
    train_batch_size: int = 256
    training_intensity: float = 256.0
    metrics_smoothing_episodes: int = 10
    min_env_steps_per_iteration: int = 1_000


# Settings known to learn these env families, under the user's own values (flowrl.run.presets)
PRESETS = (
    Preset(
        MUJOCO,
        "the SAC paper's settings (Haarnoja et al. 2018) as RL Baselines3 Zoo's sac.yml "
        "has them for Hopper and HalfCheetah: 256x256 networks, 1M buffer, batch 256, one "
        "update per env step, lr 3e-4, tau 0.005, learning from 10k steps",
        {
            "model_hiddens": (256, 256),
            "buffer_size": 1_000_000,
            "train_batch_size": 256,
            "training_intensity": 256.0,
            "lr": 3e-4,
            "critic_lr": 3e-4,
            "alpha_lr": 3e-4,
            "tau": 5e-3,
            "learning_starts": 10_000,
        },
    ),
    Preset(
        PENDULUM,
        "RL Baselines3 Zoo's sac.yml for Pendulum-v1: lr 1e-3 (the actor's, the critics' "
        "and the temperature's), the defaults otherwise; its 20k env steps unless told (the "
        "env has no threshold to stop at)",
        {"lr": 1e-3, "critic_lr": 1e-3, "alpha_lr": 1e-3},
        budget=20_000,
    ),
    Preset(
        CONTINUOUS_MOUNTAIN_CAR,
        "RL Baselines3 Zoo's sac.yml for MountainCarContinuous-v0: gSDE exploration (a draw "
        "held for 32 steps), log std -3.67 at first, 64x64 networks, a fixed temperature of "
        "0.1, batch 512, 32 updates every 32 env steps, gamma 0.9999, tau 0.01, a 50k "
        "buffer; its 50k env steps unless told. Without gSDE the car stood still "
        "(docs/benchmarks.md)",
        {
            "num_workers": 0,
            "num_envs_per_worker": 1,
            "rollout_fragment_length": 32,
            "model_hiddens": (64, 64),
            "buffer_size": 50_000,
            "train_batch_size": 512,
            "training_intensity": 512.0,
            "lr": 3e-4,
            "critic_lr": 3e-4,
            "initial_alpha": 0.1,
            "alpha_lr": 0.0,
            "gamma": 0.9999,
            "tau": 0.01,
            "learning_starts": 512,
            "gsde": True,
            "gsde_steps": 32,
            "log_std_init": -3.67,
        },
        budget=50_000,
    ),
)


def soft_q_target(
    batch: dict[str, torch.Tensor],
    next_q: torch.Tensor,
    next_logp: torch.Tensor,
    alpha: torch.Tensor,
    next_probs: torch.Tensor | None = None,
) -> torch.Tensor:
    """``r + discount * (1 - terminated) * V(s')`` with the soft value
    ``V(s') = E_a'[Q(s', a') - alpha log pi(a'|s')]``: one sampled ``a'`` for Box actions,
    the exact sum over actions (weighted by ``next_probs``) for Discrete ones."""
    soft = next_q - alpha * next_logp
    value = soft if next_probs is None else (next_probs * soft).sum(-1)
    alive = 1.0 - batch[TERMINATEDS].float()
    return batch[REWARDS] + batch[DISCOUNTS] * alive * value


# -- acting ------------------------------------------------------------------------------
class SoftActorPolicy(Policy):
    """What either variant acts with: the actor alone (no value head); fragments become
    n-step transitions."""

    def make_module(self) -> ActingModule:
        cfg, obs_space = self.config, self.input_space
        n_inputs = distribution_for(self.action_space)[1]
        check_gsde(self.action_space, cfg.gsde)
        gaussian = {"log_std_init": cfg.log_std_init, "gsde": cfg.gsde}
        return build_module(
            cfg,
            obs_space,
            self.action_space,
            lambda trunk: ActorNetwork(
                obs_space, n_inputs, hiddens=cfg.model_hiddens, trunk=trunk, **gaussian
            ),
        )

    @inference
    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self._as_numpy(self.draw(self.forward(self._as_tensor(obs)), explore)), {}

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        return n_step_transitions(fragment, n=self.config.n_step, gamma=self.config.gamma)


class SACPolicy(SoftActorPolicy):
    """Box actions: a tanh-squashed Gaussian in (-1, 1), rescaled to the Box's bounds."""

    @classmethod
    def check_action_space(cls, space: gym.Space, config: Config) -> None:
        if isinstance(space, gym.spaces.Discrete):
            raise ConfigError(
                f"SAC needs a Box action space, got {space}; "
                "set discrete=true for the discrete-action variant"
            )
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"SAC needs 1-D Box actions, got {space}")
        if not np.isfinite([space.low, space.high]).all():  # rescaled into them: NaN
            raise ConfigError(
                f"SAC squashes its actions into the action space's bounds, and {space} has "
                "infinite ones: give the env finite bounds (the range its actions act in)"
            )

    def distribution_class(self) -> type[Distribution]:
        return SquashedGaussian

    def action_array(self, actions: np.ndarray) -> np.ndarray:
        low, high = self.action_space.low, self.action_space.high
        return low + (actions + 1.0) * 0.5 * (high - low)

    def greedy_env_actions(self, obs: torch.Tensor) -> torch.Tensor:
        actions = self.dist_cls(self.forward(obs).dist_inputs).mode()
        low, high = bounds(self.action_space, actions)
        return low + (actions + 1.0) * 0.5 * (high - low)


class SACDiscretePolicy(SoftActorPolicy):
    """Discrete actions: a categorical actor."""

    @classmethod
    def check_action_space(cls, space: gym.Space, config: Config) -> None:
        if not isinstance(space, gym.spaces.Discrete):
            raise ConfigError(f"SAC with discrete=true needs a Discrete action space, got {space}")

    def distribution_class(self) -> type[Distribution]:
        return Categorical


# -- learning ----------------------------------------------------------------------------
class Temperature(nn.Module):
    """SAC's learned entropy weight, as ``log alpha``."""

    def __init__(self, initial_alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha)))

    def forward(self) -> torch.Tensor:
        """alpha, detached: the losses of the actor and critics treat it as a constant."""
        return self.log_alpha.detach().exp()


@contextlib.contextmanager
def frozen(module: torch.nn.Module) -> Iterator[None]:
    """``module``'s parameters record no gradient meanwhile (gradients still flow through
    it to its inputs)."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class SoftActorCriticLearner(Learner):
    """What both variants learn: twin critics with soft-updated targets (clipped double
    Q), the actor, and the temperature, each with its own optimiser. A variant supplies
    the soft value of the next states, the critics' Q of the taken actions, and the actor
    loss."""

    shuffle = False  # replayed rows are a random sample already
    # the actor's loss reads the critics frozen and the temperature detached: one backward
    disjoint_losses = True

    def __init__(self, policy: Policy, config: SACConfig) -> None:
        super().__init__(policy, config)
        self.q = TwinQ(policy.input_space, policy.action_space, hiddens=config.model_hiddens)
        self.q = self.q.to(self.device)
        self.q_target = self.target_of(self.q)
        self.temperature = Temperature(config.initial_alpha).to(self.device)
        self.target_entropy = (
            self.default_target_entropy()
            if config.target_entropy is None
            else config.target_entropy
        )

    def default_target_entropy(self) -> float:
        raise NotImplementedError

    def optimized(self) -> dict[str, Optimized]:
        cfg = self.config
        return {
            "critic": Optimized(list(self.q.parameters()), cfg.critic_lr, eps=1e-8),
            "actor": Optimized(list(self.module.parameters()), cfg.lr),
            "alpha": Optimized([self.temperature.log_alpha], cfg.alpha_lr, eps=1e-8),
        }

    def next_terms(self, next_obs: torch.Tensor) -> tuple:
        """``(next_q, next_logp, next_probs)`` of the next states, for
        ``soft_q_target``: the target critics' Q and the actor's log-probs."""
        raise NotImplementedError

    def taken_q(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Both critics' Q of the taken actions, ``[2, B]``."""
        return self.q.taken(self.critic_inputs(obs), actions)

    def actor_loss(
        self, obs: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor loss and the policy's entropy (estimated, for Box actions)."""
        raise NotImplementedError

    def critic_inputs(self, obs: Any) -> Any:
        """What the critics read of a batch's observations: what the actor reads."""
        return self.policy.inputs(obs)[0]

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict]:
        alpha = self.temperature()
        with torch.no_grad():
            next_q, next_logp, next_probs = self.next_terms(batch[NEXT_OBS])
            target = soft_q_target(batch, next_q, next_logp, alpha, next_probs)
        q1, q2 = self.taken_q(batch[OBS], batch[ACTIONS])
        weights = batch[WEIGHTS] if WEIGHTS in batch else torch.ones_like(q1)
        critic_loss = 0.5 * (weights * ((q1 - target).pow(2) + (q2 - target).pow(2))).mean()
        with frozen(self.q):  # the actor's loss moves the actor only
            actor_loss, entropy = self.actor_loss(batch[OBS], alpha.detach())
        entropy = entropy.detach()
        # log_alpha * (entropy - target): its gradient is the bracket
        alpha_loss = self.temperature.log_alpha * (entropy.mean() - self.target_entropy)
        td_error = (q1 - target).detach()
        losses = {"critic": critic_loss, "actor": actor_loss, "alpha": alpha_loss}
        stats = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "entropy": entropy.mean(),
            "q_mean": q1.detach().mean(),
            "td_error_abs_mean": td_error.abs().mean(),
            "td_error": td_error,
        }
        return losses, stats


class SACLearner(SoftActorCriticLearner):
    """Box actions: one reparameterised next action per row, Q of state and action."""

    def default_target_entropy(self) -> float:
        return -float(self.policy.action_space.shape[0])

    def next_terms(self, next_obs: torch.Tensor) -> tuple:
        next_actions, next_logp = self.policy.distribution(next_obs)[0].rsample()
        return (
            self.q_target(self.critic_inputs(next_obs), next_actions).min(0).values,
            next_logp,
            None,
        )

    def actor_loss(self, obs: torch.Tensor, alpha: torch.Tensor) -> tuple:
        actions, logp = self.policy.distribution(obs)[0].rsample()
        return (alpha * logp - self.q(self.critic_inputs(obs), actions).min(0).values).mean(), -logp


class SACDiscreteLearner(SoftActorCriticLearner):
    """Discrete actions: exact expectations over the actions, Q of every action."""

    def default_target_entropy(self) -> float:
        return 0.98 * math.log(self.policy.action_space.n)

    def next_terms(self, next_obs: torch.Tensor) -> tuple:
        logp = self.policy.distribution(next_obs)[0].logits
        return self.q_target(self.critic_inputs(next_obs)).min(0).values, logp, logp.exp()

    def actor_loss(self, obs: torch.Tensor, alpha: torch.Tensor) -> tuple:
        logp = self.policy.distribution(obs)[0].logits
        probs = logp.exp()
        loss = (
            (probs * (alpha * logp - self.q(self.critic_inputs(obs)).min(0).values)).sum(-1).mean()
        )
        return loss, -(probs * logp).sum(-1)


def variant(config: Config) -> tuple[type[Policy], type[Learner]]:
    """The Box variant, or the Discrete one when ``config.discrete``."""
    if config.discrete:
        return SACDiscretePolicy, SACDiscreteLearner
    return SACPolicy, SACLearner


def execution_plan(workers: WorkerSet, config: SACConfig) -> LocalIterator[dict[str, Any]]:
    """DQN's replay plan (rollouts -> store; replay -> train -> priorities -> targets) with
    a soft target update after every SGD step."""
    update_targets = UpdateTargets(workers.learner.update_targets, tau=config.tau)
    return replay_plan(workers, config, update_targets)


ALGORITHM = AlgorithmSpec(
    name="sac",
    summary="Soft Actor-Critic: squashed Gaussian or discrete actions, twin Q, learned alpha",
    config_cls=SACConfig,
    policy_cls=SACPolicy,
    learner_cls=SACLearner,
    variant=variant,
    execution_plan=execution_plan,
    presets=PRESETS,
)
