"""Presets: settings known to learn a family of envs, applied under your own values.

A run on an Atari id (``ALE/...``) or a gymnasium MuJoCo env gets its algorithm's preset for
that family, when there is one, in place of the CartPole-sized defaults; anything you set
yourself (``--set``, a config file, keyword arguments) still wins, and ``preset=false``
turns presets off. ``flowrl list ALGO --env ID`` shows what a run would use. Atari ids also
get ale-py's standard preprocessing and the Nature CNN whatever the preset (see
:mod:`flowrl.envs` and :mod:`flowrl.models`).

Each preset names where its numbers come from. Where the source schedules a value (a
linearly decaying learning rate, say), the preset takes its starting value: flowrl has no
schedules yet.

Example:
    >>> preset_for("ppo", "ALE/Pong-v5").values["clip_param"]
    0.1
    >>> preset_for("ppo", "CartPole-v1") is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowrl.envs import is_atari, resolve_env

ATARI, MUJOCO = "atari", "mujoco"


@dataclass(frozen=True)
class Preset:
    """An algorithm's settings for a family of envs, and where they come from."""

    algo: str
    family: str
    source: str
    values: dict[str, Any]


_PRESETS = [
    # -- Atari ----------------------------------------------------------------------
    Preset(
        "ppo",
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
        "dqn",
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
        "apex",
        ATARI,
        "the Ape-X paper's Atari settings (Horgan et al. 2018): 3-step returns, batch 512, "
        "lr 6.25e-5 (0.00025 / 4), target copy every 2500 updates, grad clip 40; "
        "buffer 200k here (the paper's 2M frames need ~55 GB stored this way)",
        {
            "n_step": 3,
            "train_batch_size": 512,
            "lr": 6.25e-5,
            "grad_clip": 40.0,
            "target_network_update_freq": 2_500 * 512,
            "buffer_size": 200_000,
            "learning_starts": 50_000,
            "rollout_fragment_length": 50,
            "num_envs_per_worker": 4,
        },
    ),
    Preset(
        "impala",
        ATARI,
        "RLlib's tuned pong-impala example (after the IMPALA paper): 50-step fragments, "
        "500-row batches, lr 5e-4 (decayed there), entropy 0.01, grad clip 40, one pass",
        {
            "rollout_fragment_length": 50,
            "train_batch_size": 500,
            "num_envs_per_worker": 5,
            "lr": 5e-4,
            "entropy_coeff": 0.01,
            "vf_loss_coeff": 0.5,
            "grad_clip": 40.0,
            "num_sgd_iter": 1,
        },
    ),
    Preset(
        "appo",
        ATARI,
        "RLlib's tuned pong-appo example: V-trace, no KL term, 50-step fragments, "
        "4000-row batches, lr 6e-4, 8 envs per worker",
        {
            "rollout_fragment_length": 50,
            "train_batch_size": 4000,
            "num_envs_per_worker": 8,
            "lr": 6e-4,
            "kl_coeff": 0.0,
        },
    ),
    Preset(
        "a3c",
        ATARI,
        "RLlib's tuned pong-a3c example (after Mnih et al. 2016): 20-step fragments, "
        "lr 1e-4, entropy 0.01, grad clip 40",
        {
            "rollout_fragment_length": 20,
            "num_envs_per_worker": 1,
            "lr": 1e-4,
            "entropy_coeff": 0.01,
            "grad_clip": 40.0,
        },
    ),
    # -- MuJoCo ---------------------------------------------------------------------
    Preset(
        "ppo",
        MUJOCO,
        "the PPO paper's MuJoCo settings (Schulman et al. 2017, Table 3): 2048 steps per "
        "update, 10 epochs of 64-row minibatches, lr 3e-4, lambda 0.95, clip 0.2, with "
        "observations and rewards normalised as OpenAI Baselines' VecNormalize does",
        {
            "num_workers": 0,
            "num_envs_per_worker": 4,
            "rollout_fragment_length": 512,
            "train_batch_size": 2048,
            "sgd_minibatch_size": 64,
            "num_sgd_iter": 10,
            "lr": 3e-4,
            "gae_lambda": 0.95,
            "clip_param": 0.2,
            "entropy_coeff": 0.0,
            "grad_clip": 0.5,
            "normalize_observations": True,
            "normalize_rewards": True,
        },
    ),
    Preset(
        "sac",
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
]


def env_family(env: str) -> str | None:
    """``"atari"`` for ale-py's ids, ``"mujoco"`` for gymnasium's MuJoCo envs, else None."""
    if is_atari(env):
        return ATARI
    try:
        target = resolve_env(env)
    except Exception:  # an unknown env is reported where it is used, not here
        return None
    entry = getattr(target, "entry_point", None)
    if isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco"):
        return MUJOCO
    return None


def preset_for(algo: str, env: str) -> Preset | None:
    """The preset of ``algo`` (a name) for ``env``'s family, if it has one."""
    family = env_family(env)
    return next((p for p in _PRESETS if p.algo == algo and p.family == family), None)


def presets() -> list[Preset]:
    """Every preset, for docs and ``flowrl list``."""
    return list(_PRESETS)
