"""Evaluation while training: greedy episodes every evaluation_interval iterations, in
process or on an evaluation worker of its own, the best checkpoint, the stop judged on it."""

from __future__ import annotations

import json
import sys

import pytest

from flowrl import Algorithm
from flowrl.apps.cli import main
from flowrl.core.config import ConfigError
from flowrl.rollout.episodes import Episode
from flowrl.run.checkpoints import BEST, load
from flowrl.run.evaluation import EVAL_RETURN_MEAN, episode_stats
from flowrl.run.runner import StopCriteria, run


def test_episode_stats_on_plain_episodes():
    stats = episode_stats([Episode(1.0, 10), Episode(3.0, 30)])
    assert stats == {
        "episodes": 2,
        "episode_return_mean": 2.0,
        "episode_return_min": 1.0,
        "episode_return_max": 3.0,
        "episode_len_mean": 20.0,
    }


def test_in_process_evaluation_comes_every_interval_with_the_episodes_asked_for():
    algo = Algorithm(
        "ppo", num_workers=0, evaluation_interval=2, evaluation_episodes=3, train_batch_size=256
    )
    results = [algo.train() for _ in range(4)]
    assert [EVAL_RETURN_MEAN in r for r in results] == [False, True, False, True]
    assert results[1]["evaluation/episodes"] == 3 and results[1]["evaluation/iteration"] == 2
    algo.stop()


def test_no_evaluation_by_default():
    algo = Algorithm("ppo", num_workers=0, train_batch_size=256)
    assert not any(k.startswith("evaluation/") for k in algo.train())
    algo.stop()


def test_a_run_keeps_the_best_evaluation_checkpoint_and_stops_on_the_evaluation_return(tmp_path):
    algo = Algorithm("ppo", num_workers=0, evaluation_interval=1, evaluation_episodes=2, seed=3)
    summary = run(algo, stop=StopCriteria(reward=-1.0, iters=5), output_dir=tmp_path)
    # every return beats -1: the first evaluation (iteration 1) stops the run
    assert summary["stopped_by"] == "reward" and summary["iterations"] == 1
    rows = [json.loads(line) for line in (tmp_path / "result.jsonl").open()]
    best = load(tmp_path / "checkpoints" / BEST)
    assert best.meta["iteration"] == 1 and rows[0][EVAL_RETURN_MEAN] > 0
    assert summary["best_evaluation_episode_return_mean"] == rows[0][EVAL_RETURN_MEAN]
    assert "evaluation/episode_return_mean" in (tmp_path / "progress.csv").read_text()


def test_the_best_checkpoint_holds_the_weights_that_were_scored(tmp_path):
    algo = Algorithm("ppo", num_workers=0, evaluation_interval=1, evaluation_episodes=2)
    run(algo, stop=StopCriteria(iters=3), output_dir=tmp_path)
    best = Algorithm.from_checkpoint(tmp_path / "checkpoints" / BEST, in_process=True)
    rows = [json.loads(line) for line in (tmp_path / "result.jsonl").open()]
    top = max(rows, key=lambda r: r[EVAL_RETURN_MEAN])
    # the evaluation is greedy and seeded: the same weights score the same again
    assert best.evaluate(2)["episode_return_mean"] == pytest.approx(top[EVAL_RETURN_MEAN])
    best.stop()


@pytest.mark.slow
def test_remote_evaluation_runs_on_its_own_worker_and_survives_its_death(ray_session):
    import ray

    algo = Algorithm(
        "ppo", num_workers=1, evaluation_interval=1, evaluation_episodes=2, train_batch_size=512
    )
    evaluated = []
    for _ in range(40):  # a new evaluation worker takes seconds to start on a busy host
        result = algo.train()
        if EVAL_RETURN_MEAN in result:
            evaluated.append(result["evaluation/iteration"])
            if len(evaluated) == 1:
                ray.kill(algo.evaluation._actor)  # the next one starts on a new worker
        if len(evaluated) == 3:
            break
    assert len(evaluated) == 3 and evaluated == sorted(evaluated)
    algo.stop()


@pytest.mark.slow
def test_an_env_that_raises_on_the_evaluation_worker_is_tried_again_then_ends_the_run(
    ray_session, tmp_path, caplog
):
    """The evaluation worker's env raised, and every iteration after read the same error
    ("replaced nothing; training goes on", three times) until the failure budget ended the
    run, an iteration's row lost with each."""
    from flowrl.run.runner import StopCriteria, run

    videos = str(tmp_path / "videos")  # (its env renders: it raises)
    config = {"num_workers": 1, "evaluation_interval": 1, "evaluation_episodes": 1,
              "evaluation_video_dir": videos, "train_batch_size": 512}  # fmt: skip
    algo = Algorithm("ppo", env="fault_envs:RaisesWhenRendered", **config)
    with algo, pytest.raises(RuntimeError, match="the env raised in two evaluations in a row: env"):
        run(algo, stop=StopCriteria(iters=200), output_dir=tmp_path / "run")
    tried = [r.message for r in caplog.records if "on a new evaluation worker" in r.message]
    assert len(tried) == 1 and "evaluating, raised ValueError: the renderer is broken" in tried[0]
    assert "replaced" not in caplog.text
    rows = (tmp_path / "run" / "result.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in rows] == list(range(1, algo.iteration + 1))


def test_a_run_with_an_evaluation_worker_reports_the_evaluation_of_its_final_weights(
    ray_session,
):
    """The last iteration started an evaluation on the evaluation worker, and the run
    dropped it at once: with Ray workers the final weights were never scored."""
    from flowrl.run.runner import StopCriteria, run

    algo = Algorithm("ppo", num_workers=1, evaluation_interval=2, evaluation_episodes=2,
                     train_batch_size=512)  # fmt: skip
    summary = run(algo, stop=StopCriteria(iters=2))
    assert algo.last_result["evaluation/iteration"] == 2  # started in the run's last iteration
    assert summary["best_evaluation_episode_return_mean"] == algo.last_result[EVAL_RETURN_MEAN]
    algo.stop()


@pytest.mark.slow
def test_an_evaluation_every_iteration_on_a_worker_scores_the_final_weights_too(
    ray_session, tmp_path
):
    """On the evaluation worker, each row holds the evaluation of the weights before (it
    ends while the next iteration trains), and the one the last iteration started, of
    the final weights, was dropped: neither the summary nor checkpoints/best saw them."""
    import numpy as np

    algo = Algorithm("ppo", num_workers=1, evaluation_interval=1, evaluation_episodes=2,
                     train_batch_size=256)  # fmt: skip
    run(algo, stop=StopCriteria(iters=3), output_dir=str(tmp_path))  # (a str: as users pass)
    final = algo.workers.local_worker.get_weights()["default"]
    scored = algo.evaluation.scored_weights["default"]
    assert algo.last_result["evaluation/iteration"] < 3
    assert all(np.array_equal(final[name], scored[name]) for name in final)
    assert algo.evaluation.running is None
    algo.stop()


def test_the_progress_bar_says_when_a_run_waits_for_its_final_evaluation(ray_session, capsys):
    """The wait for the last evaluation (up to two minutes of Atari episodes) was silent."""
    algo = Algorithm("ppo", env="custom_envs:SlowCorridor", env_config={"delay_s": 0.05},
                     num_workers=1, num_envs_per_worker=1, rollout_fragment_length=32,
                     train_batch_size=32, sgd_minibatch_size=32, evaluation_interval=2,
                     evaluation_episodes=10)  # fmt: skip
    try:  # 10 episodes of at least 4 steps of 0.05 s: 2 s at least
        run(algo, stop=StopCriteria(iters=2), progress=True)
    finally:
        algo.stop()
    assert "waiting for the evaluation of iteration 2 (10 episodes)" in capsys.readouterr().err
    assert algo.last_result["evaluation/iteration"] == 2


# -- videos ----------------------------------------------------------------------------------
def read_frames(path):
    import imageio.v2 as imageio

    with imageio.get_reader(path) as reader:
        return [frame for frame in reader]  # list() asks its length: inf


@pytest.mark.slow
def test_evaluate_video_writes_an_mp4_per_episode_whose_frames_show_it(tmp_path, capsys):
    algo = Algorithm("ppo", num_workers=0, train_batch_size=256)
    algo.train()
    algo.save(tmp_path / "ckpt")
    algo.stop()
    code = main(
        ["evaluate", str(tmp_path / "ckpt"), "--episodes", "2", "--video", str(tmp_path / "v")]
    )
    assert code == 0
    assert "videos of 2 episodes in" in capsys.readouterr().out
    videos = sorted((tmp_path / "v").glob("*.mp4"))
    assert [v.name for v in videos] == ["eval-episode-0.mp4", "eval-episode-1.mp4"]
    frames = read_frames(videos[0])
    assert frames[0].shape == (400, 600, 3)  # CartPole's screen
    assert len(frames) > 8 and not (frames[0] == frames[-1]).all()  # the pole moves


def test_evaluation_while_training_records_each_evaluation_of_a_custom_env(tmp_path):
    algo = Algorithm(
        "ppo",
        env="custom_envs:Corridor",
        env_config={"length": 4},
        num_workers=0,
        train_batch_size=128,
        evaluation_interval=2,
        evaluation_episodes=2,
        evaluation_video_dir=str(tmp_path / "videos"),
    )
    results = [algo.train() for _ in range(2)]
    algo.stop()
    videos = sorted((tmp_path / "videos" / "iteration_000002").glob("*.mp4"))
    assert len(videos) == 2
    frames = read_frames(videos[0])
    # the creator got render_mode="rgb_array": a 16 x 64 strip, a frame per step (and reset)
    assert frames[0].shape[:2] == (16, 64)
    length = results[1]["evaluation/episode_len_mean"]  # both alike: greedy, deterministic
    assert len(frames) in (length, length + 1)
    walker = [int(frame[8].mean(axis=1).argmax()) // 16 for frame in frames]
    assert walker[0] == 0  # the walker starts at cell 0, and moves
    assert len(set(walker)) > 1


def test_an_env_that_renders_no_frames_cannot_be_recorded(tmp_path):
    algo = Algorithm("ppo", env="custom_envs:make_corridor", num_workers=0)
    with pytest.raises(ConfigError, match="cannot be recorded: it renders no rgb_array frames"):
        algo.evaluate(1, video_dir=str(tmp_path))
    algo.stop()


def test_render_shows_each_episode_in_a_window_as_it_plays(a_display, tmp_path, capsys):
    """`flowrl evaluate RUN --render`, as RL Zoo's enjoy.py: the episodes in a window, one
    at a time, a frame per step (CartPole's human mode draws every reset and step)."""
    with Algorithm("ppo", num_workers=0, seed=3) as algo:
        stats = algo.evaluate(2, render=True)
        path = algo.save(tmp_path / "ckpt")
    assert stats["episodes"] == 2
    assert len(a_display) >= 2 * stats["episode_len_mean"]
    a_display.clear()
    assert main(["evaluate", str(path), "--episodes", "1", "--render"]) == 0
    assert "over 1 episodes" in capsys.readouterr().out and a_display


def test_render_without_a_display_or_with_video_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with Algorithm("ppo", num_workers=0) as algo:
        path = algo.save(tmp_path / "ckpt")
    for more, message in [
        ([], "no display to show env CartPole-v1 on (DISPLAY is not set); write its episodes"),
        (["--video", str(tmp_path / "v")], "--video writes the episodes and --render shows"),
    ]:
        assert main(["evaluate", str(path), "--render", *more]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_train_with_video_writes_each_evaluation_in_its_run_directory(tmp_path):
    """Checking OUTPUT/videos made it, so the run then refused its own directory as not
    empty: flowrl train --video never ran."""
    out = tmp_path / "run"
    train = ["train", "ppo", "--num-workers", "0", "--video", "--stop-iters", "1", "--output"]
    quick = ["evaluation_interval=1", "evaluation_episodes=1", "train_batch_size=256"]
    assert main([*train, str(out), "--no-progress", "--set", *quick]) == 0
    assert (out / "videos" / "iteration_000001" / "eval-episode-0.mp4").stat().st_size > 0


def test_a_video_dir_without_evaluation_is_a_config_error(tmp_path, capsys):
    with pytest.raises(ConfigError, match="set evaluation_interval too"):
        Algorithm("ppo", num_workers=0, evaluation_video_dir="videos")
    output = tmp_path / "runs" / "refused"
    train = ["train", "ppo", "--num-workers", "0", "--video", "--output", str(output)]
    assert main(train) == 2
    assert "--set evaluation_interval=N" in capsys.readouterr().err  # in the CLI's words
    assert not (tmp_path / "runs").exists(), "a refused run leaves no folder behind"


@pytest.mark.parametrize(
    ("env", "module", "package"),
    [("CartPole-v1", "moviepy", "moviepy"), ("ALE/Pong-v5", "cv2", "opencv")],
)
def test_videos_without_the_video_extra_are_a_config_error_before_training(
    monkeypatch, tmp_path, env, module, package
):
    monkeypatch.setitem(sys.modules, module, None)  # not installed, as importlib sees it
    with pytest.raises(ConfigError, match=rf"needs {package}.*pip install 'flowrl-ray\[video\]'"):
        Algorithm("ppo", env=env, num_workers=0, evaluation_interval=1,
                  evaluation_video_dir=str(tmp_path))  # fmt: skip
    algo = Algorithm("ppo", env=env, num_workers=0)
    try:
        with pytest.raises(ConfigError, match=package):
            algo.evaluate(1, video_dir=str(tmp_path))
    finally:
        algo.stop()


def test_videos_to_a_place_that_cannot_be_written_are_one_line_naming_it(tmp_path, capsys):
    """It said the env "cannot render frames here"."""
    from flowrl.apps.cli import main

    with pytest.raises(ConfigError, match="cannot write videos to /proc/videos"):
        Algorithm("ppo", env="CartPole-v1", num_workers=0, evaluation_interval=1,
                  evaluation_video_dir="/proc/videos")  # fmt: skip
    with Algorithm("ppo", env="CartPole-v1", num_workers=0) as algo:
        path = algo.save(tmp_path / "ckpt")
    assert main(["evaluate", str(path), "--episodes", "1", "--video", "/proc/videos"]) == 2
    assert "cannot write videos to /proc/videos" in capsys.readouterr().err


def test_evaluate_in_python_draws_its_progress_when_asked(capsys):
    """Only flowrl evaluate showed an evaluation's episodes as they ended: a notebook's
    algo.evaluate() of long episodes was silent."""
    with Algorithm("ppo", num_workers=0) as algo:
        assert algo.evaluate(3, progress=True)["episodes"] == 3
        assert "3/3 [" in capsys.readouterr().err
        algo.evaluate(2)  # stderr is no terminal here: no bar unless asked
        assert capsys.readouterr().err == ""
