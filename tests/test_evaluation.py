"""Evaluation while training: greedy episodes every evaluation_interval iterations, in
process or on an evaluation worker of its own, the best checkpoint, the stop judged on it."""

from __future__ import annotations

import json

import pytest

from flowrl import Algorithm
from flowrl.checkpoints import BEST, load
from flowrl.evaluation import EVAL_RETURN_MEAN, episode_stats
from flowrl.runner import StopCriteria, run


def test_episode_stats_on_plain_episodes():
    stats = episode_stats([(1.0, 10), (3.0, 30)])
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


def test_remote_evaluation_runs_on_its_own_worker_and_survives_its_death(ray_session):
    import ray

    algo = Algorithm(
        "ppo", num_workers=1, evaluation_interval=1, evaluation_episodes=2, train_batch_size=512
    )
    evaluated = []
    for _ in range(12):
        result = algo.train()
        if EVAL_RETURN_MEAN in result:
            evaluated.append(result["evaluation/iteration"])
            if len(evaluated) == 1:
                ray.kill(algo.evaluation._actor)  # the next one starts on a new worker
        if len(evaluated) == 3:
            break
    assert len(evaluated) == 3 and evaluated == sorted(evaluated)
    algo.stop()
