"""A trained policy outside training: load_policy, and ONNX / TorchScript exports that act
as the policy does (normalisation, uint8 frames and action bounds included)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl import Algorithm, load_policy
from flowrl.apps.cli import main
from flowrl.apps.inference import export_policy, input_names
from flowrl.core.config import ConfigError
from flowrl.learning.spaces import field, get
from flowrl.run.checkpoints import CheckpointError

MASKED = "flowrl.rollout.toy_envs:MaskedChoice"
OFFSET = "custom_envs:OffsetActions"
IMAGE_AND_VECTOR = "flowrl.rollout.toy_envs:ImageAndVector"
STATELESS = "flowrl.rollout.toy_envs:StatelessCartPole"
CASES = {
    "ppo-discrete": ("ppo", {"env": "CartPole-v1", "train_batch_size": 256}),
    "ppo-box-normalised": (
        "ppo",
        {"env": "Pendulum-v1", "normalize_observations": True, "train_batch_size": 256},
    ),
    "ppo-atari-frames": ("ppo", {"env": "ALE/Pong-v5", "num_envs_per_worker": 1}),
    "ppo-multidiscrete": ("ppo", {"env": "custom_envs:MatchTargets", "train_batch_size": 256}),
    "ppo-multibinary": (
        "ppo",
        {"env": "custom_envs:MatchTargets", "env_config": {"binary": 5}, "train_batch_size": 256},
    ),
    "ppo-discrete-observations": (
        "ppo",
        {"env": "FrozenLake-v1", "env_config": {"is_slippery": False}, "train_batch_size": 256},
    ),
    "ppo-masked": ("ppo", {"env": MASKED, "train_batch_size": 256}),
    "ppo-dict-image-and-vector": (
        "ppo",
        {"env": IMAGE_AND_VECTOR, "normalize_observations": True, "train_batch_size": 256},
    ),
    "ppo-lstm": ("ppo", {"env": STATELESS, "use_lstm": True, "train_batch_size": 256}),
    "appo-lstm-masked": ("appo", {"env": MASKED, "use_lstm": True, "train_batch_size": 256}),
    "ppo-dict-actions": ("ppo", {"env": "custom_envs:ChooseAndAim", "train_batch_size": 256}),
    "ppo-offset-actions": (  # Discrete and MultiDiscrete actions that do not start at 0
        "ppo",
        {"env": OFFSET, "env_config": {"composite": True}, "train_batch_size": 256},
    ),
    "dqn": ("dqn", {"env": "CartPole-v1"}),
    "dqn-masked": ("dqn", {"env": MASKED}),
    "sac": ("sac", {"env": "Pendulum-v1", "min_env_steps_per_iteration": 300}),
}


def checkpoint(tmp_path, algo, config, train=True):
    """A checkpoint as a run writes it: ``tmp_path/checkpoints/checkpoint_000001``."""
    algorithm = Algorithm(algo, num_workers=0, **config)
    if train:  # weights and statistics that are not their initial values
        algorithm.train()
    path = algorithm.save(tmp_path / "checkpoints" / "checkpoint_000001")
    algorithm.stop()
    return path


#: the cases of the quick tier: memory with a mask, a Q-network with a mask and Box actions
#: (the others, composite observations and normalisation among them, in the whole suite)
QUICK = {"appo-lstm-masked", "dqn-masked", "sac"}


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=() if c in QUICK else pytest.mark.slow) for c in CASES]
)
def test_exports_act_as_the_policy_on_100_observations(case, tmp_path):
    import onnxruntime

    algo, config = CASES[case]
    path = checkpoint(tmp_path, algo, config, train="atari" not in case)
    policy = load_policy(path)
    space, layout = policy.policy.observation_space, policy.policy.obs_layout
    space.seed(0)
    samples = [space.sample() for _ in range(100)]
    if layout is None:
        obs = np.stack(samples)
        inputs = {"obs": obs}
    else:  # one input per leaf, the action mask among them
        obs = layout.stack(samples)
        records = layout.pack(obs)
        inputs = {leaf.name: field(records, leaf.path).copy() for leaf in layout.leaves}
    expected = policy.compute_actions(obs)
    if policy.policy.module.recurrent:  # state in, state out: from a state mid-episode
        state = np.random.default_rng(0).normal(size=policy.policy.initial_state(100).shape)
        inputs["state_in"] = state.astype(np.float32)
        expected = policy.compute_actions(obs, state=inputs["state_in"])
    else:
        expected = (expected,)
    if policy.policy.action_layout is not None:  # one output per leaf, in order
        leaves = policy.policy.action_layout.leaves
        expected = tuple(get(expected[0], leaf.path) for leaf in leaves)
    assert list(inputs) == input_names(policy.policy)

    onnx_file = export_policy(path, tmp_path / "policy.onnx")
    session = onnxruntime.InferenceSession(str(onnx_file))
    from_onnx = session.run(None, inputs)
    script_file = export_policy(path, tmp_path / "policy.pt", format="torchscript")
    script = torch.jit.load(str(script_file))
    from_script = script(*(torch.as_tensor(x) for x in inputs.values()))
    from_script = [from_script] if torch.is_tensor(from_script) else from_script
    from_script = [x for out in from_script for x in (out if isinstance(out, tuple) else [out])]

    for outputs in (from_onnx, from_script):
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected, strict=True):
            got = np.asarray(got, dtype=np.float64)
            assert got.shape == want.shape
            assert np.abs(got - want).max() < 1e-5


def test_a_recurrent_policy_acts_on_one_observation_from_the_state_it_returned(tmp_path):
    policy = load_policy(checkpoint(tmp_path, "ppo", {"env": STATELESS, "use_lstm": True}))
    obs = np.zeros(2, np.float32)
    first, state = policy.compute_action(obs)
    assert first in (0, 1) and state.shape == (2, 128)
    _, same = policy.compute_action(obs, state=None)  # None: an episode's start
    np.testing.assert_array_equal(state, same)
    _, later = policy.compute_action(obs, state=state)
    assert not np.allclose(later, state)  # the memory moved on


def test_load_policy_from_a_run_directory_acts_on_one_observation(tmp_path):
    path = checkpoint(tmp_path, "ppo", {"env": "CartPole-v1", "train_batch_size": 256})
    policy = load_policy(path.parent.parent)  # the run directory
    action = policy.compute_action(np.zeros(4, dtype=np.float32))
    assert isinstance(action, int) and action in (0, 1)
    assert repr(policy) == "LoadedPolicy(ppo on CartPole-v1)"
    # another shape was numpy's matmul error, which names neither shape
    with pytest.raises(ValueError, match=r"shape \(2, 4\) .* CartPole-v1, whose are \(4,\)"):
        policy.compute_action(np.zeros((2, 4), np.float32))  # a batch: compute_actions'
    box = load_policy(checkpoint(tmp_path / "b", "sac", CASES["sac"][1], train=False))
    action = box.compute_action(np.zeros(3, dtype=np.float32), explore=True)
    assert action.shape == (1,) and -2.0 <= action[0] <= 2.0  # Pendulum's bounds


def test_make_env_gives_the_observations_the_policy_takes(tmp_path):
    frames = load_policy(checkpoint(tmp_path, "ppo", CASES["ppo-atari-frames"][1], train=False))
    env = frames.make_env(render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8  # gym.make's: (210, 160, 3)
    env.step(frames.compute_action(obs))
    assert env.render().shape == (210, 160, 3)
    env.close()
    config = CASES["ppo-multibinary"][1]
    sized = load_policy(checkpoint(tmp_path / "m", "ppo", config, train=False))
    env = sized.make_env()
    assert env.action_space == gym.spaces.MultiBinary(5)  # its env_config
    sized.compute_action(env.reset(seed=0)[0])
    with pytest.raises(ConfigError, match="does not render in mode 'human'"):
        sized.make_env(render_mode="human")


def test_load_policy_of_an_algorithm_is_its_policy_as_it_was(tmp_path):
    algo = Algorithm("dqn", env="CartPole-v1", num_workers=0, seed=0)
    algo.train()
    then = load_policy(algo)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    before = then.compute_actions(obs)
    live = algo.workers.local_worker.policy
    np.testing.assert_array_equal(live.act(obs, explore=False).env_actions, before)
    weights = then.policy.get_weights()
    for _ in range(3):
        algo.train()
    trained = live.get_weights()
    assert any(not np.array_equal(trained[k], v) for k, v in weights.items())
    np.testing.assert_array_equal(then.compute_actions(obs), before)  # a copy: unchanged
    assert repr(then) == "LoadedPolicy(dqn on CartPole-v1)"
    algo.stop()


def test_export_command_writes_the_model(tmp_path, capsys):
    path = checkpoint(tmp_path, "dqn", CASES["dqn"][1], train=False)
    out = tmp_path / "models" / "dqn.onnx"
    assert main(["export", str(path), "--out", str(out)]) == 0
    assert out.stat().st_size > 0 and "wrote the greedy policy" in capsys.readouterr().out


def test_export_without_out_writes_policy_onnx_here(tmp_path, capsys, monkeypatch):
    path = checkpoint(tmp_path, "dqn", CASES["dqn"][1], train=False)
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(path)]) == 0
    assert (tmp_path / "policy.onnx").stat().st_size > 0
    assert "to policy.onnx (onnx)" in capsys.readouterr().out
    assert main(["export", str(path), "--format", "torchscript"]) == 0
    torch.jit.load(str(tmp_path / "policy.pt"))


def test_an_onnx_export_is_one_file_that_loads_alone_elsewhere(tmp_path):
    import onnxruntime

    path = checkpoint(tmp_path, "ppo", CASES["ppo-discrete"][1])
    out = export_policy(path, tmp_path / "made" / "policy.onnx")
    assert [p.name for p in out.parent.iterdir()] == ["policy.onnx"]  # no policy.onnx.data
    moved = tmp_path / "elsewhere" / "policy.onnx"
    moved.parent.mkdir()
    out.rename(moved)
    obs = np.zeros((3, 4), dtype=np.float32)
    actions = onnxruntime.InferenceSession(str(moved)).run(None, {"obs": obs})[0]
    assert actions.shape == (3,)


def test_the_export_format_follows_the_file_name_and_a_mismatch_is_one_line(tmp_path, capsys):
    path = checkpoint(tmp_path, "dqn", CASES["dqn"][1], train=False)
    assert main(["export", str(path), "--out", str(tmp_path / "policy.pt")]) == 0
    assert "(torchscript)" in capsys.readouterr().out
    torch.jit.load(str(tmp_path / "policy.pt"))  # TorchScript, not ONNX in a .pt
    bad = ["export", str(path), "--out", str(tmp_path / "p.pt"), "--format", "onnx"]
    assert main(bad) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "p.pt names a TorchScript file" in err
    assert main(["export", str(path), "--out", str(tmp_path / "policy.bin")]) == 2
    assert "cannot tell the format" in capsys.readouterr().err
    assert not (tmp_path / "p.pt").exists()


def test_a_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        load_policy(tmp_path / "nothing")
    (tmp_path / "policy.onnx").write_bytes(b"")  # a file: it looked for file/checkpoints
    with pytest.raises(CheckpointError, match=r"policy\.onnx is a file, not a checkpoint or run"):
        load_policy(tmp_path / "policy.onnx")
    assert main(["train", "--resume", str(tmp_path / "policy.onnx")]) == 2
    assert "policy.onnx is a file, not a run directory" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.onnx")]) == 2
