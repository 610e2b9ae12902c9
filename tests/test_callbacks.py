"""Callbacks: the episode hooks see each step's env info, custom metrics reach the results,
result.jsonl, TensorBoard and MLflow, and the driver's hooks see results and checkpoints;
on Ray workers through the command line, and in-process from Python."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from custom_envs import ScriptedVectorEnv

from flowrl import Algorithm, Callbacks, ConfigError
from flowrl.apps.cli import main
from flowrl.rollout.episodes import Episode
from flowrl.rollout.sampler import SINGLE, VectorLanes

TESTS = Path(__file__).parent
FLOWRL = str(Path(sys.executable).parent / "flowrl")


class Recorder(Callbacks):
    def __init__(self):
        self.calls = []

    def on_episode_start(self, *, episode):
        self.calls.append(("start", episode.env_index))

    def on_episode_step(self, *, episode, info):
        self.calls.append(("step", episode.env_index, info.get("x")))

    def on_episode_end(self, *, episode, info):
        episode.custom_metrics["length"] = episode.length
        self.calls.append(("end", episode.env_index, episode.total_reward))


def test_episode_hooks_follow_next_step_autoreset_and_match_the_episodes():
    """Env 0 ends its episode at step 1, so step 2 is its reset step, which begins the
    next episode; each ended episode's report lines up with the lanes' episode."""
    recorder = Recorder()
    done = np.array([[False, False], [True, False], [False, True]])
    infos = [
        {"x": np.array([10 * t, 10 * t + 1]), "_x": np.array([True, t != 1])} for t in range(3)
    ]
    env = ScriptedVectorEnv(np.ones((3, 2)), done, infos)
    lanes = VectorLanes(env, callbacks=recorder, worker_index=1)
    lanes.reset()
    steps = [lanes.step({SINGLE: np.zeros(2, np.int64)}) for _ in range(3)]
    lanes.count(*(np.stack([step[k][SINGLE] for step in steps]) for k in (1, 2, 3)))
    assert recorder.calls == [
        ("start", 0), ("start", 1),
        ("step", 0, 0), ("step", 1, 1),
        ("step", 0, 10), ("end", 0, 2.0), ("step", 1, None),
        ("start", 0), ("step", 1, 21), ("end", 1, 3.0),
    ]  # fmt: skip
    assert lanes.take_episodes() == [
        Episode(2.0, 2, custom={"length": 2}),
        Episode(3.0, 3, custom={"length": 3}),
    ]


def test_episode_hooks_and_custom_metrics_in_a_parallel_multi_agent_env():
    """An episode is an env copy's: its total reward is the sum over its agents (the
    episode return), its length the copy's env steps; the fragment hook sees each
    multi-agent fragment."""
    from custom_callbacks import TeamEpisodes

    algo = Algorithm("ppo", env="flowrl.rollout.toy_multi_agent:IndependentCartPoles",
                     num_workers=0, callbacks=TeamEpisodes, train_batch_size=1024)  # fmt: skip
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["custom/total_mean"] == pytest.approx(result["episode_return_mean"])
    assert result["custom/length_mean"] == pytest.approx(result["episode_len_mean"])
    assert result["custom/agents_at_end_min"] >= 1  # the last agent to leave, at least
    assert TeamEpisodes.fragments >= 1


def test_callbacks_that_cannot_load_are_a_config_error(tmp_path):
    for spec, message in (
        ("no_colon", "module:Class"),
        ("custom_callbacks:Missing", "cannot load callbacks"),
        ("json:JSONDecoder", "Callbacks subclass"),
    ):
        with pytest.raises(ConfigError, match=message):
            Algorithm("ppo", num_workers=0, callbacks=spec)


def test_a_callbacks_class_from_python_runs_in_process_and_saves_by_name(tmp_path):
    from custom_callbacks import CoinCallbacks

    algo = Algorithm("ppo", env="custom_envs:CoinCorridor", env_config={"length": 4},
                     num_workers=0, callbacks=CoinCallbacks, train_batch_size=256)  # fmt: skip
    try:
        result = algo.train()
        assert result["custom/coins_mean"] >= 3 and result["custom/steps_seen_max"] == 0
        assert result["custom/driver_saw_iteration"] == 1
        algo.save(tmp_path / "ckpt")
        assert (tmp_path / "checkpoints_seen.txt").read_text().strip() == '"ckpt"'
        assert algo.config.to_dict()["callbacks"] == "custom_callbacks:CoinCallbacks"
    finally:
        algo.stop()


@pytest.mark.slow
def test_custom_metrics_from_env_info_on_ray_workers_reach_jsonl_tensorboard_and_mlflow(
    ray_session, tmp_path, monkeypatch
):
    """flowrl train with 2 Ray workers, --callbacks and --logger mlflow (in-process, on the
    session's Ray, whose workers import the tests' modules)."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)  # MLflow's local store goes to ./mlruns
    # mlflow.set_tracking_uri (the tracking doctest's) sets this for the whole process
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "run"
    args = ["ppo", "--env", "custom_envs:CoinCorridor", "--num-workers", "2"]
    args += ["--callbacks", "custom_callbacks:CoinCallbacks", "--stop-iters", "2"]
    args += ["--logger", "mlflow", "--no-progress", "--output", str(out)]
    args += ["--set", 'env_config={"length": 4}', "train_batch_size=512"]
    assert main(["train", *args]) == 0
    rows = [json.loads(line) for line in (out / "result.jsonl").open()]
    # an episode at the goal moved right 3 times; one cut at 16 steps may have fewer
    assert len(rows) == 2 and all(r["custom/coins_max"] >= 3 for r in rows)
    assert all(r["custom/coins_min"] >= 0 for r in rows)
    assert all(r["custom/steps_seen_max"] == 0 for r in rows)  # a step hook per step

    (events,) = out.glob("events.out.tfevents.*")
    board = EventAccumulator(str(events))
    board.Reload()
    coins = board.Scalars("custom/coins_mean")
    assert [round(s.value, 4) for s in coins] == [round(r["custom/coins_mean"], 4) for r in rows]

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    (run,) = client.search_runs(client.search_experiments()[0].experiment_id)
    history = client.get_metric_history(run.info.run_id, "custom/coins_mean")
    assert [m.value for m in history] == pytest.approx([r["custom/coins_mean"] for r in rows])


def test_the_command_line_refuses_callbacks_it_cannot_load(capsys):
    assert main(["train", "ppo", "--num-workers", "0", "--callbacks", "nope:Nope"]) == 2
    assert "cannot load callbacks nope:Nope" in capsys.readouterr().err


QUICK_RUN = ["--env", "CartPole-v1", "--num-workers", "0", "--no-progress"]
QUICK_RUN += ["--set", "train_batch_size=256", "num_envs_per_worker=2"]


def rows_and_checkpoints(run_dir: Path) -> tuple[list[int], list[str]]:
    lines = (run_dir / "result.jsonl").read_text().splitlines()
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    return [json.loads(line)["iteration"] for line in lines], names


def test_a_custom_metric_that_is_not_a_number_is_one_line_naming_it(tmp_path, capsys):
    args = ["train", "ppo", *QUICK_RUN, "--callbacks", "custom_callbacks:WordMetric"]
    assert main([*args, "--stop-iters", "3", "--output", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "WordMetric.on_episode_end reported custom metric 'mood' = 'cheerful' (str)" in err[0]
    rows, checkpoints = rows_and_checkpoints(tmp_path / "run")
    assert checkpoints == [f"checkpoint_{len(rows):06d}"], (rows, checkpoints)
    assert (tmp_path / "run" / "summary.json").exists()


def test_a_raising_driver_hook_keeps_the_row_of_its_iteration_and_the_summary(tmp_path, capsys):
    args = ["train", "ppo", *QUICK_RUN, "--stop-iters", "4"]
    hooked = [*args, "--callbacks", "custom_callbacks:RaisingResult"]
    assert main([*hooked, "--output", str(tmp_path / "result")]) == 1
    err = capsys.readouterr().err
    assert "RaisingResult.on_train_result raised KeyError" in err
    assert "(raised at " in err and "custom_callbacks.py:49)" in err  # the hook's line
    assert rows_and_checkpoints(tmp_path / "result") == ([1, 2], ["checkpoint_000002"])
    hooked = [*args, "--callbacks", "custom_callbacks:RaisingCheckpoint"]
    assert main([*hooked, "--output", str(tmp_path / "checkpoint")]) == 1
    assert "RaisingCheckpoint.on_checkpoint raised OSError" in capsys.readouterr().err
    summary = json.loads((tmp_path / "checkpoint" / "summary.json").read_text())
    assert summary["iterations"] == 4 and summary["checkpoint"].endswith("checkpoint_000004")
