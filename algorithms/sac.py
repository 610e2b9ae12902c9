"""SAC: Soft Actor-Critic (Haarnoja et al. 2018, https://arxiv.org/abs/1812.05905), and its
discrete-action variant (Christodoulou 2019, https://arxiv.org/abs/1910.07207).

A stochastic actor maximises Q plus an entropy bonus; twin Q-networks with soft-updated
targets (clipped double Q) learn the soft value; the temperature alpha is learned so the
policy's entropy tracks ``target_entropy``. Box actions use a tanh-squashed Gaussian; set
``discrete=True`` for Discrete action spaces. Like DQN, the plan runs a rollout branch into
a replay buffer and a training branch side by side.

Example:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("sac", env="Pendulum-v1")
    >>> algo.train()["env_steps_sampled"] >= algo.config.min_env_steps_per_iteration
    True
    >>> algo.stop()
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.config import ConfigError, param
from flowrl.distributions import Categorical, SquashedGaussian
from flowrl.iter import LocalIterator
from flowrl.models import TwinQ, mlp, vector_obs_size
from flowrl.ops import UpdateTargets
from flowrl.plans import replay_plan
from flowrl.policy import (
    Policy,
    adam,
    bounds,
    inference,
    load_module_weights,
    load_optimizer_state,
    module_weights,
)
from flowrl.postprocessing import DISCOUNTS, NEXT_OBS, n_step_transitions
from flowrl.presets import MUJOCO, Preset
from flowrl.replay import WEIGHTS, ReplayConfig
from flowrl.sample_batch import ACTIONS, OBS, REWARDS, TERMINATEDS, Fragment, SampleBatch
from flowrl.spec import AlgorithmSpec
from flowrl.worker import WorkerSet


@dataclass
class SACConfig(ReplayConfig):
    """SAC settings. The defaults take one SGD step per env step in one process (no Ray
    start-up) and reach -250 on Pendulum-v1 within 20k env steps."""

    algo_name: ClassVar[str] = "sac"
    default_stop_timesteps: ClassVar[int] = 100_000

    num_workers: int = 0
    num_envs_per_worker: int = 1
    rollout_fragment_length: int = 1
    discrete: bool = param(False, "the discrete-action variant, for Discrete action spaces")
    lr: float = 3e-4  # the actor's; the critics and the temperature have their own
    critic_lr: float = param(3e-4, "Q-network learning rate (Adam)", gt=0)
    alpha_lr: float = param(3e-4, "temperature learning rate (Adam)", gt=0)
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


# Settings known to learn these env families, under the user's own values (flowrl.presets)
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


class SACPolicy(Policy):
    """Stochastic actor (``self.model``, what rollout workers need), twin critics with
    target copies, and a learned temperature."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.q = TwinQ(self.observation_space, self.action_space, hiddens=cfg.model_hiddens).to(
            self.device
        )
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.log_alpha = torch.tensor(
            math.log(cfg.initial_alpha), device=self.device, requires_grad=True
        )
        self.actor_params, self.critic_params = (
            list(self.model.parameters()),
            list(self.q.parameters()),
        )
        self.target_params = list(self.q_target.parameters())
        self.target_entropy = self._target_entropy()

    # built on first use, like the actor's optimiser (rollout workers never learn)
    @cached_property
    def critic_optimizer(self) -> torch.optim.Optimizer:
        return adam(self.critic_params, self.config.critic_lr)

    @cached_property
    def alpha_optimizer(self) -> torch.optim.Optimizer:
        return adam([self.log_alpha], self.config.alpha_lr)

    def make_model(self) -> nn.Module:
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        if discrete and not self.config.discrete:
            raise ConfigError(
                f"SAC needs a Box action space, got {self.action_space}; "
                "set discrete=true for the discrete-action variant"
            )
        if self.config.discrete and not discrete:
            raise ConfigError(
                f"discrete=true needs a Discrete action space, got {self.action_space}"
            )
        if not discrete and len(self.action_space.shape) != 1:
            raise ConfigError(f"SAC needs 1-D Box actions, got {self.action_space}")
        n_out = int(self.action_space.n) if discrete else 2 * self.action_space.shape[0]
        n_obs = vector_obs_size(self.observation_space)
        hiddens = self.config.model_hiddens
        return nn.Sequential(
            nn.Flatten(), mlp([n_obs, *hiddens, n_out], out_gain=0.01, activation=nn.ReLU)
        )

    def _target_entropy(self) -> float:
        if self.config.target_entropy is not None:
            return self.config.target_entropy
        if self.config.discrete:
            return 0.98 * math.log(self.action_space.n)
        return -float(self.action_space.shape[0])

    def action_distribution(self, obs: torch.Tensor) -> Categorical | SquashedGaussian:
        inputs = self.model(obs.float())
        return Categorical(inputs) if self.config.discrete else SquashedGaussian(inputs)

    # -- acting --------------------------------------------------------------------------
    @inference
    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        dist = self.action_distribution(self._as_tensor(obs))
        actions = dist.sample() if explore else dist.mode()
        return self._as_numpy(actions), {}

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Squashed actions in (-1, 1) are rescaled to the Box bounds."""
        if self.config.discrete:
            return actions
        low, high = self.action_space.low, self.action_space.high
        return low + (actions + 1.0) * 0.5 * (high - low)

    def greedy_env_actions(self, obs: torch.Tensor) -> torch.Tensor:
        actions = self.action_distribution(obs).mode()
        if self.config.discrete:
            return actions
        low, high = bounds(self.action_space, actions)
        return low + (actions + 1.0) * 0.5 * (high - low)

    def postprocess(self, fragment: Fragment) -> SampleBatch:
        return n_step_transitions(fragment, n=self.config.n_step, gamma=self.config.gamma)

    # -- learning ------------------------------------------------------------------------
    def _policy_terms(self, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Box: a sampled action and its log-prob. Discrete: log-probs and probabilities
        of every action."""
        dist = self.action_distribution(obs)
        if self.config.discrete:
            return dist.logits, dist.logits.exp()
        return dist.rsample()

    def _critic_loss(self, t: dict[str, torch.Tensor], alpha: torch.Tensor):
        with torch.no_grad():
            if self.config.discrete:
                next_logp, next_probs = self._policy_terms(t[NEXT_OBS])
                next_q = self.q_target(t[NEXT_OBS]).min(0).values
            else:
                next_actions, next_logp = self._policy_terms(t[NEXT_OBS])
                next_q = self.q_target(t[NEXT_OBS], next_actions).min(0).values
                next_probs = None
            target = soft_q_target(t, next_q, next_logp, alpha, next_probs)
        if self.config.discrete:
            index = t[ACTIONS].long()[:, None]
            q1, q2 = self.q(t[OBS]).gather(2, index.expand(2, -1, -1)).squeeze(2)
        else:
            q1, q2 = self.q(t[OBS], t[ACTIONS])
        weights = t[WEIGHTS] if WEIGHTS in t else torch.ones_like(q1)
        loss = 0.5 * (weights * ((q1 - target).pow(2) + (q2 - target).pow(2))).mean()
        return loss, q1, (q1 - target).detach()

    def _actor_loss(self, obs: torch.Tensor, alpha: torch.Tensor):
        """The actor loss and the policy's entropy (estimated, for Box actions)."""
        if self.config.discrete:
            logp, probs = self._policy_terms(obs)
            q = self.q(obs).min(0).values
            loss = (probs * (alpha * logp - q)).sum(-1).mean()
            entropy = -(probs * logp).sum(-1)
        else:
            actions, logp = self._policy_terms(obs)
            loss = (alpha * logp - self.q(obs, actions).min(0).values).mean()
            entropy = -logp
        return loss, entropy.detach()

    def learn_on_batch(self, batch: SampleBatch, **kwargs: Any) -> dict[str, Any]:
        """One SGD step of the critics, then the actor, then the temperature."""
        t = self._tensors(batch)
        alpha = self.log_alpha.detach().exp()
        critic_loss, q, td_error = self._critic_loss(t, alpha)
        self._step(self.critic_optimizer, critic_loss, self.critic_params, t)
        actor_loss, entropy = self._actor_loss(t[OBS], alpha)
        self._step(self.optimizer, actor_loss, self.actor_params, t)  # critics: no gradient
        # alpha loss: log_alpha * (entropy - target); its gradient is the bracket
        self.log_alpha.grad = (entropy.mean() - self.target_entropy).reshape(())
        self.alpha_optimizer.step()
        self.num_updates += 1
        return {
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "alpha": float(alpha),
            "entropy": float(entropy.mean()),
            "q_mean": float(q.detach().mean()),
            "td_error_abs_mean": float(td_error.abs().mean()),
            "td_error": td_error.cpu().numpy(),
        }

    def _step(
        self,
        optimizer: torch.optim.Optimizer,
        loss: torch.Tensor,
        params: list[torch.Tensor],
        batch: dict[str, torch.Tensor],
    ) -> None:
        """Gradients of ``loss`` for ``params`` alone (clipped, checked finite), then one
        optimiser step."""
        for p, g in zip(params, torch.autograd.grad(loss, params), strict=True):
            p.grad = g
        self.clip_gradients(params, loss, batch)
        optimizer.step()

    @torch.no_grad()
    def update_target(self, tau: float = 1.0) -> None:
        """target <- tau * online + (1 - tau) * target."""
        torch._foreach_lerp_(self.target_params, self.critic_params, tau)

    # -- state ---------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {
            **super().get_state(),
            "q": module_weights(self.q),
            "q_target": module_weights(self.q_target),
            "log_alpha": float(self.log_alpha.detach()),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        load_module_weights(self.q, state["q"])
        load_module_weights(self.q_target, state["q_target"])
        with torch.no_grad():
            self.log_alpha.fill_(state["log_alpha"])
        cfg = self.config
        load_optimizer_state(self.critic_optimizer, state["critic_optimizer"], cfg.critic_lr)
        load_optimizer_state(self.alpha_optimizer, state["alpha_optimizer"], cfg.alpha_lr)


def execution_plan(workers: WorkerSet, config: SACConfig) -> LocalIterator[dict[str, Any]]:
    """DQN's replay plan (rollouts -> store; replay -> train -> priorities -> targets) with
    a soft target update after every SGD step."""
    policy = workers.local_worker.policy
    return replay_plan(workers, config, UpdateTargets(policy.update_target, tau=config.tau))


ALGORITHM = AlgorithmSpec(
    name="sac",
    summary="Soft Actor-Critic: squashed Gaussian or discrete actions, twin Q, learned alpha",
    config_cls=SACConfig,
    policy_cls=SACPolicy,
    execution_plan=execution_plan,
    presets=PRESETS,
)
