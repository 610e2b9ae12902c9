"""The aggregate of benchmarks/suite.py: rliable's interquartile mean and stratified
bootstrap, computed by hand (rliable 1.2 fails to import beside pandas 3)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from suite import iqm, stratified_bootstrap


@pytest.mark.parametrize("runs", [1, 2, 3, 5, 10])
def test_iqm_is_rliables_trimmed_mean(runs):
    """rliable's aggregate_iqm is scipy's trim_mean(scores, 0.25, axis=None)."""
    from scipy.stats import trim_mean  # (here: scipy.stats takes 0.9 s to import)

    scores = np.random.default_rng(runs).normal(size=(runs, 3))
    assert iqm(scores) == pytest.approx(trim_mean(scores, 0.25, axis=None))


def test_stratified_bootstrap_resamples_runs_within_each_task():
    """Tasks of very different scores: a resample that mixed them across tasks would
    reach values no within-task resample can; the interval holds the point estimate
    and narrows as runs are added."""
    rng = np.random.default_rng(0)
    few = np.stack([rng.normal(0, 1, 3), rng.normal(100, 1, 3)], axis=1)
    many = np.stack([rng.normal(0, 1, 30), rng.normal(100, 1, 30)], axis=1)
    lo, hi = stratified_bootstrap(few)
    assert lo <= iqm(few) <= hi
    many_lo, many_hi = stratified_bootstrap(many)
    assert many_hi - many_lo < hi - lo
    assert stratified_bootstrap(few) == (lo, hi)  # seeded


def test_the_aggregate_keeps_tasks_of_several_runs_and_names_the_others(tmp_path, monkeypatch):
    """Tasks resampled by the bootstrap keep the runs all of them have; a task of one run
    (a single-seed Atari row, say) is left out and named; a task whose published return is
    negative (the mountain car's -110) is left out, as a ratio to it reads backwards."""
    import json

    import suite

    def row(algo, env, ret, published=2.0):
        return {"algo": algo, "env": env, "return": ret, "published": published}

    rows = [row("ppo", "A", r) for r in (2.0, 4.0, 6.0)] + [row("ppo", "B", r) for r in (2, 2)]
    rows += [row("ppo", "D", r, published=-110.0) for r in (-200.0, -200.0)]
    parts = {"one": rows, "two": [row("dqn", "C", 1.0)]}
    for part, part_rows in parts.items():
        (tmp_path / f"suite_{part}.json").write_text(json.dumps({"rows": part_rows}))
    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    out = suite.aggregate(list(parts))
    assert out["tasks"] == ["ppo A", "ppo B"] and out["runs_per_task"] == 2
    assert out["left_out"] == ["dqn C"]
    assert out["iqm_normalised"] == pytest.approx(iqm(np.array([[1.0, 1.0], [2.0, 1.0]])))


def test_a_dqn_row_is_evaluated_from_its_final_checkpoint_at_an_epsilon(tmp_path):
    """As CleanRL scores its DQN runs: whole games of the final checkpoint at epsilon 0.05."""
    import suite

    from flowrl import Algorithm

    with Algorithm("dqn", env="CartPole-v1", num_workers=0, seed=0) as algo:
        algo.train()
        algo.save(tmp_path / "checkpoints" / "checkpoint_000001")
    scores = suite.evaluate(tmp_path, 0.05, episodes=3)
    assert scores["eval_eps"] == 0.05
    assert scores["eval_min"] <= scores["eval_return"] <= scores["eval_max"]
    row = {"algo": "dqn", "env": "CartPole-v1", "return": 9.0, "seconds": 1, "steps_per_s": 1}
    [line] = suite.table([{**row, **scores}])
    assert line["evaluated"].endswith("(epsilon 0.05)")


def test_a_ppo_row_is_evaluated_greedily_and_the_aggregate_counts_that_return(
    tmp_path, monkeypatch
):
    """RL Zoo scores its lander agent deterministically: a PPO checkpoint plays greedy (it
    has no epsilon), and a row that was evaluated enters the aggregate with that score."""
    import json

    import suite

    from flowrl import Algorithm

    with Algorithm("ppo", env="CartPole-v1", num_workers=0, seed=0) as algo:
        algo.train()
        algo.save(tmp_path / "checkpoints" / "checkpoint_000001")
    scores = suite.evaluate(tmp_path, 0.0, episodes=2)
    assert scores["eval_min"] <= scores["eval_return"] <= scores["eval_max"]
    row = {"algo": "ppo", "env": "A", "return": 1.0, "published": 2.0, "eval_eps": 0.0}
    [line] = suite.table([{**row, **scores, "seconds": 1, "steps_per_s": 1}])
    assert line["evaluated"].endswith("(greedy)")
    rows = [{**row, "eval_return": r} for r in (4.0, 4.0)]
    (tmp_path / "suite_x.json").write_text(json.dumps({"rows": rows}))
    monkeypatch.setattr(suite, "RESULTS", tmp_path)
    assert suite.aggregate(["x"])["iqm_normalised"] == pytest.approx(2.0)
