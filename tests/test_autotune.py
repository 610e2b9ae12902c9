"""Automatic layout: the cost model's choices on plain numbers, and num_workers="auto"
measuring a real plan and training with what it chose (Python and CLI)."""

from __future__ import annotations

import json

import pytest

from flowrl import Algorithm, ConfigError
from flowrl.apps.cli import main
from flowrl.diagnostics.autotune import Costs, best_layout, predict


def costs(sample_us: float, learn_us: float, *, thread: bool = False, cpus: int = 2, **kw):
    base = {
        "sample_s": {4: 1.5 * sample_us * 1e-6, 8: sample_us * 1e-6, 16: 0.8 * sample_us * 1e-6},
        "step_bytes": 200.0,
        "learn_s": learn_us * 1e-6,
        "learner_thread": thread,
        "weight_bytes": 40_000,
        "cpus": cpus,
        "ray_running": True,
    }
    return Costs(**{**base, **kw})


def test_an_expensive_env_gets_a_worker_per_cpu():
    layout = best_layout(costs(1000, 20), round_steps=2048)
    assert (layout.num_workers, layout.num_envs_per_worker) == (2, 16)
    assert layout.num_workers * layout.num_envs_per_worker * layout.rollout_fragment_length == 2048
    assert "2 workers x 16 envs" in layout.reason


def test_ray_must_pay_for_its_start():
    cheap = costs(20, 30, ray_running=False)  # workers would win 10% once running
    assert best_layout(costs(20, 30), 2048).num_workers > 0  # Ray already up
    layout = best_layout(cheap, 2048)  # its start is not won back within half a minute
    assert layout.num_workers == 0 and layout.reason.startswith("layout auto: in-process")
    assert best_layout(cheap, 2048, horizon_steps=100_000_000).num_workers > 0  # a long run
    assert best_layout(costs(1000, 20, ray_running=False), 2048).num_workers == 2


def test_a_learner_thread_takes_a_cpu_from_the_workers():
    plan = costs(500, 400, thread=True)
    assert predict(plan, 2, 16, 64) < 2 / plan.sample_s[16]  # less than two free CPUs
    assert predict(plan, 0, 16, 64) == pytest.approx(1 / plan.sample_s[16])  # beside it
    assert best_layout(plan, 2048).steps_per_s <= 1 / plan.learn_s + 1e-6  # learner bound


def test_rounds_asked_ahead_learn_beside_the_workers_not_in_process():
    between, ahead = costs(500, 400), costs(500, 400, rounds_ahead=True)
    threaded = costs(500, 400, thread=True)
    assert predict(ahead, 2, 16, 64) == predict(threaded, 2, 16, 64)
    assert predict(ahead, 2, 16, 64) > predict(between, 2, 16, 64)
    assert predict(ahead, 0, 16, 64) == predict(between, 0, 16, 64)  # nothing to overlap


def test_in_process_only_the_measured_envs_compete_with_the_workers():
    """APPO on CartPole took 4 envs in process: predicted at 30k env steps/s against the
    32 envs' measured 25k, it ran at 9k (sampling shares the interpreter with the learner
    thread, and 4 envs cost the most Python per step)."""
    measured = costs(20, 33, thread=True, ray_running=False, measured=(16, 25_000.0))
    measured.sample_s[4] = 26e-6  # predicted 1 / max(26 us, 33 us): 30k
    layout = best_layout(measured, 3200)
    assert (layout.num_workers, layout.num_envs_per_worker) == (0, 16), layout.reason
    assert layout.steps_per_s == 25_000.0 and "~25,000 env steps/s measured on" in layout.reason
    in_process = {c["num_envs_per_worker"] for c in layout.candidates if not c["num_workers"]}
    assert in_process == {16}


def test_more_cpus_allow_more_workers():
    assert best_layout(costs(1000, 5, cpus=8), 2048).num_workers == 8


def test_every_candidate_is_reported():
    layout = best_layout(costs(100, 50), 2048)
    assert {(c["num_workers"], c["num_envs_per_worker"]) for c in layout.candidates} == {
        (w, n) for w in (0, 1, 2) for n in (4, 8, 16)
    }
    assert "candidates" not in repr(layout)  # a notebook's print(algo.layout): the choice


def test_auto_measures_the_plan_and_trains_with_its_choice():
    with pytest.raises(ConfigError, match=r"build with Algorithm.auto"):
        Algorithm("ppo", env="CartPole-v1", num_workers="auto")
    algo = Algorithm.auto("ppo", env="CartPole-v1", seed=0)
    try:
        layout = algo.layout
        assert algo.config.num_workers == layout.num_workers
        assert algo.config.num_envs_per_worker == layout.num_envs_per_worker
        assert algo.train()["env_steps_sampled"] >= 2048
    finally:
        algo.stop()
    assert layout.steps_per_s > 0 and len(layout.candidates) >= 9


def test_cli_says_what_auto_chose_and_auto_is_trains_default(tmp_path, capsys):
    args = ["train", "ppo", "--num-workers", "auto", "--stop-iters", "1", "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "flowrl: layout auto: " in out and "env steps/s" in out
    layout = json.loads((tmp_path / "run" / "summary.json").read_text())["layout"]
    assert layout["num_workers"] >= 0 and layout["reason"].startswith("layout auto: ")
    rows = (tmp_path / "run" / "result.jsonl").read_text().splitlines()
    assert [json.loads(row)["iteration"] for row in rows] == [1]  # the criterion, not 2 s
    unset = ["train", "ppo", "--stop-iters", "1", "--no-progress"]
    assert main([*unset, "--output", str(tmp_path / "default")]) == 0
    assert "flowrl: layout auto: " in capsys.readouterr().out
    chosen = [*unset, "--set", "num_workers=0", "--output", str(tmp_path / "set")]
    assert main(chosen) == 0
    assert "layout auto" not in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        main(["train", "ppo", "--num-workers", "many"])
    assert bad.value.code == 2 and "expected a number or auto" in capsys.readouterr().err


def test_an_auto_layout_run_stops_at_its_budget_and_logs_every_iteration(tmp_path, capsys):
    """The measuring run is the run's start: it stops at the criteria, and its iterations
    are in the logs (it used to run on for seconds past --stop-timesteps, unlogged)."""
    args = ["train", "ppo", "--env", "CartPole-v1", "--stop-timesteps", "10000"]
    assert main([*args, "--no-progress", "--output", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flowrl: measuring the fastest layout")
    rows = [json.loads(r) for r in (tmp_path / "run" / "result.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, len(rows) + 1))
    steps = [r["env_steps_sampled"] for r in rows]
    assert steps[-1] >= 10_000 > steps[-2]  # stopped at the first result past the budget
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stopped_by"] == "timesteps" and summary["iterations"] == len(rows)
    assert f"after {steps[-1]} env steps" in out
    csv_rows = (tmp_path / "run" / "progress.csv").read_text().splitlines()
    assert len(csv_rows) == len(rows) + 1


def test_a_layout_keeps_the_fragments_an_n_step_return_needs():
    """DQN's 16 env steps a round had become 16 envs x 1 step: its 3-step returns were cut
    to 1 step, and it reached 450 on CartPole on 0 of 10 seeds (benchmarks/seeds.py)."""
    from flowrl.algorithms.dqn import DQNConfig

    assert DQNConfig().min_fragment_length == 3 and DQNConfig(n_step=1).min_fragment_length == 1
    every = best_layout(costs(1000, 20), 48)  # an expensive env: 2 workers x 16 envs x 2
    assert (every.num_workers, every.num_envs_per_worker, every.rollout_fragment_length) == (
        2, 16, 2)  # fmt: skip
    layout = best_layout(costs(1000, 20), 48, floor=3)
    assert (layout.num_workers, layout.num_envs_per_worker, layout.rollout_fragment_length) == (
        2, 8, 3)  # fmt: skip
    assert min(c["fragment"] for c in layout.candidates) >= 3


def test_a_ppo_layout_keeps_fragments_of_a_gae_horizon_and_a_half():
    """The lunar lander (gamma 0.999, lambda 0.98: a horizon of 48 steps) in the 64-step
    fragments that 32 envs gave a 2048-step round scored 125-199 greedy at 1M env steps,
    in 128-step ones 208-267 (benchmarks/suite.py --part lunar-lander-fragments)."""
    from flowrl.algorithms.ppo import PPOConfig

    lander = PPOConfig(gamma=0.999, gae_lambda=0.98)
    assert lander.min_fragment_length == 72 and PPOConfig().min_fragment_length == 26
    assert PPOConfig(gamma=1.0, gae_lambda=1.0).min_fragment_length >= 2048  # one env, whole
    with Algorithm.auto("ppo", env="CartPole-v1", gamma=0.999, gae_lambda=0.98) as algo:
        assert algo.config.rollout_fragment_length >= 72


@pytest.mark.slow
def test_auto_dqn_samples_fragments_of_its_n_steps():
    algo = Algorithm.auto("dqn", env="CartPole-v1")
    with algo:
        assert algo.config.rollout_fragment_length >= algo.config.n_step
        assert algo.config.num_envs_per_worker * algo.config.rollout_fragment_length == 16


def test_a_named_cluster_keeps_every_layout_on_ray():
    cheap = costs(20, 60, ray_running=False)
    assert best_layout(cheap, 2048).num_workers == 0
    assert best_layout(cheap, 2048, min_workers=1).num_workers >= 1


def test_an_algorithm_that_needs_workers_gets_them_even_on_one_cpu():
    from flowrl.algorithms.apex import ApexConfig

    cheap = costs(20, 60, ray_running=False)
    assert ApexConfig.auto_min_workers == 2
    assert best_layout(cheap, 2048, min_workers=2).num_workers == 2
    one_cpu = costs(20, 60, ray_running=False, cpus=1)
    assert best_layout(one_cpu, 2048, min_workers=2).num_workers == 2


def test_a_buffer_slow_to_fill_is_measured_early_and_the_run_starts_afresh(monkeypatch):
    """DQN's Atari preset fills 100k env steps before it learns: the measuring run used to
    sample them all in one process (minutes) and then learn for two 10k-step iterations
    before a layout was chosen. It now learns after MEASURING_FILL_S of sampling, a result
    per SGD step, and the run starts with the config's own learning_starts."""
    from flowrl.diagnostics import autotune

    monkeypatch.setattr(autotune, "MEASURING_FILL_S", 0.05)  # CartPole's 1000 steps: longer
    algo = Algorithm.auto("dqn", env="CartPole-v1", seed=0)
    with algo:
        assert algo.unreported == [] and algo.iteration == 0  # the measuring run stopped
        assert algo.config.learning_starts == 1000
        assert algo.config.min_env_steps_per_iteration == 1000
        assert algo.layout.reason.startswith("layout auto: ") and algo.layout.steps_per_s > 0


def test_a_measuring_run_that_meets_its_criterion_reports_its_own_rate(tmp_path, capsys):
    """A run done before its learning was measured said 67k-159k env steps/s (one step
    over the time between two results); its rate is now its env steps over its time."""
    args = ["train", "ppo", "--env", "CartPole-v1", "--stop-timesteps", "1000"]
    assert main([*args, "--no-progress", "--output", str(tmp_path / "run")]) == 0
    reason = json.loads((tmp_path / "run" / "summary.json").read_text())["layout"]["reason"]
    assert "the run met its stop criterion" in reason, reason
    (row,) = [json.loads(r) for r in (tmp_path / "run" / "result.jsonl").read_text().splitlines()]
    rate = float(reason.split("~")[1].split(" env steps/s")[0].replace(",", ""))
    assert rate <= 1.5 * row["env_steps_sampled"] / row["time_total_s"], (rate, row)


def test_a_measuring_run_that_is_the_run_stops_at_its_step_budget(tmp_path):
    """flowrl train a3c --stop-timesteps 2000, laid out by measuring, sampled 49,408 env
    steps: the measuring run, which became the run, kept A3C's 0.5 s iterations."""
    args = ["train", "a3c", "--env", "CartPole-v1", "--stop-timesteps", "2000", "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "run")]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "the run met its stop criterion" in summary["layout"]["reason"]
    assert 2000 <= summary["env_steps_sampled"] < 2300
