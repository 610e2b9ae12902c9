"""The Python API: train, save/restore, evaluate, custom plans, determinism."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv

import flowrl
from flowrl import Algorithm, ConfigError, register_env
from flowrl.apps.inference import OTHER_METHODS as POLICY_METHODS
from flowrl.ops import ParallelRollouts, StandardMetricsReporting, TrainOneStep
from flowrl.run.algorithm import OTHER_METHODS

FAST = dict(num_workers=0, num_envs_per_worker=2, rollout_fragment_length=32, train_batch_size=64)


def test_train_save_restore_keeps_weights_counters_and_optimizer(tmp_path):
    algo = Algorithm("ppo", env="CartPole-v1", **FAST)
    algo.train()
    result = algo.train()
    path = algo.save(tmp_path / "ckpt")
    clone = Algorithm.from_checkpoint(path)
    a, b = algo.workers.local_worker.get_weights(), clone.workers.local_worker.get_weights()
    assert list(a) == list(b) == ["default"]
    assert all(np.array_equal(a["default"][k], b["default"][k]) for k in a["default"])
    assert clone.iteration == 2
    nxt = clone.train()
    assert nxt["iteration"] == 3 and nxt["env_steps_sampled"] > result["env_steps_sampled"]
    assert clone.workers.learner["default"].optimizers["model"].state_dict()["state"]
    algo.stop()
    clone.stop()


def test_training_goes_on_after_an_interrupt():
    """A notebook's interrupt raises KeyboardInterrupt inside train(), which closed the
    plan's generators: every later train() raised 'the execution plan ... ended'."""
    calls = iter(range(1000))

    def interrupted_once(workers, config):
        def fragment(batch):
            if next(calls) == 1:  # the second fragment of the run, in whichever plan
                raise KeyboardInterrupt
            return batch

        rollouts = ParallelRollouts(workers, mode="bulk_sync").for_each(fragment)
        return StandardMetricsReporting(rollouts.for_each(TrainOneStep(workers)), workers, config)

    with Algorithm("ppo", env="CartPole-v1", plan=interrupted_once, **FAST) as algo:
        first = algo.train()
        with pytest.raises(KeyboardInterrupt):
            algo.train()
        after = algo.train()
    assert after["iteration"] == first["iteration"] + 1
    assert after["env_steps_trained"] > first["env_steps_trained"]


def test_a_result_key_of_rllib_or_sb3_names_flowrls_key():
    with Algorithm("ppo", env="CartPole-v1", **FAST) as algo:
        result = algo.train()
    for theirs, ours in [
        ("episode_reward_mean", "episode_return_mean"),  # RLlib's old API stack
        ("env_runners/episode_return_mean", "episode_return_mean"),  # its new one
        ("rollout/ep_rew_mean", "episode_return_mean"),  # Stable-Baselines3's logger
        ("timesteps_total", "env_steps_sampled"),
    ]:
        with pytest.raises(KeyError, match=f"flowrl's name for it: '{ours}'"):
            result[theirs]
    with pytest.raises(KeyError, match="did you mean 'episode_len_mean'"):
        result["episode_length_mean"]
    with pytest.raises(KeyError, match="did you mean 'episode_return_mean'"):
        result["episode_return"]  # (difflib's nearest is episode_return_min)
    with pytest.raises(KeyError, match="every evaluation_interval iterations"):
        result["evaluation/episode_return_mean"]
    assert result.get("episode_reward_mean") is None and "episode_reward_mean" not in result


def test_importing_an_algorithm_class_as_sb3_and_rllib_do_names_flowrls_way():
    """``from flowrl import PPO`` was Python's bare "cannot import name 'PPO'"."""
    with pytest.raises(ImportError, match=re.escape("flowrl.Algorithm('ppo', env=...)")):
        from flowrl import PPO  # noqa: F401
    with pytest.raises(ImportError, match=re.escape("flowrl.Algorithm('apex', env=...)")):
        from flowrl import ApeX  # noqa: F401
    assert not hasattr(flowrl, "ppo_typo")  # any other name: an AttributeError, as before


def test_a_method_of_sb3_or_rllib_names_flowrls_way_which_runs(tmp_path):
    """SB3's model.learn(total_timesteps=N) and model.predict(obs), RLlib's
    algo.compute_single_action(obs): each was a bare AttributeError. Each way named runs."""
    with Algorithm("ppo", env="CartPole-v1", **FAST) as algo:
        policy = flowrl.load_policy(algo)
        names = {"algo": algo, "flowrl": flowrl, "Algorithm": Algorithm, "policy": policy,
                 "N": 64, "obs": np.zeros(4, np.float32), "path": tmp_path / "checkpoint",
                 "weights": algo.workers.local_worker.get_weights()}  # fmt: skip
        for methods, owner in [(OTHER_METHODS, algo), (POLICY_METHODS, policy)]:
            for theirs, ours in methods.items():
                with pytest.raises(AttributeError, match=re.escape(f"(flowrl's way: {ours})")):
                    getattr(owner, theirs)
        with pytest.raises(AttributeError, match="did you mean 'evaluate'"):
            algo.evalute()
        for ours in [*OTHER_METHODS.values(), *POLICY_METHODS.values()]:  # (stop() last)
            made = eval(ours, names)
            if isinstance(made, Algorithm | gym.Env):
                made.close() if isinstance(made, gym.Env) else made.stop()
        assert not hasattr(algo, "_private") and not hasattr(algo, "learn")


def test_training_a_stopped_algorithm_says_it_was_stopped():
    """train() after stop() raised 'the execution plan ParallelRollouts(...)... ended', six
    lines of plan that did not say why."""
    algo = Algorithm("ppo", env="CartPole-v1", **FAST)
    algo.stop()
    with pytest.raises(RuntimeError, match=r"^this algorithm was stopped: build another"):
        algo.train()


class CrashOnce(CartPoleEnv):
    crashed = False  # the first env of the process to take 100 steps raises, once

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps >= 100 and not CrashOnce.crashed:
            CrashOnce.crashed = True
            raise ValueError("the simulator crashed")
        return super().step(action)


def test_training_after_the_plan_failed_says_why_and_a_restore_goes_on(tmp_path):
    """After an error in the plan (a notebook's env that raised), train() said 'the execution
    plan ParallelRollouts(...)... ended': six lines of plan, and not why."""
    from flowrl.rollout.envs import EnvError

    register_env("crash-once", CrashOnce)
    algo = Algorithm("ppo", env="crash-once", **FAST)
    path = algo.save(tmp_path / "start")
    with pytest.raises(EnvError):
        for _ in range(10):
            algo.train()
    with pytest.raises(RuntimeError, match=r"^this algorithm ended with EnvError: env crash-once"):
        algo.train()
    algo.restore(path)  # a new plan from the checkpoint: it goes on
    assert algo.train()["iteration"] == 1
    algo.stop()


def test_a_checkpoint_restored_into_a_running_plan_iterates_and_rates_from_the_restore(tmp_path):
    """PBT's exploit loads a trial further on into a plan that has run. The rate counted
    the other trial's extra env steps as sampled in this iteration (4x too high), and the
    iteration ended at once: its least env steps counted from this run's mark."""
    least = {"num_workers": 0, "learning_starts": 64, "min_env_steps_per_iteration": 200}
    with Algorithm("dqn", env="CartPole-v1", **least) as ahead:
        for _ in range(4):
            ahead.train()
        path = ahead.save(tmp_path / "ahead")
    with Algorithm("dqn", env="CartPole-v1", **least) as behind:
        behind.train()
        behind.restore(path)
        before = behind.plan.context.counters["env_steps_sampled"]
        result = behind.train()
    assert result["iteration"] == 5 and result["env_steps_sampled"] - before >= 200
    rate = (result["env_steps_sampled"] - before) / result["time_this_iter_s"]
    assert result["env_steps_per_s"] == pytest.approx(rate, rel=0.1)


def test_the_metrics_operator_checkpoints_its_own_window_and_time(tmp_path):
    algo = Algorithm("ppo", env="CartPole-v1", metrics_smoothing_episodes=5, **FAST)
    for _ in range(3):
        result = algo.train()
    path = algo.save(tmp_path / "ckpt")
    assert set(algo.plan.context.checkpointables) == {"metrics"}
    clone = Algorithm.from_checkpoint(path)
    metrics = clone.plan.context.pending_state["metrics"]  # applied when the plan builds
    assert len(metrics["episodes"]) == 5 and metrics["time_total_s"] == result["time_total_s"]
    nxt = clone.train()
    assert nxt["time_total_s"] > result["time_total_s"] and nxt["episodes_total"] > 5
    algo.stop()
    clone.stop()


def test_a_run_says_when_its_lr_schedule_reaches_0_before_its_step_budget(tmp_path, caplog):
    from flowrl.run.runner import StopCriteria, run

    algo = Algorithm("ppo", env="CartPole-v1", lr=[[0, 1e-3], [4000, 0.0]], **FAST)
    with algo:
        run(algo, stop=StopCriteria(timesteps=50_000, iters=1), output_dir=tmp_path)
    assert "lr reaches 0 at 4,000 env steps, before this run's stop at 50,000" in caplog.text


def test_a_run_says_when_its_step_budget_ends_before_learning_starts(caplog):
    """SAC's MuJoCo preset fills 10k steps before it learns: a run of 3,000 (a quick try)
    learned nothing, and said nothing of it."""
    with Algorithm("dqn", num_workers=0, learning_starts=1000) as algo:
        algo.run(stop={"timesteps": 500})
    assert "learning_starts is 1,000 env steps, at or past this run's stop at 500" in caplog.text


def test_run_takes_its_stop_criteria_as_a_dict_too():
    """algo.run(stop={"iters": 2}), as Tune's stop is written, raised AttributeError."""
    algo = Algorithm("ppo", num_workers=0, train_batch_size=256)
    try:
        assert algo.run(stop={"iters": 2})["iterations"] == 2
        with pytest.raises(ConfigError, match="unknown stop criterion 'training_iteration'"):
            algo.run(stop={"training_iteration": 3})
    finally:
        algo.stop()


def test_a_run_stops_at_its_step_budget_not_an_iteration_past_it():
    """A3C's iterations last at least 0.5 s, DQN's 1,000 env steps: asked for 2,000 and
    500 env steps, they sampled 21,632 and 1,008. train() after the run has whole
    iterations again."""
    with Algorithm("a3c", num_workers=0) as algo:
        assert 2000 <= algo.run(stop={"timesteps": 2000})["env_steps_sampled"] < 2100
    with Algorithm("dqn", num_workers=0) as algo:
        steps = algo.run(stop={"timesteps": 500})["env_steps_sampled"]
        assert 500 <= steps < 600
        assert algo.train()["env_steps_sampled"] - steps >= 1000


def test_a_second_run_past_its_budget_says_so_instead_of_training():
    """A notebook's second algo.run(stop={"iters": 2}) trained a third iteration and
    stopped: criteria count from the algorithm's start, as a resumed run's do."""
    with Algorithm("ppo", num_workers=0, train_batch_size=256) as algo:
        last = algo.run(stop={"iters": 2})
        steps = algo.plan.context.counters["env_steps_sampled"]
        for stop, said in (
            ({"iters": 2}, "has 2 iterations already, at or past the run's budget of 2"),
            ({"timesteps": steps}, f"has {steps:,} env steps already"),
            ({"time_s": last["time_total_s"]}, "s of training already"),
            ({"reward": last["episode_return_mean"]}, "has a mean return of"),
        ):
            with pytest.raises(ConfigError, match=said):
                algo.run(stop=stop)
        assert algo.iteration == 2 and algo.run(stop={"iters": 3})["iterations"] == 3


def test_lr_and_entropy_coeff_follow_their_schedules_across_a_resume(tmp_path):
    from flowrl.core.schedules import scheduled

    lr, entropy = [[0, 1e-3], [6000, 1e-4]], [[0, 0.02], [6000, 0.0]]
    algo = Algorithm("ppo", env="CartPole-v1", lr=lr, entropy_coeff=entropy, **FAST)

    def follows(agent, result, steps_before):
        learner = agent.workers.local_worker.learner["default"]
        assert result["schedule/lr"] == pytest.approx(scheduled(agent.config.lr, steps_before))
        assert learner.optimizers["model"].param_groups[0]["lr"] == result["schedule/lr"]
        assert result["schedule/entropy_coeff"] == pytest.approx(
            scheduled(agent.config.entropy_coeff, steps_before)
        )

    steps = 0
    for _ in range(2):
        result = algo.train()
        follows(algo, result, steps)
        steps = result["env_steps_sampled"]
    path = algo.save(tmp_path / "ckpt")
    algo.stop()
    clone = Algorithm.from_checkpoint(path)  # the schedule goes on from the saved env steps
    assert clone.config.lr == ((0.0, 1e-3), (6000.0, 1e-4))
    result = clone.train()
    follows(clone, result, steps)
    assert 1e-4 < result["schedule/lr"] < 1e-3 and result["schedule/entropy_coeff"] < 0.02
    clone.stop()


@pytest.mark.parametrize(
    ("algo", "keys"),
    [
        ("ppo", ["clip_fraction", "explained_variance", "kl", "entropy"]),
        ("dqn", ["q_mean", "td_error_abs_mean"]),
    ],
)
def test_learners_report_what_practitioners_read(algo, keys):
    overrides = FAST if algo == "ppo" else dict(num_workers=0, learning_starts=64)
    agent = Algorithm(algo, env="CartPole-v1", **overrides)
    result = agent.train()
    agent.stop()
    for key in keys:
        assert np.isfinite(result[f"learner/{key}"]), key


def test_same_seed_same_results_in_local_mode():
    runs = []
    for _ in range(2):
        algo = Algorithm("ppo", env="CartPole-v1", seed=7, **FAST)
        runs.append([algo.train()["learner/policy_loss"] for _ in range(2)])
        algo.stop()
    assert runs[0] == runs[1]


@pytest.mark.ray
@pytest.mark.slow
def test_same_seed_same_results_in_bulk_sync(ray_session):
    runs = []
    for _ in range(2):
        algo = Algorithm("ppo", env="CartPole-v1", seed=7, **{**FAST, "num_workers": 2})
        runs.append([algo.train()["learner/policy_loss"] for _ in range(2)])
        algo.stop()
    assert runs[0] == runs[1]


def test_learner_threads_hold_while_the_run_lasts_and_are_given_back():
    before = torch.get_num_threads()
    algo = Algorithm("ppo", env="CartPole-v1", learner_threads=1, **FAST)
    algo.train()
    assert torch.get_num_threads() == 1
    algo.stop()
    assert torch.get_num_threads() == before
    runs = [Algorithm("ppo", env="CartPole-v1", learner_threads=1, **FAST) for _ in range(2)]
    for run in runs:  # runs stopped in any order leave the threads as they found them
        run.stop()
    assert torch.get_num_threads() == before


def test_a_small_network_learns_on_one_torch_thread_and_a_larger_on_torchs_own():
    outside = torch.get_num_threads()
    torch.set_num_threads(2)  # the process's own, whatever the suite runs with
    try:
        algo = Algorithm("ppo", env="CartPole-v1", **FAST)  # 64-wide: its ops are too small
        assert torch.get_num_threads() == 1
        algo.stop()
        assert torch.get_num_threads() == 2
        algo = Algorithm("ppo", env="CartPole-v1", model_hiddens=(256, 256), **FAST)
        assert torch.get_num_threads() == 2
        algo.stop()
        # a recurrent cell's weights count per gate: it steps a row per sequence
        for cells, threads in ((128, 1), (512, 2)):
            algo = Algorithm("ppo", env="CartPole-v1", use_lstm=True, lstm_cell_size=cells, **FAST)
            assert torch.get_num_threads() == threads, cells
            algo.stop()
    finally:
        torch.set_num_threads(outside)


def test_evaluate_reports_the_requested_episodes():
    algo = Algorithm("a3c", env="CartPole-v1", num_workers=0)
    res = algo.evaluate(episodes=4)
    assert res["episodes"] == 4 and res["episode_return_mean"] > 0
    with pytest.raises(ConfigError):
        algo.evaluate(episodes=0)


def my_plan(workers, config):
    """Plain policy-gradient steps on every fragment."""
    train_op = ParallelRollouts(workers, mode="bulk_sync").for_each(TrainOneStep(workers))
    return StandardMetricsReporting(train_op, workers, config)


@pytest.mark.parametrize(
    ("env_address", "address", "expected"),
    [
        (None, None, {"num_cpus": 2, "include_dashboard": False}),
        ("10.0.0.1:6379", None, {"address": "10.0.0.1:6379"}),
        ("10.0.0.1:6379", "10.0.0.2:6379", {"address": "10.0.0.2:6379"}),
    ],
)
def test_ensure_ray_joins_the_cluster_ray_address_names(
    monkeypatch, env_address, address, expected
):
    """With RAY_ADDRESS set, Ray joins that cluster (passing num_cpus there is an error)."""
    import ray

    from flowrl.run.algorithm import ensure_ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    if env_address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env_address)
    ensure_ray(address)
    assert len(calls) == 1 and expected.items() <= calls[0].items()
    assert ("num_cpus" in calls[0]) == ("address" not in calls[0])


@pytest.mark.parametrize("algo", ["ppo", "a3c", "dqn", "sac"])
def test_in_process_overrides_keep_every_config_out_of_ray(algo):
    from flowrl.run.algorithm import get_algorithm

    config_cls = get_algorithm(algo).config_cls
    busy = {"num_workers": 2}
    if "replay_shards" in config_cls.__dataclass_fields__:
        busy["replay_shards"] = 2
    assert config_cls(**busy).uses_ray
    assert not config_cls(**{**busy, **config_cls.in_process()}).uses_ray


def test_custom_plan_in_a_few_lines():
    algo = Algorithm("ppo", env="CartPole-v1", plan=my_plan, **FAST)
    assert "TrainOneStep" in str(algo.plan)
    assert algo.train()["env_steps_trained"] > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"algo": "nope"}, "unknown algorithm 'nope'"),
        ({"env": "NoSuchEnv-v0"}, "unknown env id 'NoSuchEnv-v0'"),
        ({"env": "CartPole-v1", "bogus": 1}, "unknown config key 'bogus'"),
        # Stable-Baselines3's PPO("MlpPolicy", "CartPole-v1") puts the env second
        ({"config": "CartPole-v1"}, r"the second argument is the config .* got 'CartPole-v1'"),
    ],
)
def test_bad_input_raises_config_error(kwargs, message):
    kwargs = {"algo": "ppo", **kwargs}
    with pytest.raises(ConfigError, match=message):
        Algorithm(**kwargs)


def test_ppo_trains_on_continuous_actions():
    algo = Algorithm("ppo", env="Pendulum-v1", **FAST)
    result = algo.train()
    assert result["learner/entropy"] > 0 and "learner/kl" in result
    assert algo.workers.local_worker.policy.module.log_std is not None
    algo.stop()


class TextInside(gym.Env):
    observation_space = gym.spaces.Dict({"note": gym.spaces.Text(5), "x": gym.spaces.Discrete(3)})
    action_space = gym.spaces.Discrete(2)


class TextAlone(TextInside):
    observation_space = gym.spaces.Dict({"note": gym.spaces.Text(5)})


def test_tuple_observations_train_and_unsupported_spaces_are_rejected_clearly():
    with Algorithm("ppo", env="Blackjack-v1", **FAST) as algo:  # Tuple of Discretes
        assert algo.train()["env_steps_trained"] > 0
    register_env("text-inside", TextInside)  # the entry named, and how to drop it
    with pytest.raises(ConfigError) as refused:
        Algorithm("ppo", env="text-inside", num_workers=0)
    assert "text-inside's observation entry 'note' is a Text space" in str(refused.value)
    assert str(refused.value).endswith("gymnasium.wrappers.FilterObservation(env, ['x'])")
    register_env("text-alone", TextAlone)
    with pytest.raises(ConfigError, match=r"'note' is a Text space.*an ObservationWrapper"):
        Algorithm("ppo", env="text-alone", num_workers=0)


def test_atari_frames_train_through_the_cnn_and_stay_uint8():
    algo = Algorithm(
        "ppo", env="ALE/Pong-v5", num_workers=0, num_envs_per_worker=2,
        rollout_fragment_length=32, train_batch_size=64, sgd_minibatch_size=32, num_sgd_iter=1,
    )  # fmt: skip
    assert algo.workers.local_worker.sample()["default"]["obs"].dtype == np.uint8
    assert algo.train()["env_steps_trained"] >= 64
    algo.stop()


@pytest.mark.ray
@pytest.mark.slow
def test_training_survives_a_dead_worker(ray_session):
    from flowrl.run.runner import StopCriteria

    algo = Algorithm("ppo", env="CartPole-v1", seed=0, **{**FAST, "num_workers": 2})
    before = algo.train()
    dead = algo.workers.remote_workers[0]
    ray_session.kill(dead)
    summary = algo.run(stop=StopCriteria(iters=4))
    assert summary["iterations"] == 4 and summary["stopped_by"] == "iterations"
    assert algo.workers.remote_workers[0] is not dead
    # the rebuilt plan's metrics operator took over its predecessor's clock
    assert summary["time_total_s"] > before["time_total_s"]
    algo.stop()


def test_a_single_agent_checkpoint_from_before_policy_ids_still_loads(tmp_path):
    """Checkpoints written before every run was keyed by policy id held a single-agent
    run's policy and learner state flat."""
    from flowrl import load_policy
    from flowrl.run.checkpoints import STATE_FILE

    algo = Algorithm("ppo", env="CartPole-v1", **FAST)
    algo.train()
    path = algo.save(tmp_path / "ckpt")
    state = torch.load(path / STATE_FILE, weights_only=True)
    state["policy"], state["learner"] = state["policy"]["default"], state["learner"]["default"]
    torch.save(state, path / STATE_FILE)
    clone = Algorithm.from_checkpoint(path)
    a, b = algo.workers.local_worker.get_weights(), clone.workers.local_worker.get_weights()
    assert all(np.array_equal(a["default"][k], b["default"][k]) for k in a["default"])
    assert load_policy(path).compute_action(np.zeros(4, np.float32)) in (0, 1)
    algo.stop()
    clone.stop()


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU: this is the CPU's case")
def test_a_checkpoint_written_on_a_gpu_loads_trains_and_acts_on_the_cpu(tmp_path, caplog):
    """tests/data/ppo_cartpole_h100: in-process PPO, device=cuda, 5 iterations on an H100
    (benchmarks/device.py's machine); its tensors were saved from the GPU."""
    from flowrl import load_policy

    path = Path(__file__).parent / "data" / "ppo_cartpole_h100"
    clone = Algorithm.from_checkpoint(path, in_process=True)
    assert "torch sees none here, so it loads on the CPU" in caplog.text
    assert clone.config.device == "cpu" and clone.iteration == 5
    assert clone.evaluate(2)["episodes"] == 2
    assert clone.train()["env_steps_trained"] > 0
    clone.stop()
    assert load_policy(path).compute_action(np.zeros(4, np.float32)) in (0, 1)
    with pytest.raises(ConfigError, match=r"device=cuda, but torch .* sees no CUDA GPU here"):
        Algorithm.from_checkpoint(path, in_process=True, device="cuda")


def test_auto_takes_the_gpu_for_image_observations_only(monkeypatch):
    """benchmarks/device.py: a CNN learns about twice as fast on a GPU, an MLP on CartPole
    samples at about half the env steps/s there."""
    from flowrl.learning.policy import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    vector = gym.spaces.Box(-1, 1, (4,), np.float32)
    assert resolve_device("auto", frames).type == "cuda"
    assert resolve_device("auto", gym.spaces.Dict({"image": frames, "v": vector})).type == "cuda"
    assert resolve_device("auto", vector).type == "cpu"
    assert resolve_device("cuda", vector).type == "cuda"
