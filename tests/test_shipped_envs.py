"""The envs flowrl ships pass their ecosystem's own checkers: gymnasium's ``check_env`` for
each gymnasium env, PettingZoo's ``parallel_api_test`` for each Parallel env (and its AEC
conversion through ``api_test``)."""

from __future__ import annotations

import warnings

import pytest
from gymnasium.utils.env_checker import check_env

from flowrl.rollout import toy_envs

GYMNASIUM_ENVS = ["StatelessCartPole", "MaskedChoice", "ImageAndVector"]


@pytest.mark.parametrize("name", GYMNASIUM_ENVS)
def test_gymnasium_envs_pass_check_env(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its notes on render modes an env without a spec has
        check_env(getattr(toy_envs, name)(), skip_render_check=True)


def test_parallel_envs_pass_pettingzoo_api_tests():
    from pettingzoo.test import api_test, parallel_api_test
    from pettingzoo.utils.conversions import parallel_to_aec

    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    parallel_api_test(IndependentCartPoles(), num_cycles=200)
    api_test(parallel_to_aec(IndependentCartPoles()), num_cycles=200)


def test_the_shipped_vector_envs_step_as_gymnasium_vector_envs():
    for env in (toy_envs.cartpole_vector(3), toy_envs.SleepyVectorEnv(num_envs=2, step_s=0.0)):
        obs, _ = env.reset(seed=0)
        assert obs.shape[0] == env.num_envs and env.single_observation_space.contains(obs[0])
        obs, rewards, terminated, truncated, _ = env.step(env.action_space.sample())
        assert rewards.shape == terminated.shape == truncated.shape == (env.num_envs,)
        env.close()
