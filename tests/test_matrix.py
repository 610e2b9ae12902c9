"""Every feature in every kind of env: a gymnasium env (vector env lanes), a PettingZoo
Parallel env and a turn-based game, each with a Dict observation holding an action mask,
trained by one PPO run with an LSTM, observation normalisation and episode hooks at once,
then evaluated greedily, resumed from its checkpoint and exported to ONNX. Videos of each
kind are in tests/test_evaluation.py and tests/test_multi_agent.py."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl import Algorithm, load_policy
from flowrl.apps.inference import export_policy

KINDS = {
    "vector env": "flowrl.rollout.toy_envs:MaskedChoice",
    "parallel env": "custom_envs:MaskedChoices",
    "turn-based game": "custom_envs:float_tictactoe",
}
EVERY_FEATURE = {
    "use_lstm": True,
    "max_seq_len": 8,
    "normalize_observations": True,
    "callbacks": "custom_callbacks:EpisodeSteps",
}
SMALL = {
    "num_workers": 0,
    "seed": 0,
    "num_envs_per_worker": 4,
    "rollout_fragment_length": 32,
    "train_batch_size": 256,
    "sgd_minibatch_size": 64,
    "num_sgd_iter": 2,
}


@pytest.mark.parametrize("kind", KINDS)
def test_every_feature_at_once_in_every_kind_of_env(kind, tmp_path):
    with Algorithm("ppo", env=KINDS[kind], **EVERY_FEATURE, **SMALL) as algo:
        result = algo.train()
        evaluation = algo.evaluate(3)  # greedy
        path = algo.save(str(tmp_path / "run"))
    assert result["episodes_this_iter"] > 0 and result["custom/steps_mean"] > 0
    losses = [v for k, v in result.items() if k.endswith("policy_loss")]  # by policy or not
    assert losses and np.isfinite(losses).all()
    assert evaluation["episodes"] == 3
    with Algorithm.from_checkpoint(path) as resumed:
        assert resumed.train()["iteration"] == 2
    policy = load_policy(path).policy  # the one policy, shared by the agents
    assert policy.module.recurrent and policy.normalizer.parts
    assert export_policy(path, tmp_path / "policy.onnx").stat().st_size > 0


def test_gsde_explores_in_a_parallel_env_as_in_a_vector_env(tmp_path):
    """gSDE lives in the policy, so the agents of a Parallel env with Box actions explore
    with it as a vector env's lanes do, each agent holding its own draw."""
    with Algorithm("ppo", env="custom_envs:pendulum_pair", gsde=True, **SMALL) as algo:
        result = algo.train()
        evaluation = algo.evaluate(2)
        policy = algo.workers.local_worker.policy
    losses = [v for k, v in result.items() if k.endswith("policy_loss")]
    assert losses and np.isfinite(losses).all() and evaluation["episodes"] == 2
    assert policy.numpy_acting.gsde_draws.value.shape == (8, 64, 1)  # 4 envs x 2 agents
