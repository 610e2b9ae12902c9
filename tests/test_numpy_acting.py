"""Acting in numpy (flowrl.learning.numpy_acting): the same distribution inputs, values and
action distribution as the torch module, following its weights; torch where it must."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl import Config, Policy
from flowrl.core.config import ActorCriticConfig
from flowrl.learning.numpy_acting import NumpyActing

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)


def twins(action_space, config_cls=Config, **config):
    """A policy acting in numpy and one acting in torch, with the same weights."""
    fast = Policy(OBS, action_space, config_cls(**config))
    slow = Policy(OBS, action_space, config_cls(numpy_acting=False, **config))
    slow.set_weights(fast.get_weights())
    assert fast.numpy_acting is not None and slow.numpy_acting is None
    return fast, slow


@pytest.mark.parametrize(
    "action_space, settings",
    [
        (gym.spaces.Discrete(3), {}),
        (gym.spaces.Box(-2, 2, (2,)), {}),
        (gym.spaces.Box(-2, 2, (2,)), {"gsde": True, "log_std_init": -1.0}),
        (gym.spaces.Box(-2, 2, (2,)), {"gsde": True, "use_lstm": True, "lstm_cell_size": 16}),
    ],
    ids=["categorical", "gaussian", "gsde", "gsde-lstm"],
)
def test_numpy_acting_matches_torch(action_space, settings):
    fast, slow = twins(action_space, ActorCriticConfig, **settings)
    obs = np.random.default_rng(0).uniform(-1, 1, (20_000, 4)).astype(np.float32)
    greedy, fast_extras = fast.compute_actions(obs, explore=False)
    torch_greedy, slow_extras = slow.compute_actions(obs, explore=False)
    for name, value in fast_extras.items():
        np.testing.assert_allclose(value, slow_extras[name], rtol=1e-4, atol=1e-5)
    sampled, _ = fast.compute_actions(obs, explore=True)
    assert sampled.dtype == slow.compute_actions(obs[:2])[0].dtype
    if isinstance(action_space, gym.spaces.Discrete):
        assert (greedy == torch_greedy).mean() > 0.999  # (ties of float32 rounding aside)
        probs = torch.softmax(torch.from_numpy(fast_extras["action_dist_inputs"]), -1).numpy()
        freq = np.bincount(sampled, minlength=3) / len(obs)
        np.testing.assert_allclose(freq, probs.mean(0), atol=0.01)
    else:
        np.testing.assert_allclose(greedy, torch_greedy, rtol=1e-4, atol=1e-5)
        noise = (sampled - greedy) / np.exp(fast_extras["action_dist_inputs"][:, 2:])
        assert abs(noise.mean()) < 0.02 and abs(noise.std() - 1) < 0.02


def test_numpy_acting_follows_the_module_s_weights():
    """An optimiser's step in place (a learner in this process) and set_weights both
    reach the numpy copy."""
    fast, slow = twins(gym.spaces.Discrete(2))
    obs = np.ones((3, 4), np.float32)
    before = fast.compute_actions(obs, explore=False)[1]["vf_preds"]
    with torch.no_grad():
        for p in fast.module.parameters():
            p.add_(0.1)
    moved = fast.compute_actions(obs, explore=False)[1]["vf_preds"]
    assert not np.allclose(before, moved)
    fast.set_weights(slow.get_weights())
    np.testing.assert_allclose(fast.compute_actions(obs, explore=False)[1]["vf_preds"], before)


def test_numpy_acting_steps_the_lstm_as_torch_does():
    """With use_lstm: the same outputs and next state, step after step from zeros."""
    config = ActorCriticConfig(use_lstm=True, lstm_cell_size=16)
    fast = Policy(OBS, gym.spaces.Discrete(3), config)
    slow = Policy(
        OBS, gym.spaces.Discrete(3), ActorCriticConfig(**{**vars(config), "numpy_acting": False})
    )
    slow.set_weights(fast.get_weights())
    assert fast.numpy_acting is not None and slow.numpy_acting is None
    rng = np.random.default_rng(0)
    fast_state = slow_state = fast.initial_state(6)
    for _ in range(5):
        obs = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
        _, fast_extras = fast.compute_actions(obs, explore=False, state=fast_state)
        _, slow_extras = slow.compute_actions(obs, explore=False, state=slow_state)
        for name, value in fast_extras.items():
            np.testing.assert_allclose(value, slow_extras[name], rtol=1e-4, atol=1e-5)
        fast_state, slow_state = fast_extras["state_out"], slow_extras["state_out"]


def test_torch_acts_where_numpy_does_not_apply():
    """An action mask, image observations or MultiDiscrete actions keep torch."""
    discrete = gym.spaces.Discrete(2)
    masked = gym.spaces.Dict({"observation": OBS, "action_mask": gym.spaces.MultiBinary(2)})
    assert Policy(masked, discrete, Config()).numpy_acting is None
    image = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert Policy(image, discrete, Config()).numpy_acting is None
    assert NumpyActing.of(Policy(OBS, gym.spaces.MultiDiscrete([2, 3]), Config())) is None


def test_in_process_acting_follows_the_learner_s_steps():
    """With no remote workers the learner steps the acting module itself, with fused Adam
    (which torch's version counters miss): the numpy copy acts with every update."""
    from flowrl import Algorithm

    with Algorithm("ppo", env="CartPole-v1", num_workers=0, train_batch_size=512) as algo:
        policy = algo.workers.local_worker.policies["default"]
        obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
        for _ in range(2):
            algo.train()
            values = policy.compute_actions(obs, explore=False)[1]["vf_preds"]
            with torch.no_grad():
                torch_values = policy.module(torch.from_numpy(obs)).value.numpy()
            np.testing.assert_allclose(values, torch_values, rtol=1e-4, atol=1e-5)


#: epsilon 0: a Q-policy's draws (torch's or numpy's generator) never change an action
GREEDY = {"exploration_initial_eps": 0.0, "exploration_final_eps": 0.0}


def torch_and_numpy_workers(name, env="CartPole-v1", **settings):
    """Worker 1 of an in-process WorkerSet built twice: with the algorithm's torch policy,
    and as a remote worker without torch is (``NumpyPolicy``), with the same weights."""
    from flowrl.rollout.worker import RolloutWorker, WorkerSet, numpy_worker_args
    from flowrl.run.spec import get_algorithm

    spec = get_algorithm(name)
    config = spec.config_cls(env=env, num_workers=0, num_envs_per_worker=3,
                             rollout_fragment_length=16, **settings)  # fmt: skip
    workers = WorkerSet(policy_cls=spec.policy_cls, config=config)
    light_args = numpy_worker_args(workers.local_worker)
    assert light_args is not None
    heavy = RolloutWorker(policy_cls=spec.policy_cls, config=config, worker_index=1)
    light = RolloutWorker(**light_args, worker_index=1)
    weights = workers.local_worker.get_weights()
    heavy.set_weights(weights)
    light.set_weights(weights)
    return heavy, light


@pytest.mark.parametrize(
    "name, settings",
    [
        ("ppo", {}),
        ("ppo", {"use_lstm": True, "max_seq_len": 8}),
        ("ppo", {"normalize_observations": True}),
        ("impala", {}),
        ("dqn", GREEDY),
        ("apex", GREEDY),
    ],
    ids=["gae", "gae-lstm", "gae-normalised", "sequences", "n-step", "n-step-priorities"],
)
def test_a_numpy_worker_samples_the_fragments_a_torch_worker_does(name, settings):
    """The same seed and weights give the same actions, log-probs, values, advantages,
    sequences, n-step rows and priorities, to float32 rounding, from a worker that holds
    no torch policy."""
    from flowrl.learning.numpy_policy import NumpyPolicy

    heavy, light = torch_and_numpy_workers(name, **settings)
    assert isinstance(light.policy, NumpyPolicy)
    assert type(light.config).__module__ == "flowrl.core.config"  # unpickled without torch
    for _ in range(3):  # across fragments: the recurrent state and the envs carry over
        ours, theirs = light.sample().policy_batches, heavy.sample().policy_batches
        (a,), (b,) = ours.values(), theirs.values()
        names = sorted(a.keys())
        assert names == sorted(b.keys())
        for column in names:
            np.testing.assert_allclose(a[column], b[column], rtol=1e-4, atol=1e-5, err_msg=column)
    assert light.parameter_count() == heavy.parameter_count()


def test_a_numpy_worker_explores_with_gsde():
    """A worker without torch draws gSDE's noise itself: its fragments' Gaussians have a
    log std that varies with the state, and each action's log-prob is its own under them."""
    from flowrl.learning.numpy_acting import logp
    from flowrl.learning.numpy_policy import NumpyPolicy

    _, light = torch_and_numpy_workers("ppo", env="Pendulum-v1", gsde=True, log_std_init=-1.0)
    assert isinstance(light.policy, NumpyPolicy) and light.policy.plan.gsde_steps == 4
    (rows,) = light.sample().policy_batches.values()
    log_std = rows["action_dist_inputs"][:, 1]
    assert log_std.std() > 0.01  # (a plain Gaussian's is one number)
    expected = logp(False, rows["action_dist_inputs"], rows["actions"])
    np.testing.assert_allclose(rows["action_logp"], expected, rtol=1e-5, atol=1e-5)


def test_policies_of_their_own_keep_torch_workers():
    """SAC acts with a network of its own, a DQN of your class or on images keeps torch,
    and A3C's workers learn."""
    from flowrl.algorithms.dqn import DQNConfig, DQNPolicy
    from flowrl.learning.numpy_policy import NumpyPolicy
    from flowrl.run.spec import get_algorithm

    sac = get_algorithm("sac")
    assert NumpyPolicy.remote_of(sac.policy_cls(*spaces("Pendulum-v1"), sac.config_cls())) is None
    ppo = get_algorithm("ppo")
    off = ppo.policy_cls(*spaces("CartPole-v1"), ppo.config_cls(numpy_acting=False))
    assert NumpyPolicy.remote_of(off) is None

    class Mine(DQNPolicy):
        def epsilon(self):
            return 0.5

    images = gym.spaces.Box(0, 255, (42, 42, 4), np.uint8)
    for policy in (
        Mine(OBS, gym.spaces.Discrete(2), DQNConfig()),
        DQNPolicy(images, gym.spaces.Discrete(2), DQNConfig()),
        DQNPolicy(OBS, gym.spaces.Discrete(2), DQNConfig(numpy_acting=False)),
    ):
        assert NumpyPolicy.remote_of(policy) is None
    assert get_algorithm("a3c").workers_learn


@pytest.mark.parametrize("dueling", [True, False])
def test_a_numpy_q_policy_acts_explores_and_prioritises_as_its_torch_one(dueling):
    """Ape-X's remote worker 2 of 3 in numpy: the same Q-values, greedy actions, epsilon
    (its own per worker) and TD errors as in torch; its epsilon-greedy draws at that rate."""
    from flowrl.algorithms.apex import ApexConfig, ApexPolicy
    from flowrl.core.sample_batch import ACTIONS, REWARDS, TERMINATEDS, SampleBatch
    from flowrl.core.sample_batch import OBS as OBS_COLUMN
    from flowrl.learning.numpy_policy import NumpyPolicy, NumpyQPolicy
    from flowrl.learning.postprocessing import DISCOUNTS, NEXT_OBS

    config = ApexConfig(num_workers=3, dueling=dueling, exploration_final_eps=0.5,
                        exploration_timesteps=30_000, worker_epsilon_alpha=1.0)  # fmt: skip
    actions = gym.spaces.Discrete(3)
    heavy = ApexPolicy(OBS, actions, config, worker_index=2)
    light = NumpyPolicy.remote_of(heavy)(OBS, actions, config.portable(), worker_index=2)
    assert isinstance(light, NumpyQPolicy)
    light.set_weights(heavy.get_weights())
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (20_000, 4)).astype(np.float32)
    q_values = heavy.forward(torch.from_numpy(obs)).dist_inputs.detach().numpy()
    np.testing.assert_allclose(light.acting.q_values(obs), q_values, atol=1e-5)
    greedy = q_values.argmax(-1)
    assert np.mean(light.compute_actions(obs, explore=False)[0] == greedy) > 0.999
    light.timesteps = heavy.timesteps = 10_000  # 30k of the run's: at the schedule's end
    assert light.epsilon() == pytest.approx(heavy.epsilon()) == pytest.approx(0.5**1.5)
    explored = light.compute_actions(obs)[0]
    # epsilon's random actions are 2 of 3 times not the greedy one
    assert abs(np.mean(explored != greedy) - 0.5**1.5 * 2 / 3) < 0.015
    assert light.timesteps == 30_000
    batch = SampleBatch({OBS_COLUMN: obs[:500], ACTIONS: rng.integers(3, size=500),
                         NEXT_OBS: obs[500:1000], REWARDS: rng.normal(size=500).astype(np.float32),
                         DISCOUNTS: np.full(500, 0.97, np.float32),
                         TERMINATEDS: rng.random(500) < 0.1})  # fmt: skip
    np.testing.assert_allclose(light.td_errors(batch), heavy.td_errors(batch), atol=1e-5)


def spaces(env):
    one = gym.make(env)
    return one.observation_space, one.action_space


@pytest.mark.ray
def test_remote_workers_act_without_torch(ray_session):
    """A PPO run's remote workers never import torch, and the run learns as it does with
    them in torch; an evaluation worker is the same kind."""
    import sys

    from flowrl import Algorithm

    ray = ray_session
    small = {"num_envs_per_worker": 4, "rollout_fragment_length": 64, "train_batch_size": 512}
    with Algorithm("ppo", env="CartPole-v1", num_workers=2, **small) as algo:
        assert algo.workers.numpy_workers
        for _ in range(3):
            result = algo.train()
        actors = [*algo.workers.remote_workers, algo.workers.make_evaluation_worker()]
        loaded = ray.get(
            [a.__ray_call__.remote(lambda self: "torch" in sys.modules) for a in actors]
        )
        assert loaded == [False, False, False]
        assert result["episode_return_mean"] > 20
