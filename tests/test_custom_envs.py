"""A user's own envs: ``module:ClassOrFactory`` ids, register_env, env_config and env
classes given to Algorithm, in-process and on Ray workers; spaces flowrl cannot take are
refused before any worker starts."""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from flowrl import Algorithm, ConfigError, register_env
from flowrl.rollout.envs import make_vector_env

FLOWRL = str(Path(sys.executable).parent / "flowrl")
TESTS = Path(__file__).parent


def episode_lengths(algo: Algorithm) -> list[int]:
    return [length for _, length in algo.workers.collect_metrics()[0]]


@pytest.mark.parametrize("env", ["custom_envs:Corridor", "custom_envs:make_corridor"])
def test_a_class_or_factory_named_by_module_makes_vector_envs_with_env_config(env):
    vec = make_vector_env(env, num_envs=3, seed=0, env_config={"length": 3})
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (3, 1) and vec.num_envs == 3
    for _ in range(2):  # two steps right reach the goal of a 3-cell corridor
        obs, rewards, terminated, _, _ = vec.step(np.ones(3, dtype=np.int64))
    assert terminated.all() and (rewards == 1.0).all()
    vec.close()


def test_env_config_goes_to_gymnasium_ids_too():
    vec = make_vector_env("CartPole-v1", num_envs=2, seed=0, env_config={"max_episode_steps": 5})
    vec.reset(seed=0)
    truncated = [vec.step(np.zeros(2, dtype=np.int64))[3] for _ in range(5)]
    assert truncated[-1].all()


def test_an_env_class_given_to_algorithm_trains_in_process_and_is_named_for_checkpoints():
    from custom_envs import Corridor

    algo = Algorithm("ppo", env=Corridor, env_config={"length": 4}, num_workers=0)
    assert algo.config.env == "custom_envs:Corridor"
    assert algo.train()["env_steps_sampled"] > 0
    assert max(episode_lengths(algo) or [16]) <= 16  # 4 * length: env_config arrived
    algo.stop()


def test_register_env_with_a_closure_trains_on_ray_workers(ray_session, tmp_path):
    marker = tmp_path / "made"  # written by the workers' creator: they used it, not the id

    def creator(length: int = 5) -> gym.Env:
        from custom_envs import Corridor

        marker.touch()
        return Corridor(length)

    register_env("my-corridor", creator)
    algo = Algorithm(
        "ppo", env="my-corridor", env_config={"length": 3}, num_workers=2, train_batch_size=512
    )
    result = algo.train()
    assert result["env_steps_sampled"] >= 512 and marker.exists()
    assert result["episode_len_mean"] <= 12  # 4 * length 3
    algo.stop()


@pytest.mark.slow
def test_an_env_module_on_a_path_added_here_trains_on_the_ray_workers_flowrl_starts(tmp_path):
    """A notebook's sys.path.append made a module importable here and not in Ray's workers:
    a local Ray that flowrl starts now puts the added directory on its workers' path."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "path_added_envs.py").write_text(
        "from gymnasium.envs.classic_control import CartPoleEnv as Env\n"
    )
    script = (
        f"import sys; sys.path.append({str(tmp_path / 'envs')!r})\n"
        "from flowrl import Algorithm\n"
        "from path_added_envs import Env\n"
        "for env in ('path_added_envs:Env', Env):  # a name, and a class pickled by reference\n"
        "    algo = Algorithm('ppo', env=env, num_workers=1, train_batch_size=256)\n"
        "    assert algo.train()['env_steps_sampled'] >= 256\n"
        "    algo.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_an_env_module_ray_workers_cannot_import_is_one_line(ray_session, tmp_path, monkeypatch):
    """With Ray already running, a module on a path added since is importable here, not in
    Ray's workers: the run ended in Ray's ActorDiedError, the worker's traceback inside it."""
    (tmp_path / "only_here_envs.py").write_text(
        "from gymnasium.envs.classic_control import CartPoleEnv as Env\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    said = r"^a rollout worker: cannot import only_here_envs .* Ray's worker processes cannot"
    with pytest.raises(ConfigError, match=said):
        Algorithm("ppo", env="only_here_envs:Env", num_workers=1)


class MapsOnlyHere(gym.Wrapper):
    """CartPole that reads a file only this process has: a Ray worker's raises."""

    def __init__(self):
        if os.environ.get("MAPS_HERE") != str(os.getpid()):
            raise FileNotFoundError("maps/level1.txt")
        super().__init__(gym.make("CartPole-v1"))


@pytest.mark.slow
def test_an_env_that_raises_as_a_ray_worker_builds_it_is_one_line(
    ray_session, monkeypatch, tmp_path, capsys
):
    """The run ended in Ray's "ActorDiedError: The actor died because of an error raised in
    its creation task", which named neither the error nor the env's line."""
    import linecache

    from flowrl.apps.cli import main

    monkeypatch.setenv("MAPS_HERE", str(os.getpid()))
    said = r"^a rollout worker could not start: FileNotFoundError: maps/level1.txt$"
    with pytest.raises(RuntimeError, match=said) as raised:
        Algorithm("ppo", env="test_custom_envs:MapsOnlyHere", num_workers=1)
    file, line = raised.value.raised_at.rsplit(":", 1)
    assert "raise FileNotFoundError" in linecache.getline(file, int(line)), "the env's line"
    args = ["--env", "test_custom_envs:MapsOnlyHere", "--num-workers", "1", "--no-progress"]
    assert main(["train", "ppo", *args, "--output", str(tmp_path / "run")]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (this process's Ray streams
    # the worker's own log before it: the CLI's run exits before that comes)
    assert last.startswith("flowrl: error: WorkerStartError: a rollout worker could not start")
    assert "FileNotFoundError: maps/level1.txt (raised at " in last, last


def test_a_notebook_style_class_trains_on_ray_workers(ray_session):
    class Local(gym.Env):  # defined here, importable from nowhere: pickled by value
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(2, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.zeros(2, np.float32), float(action), False, self.t >= 7, {}

    algo = Algorithm("a3c", env=Local, num_workers=1)
    assert algo.config.env == "Local"
    result = algo.train()
    assert result["env_steps_sampled"] > 0 and result["episode_len_mean"] == 7
    algo.stop()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("custom_envs:TextObservation", "entry 'note' is a Text space"),
        ("custom_envs:MultiDiscreteActions", "action space MultiDiscrete"),
        ("custom_envs:not_an_env", "not a gymnasium.Env"),
        ("custom_envs:NoSuchEnv", "custom_envs has no NoSuchEnv"),
        ("gymnasium.envs:classic_control.NoSuchEnv", "has no classic_control.NoSuchEnv"),
        ("no_such_module:Env", "cannot import no_such_module"),
        ("MyEnv-v0", "flowrl.register_env"),
    ],
)
def test_envs_flowrl_cannot_use_are_refused_with_one_line(env, message):
    with pytest.raises(ConfigError, match=message):
        Algorithm("ppo", env=env, num_workers=0)


def test_an_env_module_missing_an_extras_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # not installed, as import sees it
    monkeypatch.delitem(sys.modules, "flowrl.rollout.toy_multi_agent", raising=False)
    with pytest.raises(ConfigError, match=r"pettingzoo.*pip install 'flowrl-ray\[multiagent\]'"):
        Algorithm("ppo", env="flowrl.rollout.toy_multi_agent:RememberCues", num_workers=0)


def test_a_gymnasium_env_missing_its_package_names_flowrls_extra(monkeypatch, capsys, tmp_path):
    """gymnasium's own advice for Box2D (swig, then a build from source) is not what a
    user needs: the extra installs Box2D's wheel."""
    from flowrl.apps.cli import main

    monkeypatch.setitem(sys.modules, "Box2D", None)  # not installed, as import sees it
    hint = "pip install 'flowrl-ray[box2d]'"
    for env in ["LunarLander-v3", "gymnasium.envs.box2d.lunar_lander:LunarLander"]:
        for name in [m for m in sys.modules if m.startswith("gymnasium.envs.box2d")]:
            monkeypatch.delitem(sys.modules, name)  # imported anew, without Box2D
        assert main(["train", "ppo", "--env", env, "--num-workers", "0"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"flowrl: error: env {env} needs Box2D, which is not installed: {hint}"
        ]
    # an env module of the user's own that imports Box2D
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "lander_env.py").write_text("import Box2D\n")
    with pytest.raises(ConfigError, match=r"cannot import lander_env .*flowrl-ray\[box2d\]'\)$"):
        Algorithm("ppo", env="lander_env:Env", num_workers=0)


def test_an_env_instance_is_refused_naming_what_to_pass_instead():
    env = gym.make("CartPole-v1")  # as Stable-Baselines3 takes it
    with pytest.raises(ConfigError, match=r"env instance .* its id \(env='CartPole-v1'\)"):
        Algorithm("ppo", env=env, num_workers=0)
    with pytest.raises(ConfigError, match=r"env instance .* pass its class"):
        Algorithm("ppo", env=env.unwrapped.__class__(), num_workers=0)


@pytest.mark.parametrize("composite", [False, True])
def test_actions_numbered_from_other_than_0_reach_the_env_in_its_numbers(composite, tmp_path):
    """Discrete(3, start=-1) takes -1, 0 and 1: flowrl sent 0, 1 and 2 (and the env's
    check raised), from workers, evaluation, load_policy and exports alike."""
    import onnxruntime

    from flowrl import load_policy
    from flowrl.apps.inference import export_policy

    algo = Algorithm("ppo", env="custom_envs:OffsetActions", env_config={"composite": composite},
                     num_workers=0, seed=0)  # fmt: skip
    try:
        for _ in range(5):
            algo.train()  # the env raises on an action outside its space
        # the best returns are 40 and 20; random play's about 12 and 7
        assert algo.evaluate(5)["episode_return_mean"] >= (30 if composite else 18)
        policy, obs = load_policy(algo), np.array([[-1.0], [0.0], [1.0]], np.float32)
        actions = [policy.compute_action(o) for o in obs]
        path = export_policy(algo.save(tmp_path / "ckpt"), tmp_path / "policy.onnx")
    finally:
        algo.stop()
    exported = onnxruntime.InferenceSession(str(path)).run(None, {"obs": obs})
    if composite:  # in the env's numbers, and the same from the export
        signs, gears = [a["sign"] for a in actions], [a["gears"].tolist() for a in actions]
        assert set(signs) <= {-1, 0, 1} and signs == exported[1].tolist()
        assert gears == [[2, 2]] * 3 == exported[0].tolist()
    else:
        assert actions == [-1, 0, 1] == exported[0].tolist()


def test_a_creator_taking_env_config_as_one_dict_as_in_rllib_trains_and_records(tmp_path):
    vec = make_vector_env("custom_envs:rllib_corridor", num_envs=2, seed=0, env_config={})
    assert vec.num_envs == 2  # no env_config: an empty dict
    algo = Algorithm("ppo", env="custom_envs:rllib_corridor", env_config={"length": 3},
                     num_workers=0, num_envs_per_worker=2, rollout_fragment_length=16,
                     train_batch_size=32, sgd_minibatch_size=32)  # fmt: skip
    try:
        algo.train()
        assert max(episode_lengths(algo) or [12]) <= 12  # 4 * length: env_config arrived
        stats = algo.evaluate(1, video_dir=str(tmp_path))  # render_mode in the dict
        assert stats["episodes"] == 1 and list(tmp_path.glob("*.mp4"))
    finally:
        algo.stop()


def test_unbounded_box_actions_train_ppo_and_are_refused_by_sac():
    """SAC rescales its squashed actions into the bounds: infinite ones gave NaN actions."""
    algo = Algorithm("ppo", env="custom_envs:UnboundedActions", num_workers=0,
                     train_batch_size=256)  # fmt: skip
    assert algo.train()["episodes_this_iter"] > 0
    algo.stop()
    with pytest.raises(ConfigError, match=r"Box\(-inf, inf, \(1,\), float32\) has infinite"):
        Algorithm("sac", env="custom_envs:UnboundedActions", num_workers=0)


def test_env_config_the_creator_does_not_take_is_refused():
    with pytest.raises(ConfigError, match="does not take env_config"):
        Algorithm("ppo", env="custom_envs:Corridor", env_config={"size": 3}, num_workers=0)
    # a subclass passing **kwargs on: its signature takes any, CartPoleEnv's does not
    with pytest.raises(ConfigError, match=r"RaiseAfter does not take env_config .*'after'"):
        Algorithm("ppo", env="fault_envs:RaiseAfter", env_config={"after": 5}, num_workers=0)
    with pytest.raises(ConfigError, match=r"connect_four_v3:env does not take env_config"):
        Algorithm("ppo", env="pettingzoo.classic.connect_four_v3:env", env_config={"bogus": 1})
    # ale-py's vector env: a TypeError from inside it, exit 1, before
    with pytest.raises(ConfigError, match=r"ALE/Pong-v5 does not take env_config \{'bogus': 1\}"):
        Algorithm("ppo", env="ALE/Pong-v5", env_config={"bogus": 1}, num_workers=0)
    with pytest.raises(ConfigError, match="env_config expects a mapping"):
        Algorithm("ppo", env_config="[1, 2]", num_workers=0)


@pytest.mark.slow
def test_the_cli_trains_and_evaluates_a_module_from_the_current_directory(tmp_path):
    """As a user does: their env in ./user_corridor.py, 2 Ray workers, then evaluate."""
    shutil.copy(TESTS / "custom_envs.py", tmp_path / "user_corridor.py")
    out = tmp_path / "run"
    args = ["--env", "user_corridor:Corridor", "--num-workers", "2", "--stop-iters", "2"]
    args += ["--set", 'env_config={"length": 4}', "--no-progress", "--output", str(out)]
    train = subprocess.run(
        [FLOWRL, "train", "ppo", *args], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert train.returncode == 0, train.stderr
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["env"] == "user_corridor:Corridor" and saved["env_config"] == {"length": 4}
    evaluate = subprocess.run(
        [FLOWRL, "evaluate", str(out), "--episodes", "3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert evaluate.returncode == 0, evaluate.stderr
    assert "user_corridor:Corridor" in evaluate.stdout


def test_the_cli_refuses_an_unsupported_space_with_exit_2_and_one_line(tmp_path):
    shutil.copy(TESTS / "custom_envs.py", tmp_path / "user_envs.py")
    proc = subprocess.run(
        [FLOWRL, "train", "ppo", "--env", "user_envs:TextObservation", "--num-workers", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "entry 'note' is a Text space" in proc.stderr


def test_a_vector_env_of_your_own_is_stepped_as_it_is():
    from flowrl.rollout.envs import make_vector_env

    vec = make_vector_env("custom_envs:cartpole_vector", num_envs=5, seed=0)
    assert type(vec).__name__ == "CartPoleVectorEnv" and vec.num_envs == 5  # no SyncVectorEnv
    algo = Algorithm("ppo", env="custom_envs:cartpole_vector", num_workers=0)
    try:
        assert algo.train()["episode_return_mean"] > 0
    finally:
        algo.stop()
    with pytest.raises(
        ConfigError, match="must make a gymnasium VectorEnv of num_envs=2 envs; it made 3 envs"
    ):
        make_vector_env("custom_envs:cartpole_vector", num_envs=2, seed=0, env_config={"extra": 1})
    with pytest.raises(ConfigError, match="resets its envs in SAME_STEP mode"):
        make_vector_env(
            "custom_envs:cartpole_vector", num_envs=2, seed=0, env_config={"autoreset": "SAME_STEP"}
        )


def test_large_images_are_said_to_slow_the_run_down(caplog):
    """PettingZoo's cooperative_pong (280x480 frames) took 170 s for PPO's first iteration
    and said nothing: the Nature CNN's linear layer had 35 times an 84x84 frame's inputs."""
    with caplog.at_level(logging.WARNING, logger="flowrl"):
        Algorithm("ppo", env="custom_envs:LargeFrames", num_workers=0).stop()
        said = caplog.text
        caplog.clear()
        config = {"height": 84, "width": 84}
        Algorithm("ppo", env="custom_envs:LargeFrames", env_config=config, num_workers=0).stop()
    assert "images of 280x480x3 give the Nature CNN's linear layer 111,104 inputs" in said
    assert "downsample the frames in an env creator of your own" in said
    assert "Nature CNN" not in caplog.text


def test_an_unknown_env_name_says_how_to_register_one_and_another_version_does_not():
    """A deprecated version (Taxi-v3) got the hint for an env a package registers."""
    from flowrl.rollout.envs import resolve_env

    with pytest.raises(ConfigError, match=r"'NoSuchEnv-v0'.*package:EnvId"):
        resolve_env("NoSuchEnv-v0")
    for env, said in (("Taxi-v3", "Please use `Taxi-v4`"), ("CartPole-v9", "`v0`, `v1`")):
        with pytest.raises(ConfigError, match=said) as raised:
            resolve_env(env)
        assert "package:EnvId" not in str(raised.value)


def test_an_id_without_its_version_or_an_older_atari_id_names_the_id_to_give():
    """``CartPole`` and RL Zoo's ``PongNoFrameskip-v4`` got the general hint; and once ale-py
    was imported (an Atari run earlier in a notebook) ``PongNoFrameskip-v4`` resolved, as
    raw screens flowrl does not preprocess."""
    import ale_py  # noqa: F401  (registers the older ids too)

    from flowrl.rollout.envs import resolve_env

    for env, said in (("CartPole", "CartPole-v1"), ("ALE/Pong", "ALE/Pong-v5")):
        with pytest.raises(ConfigError, match=rf"\(did you mean {said}\?\)$"):
            resolve_env(env)
    for env, game in (("PongNoFrameskip-v4", "Pong"), ("Breakout-v5", "Breakout")):
        with pytest.raises(ConfigError, match=f"older id of an Atari game.*--env ALE/{game}-v5"):
            resolve_env(env)
    assert resolve_env("MountainCar-v0").id == "MountainCar-v0"  # its name fits, no ROM
    gym.register("Tetris-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:  # a game's name, registered by another package: that package's env
        assert resolve_env("Tetris-v0").id == "Tetris-v0"
    finally:
        del gym.registry["Tetris-v0"]


def test_an_id_a_known_package_registers_names_the_package_and_pip_where_missing(monkeypatch):
    """MiniGrid-Empty-5x5-v0 with minigrid installed got the general hint only."""
    from flowrl.rollout import envs

    with pytest.raises(ConfigError, match="name it minigrid:MiniGrid-Empty-5x5-v0"):
        envs.resolve_env("MiniGrid-Empty-5x5-v0")
    monkeypatch.setattr(
        envs,
        "REGISTERED_ON_IMPORT",
        {"Here-": ("json", "x"), "Gone-": ("no_such_module_q", "gone-pkg")},
    )
    with pytest.raises(
        ConfigError, match=r"\(json registers it when imported: name it json:Here-v0\)$"
    ):
        envs.resolve_env("Here-v0")
    with pytest.raises(
        ConfigError, match="pip install gone-pkg, then name it no_such_module_q:Gone-v1"
    ):
        envs.resolve_env("Gone-v1")


def test_an_env_inside_a_submodule_or_class_is_named_with_a_dotted_path():
    """As an entry point names it (``mpe2:simple_spread_v3.parallel_env``): gymnasium's
    own ``module:EnvId`` said that no env of the whole name existed."""
    from gymnasium.envs.classic_control import CartPoleEnv

    from flowrl.rollout.envs import resolve_env

    assert resolve_env("gymnasium.envs:classic_control.CartPoleEnv") is CartPoleEnv
    with pytest.raises(ConfigError, match=r"Did you mean: `CartPole`\?"):
        resolve_env("gymnasium:CartPol-v1")  # gymnasium's guess, kept


def test_a_checkpoint_of_an_env_its_process_registered_says_how_to_load_it(tmp_path, monkeypatch):
    """A notebook's env class is registered under its bare name, which a new process
    lacks: loading its checkpoint said only that no gymnasium env had that name."""
    from gymnasium.envs.classic_control import CartPoleEnv

    from flowrl import load_policy
    from flowrl.rollout import envs

    class NotebookCartPole(CartPoleEnv):  # (a function's class: registered, as __main__'s)
        pass

    algo = Algorithm("ppo", env=NotebookCartPole, num_workers=0)
    path = algo.save(tmp_path / "ckpt")
    algo.stop()
    monkeypatch.delitem(envs._REGISTERED, "NotebookCartPole")  # as in a new process
    said = r"register_env\('NotebookCartPole', NotebookCartPole\) first"
    for load in (Algorithm.from_checkpoint, load_policy):
        with pytest.raises(ConfigError, match=said):
            load(path)
    register_env("NotebookCartPole", NotebookCartPole)
    assert load_policy(path).compute_action(np.zeros(4, np.float32)) in (0, 1)
    register_env("partial-cartpole", functools.partial(gym.make, "CartPole-v1"))  # no __qualname__
    with Algorithm("ppo", env="partial-cartpole", num_workers=0) as algo:
        assert algo.save(tmp_path / "partial").is_dir()


def test_an_algorithm_that_cannot_be_built_closes_the_envs_it_made():
    """An env made before the policy refused its spaces stayed open: ale-py's said at exit
    that it had leaked, after the one-line error."""
    closed = []

    class Counted(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)  # not SAC's Box

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), 0.0, False, True, {}

        def close(self):
            closed.append(self)

    with pytest.raises(ConfigError, match="SAC needs a Box action space"):
        Algorithm("sac", env=Counted, num_workers=0, num_envs_per_worker=3)
    assert len(closed) == 3
