"""The learner on a CUDA GPU (``device=cuda``): every algorithm trains there in-process, its
checkpoint loads and acts on the CPU, and PPO learns CartPole there as on the CPU.

These run only where torch sees a GPU (CI has none; docs/performance.md, "The learner on
a GPU", says where they ran); ``FLOWRL_TEST_DEVICE=cpu`` runs the same checks on the CPU.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from reach import reach

from flowrl import Algorithm
from flowrl.apps.inference import export_policy, load_policy

DEVICE = os.environ.get("FLOWRL_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(), reason="torch sees no CUDA GPU"
)

#: each algorithm in-process, a couple of hundred env steps an iteration, and the features
#: whose tensors have a place to go: recurrent state with masks, masked Q-values, a Dict of
#: an image and a vector, normalised observations, several policies
TOY = "flowrl.rollout.toy_envs:"
AGENTS = "flowrl.rollout.toy_multi_agent:IndependentCartPoles"
PPO = dict(train_batch_size=256, sgd_minibatch_size=64)
REPLAY = dict(learning_starts=64, min_env_steps_per_iteration=200)
CASES = {
    "ppo": ("ppo", "CartPole-v1", PPO),
    "appo": ("appo", "CartPole-v1", dict(train_batch_size=256)),
    "impala": ("impala", "CartPole-v1", dict(train_batch_size=256)),
    "a3c": ("a3c", "CartPole-v1", dict()),
    "dqn": ("dqn", "CartPole-v1", REPLAY),
    "apex": ("apex", "CartPole-v1", dict(replay_shards=0, learning_starts=64)),
    "sac": ("sac", "Pendulum-v1", REPLAY),
    "ppo-lstm-masks": ("ppo", TOY + "MaskedRecall", dict(PPO, use_lstm=True)),
    "dqn-masks": ("dqn", TOY + "MaskedChoice", REPLAY),
    "ppo-image-and-vector": ("ppo", TOY + "ImageAndVector", dict(PPO, normalize_observations=True)),
    "ppo-multi-agent": ("ppo", AGENTS, dict(PPO, policy_mapping="independent")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_algorithm_learns_on_the_device_and_its_checkpoint_acts_on_the_cpu(case, tmp_path):
    algo, env, settings = CASES[case]
    if env == AGENTS:
        pytest.importorskip("pettingzoo")
    trainer = Algorithm(algo, env=env, num_workers=0, device=DEVICE, seed=0, **settings)
    for pid in trainer.workers.learner.policy_ids:
        assert next(trainer.workers.learner[pid].module.parameters()).device.type == DEVICE
    for _ in range(2):
        result = trainer.train()
    assert result["env_steps_trained"] > 0
    assert all(math.isfinite(v) for k, v in result.items() if k.startswith("learner/"))
    checkpoint = trainer.save(tmp_path / "checkpoint")
    trainer.stop()
    again = Algorithm.from_checkpoint(checkpoint, in_process=True, device="cpu")
    assert again.evaluate(1)["episodes"] == 1
    again.stop()
    if env == AGENTS:
        return  # load_policy and exports take one policy id; the checkpoint's are tested above
    policy = load_policy(checkpoint)
    spaces = policy.policy.observation_space, policy.policy.action_space
    acted = policy.compute_action(spaces[0].sample())
    action = acted[0] if isinstance(acted, tuple) else acted  # (action, state) when recurrent
    assert spaces[1].contains(np.asarray(action, spaces[1].dtype))
    assert export_policy(checkpoint, tmp_path / "policy.pt").stat().st_size > 0


def test_ppo_learns_cartpole_with_its_learner_on_the_device():
    """test_learning.py's in-process PPO test (its threshold, budget and seed), on the device."""
    trainer = Algorithm("ppo", env="CartPole-v1", num_workers=0, device=DEVICE, seed=1)
    summary = reach(trainer, 150, 100_000)
    assert summary["stopped_by"] == "reward", summary
