"""Sweeps on real Ray Tune: grids, PBT exploiting a trial's checkpoint, the tune command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from flowrl.apps.cli import main
from flowrl.apps.plotting import find_runs
from flowrl.apps.sweeps import RESTORES, parse_grid, sweep, trial_rows
from flowrl.core.config import ConfigError
from flowrl.run import checkpoints

FAST = {"num_workers": 0, "train_batch_size": 256, "sgd_minibatch_size": 64, "num_sgd_iter": 2}


def test_parse_grid_reads_json_lists_and_names_a_bad_item():
    assert parse_grid(["lr=[0.001, 0.0003]", "model_hiddens=[[32],[64,64]]"]) == {
        "lr": [0.001, 0.0003],
        "model_hiddens": [[32], [64, 64]],
    }
    # without brackets, which zsh (macOS's shell) reads as a file pattern unless quoted
    assert parse_grid(["lr=0.001,3e-4", "use_lstm=true,false", "gamma=0.99"]) == {
        "lr": [0.001, 0.0003],
        "use_lstm": [True, False],
        "gamma": [0.99],
    }
    for bad in ("lr", "lr=", "lr=[]", "=[1]", "lr=[1,", "lr=1,,2"):
        with pytest.raises(ConfigError, match="--grid expects KEY="):
            parse_grid([bad])


@pytest.mark.slow
def test_a_grid_runs_a_trial_per_value_with_flowrls_own_run_files(ray_session, tmp_path):
    fixed = {**FAST, "record_experiences": str(tmp_path / "recorded")}  # side by side
    grid = {"lr": [1e-3, 3e-4], "env_config.max_episode_steps": [30]}  # one entry of a mapping
    results = sweep("ppo", grid, fixed=fixed, stop={"training_iteration": 2}, storage=tmp_path)
    assert sorted(r.config["lr"] for r in results) == [3e-4, 1e-3]
    # each trial records to a directory of its own (they wrote each other's files over)
    recorded = sorted(p.parent.name for p in (tmp_path / "recorded").glob("*/manifest.json"))
    assert recorded == sorted(r.metrics["trial_id"] for r in results)
    for result in results:
        assert result.error is None and result.metrics["training_iteration"] == 2
        run_dir = tmp_path / "tune" / result.path.rsplit("/", 1)[-1] / "flowrl"
        rows = [json.loads(line) for line in (run_dir / "result.jsonl").open()]
        assert [r["iteration"] for r in rows] == [1, 2]
        assert max(r["episode_return_max"] for r in rows) <= 30  # the dotted key arrived
        assert (run_dir / "progress.csv").exists() and list(run_dir.glob("events.out.tfevents.*"))
        assert (
            json.loads((run_dir / "config.json").read_text())["config"]["lr"] == result.config["lr"]
        )
    # the sweep's output is runs to flowrl plot, each trial a checkpoint to flowrl evaluate
    trials = sorted(tmp_path / "tune" / r.path.rsplit("/", 1)[-1] for r in results)
    assert find_runs([tmp_path]) == [trial / "flowrl" for trial in trials]
    assert [checkpoints.resolve(trial).meta["algo"] for trial in trials] == ["ppo", "ppo"]


def test_a_sweep_in_python_fits_its_trials_or_says_what_holds_the_cpus(ray_session, tmp_path):
    """sweep() from a notebook waited forever, silently, for trials that could not be
    placed: the config's 2 workers per trial on 2 CPUs, or CPUs this process's algorithm
    held. flowrl tune checked the first; sweep() now checks both, as flowrl tune does."""
    from flowrl.algorithms.ppo import PPOConfig, PPOPolicy
    from flowrl.rollout.worker import WorkerSet

    holder = WorkerSet(policy_cls=PPOPolicy, config=PPOConfig(num_workers=2))  # both CPUs
    try:
        with pytest.raises(ConfigError, match=r"workers of ppo on CartPole-v1 .* hold 2: stop"):
            sweep("ppo", {"lr": [1e-3]}, fixed=FAST, stop={"training_iteration": 1},
                  storage=tmp_path)  # fmt: skip
    finally:
        holder.stop()
    with pytest.raises(ConfigError, match="each trial reserves 5 CPUs"):
        sweep("ppo", {"lr": [1e-3]}, fixed={"num_workers": 4}, storage=tmp_path)


@pytest.mark.slow
def test_pbt_restores_one_trials_checkpoint_into_the_other(ray_session, tmp_path):
    results = sweep(
        "ppo",
        {"lr": [1e-3, 1e-5]},  # the second learns nothing: PBT replaces it by the first
        fixed=FAST,
        stop={"training_iteration": 4},
        storage=tmp_path,
        scheduler="pbt",
        perturbation_interval=2,
    )
    assert all(r.error is None for r in results)
    assert max(r.metrics[RESTORES] for r in results) >= 1
    exploits = (tmp_path / "tune" / "pbt_global.txt").read_text().splitlines()
    assert exploits, "PBT logs each exploit"


@pytest.mark.slow
def test_tune_counts_iterations_from_the_first_that_trained(ray_session, tmp_path):
    """The rollouts of a replay plan report while its buffer fills: those results go to
    the trial's run files, and Tune's iterations (ASHA's rungs, PBT's intervals) begin
    with the first that trained, so no scheduler compares untrained trials."""
    fixed = {"num_workers": 0, "learning_starts": 1500, "min_env_steps_per_iteration": 500}
    (result,) = sweep("dqn", {"lr": [1e-3]}, fixed=fixed, stop={"training_iteration": 1},
                      storage=tmp_path)  # fmt: skip
    assert result.error is None and result.metrics["env_steps_trained"] > 0
    run_dir = tmp_path / "tune" / result.path.rsplit("/", 1)[-1] / "flowrl"
    rows = [json.loads(line) for line in (run_dir / "result.jsonl").open()]
    assert [r["env_steps_trained"] == 0 for r in rows] == [True] * (len(rows) - 1) + [False]
    assert len(rows) >= 3 and rows[-1]["env_steps_sampled"] == result.metrics["env_steps_sampled"]
    # the table counts the trial's iterations as its run files and --stop-iters do: it
    # showed Tune's, 2 for a run of 3
    assert trial_rows([result], ["lr"])[0]["iterations"] == len(rows)


@pytest.mark.slow
def test_trials_stop_at_tunes_step_budget_not_an_iteration_past_it(ray_session, tmp_path):
    """A3C's iterations last 0.5 s: trials asked for 2,000 env steps sampled ten times that,
    as many as their speed allowed, so trials were compared at different budgets."""
    stop = {"env_steps_sampled": 2000}
    (result,) = sweep("a3c", {"lr": [1e-3]}, fixed={"num_workers": 0}, stop=stop,
                      storage=tmp_path)  # fmt: skip
    assert result.error is None and 2000 <= result.metrics["env_steps_sampled"] < 2100


def test_tune_without_the_tune_extra_is_one_line_naming_it(capsys, monkeypatch):
    """Ray without its tune extra: Ray's ImportError, raised at ray/tune/__init__.py, exit 1."""
    import ray

    monkeypatch.setitem(sys.modules, "ray.tune", None)  # not installed, as import sees it
    monkeypatch.delattr(ray, "tune", raising=False)  # (an import earlier in the suite set it)
    monkeypatch.delitem(sys.modules, "flowrl.apps.sweeps")  # imported again, without it
    assert main(["tune", "ppo", "--grid", "lr=[0.001]"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["flowrl: error: sweeps need Ray Tune: pip install 'flowrl-ray[tune]'"]


def test_tune_command_refuses_bad_input_in_one_line(capsys):
    for args, message in (
        (["tune", "ppo"], "needs at least one --grid"),
        (["tune", "ppo", "--grid", "lr="], "--grid expects KEY="),
        (["tune", "ppo", "--grid", "lrr=[0.1]"], "unknown config key 'lrr'"),
        (["tune", "ppo", "--grid", "lrr.x=[0.1]"], "unknown config key 'lrr.x'"),
        (["tune", "ppo", "--grid", "gamma.x=[1]"], "gamma expects float, got {'x': 1}"),
        (["tune", "ppo", "--grid", "lr=[0.1]", "--num-samples", "0"], "--num-samples"),
        (["tune", "ppo", "--space", "lr=lognormal(1,2)"], "--space expects KEY=DIST(ARGS)"),
        (["tune", "ppo", "--space", "lr=uniform(0.1)"], "uniform takes LOW, HIGH"),
        (["tune", "ppo", "--space", "lr=uniform(-1,1)"], "lr"),  # out of lr's range
        (["tune", "ppo", "--grid", "lr=[0.1]", "--search", "optuna"], "give --space"),
        (["tune", "ppo", "--space", "lr=uniform(0.1,1)", "--scheduler", "pbt"], "give --grid"),
        (["tune", "ppo", "--grid", "lr=[0.001,-1]"], "lr"),  # every value, not the first
        (["tune", "ppo", "--space", "num_sgd_iter=uniform(1,5)"], "takes whole numbers"),
        (["tune", "ppo", "--grid", "lr=[0.1]", "--num-workers", "512"], "each trial reserves"),
        (["tune", "ppo", "--grid", "lr=[0.1]", "--num-workers", "auto"], "is flowrl train's"),
    ):
        assert main(args) == 2
        # Ray may still forward an earlier test's trial output (lines it tags "(actor pid=N)")
        out, err = capsys.readouterr()
        lines = [ln for ln in err.splitlines() if not ln.lstrip("\x1b[0123456789m").startswith("(")]
        assert len(lines) == 1 and message in lines[0], err
        assert out == "", out  # refused before it says what it sweeps (and before Ray starts)


@pytest.mark.slow
def test_an_offline_sweep_reads_a_relative_input_and_ranks_by_the_evaluation(
    ray_session, tmp_path, monkeypatch, capsys
):
    """Tune runs each trial in a directory of its own: a relative --input failed every trial
    ('rec is not a recording'), and the table ranked them by a training return that an
    offline run never has (NaN)."""
    from flowrl import Algorithm

    monkeypatch.chdir(tmp_path)
    with Algorithm("ppo", num_workers=0, record_experiences="rec", train_batch_size=512) as run:
        run.train()
    args = ["tune", "bc", "--input", "rec", "--grid", "lr=[0.001,0.0003]", "--stop-iters", "1"]
    args += ["--set", "updates_per_iteration=5", "evaluation_episodes=2", "--output", "sweep"]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    header, *rows = out.split("\ntrial ", 1)[1].splitlines()[:3]  # a row per trial
    assert "evaluation/episode_return_mean" in header and "2 trials, 0 failed" in out
    assert sorted(row.split()[1] for row in rows) == ["0.0003", "0.001"]
    assert all(float(row.split()[4]) > 0 for row in rows), out  # CartPole's returns


@pytest.mark.slow
def test_an_offline_sweep_announces_and_names_its_recordings_env(ray_session, tmp_path, capsys):
    """The trials took the recording's env while the sweep said (and named its output
    after) CartPole-v1, the default: the command built its config another way."""
    from flowrl import Algorithm

    rec = str(tmp_path / "rec")
    with Algorithm("ppo", env="Acrobot-v1", num_workers=0, record_experiences=rec,
                   train_batch_size=256) as run:  # fmt: skip
        run.train()
    args = ["tune", "bc", "--input", rec, "--grid", "lr=[0.001]", "--stop-iters", "1"]
    args += ["--set", "updates_per_iteration=1", "evaluation_episodes=1"]
    assert main([*args, "--output", str(tmp_path / "sweep")]) == 0
    assert "flowrl: sweeping bc on Acrobot-v1 over lr" in capsys.readouterr().out


def test_an_offline_sweep_needs_an_evaluation_every_iteration():
    from flowrl.apps.sweeps import check_trials
    from flowrl.run.spec import get_algorithm

    fixed = {"input": "rec", "evaluation_interval": 2}
    with pytest.raises(ConfigError, match="evaluation_interval=1"):
        check_trials(get_algorithm("bc"), fixed, {"lr": [1e-3]}, {}, cpus=2)


def test_an_offline_sweep_stopped_on_env_steps_is_refused_before_tune_starts(tmp_path):
    """sweep("bc", ..., stop={"env_steps_sampled": N}): its trials sample nothing, so
    they never stopped (flowrl tune --stop-timesteps is refused the same way)."""
    with pytest.raises(ConfigError, match="bc samples no env steps, so env_steps_sampled"):
        sweep("bc", {"lr": [1e-3]}, fixed={"input": "rec"},
              stop={"env_steps_sampled": 1000}, storage=tmp_path)  # fmt: skip


@pytest.mark.slow
def test_an_optuna_search_on_real_tune(ray_session, tmp_path, capsys):
    """Optuna's TPE sampler draws lr and the epochs from their ranges, a trial each (the
    command in-process, on the session's Ray)."""
    args = ["tune", "ppo", "--env", "CartPole-v1", "--search", "optuna", "--num-samples", "2"]
    args += ["--space", "lr=loguniform(1e-4,1e-2)", "num_sgd_iter=choice(1,2,3)"]
    args += ["--stop-iters", "2", "--num-workers", "0", "--output", str(tmp_path)]
    args += ["--set", "train_batch_size=256", "sgd_minibatch_size=128"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "with Optuna" in out and "2 trials, 0 failed" in out
    assert err.count(" done: episode_return_mean ") == 2  # a line as each trial ended
    assert "A new study created" not in err  # Optuna's own log line
    table = out.split("\ntrial ", 1)[1].splitlines()[1:3]
    lrs = [float(row.split()[1]) for row in table]
    assert len(set(lrs)) == 2 and all(1e-4 <= lr <= 1e-2 for lr in lrs)
    assert {int(row.split()[2]) for row in table} <= {1, 2, 3}
    state = list((tmp_path / "tune").glob("searcher-state-*.pkl"))
    assert state, "Tune saved the Optuna searcher's state beside the trials"


@pytest.mark.slow
def test_a_trial_that_fails_before_its_first_result_is_a_row_and_one_line(
    ray_session, tmp_path, capsys
):
    """The second trial's env cannot be made: the first trial's row is still printed, the
    failure is one line naming its cause, and no layout was given, so the trials run
    in-process (2 workers and the trial itself would need 3 CPUs of 2: Ray waited
    forever)."""
    args = ["tune", "ppo", "--env", "CartPole-v1", "--stop-iters", "2", "--output", str(tmp_path)]
    args += ["--grid", 'env_config=[{}, {"no_such_argument": 1}]']
    args += ["--set", "train_batch_size=256"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "trials run in-process" in captured.out and "2 trials, 1 failed" in captured.out
    said = [ln for ln in captured.err.splitlines() if ln.startswith("flowrl: trial ")]
    failures = [ln for ln in said if " failed: " in ln]  # said as it failed, not at the end
    assert len(failures) == 1 and "no_such_argument" in failures[0], captured.err[-2000:]
    assert len(said) == 2 and " done: episode_return_mean " in "".join(said)
    assert "AttributeError" not in captured.err


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_from_its_trials_checkpoints_with_every_row(
    ray_session, tmp_path, capsys
):
    """SIGTERM (a scheduler's preemption) ended a sweep at once, Ctrl-C with a table of
    blank rows that said "0 failed" and exit 0, and nothing resumed it. Resumed with Tune's
    own restore, a trial had no checkpoint before its last, so it started again, and its
    files in Tune's storage were written over by those of its new working directory."""
    import signal
    import subprocess
    import time

    storage = tmp_path / "sweep"
    args = ["tune", "ppo", "--env", "custom_envs:SlowCorridor", "--grid", "lr=[1e-3,3e-4,1e-4]"]
    args += ["--stop-iters", "25", "--output", str(storage), "--num-workers", "0", "--set"]
    args += ["train_batch_size=128", "sgd_minibatch_size=64", "num_sgd_iter=2"]
    args += ["num_envs_per_worker=1"]
    code = (  # the command, its trials checkpointing every second (not every minute)
        "import sys\nfrom flowrl.apps import sweeps\nfrom flowrl.apps.cli import main\n"
        "sweeps.sweep.__kwdefaults__['checkpoint_every_s'] = 1\n"
        f"sys.exit(main({args!r}))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline, kept = time.time() + 120, None
        while time.time() < deadline and kept is None:  # a checkpoint past the first iterations
            time.sleep(0.2)
            for logged in storage.glob("tune/*/checkpoint_*/run/result.jsonl"):
                rows = logged.read_text().splitlines()  # as they were logged
                if len(rows) >= 3:
                    trial, kept = logged.parents[2], rows
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert " unfinished\n" in out and " not started\n" in out, out
    assert f"interrupted; flowrl tune --resume {storage} goes on" in err

    assert main(["tune", "--resume", str(storage)]) == 0
    captured = capsys.readouterr()
    assert "3 trials, 0 failed" in captured.out and "flowrl: interrupted" not in captured.err
    assert captured.err.count(" done: episode_return_mean ") == 3  # the resumed one says so too
    for run_dir in storage.glob("tune/*/flowrl"):
        rows = (run_dir / "result.jsonl").read_text().splitlines()
        assert [json.loads(row)["iteration"] for row in rows] == list(range(1, 26))
    # the trial went on from its checkpoint: the rows before it are those it had logged
    # (a trial started again logs them anew, each with another time_this_iter_s)
    assert (trial / "flowrl" / "result.jsonl").read_text().splitlines()[: len(kept)] == kept
    assert main(["tune", "ppo", "--grid", "lr=[0.1]", "--output", str(storage)]) == 2
    assert "holds a sweep already" in capsys.readouterr().err


PLAN_FILE = """
from flowrl.algorithms.ppo import PPOConfig as Config, PPOLearner as Learner, PPOPolicy as Policy
from flowrl.ops import ConcatBatches, ParallelRollouts, StandardMetricsReporting, TrainOneStep


def plan(workers, config):
    rollouts = ParallelRollouts(workers, mode="bulk_sync")
    train_op = rollouts.combine(ConcatBatches(min_batch_size=256)).for_each(
        TrainOneStep(workers, num_sgd_iter=1, sgd_minibatch_size=128)
    )
    return StandardMetricsReporting(train_op, workers, config)
"""


@pytest.mark.slow
def test_a_plan_file_named_from_the_current_directory_sweeps(ray_session, tmp_path, monkeypatch):
    """flowrl tune my_plan.py:plan failed every trial ("plan file not found: my_plan.py"):
    Tune runs each trial in a directory of its own."""
    from flowrl.apps.sweeps import read_sweep

    monkeypatch.chdir(tmp_path)
    Path("my_plan.py").write_text(PLAN_FILE)
    (result,) = sweep("my_plan.py:plan", {"lr": [1e-3]}, fixed={"num_workers": 0},
                      stop={"training_iteration": 1}, storage=Path("sweep"))  # fmt: skip
    assert result.error is None and result.metrics["iteration"] == 1
    assert read_sweep(Path("sweep"))["algo"] == f"{tmp_path / 'my_plan.py'}:plan"  # resumable


@pytest.mark.slow
def test_a_sweep_of_a_notebooks_env_class_runs_it_in_every_trial(ray_session, tmp_path):
    """sweep(..., fixed={"env": MyEnv}), as Algorithm takes it: "env expects str", and no
    trial process could have imported a notebook's class by name anyway."""
    from gymnasium.envs.classic_control import CartPoleEnv

    class DoubleRewardCartPole(CartPoleEnv):  # a function's: no trial process imports it
        def step(self, action):
            obs, reward, *rest = super().step(action)
            return (obs, 2 * reward, *rest)

    fixed = {**FAST, "env": DoubleRewardCartPole}
    results = sweep("ppo", {"lr": [1e-3]}, fixed=fixed, stop={"training_iteration": 1},
                    storage=tmp_path)  # fmt: skip
    (result,) = results
    assert result.error is None, result.error
    metrics = result.metrics
    assert metrics["episode_return_mean"] == pytest.approx(2 * metrics["episode_len_mean"])
    assert trial_rows(results, ["lr"])[0]["status"] == "done"


def test_a_sweep_says_each_trial_as_it_ends_and_where_it_stands_now_and_then(capsys):
    """A sweep said nothing between its first line and its table, minutes later."""
    from types import SimpleNamespace

    from flowrl.apps.sweeps import SweepProgress

    def trial(trial_id, status, lr, ret=None, iteration=7):
        last = {} if ret is None else {"episode_return_mean": ret, "iteration": iteration,
                                       "env_steps_sampled": iteration * 2048}  # fmt: skip
        return SimpleNamespace(trial_id=trial_id, status=status, config={"lr": lr},
                               last_result=last, error_file=None)  # fmt: skip

    trials = [trial("a", "TERMINATED", 1e-3, 480.5), trial("b", "RUNNING", 3e-4, 212.0)]
    trials += [trial("c", "ERROR", 1e-4), trial("d", "TERMINATED", 1e-5, 25.0, iteration=2)]
    progress = SweepProgress(["lr"], trials=5, interval_s=0, stop={"iteration": 7})
    progress.on_trial_complete(iteration=1, trials=trials, trial=trials[0])
    progress.on_trial_error(iteration=1, trials=trials, trial=trials[2])
    progress.on_trial_complete(iteration=1, trials=trials, trial=trials[3])  # ASHA's rung
    progress.on_step_end(iteration=1, trials=trials)
    assert capsys.readouterr().err.splitlines() == [
        "flowrl: trial a (lr=0.001) done: episode_return_mean 480.5 at iteration 7, "
        "14,336 env steps",
        "flowrl: trial c (lr=0.0001) failed: (Tune wrote no error.txt)",
        "flowrl: trial d (lr=1e-05) stopped early: episode_return_mean 25 at iteration 2, "
        "4,096 env steps",
        "flowrl: 3 of 5 trials ended, 1 running, 1 waiting; best episode_return_mean 480.5 "
        "(lr=0.001)",
    ]
    quiet = SweepProgress(["lr"], trials=5)  # every 30 s: not yet
    quiet.on_step_end(iteration=1, trials=trials)
    assert capsys.readouterr().err == ""


TUNE_ON_A_CLUSTER = """
import sys
from ray.cluster_utils import Cluster
from flowrl.apps.cli import main

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4})
args = ["tune", "ppo", "--grid", "lr=[0.001]", "--num-workers", "2", "--stop-iters", "1"]
args += ["--set", "train_batch_size=256", "--output", sys.argv[1], "--address", cluster.address]
code = main(args)
cluster.shutdown()
sys.exit(code)
"""


@pytest.mark.slow
def test_a_sweep_runs_on_the_ray_cluster_its_address_names(tmp_path, cluster_env):
    """flowrl tune had no --address, counted this machine's CPUs (a trial of 2 workers needs
    3: refused on 2), and with RAY_ADDRESS set, ray.init failed ("When connecting to an
    existing cluster, num_cpus and num_gpus must not be provided"). A cluster of 4 CPUs
    (a separate Ray from the suite's) runs the trial."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", TUNE_ON_A_CLUSTER, str(tmp_path / "sweep")],
                          capture_output=True, text=True, timeout=240, env=cluster_env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 trial, 0 failed" in proc.stdout and " done: " in proc.stderr


def test_resume_refuses_what_it_cannot_go_on_with_in_one_line(tmp_path, capsys):
    """Resumed, a PBT sweep's trials stayed paused and the sweep ended at once, unfinished."""
    (tmp_path / "pbt").mkdir()
    saved = {"algo": "ppo", "keys": ["lr"], "name": "tune", "trials": 2, "scheduler": "pbt"}
    (tmp_path / "pbt" / "sweep.json").write_text(json.dumps(saved))
    (tmp_path / "fifo").mkdir()
    (tmp_path / "fifo" / "sweep.json").write_text(json.dumps({**saved, "scheduler": "fifo"}))
    for args, message in (
        (["--resume", str(tmp_path / "none")], "holds no sweep to resume"),
        (["--resume", str(tmp_path / "pbt")], "Population Based Training does not go on"),
        (["--resume", str(tmp_path / "fifo"), "--grid", "lr=[1]"], "started: drop --grid"),
        (["dqn", "--resume", str(tmp_path / "fifo")], "holds a sweep of ppo, not dqn"),
        (["ppo", "--grid", "lr=[1]", "--output", str(tmp_path / "fifo")], "holds a sweep already"),
    ):
        assert main(["tune", *args]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and message in err, err


@pytest.mark.slow
def test_a_trial_short_of_the_sweeps_stop_is_a_row_stopped_early():
    """A trial that ASHA stopped at a rung was a row "done", as one that met the stop."""
    from types import SimpleNamespace

    import pandas as pd

    def result(path, iteration):
        metrics = {"done": True, "iteration": iteration, "trial_id": path}
        history = pd.DataFrame({"episode_return_mean": [20.0] * iteration})
        return SimpleNamespace(metrics=metrics, path=path, config={"lr": 0.1}, error=None,
                               metrics_dataframe=history)  # fmt: skip

    rows = trial_rows([result("a", 12), result("b", 4)], ["lr"], stop={"iteration": 12})
    assert [row["status"] for row in rows] == ["done", "stopped early"]
    assert trial_rows([result("b", 4)], ["lr"])[0]["status"] == "done"  # no stop: its own


@pytest.mark.slow  # 220 iterations: the quick tier's Tune run is the sweep in Python
def test_asha_runs_the_best_trials_to_the_sweeps_iterations(ray_session, tmp_path):
    """ASHA's own budget (100 iterations) ended every trial there, --stop-iters 300 or not."""
    results = sweep("ppo", {"lr": [1e-3, 1e-5]}, fixed=FAST, stop={"iteration": 110},
                    storage=tmp_path, scheduler="asha")  # fmt: skip
    assert max(r.metrics["iteration"] for r in results) == 110
    for row in trial_rows(results, ["lr"]):  # (the sweep's stop, as sweep kept it)
        assert row["status"] == ("done" if row["iterations"] == 110 else "stopped early")
