"""DQN: Deep Q-Networks (Mnih et al. 2015, https://www.nature.com/articles/nature14236) with
the Rainbow-era refinements: double Q (van Hasselt et al. 2016), dueling heads (Wang et al.
2016), n-step returns and prioritized replay (Schaul et al. 2016).

Two branches run side by side: rollouts go into a replay buffer, and sampled batches train
the Q-network, whose target copy is refreshed every ``target_network_update_freq`` trained
steps. ``training_intensity`` (env steps trained per env step sampled) sets their ratio.

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("dqn", env="CartPole-v1")
    >>> algo.train()["env_steps_sampled"] >= algo.config.min_env_steps_per_iteration
    True
    >>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from flowrl.core.config import param
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import ACTIONS, OBS, REWARDS, TERMINATEDS
from flowrl.core.schedules import Schedule
from flowrl.learning.distributions import Categorical
from flowrl.learning.epsilon_greedy import EpsilonGreedy
from flowrl.learning.learner import Learner
from flowrl.learning.models import QNetwork
from flowrl.learning.policy import MASKED, Policy, inference
from flowrl.learning.postprocessing import DISCOUNTS, NEXT_OBS
from flowrl.learning.registry import build_module
from flowrl.ops import UpdateTargets
from flowrl.ops.plans import replay_plan
from flowrl.replay import WEIGHTS, ReplayConfig
from flowrl.rollout.worker import WorkerSet
from flowrl.run.presets import ATARI, MOUNTAIN_CAR, Preset
from flowrl.run.spec import AlgorithmSpec

#: the losses on the TD error ``td_loss`` names: Huber (the Nature DQN's error clipping)
#: or squared, elementwise
TD_LOSSES = {"huber": F.smooth_l1_loss, "mse": F.mse_loss}


@dataclass
class DQNConfig(ReplayConfig):
    """DQN settings. The defaults sample in one process (no Ray start-up) and solve
    CartPole-v1 within 200k env steps. Uniform replay is the default: on CartPole-v1,
    prioritized replay with these settings was less reliable across seeds.

    Examples:
        >>> DQNConfig(n_step=1).n_step
        1
    """

    algo_name: ClassVar[str] = "dqn"
    default_stop_timesteps: ClassVar[int] = 500_000

    num_workers: int = 0
    num_envs_per_worker: int = 4
    rollout_fragment_length: int = 4
    lr: float = 1e-3
    grad_clip: float = 10.0
    model_hiddens: tuple[int, ...] = (128, 128)
    # 8 rows trained per row sampled, a target copy every 1000 env steps: the pace that
    # reaches CartPole's 450 within 200k on seeds never tuned on (defaults.md, seeds.py)
    training_intensity: float = 8.0
    target_network_update_freq: int = param(8_000, "env steps trained between target copies", ge=1)
    n_step: int = 3
    double_q: bool = param(True, "pick next actions with the online net (double DQN)")
    dueling: bool = param(True, "dueling value/advantage heads")
    td_loss: str = param(
        "huber", "loss on the TD error: huber (smooth L1) or mse", choices=tuple(TD_LOSSES)
    )
    exploration_initial_eps: float = param(1.0, "epsilon at the start", ge=0, le=1)
    exploration_final_eps: float = param(0.02, "epsilon after the schedule", ge=0, le=1)
    exploration_timesteps: int = param(10_000, "env steps of linear epsilon decay", ge=1)
    exploration_eps: Schedule = param(  # noqa: RUF009
        -1.0,
        "epsilon as a constant or a schedule [[env_steps, eps], ...]; -1: the linear decay of "
        "the three settings above",
        ge=-1,
        le=1,
        schedule=True,
    )
    min_env_steps_per_iteration: int = 1_000


# Settings known to learn these env families, under the user's own values (flowrl.run.presets)
PRESETS = (
    Preset(
        ATARI,
        "RL Baselines3 Zoo's dqn.yml for Atari (the Nature DQN's schedule at 1/10 of its "
        "buffer): 100k buffer, lr 1e-4, batch 32 every 4 env steps, target copy every 1000 "
        "env steps, epsilon 1 -> 0.01 over 1M steps, learning from 100k",
        {
            "buffer_size": 100_000,
            "lr": 1e-4,
            "train_batch_size": 32,
            "rollout_fragment_length": 4,
            "num_envs_per_worker": 1,
            "training_intensity": 8.0,  # 32 rows trained per 4 sampled
            "target_network_update_freq": 8_000,  # rows trained in 1000 env steps
            "learning_starts": 100_000,
            "exploration_timesteps": 1_000_000,
            "exploration_final_eps": 0.01,
            "n_step": 1,
            "min_env_steps_per_iteration": 10_000,
        },
    ),
    Preset(
        MOUNTAIN_CAR,
        "RL Baselines3 Zoo's dqn.yml for MountainCar-v0: 256x256, 10k buffer, lr 4e-3, 8 "
        "batches of 128 every 16 env steps, target copy every 600 env steps, gamma 0.98, "
        "epsilon 1 -> 0.07 over 24k steps, learning from 1k; its 120k env steps unless told "
        "(seed 0 scored -112 greedy there, -142 at DQN's default 500k); in process, with "
        "its one env (in an automatic layout's 16 envs x 1 step seed 0 stayed at -200)",
        {
            "num_workers": 0,
            "model_hiddens": (256, 256),
            "buffer_size": 10_000,
            "lr": 4e-3,
            "train_batch_size": 128,
            "num_envs_per_worker": 1,
            "rollout_fragment_length": 16,
            "training_intensity": 64.0,  # 8 x 128 rows trained per 16 sampled
            "target_network_update_freq": 38_400,  # rows trained in 600 env steps
            "learning_starts": 1_000,
            "gamma": 0.98,
            "n_step": 1,
            "exploration_timesteps": 24_000,
            "exploration_final_eps": 0.07,
        },
        budget=120_000,
    ),
)


class DQNPolicy(EpsilonGreedy, Policy):
    """Epsilon-greedy over a Q-network (the acting module's ``dist_inputs`` are the
    Q-values; the schedule is ``EpsilonGreedy``'s); fragments become n-step transitions.
    Remote workers act with an MLP Q-network in numpy, without torch (``NumpyQPolicy``)."""

    action_spaces = (gym.spaces.Discrete,)

    def make_module(self) -> nn.Module:
        cfg, obs_space, action_space = self.config, self.input_space, self.action_space
        return build_module(
            cfg,
            obs_space,
            action_space,
            lambda trunk: QNetwork(
                obs_space, action_space, hiddens=cfg.model_hiddens, dueling=cfg.dueling, trunk=trunk
            ),
        )

    @inference
    def compute_actions(
        self, obs: np.ndarray, *, explore: bool = True
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        q_values = self.forward(self._as_tensor(obs)).dist_inputs.cpu()
        greedy = q_values.argmax(-1)
        if not explore:
            return greedy.numpy(), {}
        n = len(greedy)
        if self.masked:  # uniform over the valid actions (the masked ones hold MASKED)
            random_actions = Categorical((q_values == MASKED).float() * MASKED).sample()
        else:
            random_actions = torch.randint(0, int(self.action_space.n), (n,))
        actions = torch.where(torch.rand(n) < self.epsilon(), random_actions, greedy)
        self.timesteps += n
        return actions.numpy(), self.acting_extras(q_values.numpy())

    def greedy_env_actions(self, obs: torch.Tensor) -> torch.Tensor:
        return self.forward(obs).dist_inputs.argmax(-1)

    @inference
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        return self._as_numpy(self.forward(self._as_tensor(obs)).dist_inputs)


def q_and_targets(
    policy: Policy, target: nn.Module, batch: dict[str, torch.Tensor], *, double_q: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Q(s, a) of the ``policy``'s Q-network and its n-step (double) Q-learning targets,
    bootstrapped from ``target``, over the valid next actions of a masked observation;
    their difference is the TD error."""
    q_values = policy.forward(batch[OBS]).dist_inputs
    q = q_values.gather(1, batch[ACTIONS].long()[:, None]).squeeze(1)
    with torch.no_grad():
        next_target = policy.forward(batch[NEXT_OBS], module=target).dist_inputs
        chooser = policy.forward(batch[NEXT_OBS]).dist_inputs if double_q else next_target
        next_q = next_target.gather(1, chooser.argmax(1, keepdim=True)).squeeze(1)
        alive = 1.0 - batch[TERMINATEDS].float()
        y = batch[REWARDS] + batch[DISCOUNTS] * alive * next_q
    return q, y


class DQNLearner(Learner):
    """The (double) Q-learning loss (Huber or squared, weighted by prioritized replay's
    importance weights), bootstrapped from a target copy of the Q-network."""

    shuffle = False  # replayed rows are a random sample already

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target = self.target_of(self.module)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        q, target = q_and_targets(self.policy, self.target, batch, double_q=self.config.double_q)
        td_loss = TD_LOSSES[self.config.td_loss]
        if WEIGHTS in batch:  # prioritized replay's importance weights
            loss = (batch[WEIGHTS] * td_loss(q, target, reduction="none")).mean()
        else:
            loss = td_loss(q, target)
        td_error = (q - target).detach()
        stats = {
            "loss": loss.detach(),
            "q_mean": q.mean().detach(),
            "td_error_abs_mean": td_error.abs().mean(),
            "td_error": td_error,
        }
        return loss, stats


def execution_plan(workers: WorkerSet, config: DQNConfig) -> LocalIterator[dict[str, Any]]:
    """The replay plan with hard target copies every ``target_network_update_freq``."""
    period = config.target_network_update_freq
    return replay_plan(
        workers, config, UpdateTargets(workers.learner.update_targets, period=period)
    )


ALGORITHM = AlgorithmSpec(
    name="dqn",
    summary="Deep Q-Networks: double Q, dueling heads, n-step, uniform or prioritized replay",
    config_cls=DQNConfig,
    policy_cls=DQNPolicy,
    learner_cls=DQNLearner,
    execution_plan=execution_plan,
    presets=PRESETS,
)
