"""Presets: an algorithm's settings for Atari, MuJoCo, the lunar lander, the pendulum or the
mountain car, under the user's own values."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flowrl.apps.cli import main
from flowrl.run.algorithm import build_config
from flowrl.run.presets import (
    ATARI,
    BIPEDAL_WALKER,
    CONTINUOUS_MOUNTAIN_CAR,
    LUNAR_LANDER,
    MOUNTAIN_CAR,
    MUJOCO,
    PENDULUM,
    env_family,
    preset_for,
)
from flowrl.run.spec import get_algorithm, list_algorithms

PRESETS = [(spec.name, preset) for spec in list_algorithms() for preset in spec.presets]


@pytest.mark.parametrize(
    ("env", "family"),
    [
        ("ALE/Pong-v5", ATARI),
        ("Hopper-v5", MUJOCO),
        ("HalfCheetah-v5", MUJOCO),
        ("LunarLander-v3", LUNAR_LANDER),
        ("LunarLanderContinuous-v3", LUNAR_LANDER),
        ("BipedalWalker-v3", BIPEDAL_WALKER),
        ("BipedalWalkerHardcore-v3", None),  # the same class, other settings
        ("CarRacing-v3", None),
        ("Pendulum-v1", PENDULUM),
        ("MountainCar-v0", MOUNTAIN_CAR),
        ("MountainCarContinuous-v0", CONTINUOUS_MOUNTAIN_CAR),  # another module
        ("CartPole-v1", None),
        ("Acrobot-v1", None),
    ],
)
def test_env_families(env, family):
    assert env_family(env) == family


@pytest.mark.parametrize(("algo", "preset"), PRESETS, ids=[f"{a}-{p.family}" for a, p in PRESETS])
def test_every_preset_is_a_valid_config_of_its_algorithm_and_names_its_source(algo, preset):
    env = {
        ATARI: "ALE/Pong-v5",
        MUJOCO: "Hopper-v5",
        LUNAR_LANDER: "LunarLander-v3",
        BIPEDAL_WALKER: "BipedalWalker-v3",
        PENDULUM: "Pendulum-v1",
        MOUNTAIN_CAR: "MountainCar-v0",
        CONTINUOUS_MOUNTAIN_CAR: "MountainCarContinuous-v0",
    }[preset.family]
    spec = get_algorithm(algo)
    fields = spec.config_cls.__dataclass_fields__
    assert set(preset.values) <= set(fields), set(preset.values) - set(fields)
    config = build_config(spec, {"env": env})
    for key, value in preset.values.items():
        expected = list(value) if isinstance(value, tuple) else value
        assert config.to_dict()[key] == expected
    assert preset.source


def test_your_own_values_win_and_preset_false_drops_the_preset():
    spec = get_algorithm("ppo")
    mine = build_config(spec, {"env": "Hopper-v5", "lr": 1e-3})
    assert mine.lr == 1e-3 and mine.num_sgd_iter == 10  # the rest of the preset stays
    plain = build_config(spec, {"env": "Hopper-v5", "preset": False})
    assert plain.num_sgd_iter == spec.config_cls().num_sgd_iter
    assert not plain.normalize_observations
    assert preset_for(spec, "CartPole-v1") is None
    assert len(PRESETS) == 16
    assert build_config(spec, {}) == spec.config_cls()


def test_a_preset_s_budget_is_a_run_s_default_stop_unless_presets_are_off():
    """DQN's mountain car preset trains for its source's 120k env steps (greedy -112 there
    on seed 0, -142 at DQN's default 500k); the env's threshold still stops it first."""
    from flowrl.run.runner import StopCriteria

    def default_stop(**values):
        return StopCriteria.default_for(build_config(get_algorithm("dqn"), values))

    stop = default_stop(env="MountainCar-v0")
    assert (stop.timesteps, stop.reward) == (120_000, -110.0)
    assert default_stop(env="MountainCar-v0", preset=False).timesteps == 500_000
    assert default_stop(env="CartPole-v1").timesteps == 500_000
    pendulum = build_config(get_algorithm("ppo"), {"env": "Pendulum-v1"})
    assert StopCriteria().for_config(pendulum).timesteps == 200_000  # no stop given
    assert StopCriteria(timesteps=5_000).for_config(pendulum).timesteps == 5_000
    sac = build_config(get_algorithm("sac"), {})  # SAC's default env is the pendulum
    assert (sac.lr, StopCriteria().for_config(sac).timesteps) == (1e-3, 20_000)


def test_a_preset_s_budget_goes_with_its_values(tmp_path):
    """A plan file using PPOConfig on the pendulum got the preset's 200k env steps without
    the preset's values, as did a PPOConfig made by hand: both keep PPO's default 1M."""
    from flowrl.algorithms.ppo import PPOConfig
    from flowrl.run.runner import StopCriteria
    from flowrl.run.spec import load_plan_file

    plan = tmp_path / "my_plan.py"
    plan.write_text(
        "from flowrl.algorithms.ppo import PPOConfig as Config, PPOLearner as Learner\n"
        "from flowrl.algorithms.ppo import PPOPolicy as Policy, execution_plan as plan\n"
    )
    own = build_config(load_plan_file(f"{plan}:plan"), {"env": "Pendulum-v1"})
    by_hand = PPOConfig(env="Pendulum-v1")
    tweaked = build_config(get_algorithm("ppo"), {"env": "Pendulum-v1", "lr": 5e-4})
    budget = [StopCriteria().for_config(c).timesteps for c in (own, by_hand, tweaked)]
    assert budget == [1_000_000, 1_000_000, 200_000]  # a value of yours keeps the rest


def test_a_resumed_run_keeps_its_preset_s_budget(tmp_path):
    """A resumed run builds its config from the checkpoint, which keeps ``preset`` and the
    env: its default stop is the preset's budget still (the car's 20k, not PPO's 1M)."""
    from flowrl import Algorithm
    from flowrl.run.runner import StopCriteria

    with Algorithm("ppo", env="MountainCarContinuous-v0", seed=0) as algo:
        algo.train()
        path = algo.save(str(tmp_path / "run"))
    with Algorithm.from_checkpoint(path) as resumed:
        assert resumed.config.gsde and StopCriteria().for_config(resumed.config).timesteps == 20_000


def test_list_with_an_env_shows_the_preset_and_marks_its_values(capsys):
    assert main(["list", "ppo", "--env", "ALE/Pong-v5"]) == 0
    out = capsys.readouterr().out
    assert "the atari preset" in out and "Schulman et al. 2017" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(" ")}
    assert lines["*clip_param"].split()[1] == "0.1"
    assert "seed" in lines  # not the preset's: unmarked


def test_list_shows_the_preset_a_run_on_the_default_env_uses(capsys):
    """``flowrl train sac`` runs the pendulum preset on SAC's default env; ``flowrl list
    sac`` showed the bare defaults (lr 3e-4) as if they applied."""
    assert main(["list", "sac"]) == 0
    out = capsys.readouterr().out
    assert "Pendulum-v1: the pendulum preset" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(" ")}
    assert lines["*lr"].split()[1] == "0.001"
    assert main(["list", "ppo"]) == 0  # CartPole: no preset, and nothing said of one
    out = capsys.readouterr().out
    assert "preset (* below)" not in out and "no preset" not in out and "*lr" not in out


def test_list_with_an_env_but_no_algorithm_is_one_line(capsys):
    assert main(["list", "--env", "Hopper-v5"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.slow
def test_train_says_which_preset_it_uses(tmp_path):
    args = ["train", "ppo", "--env", "Hopper-v5", "--stop-iters", "1", "--no-progress"]
    args += ["--output", str(tmp_path / "run")]
    out = subprocess.run(
        [sys.executable, "-m", "flowrl", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "with the mujoco preset for ppo" in out.stdout
