"""The flowrl command, run as a user runs it (a subprocess of the installed script)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowrl.apps.cli import main

FLOWRL = str(Path(sys.executable).parent / "flowrl")
QUICK = ["--num-workers", "0", "--no-progress", "--set", "train_batch_size=256"]
SLOW = pytest.mark.slow


def flowrl(*args, cwd=None, timeout=180, env=None):
    return subprocess.run(
        [FLOWRL, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def test_help_and_usage_errors_answer_without_loading_torch():
    """``flowrl --help`` and an argument error answer in a fraction of torch's import
    (1.8 s on a slow host): nothing the command imports before parsing loads it."""
    code = (
        "import sys\nfrom flowrl.apps.cli import main\n"
        "for argv in (['--help'], ['train']):\n"
        "    try: main(argv)\n"
        "    except SystemExit as e: assert e.code in (0, 2), e.code\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "False"


@pytest.mark.parametrize(
    ("text", "steps"),
    [("200k", 200_000), ("1.5M", 1_500_000), ("2e5", 200_000), ("10_000", 10_000)],
)
def test_a_step_budget_reads_as_budgets_are_written(text, steps):
    from flowrl.apps.cli import _whole

    assert _whole(text) == steps


@pytest.mark.slow
def test_an_atari_run_exits_without_nanobind_leak_warnings(tmp_path):
    """The command skips the interpreter's last garbage collection (console_main), so an
    Atari vector env still held there was never freed: ale-py's nanobind printed 20 lines
    of leaked instances and types after every Atari run. A closed env is now let go."""
    args = ["--stop-iters", "1", "--num-workers", "0", "--no-progress", "--output", tmp_path]
    out = flowrl("train", "ppo", "--env", "ALE/Pong-v5", *args,
                 "--set", "train_batch_size=128", "--set", "num_envs_per_worker=2")  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "leaked" not in out.stderr, out.stderr[-2000:]


def test_list():
    out = flowrl("list")
    assert out.returncode == 0
    names = ("ppo", "a3c", "dqn", "sac", "impala", "appo", "apex")
    assert all(name in out.stdout for name in names)
    detail = flowrl("list", "ppo")
    assert detail.returncode == 0 and "clip_param" in detail.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "nope", "--env", "CartPole-v1"], "unknown algorithm 'nope'"),
        (["train", "ppo", "--env", "NoSuchEnv-v0"], "unknown env id 'NoSuchEnv-v0'"),
        (["train", "ppo", "--set", "bogus=1"], "unknown config key 'bogus'"),
        (["train", "dqn", "--set", "use_lstm=true"], "(ppo, a3c, impala and appo have it)"),
        (["train", "ppo", "--set", "learning_rate=0.001"], "flowrl's name for it: 'lr'"),
        (["train", "ppo", "--set", "lr=fast"], "lr expects a number or a schedule"),
        (["train", "ppo", "--set", "gamma=2"], "gamma must be <= 1"),
        (["train", "ppo", "--num-workers", "-1"], "num_workers must be >= 0"),
        (["train", "ppo", "--num-workers", "two"], "expected a number or auto, got 'two'"),
        (["train", "ppo", "--stop-timesteps", "1.5e3x"], "expected a whole number (200000,"),
        (["train", "ppo", "--stop-timesteps", "1.0001k"], "2e5, 200k), got '1.0001k'"),
        (["train", "ppo", "--set", "lr"], "--set expects KEY=VALUE"),
        (["train", "ppo", "--set", "gamma=0.9", "gamma.x=1"], "gamma is 0.9, not a mapping"),
        (["train", "ppo", "--config", "/no/such/file.json"], "cannot read config file"),
        (["train", "ppo", "--resume", "/no/such/run"], "run directory not found"),
        (["train", "missing.py:plan"], "plan file not found"),
        (["train"], "name the algorithm (flowrl list shows them), or --resume RUN_DIR"),
        (["evaluate", "/no/such/checkpoint"], "checkpoint not found"),
        (["evaluate", ".", "--episodes", "0"], "--episodes must be >= 1"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["export", ".", "--bogus"], "unrecognized arguments: --bogus (see flowrl export --help)"),
        (["train", "sac", "--env", "CartPole-v1"], "set discrete=true"),
        (["train", "sac", "--env", "CartPole-v1", "--num-workers", "2"], "set discrete=true"),
        (["train", "sac", "--env", "Pendulum-v1", "--set", "discrete=true"], "needs a Discrete"),
        (["train", "dqn", "--env", "Pendulum-v1"], "dqn takes Discrete actions"),
        (["train", "ppo", "--num-workers", "10000"], "10000 rollout workers reserve"),
        (["train", "bc"], "no recording to read"),
        (["train", "ppo", "--input", "recorded"], "recording for the offline algorithms"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message, capsys):
    try:  # in-process: the same main as the console script (one process run is below)
        code = main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err
    assert out == "", out  # not even the layout measuring's announcement


def test_set_with_a_dotted_key_sets_one_entry_of_a_mapping_over_the_config_file(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[env_config]\nmax_episode_steps = 50\nrender_mode = "rgb_array"\n')
    out = tmp_path / "run"
    code = main(["train", "ppo", "--stop-iters", "1", "--config", str(cfg), "--output", str(out),
                 *QUICK, "env_config.max_episode_steps=20"])  # fmt: skip
    assert code == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["env_config"] == {"max_episode_steps": 20, "render_mode": "rgb_array"}
    rows = [json.loads(line) for line in (out / "result.jsonl").read_text().splitlines()]
    assert rows[-1]["episode_return_max"] <= 20  # the env's own limit arrived


def test_a_bad_input_exits_the_process_with_2_and_no_traceback():
    out = flowrl("train", "nope", "--env", "CartPole-v1")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "unknown algorithm 'nope'" in lines[0]


def test_unparsable_config_file_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = flowrl("train", "ppo", "--config", bad)
    assert out.returncode == 2 and "cannot parse config file" in out.stderr


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("run") / "ppo_run"
    cfg = out_dir.parent / "cfg.json"
    cfg.write_text(json.dumps({"rollout_fragment_length": 32}))
    out = flowrl("train", "ppo", "--env", "CartPole-v1", "--stop-iters", 2, "--config", cfg,
                 "--output", out_dir, *QUICK, "gamma=0.98", "--set", "lr=0.001")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "stopped by iterations" in out.stdout
    return out_dir


def test_train_writes_the_run_files(run_dir):
    results = [json.loads(line) for line in (run_dir / "result.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in results] == [1, 2]
    for key in ("time_total_s", "env_steps_sampled", "env_steps_trained", "episodes_total",
                "episode_return_mean", "episode_len_mean", "env_steps_per_s"):  # fmt: skip
        assert key in results[-1]
    assert any(k.startswith("learner/") for k in results[-1])
    assert any(k.startswith("timers/") for k in results[-1])
    assert (run_dir / "progress.csv").read_text().count("\n") == 3
    assert list(run_dir.glob("events.out.tfevents.*"))
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"] == "ppo" and config["config"]["rollout_fragment_length"] == 32
    assert (config["config"]["gamma"], config["config"]["lr"]) == (0.98, 0.001)
    assert config["config"]["train_batch_size"] == 256, "--set takes several KEY=VALUEs"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "iterations" and summary["iterations"] == 2
    for key in ("algo", "env", "env_steps_sampled", "time_total_s", "episode_return_mean",
                "best_episode_return_mean"):  # fmt: skip
        assert key in summary
    assert (run_dir / "checkpoints" / "checkpoint_000002").is_dir()


def test_a_runs_config_json_repeats_it_as_config(run_dir, tmp_path, capsys):
    """--config RUN/config.json was "unknown config key 'algo'": it now repeats the run."""
    again = tmp_path / "again"
    args = ["--config", str(run_dir / "config.json"), "--stop-iters", "2", "--no-progress"]
    assert main(["train", "ppo", *args, "--output", str(again)]) == 0

    def returns(run):
        return [json.loads(r)["episode_return_mean"] for r in open(run / "result.jsonl")]

    assert returns(again) == returns(run_dir)  # the seed, the layout and the values
    assert main(["train", "dqn", *args]) == 2
    assert "config.json is the config of a ppo run, not dqn" in capsys.readouterr().err


def test_evaluate_shows_its_episodes_as_they_end_on_a_terminal(run_dir, capsys, monkeypatch):
    """An evaluation said nothing until its last episode: 3.5 silent minutes for ten
    episodes of an untrained Breakout policy, each run to its 27,000-step limit."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # (capsys's stderr)
    assert main(["evaluate", str(run_dir), "--episodes", "3"]) == 0
    out, err = capsys.readouterr()
    assert "3/3 [" in err and "episodes/s" in err and "over 3 episodes" in out
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)  # piped: no bar
    assert main(["evaluate", str(run_dir), "--episodes", "3"]) == 0
    assert capsys.readouterr().err == ""


def test_evaluate_a_run_dir(run_dir):
    out = flowrl("evaluate", run_dir, "--episodes", 3)
    assert out.returncode == 0, out.stderr
    assert "episode_return_mean" in out.stdout and "over 3 episodes" in out.stdout


def test_evaluate_on_another_env_or_seed_says_so_and_refuses_other_settings(run_dir, capsys):
    """A checkpoint was evaluated on its own env and seeds only: no variant (a longer time
    limit, CartPole-v0), no other episodes, and no env the run was given as an object."""

    def evaluate(*flags):
        assert main(["evaluate", str(run_dir), "--episodes", "10", *flags]) == 0, flags
        line = capsys.readouterr().out.splitlines()[0]
        return line, float(line.split("mean length ")[1].rstrip(")"))

    line, length = evaluate("--set", "env_config.max_episode_steps=8")
    assert line.startswith("ppo on CartPole-v1 (") and length <= 8
    line, _ = evaluate("--env", "CartPole-v0")
    assert line.startswith("ppo on CartPole-v0 (")
    lengths = [evaluate("--seed", str(seed))[1] for seed in (1, 2, 1)]
    assert lengths[0] == lengths[2] != lengths[1]
    assert main(["evaluate", str(run_dir), "--set", "lr=1"]) == 2
    assert "--set takes the env's env_config values (env_config.KEY=VALUE), not lr" in (
        capsys.readouterr().err
    )
    # another env starts from no env_config; the same one from the checkpoint's
    from argparse import Namespace

    from flowrl.apps.cli import _evaluated_env

    saved = {"env": "custom_envs:Corridor", "env_config": {"length": 7}}
    other = Namespace(env="custom_envs:make_corridor", set=[])
    assert _evaluated_env(other, saved) == {"env": other.env, "env_config": {}}
    same = Namespace(env=None, set=["env_config.delay=1"])
    assert _evaluated_env(same, saved) == {"env_config": {"length": 7, "delay": 1}}


def test_evaluate_an_apex_checkpoint_without_ray(tmp_path):
    """Evaluation runs in the process: an Ape-X checkpoint's replay actors and rollout
    workers are not started (Ray, pointed at an address where nothing listens, would fail)."""
    from flowrl.run.algorithm import Algorithm
    from flowrl.run.checkpoints import META_FILE

    with Algorithm("dqn", env="CartPole-v1", num_workers=0) as algo:
        ckpt = algo.save(tmp_path / "apex")
    meta = json.loads((ckpt / META_FILE).read_text())
    meta["config"].update(num_workers=2, replay_shards=2)
    (ckpt / META_FILE).write_text(json.dumps(meta))
    out = flowrl(
        "evaluate", ckpt, "--episodes", 2, env={**os.environ, "RAY_ADDRESS": "127.0.0.1:9"}
    )
    assert out.returncode == 0, out.stderr
    assert "over 2 episodes" in out.stdout


def test_resume_continues_the_run(run_dir, tmp_path):
    import shutil

    copy = tmp_path / "resumed"
    shutil.copytree(run_dir, copy)
    out = flowrl("train", "ppo", "--resume", copy, "--stop-iters", 3, *QUICK)
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in (copy / "result.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in results] == [1, 2, 3]
    assert results[2]["env_steps_sampled"] > results[1]["env_steps_sampled"]


def test_resume_past_the_runs_budget_says_so_instead_of_training(run_dir, capsys):
    """A run of 2 iterations resumed with --stop-iters 2 (or a step budget, a time or a
    reward it had reached) trained one iteration more and stopped."""
    rows = (run_dir / "result.jsonl").read_text()
    last = json.loads(rows.splitlines()[-1])
    steps, seconds, ret = (
        last["env_steps_sampled"],
        last["time_total_s"],
        last["episode_return_mean"],
    )
    for flag, value, said in (
        ("--stop-iters", 2, "has 2 iterations already, at or past"),
        ("--stop-timesteps", steps, f"has {steps:,} env steps already"),
        ("--stop-time", seconds, "s of training already, at or past the run's time budget"),
        ("--stop-reward", ret, f"has a mean return of {ret:,.1f} already"),
    ):
        assert main(["train", "--resume", str(run_dir), flag, str(value)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and f"a larger {flag}" in err[0], err
    assert (run_dir / "result.jsonl").read_text() == rows


def test_resume_takes_the_newest_checkpoint_of_a_run_and_says_why_not_another(
    run_dir, tmp_path, capsys
):
    """--resume RUN/checkpoints/checkpoint_N said "no checkpoint in .../checkpoint_N/
    checkpoints". The newest goes on with its run; another is one line saying why not."""
    import shutil

    copy = tmp_path / "resumed"
    shutil.copytree(run_dir, copy)
    newest = copy / "checkpoints" / "checkpoint_000002"
    shutil.copytree(newest, copy / "checkpoints" / "checkpoint_000001")
    shutil.copytree(newest, tmp_path / "alone")
    for path, message in (
        ("checkpoint_000001", "goes on from its newest checkpoint (checkpoint_000002), not "
                              "checkpoint_000001 (delete the newer ones to go on from it)"),
        ("best", "(checkpoint_000002), not best"),
        (tmp_path / "alone", "is a checkpoint, not a run directory"),
    ):  # fmt: skip
        (copy / "checkpoints" / "best").mkdir(exist_ok=True)
        (copy / "checkpoints" / "best" / "checkpoint.json").write_text("{}")
        assert main(["train", "--resume", str(copy / "checkpoints" / path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert main(["train", "--resume", str(newest), "--stop-iters", "3", *QUICK]) == 0
    rows = [json.loads(line) for line in (copy / "result.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3]


def test_a_run_directory_has_one_writer_at_a_time(run_dir, tmp_path, capsys):
    """Two --resume of one directory at once lost rows; the second is now refused in one
    line while another process holds the directory, and goes on once it is free."""
    import shutil

    copy = tmp_path / "held"
    shutil.copytree(run_dir, copy)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from flowrl.run.logger import hold_run_dir; "
         f"h = hold_run_dir({str(copy)!r}); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["train", "ppo", "--resume", str(copy), "--stop-iters", "3", *QUICK]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"in use by another flowrl process (pid {holder.pid})" in err[0]
    finally:
        holder.kill()
        holder.wait()
    assert main(["train", "--resume", str(copy), "--stop-iters", "3", *QUICK]) == 0  # its algo
    rows = [json.loads(line) for line in (copy / "result.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert main(["train"]) == 2  # neither an algorithm nor a run to resume
    assert "name the algorithm (flowrl list shows them), or --resume" in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["impala", "appo", "apex"])
@pytest.mark.slow
def test_learner_thread_algorithms_train_resume_and_evaluate(algo, tmp_path):
    quick = ["--num-workers", "0", "--no-progress", "--set", "train_batch_size=200"]
    if algo == "apex":  # its replay in the learner's process too: no Ray
        quick += ["replay_shards=0", "learning_starts=200"]
    out = flowrl("train", algo, "--stop-iters", 2, "--output", tmp_path / "run", *quick)
    assert out.returncode == 0, out.stderr
    resumed = flowrl("train", algo, "--resume", tmp_path / "run", "--stop-iters", 3, *quick)
    assert resumed.returncode == 0, resumed.stderr
    results = (tmp_path / "run" / "result.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in results] == [1, 2, 3]
    evaluated = flowrl("evaluate", tmp_path / "run", "--episodes", 2)
    assert evaluated.returncode == 0 and "over 2 episodes" in evaluated.stdout


@pytest.mark.slow
def test_user_plan_file(tmp_path):
    plan = tmp_path / "my_plan.py"
    plan.write_text(
        "from flowrl.algorithms.ppo import PPOConfig as Config, PPOPolicy as Policy\n"
        "from flowrl.algorithms.ppo import PPOLearner as Learner\n"
        "from flowrl.ops import ParallelRollouts, StandardMetricsReporting, TrainOneStep\n\n"
        "def plan(workers, config):\n"
        '    """One SGD step per fragment."""\n'
        "    train_op = ParallelRollouts(workers).for_each(TrainOneStep(workers))\n"
        "    return StandardMetricsReporting(train_op, workers, config)\n"
    )
    out = flowrl("train", f"{plan}:plan", "--stop-iters", 2, "--output", tmp_path / "o", *QUICK)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["iterations"] == 2
    missing = flowrl("train", f"{plan}:nope", *QUICK)
    assert missing.returncode == 2 and "has no function 'nope'" in missing.stderr
    plan.write_text(plan.read_text().split("\n", 2)[2])  # without the Config, Policy, Learner
    unnamed = flowrl("train", f"{plan}:plan", *QUICK)
    assert unnamed.returncode == 2 and "must name a Config class" in unnamed.stderr
    assert "import PPOConfig as Config" in unnamed.stderr


def test_an_operator_given_an_argument_of_the_wrong_type_is_one_line_exit_2(tmp_path, capsys):
    """RLlib's UpdateTargetNetwork takes the workers; flowrl's UpdateTargets a function.
    Its TypeError exited 1, as an error of flowrl's would."""
    plan = tmp_path / "typed_plan.py"
    plan.write_text(
        "from flowrl.algorithms.dqn import DQNConfig as Config, DQNPolicy as Policy\n"
        "from flowrl.algorithms.dqn import DQNLearner as Learner\n"
        "from flowrl.ops import ParallelRollouts, UpdateTargets\n\n"
        "def plan(workers, config):\n"
        "    return ParallelRollouts(workers).for_each(UpdateTargets(workers, period=10))\n"
    )
    assert main(["train", f"{plan}:plan", *QUICK[:3]]) == 2
    err = capsys.readouterr().err.strip()
    assert "UpdateTargets takes the function" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    ("sig", "workers"),
    [(signal.SIGINT, 0), (signal.SIGTERM, 0), pytest.param(signal.SIGTERM, 2, marks=SLOW)],
    ids=["ctrl-c", "sigterm", "sigterm-with-ray"],
)
def test_ctrl_c_and_sigterm_stop_cleanly_and_checkpoint(tmp_path, sig, workers):
    """SIGTERM (kill, docker stop, a scheduler's preemption) ended the run at once, with no
    checkpoint and no summary (with Ray, after a stack dump of ray.init's own handler): it
    is now a Ctrl-C."""
    out_dir = tmp_path / "interrupted"
    quick = [*QUICK[:1], str(workers), *QUICK[2:]]
    proc = subprocess.Popen(
        [FLOWRL, "train", "ppo", "--stop-timesteps", "100000000", "--output", out_dir, *quick],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a suite started as a background job inherits SIGINT ignored: give the CLI the
        # terminal's default, as a user pressing Ctrl-C has it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        results = out_dir / "result.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and not (results.exists() and results.read_text().count("\n")):
            time.sleep(0.2)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()  # never leave a training run behind to slow the rest of the suite
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "interrupted"
    assert Path(summary["checkpoint"]).is_dir()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_python_dropped_still_stops_the_run_at_its_next_result(tmp_path):
    """SIGTERM reached the handler while importlib ran a module lock's weakref callback:
    Python printed the KeyboardInterrupt as "Exception ignored" and the run trained on (the
    signal test above timed out once in the suite). A ``__del__`` drops it the same way."""
    from flowrl import Algorithm
    from flowrl.run.runner import raise_interrupt, run

    class DroppedInterrupt:
        def __del__(self):
            raise_interrupt(signal.SIGTERM, None)

    with Algorithm("ppo", num_workers=0, train_batch_size=256) as algo:
        run(algo, stop={"iters": 1})
        DroppedInterrupt()  # its __del__ runs here: Python prints the interrupt and drops it
        summary = run(algo, stop={"iters": 1000}, output_dir=tmp_path / "run")
        assert summary["stopped_by"] == "interrupted" and summary["iterations"] == 1
        assert run(algo, stop={"iters": 2})["stopped_by"] == "iterations"  # it was spent


def test_output_piped_into_head_is_not_an_error():
    proc = subprocess.run(
        f"'{FLOWRL}' list ppo | head -1", shell=True, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.startswith("ppo:") and "Traceback" not in proc.stderr


def test_the_progress_bar_stops_at_its_total_and_shows_the_target(capsys):
    from flowrl.run.runner import StopCriteria, _progress_bar, _show_progress

    stop = StopCriteria(reward=450, timesteps=1000)
    bar, shown = _progress_bar(stop, enabled=True), {}
    for steps in (600, 1200):
        _show_progress(bar, stop, {"env_steps_sampled": steps, "episode_return_mean": 20.0}, shown)
    bar.close()
    err = capsys.readouterr().err
    assert bar.n == 1000 and "1.00k/1.00k" in err and "1.20k" not in err
    assert "ret=20.0/450" in err and err.count("steps/s") >= 1 and "steps_s" not in err
    game = StopCriteria(iters=3)  # a bar over the iterations: the run's only budget
    bar, shown = _progress_bar(game, enabled=True), {}
    for iteration, win in enumerate((0.5, None), start=1):  # SelfPlay reports now and then
        result = {"iteration": iteration, "env_steps_sampled": 10, "episode_return_mean": 0.0}
        result |= {"selfplay/vs_random/win": win} if win is not None else {}
        _show_progress(bar, game, result, shown)
    bar.close()
    err = capsys.readouterr().err.splitlines()[-1]
    assert "win=0.50" in err and "ret=" not in err  # the last rate stays
    assert bar.n == 2 and "2/3" in err and "it/s" in err


def test_a_progress_bar_in_a_log_file_writes_a_line_now_and_then(capsys, monkeypatch):
    """flowrl train > train.log drew its bar there: every redraw, twice a second, joined
    into one line by carriage returns (a CI job's log, a cluster scheduler's)."""
    from flowrl.run import runner

    monkeypatch.setattr(runner, "LINE_INTERVAL_S", 3600.0)
    stop = runner.StopCriteria(timesteps=1000)
    bar, shown = runner._progress_bar(stop, enabled=True), {}
    for steps in (200, 400, 600):
        result = {"env_steps_sampled": steps, "episode_return_mean": steps / 10}
        runner._show_progress(bar, stop, result, shown)
    runner._waiting_for(bar, "the evaluation of iteration 3")  # said at once
    bar.close()
    err = capsys.readouterr().err
    assert "\r" not in err and "| " not in err, err  # no redraws, no bar drawn
    lines = err.strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith("0%") and "600/1.00k" in lines[2], lines
    assert "waiting for the evaluation of iteration 3" in lines[1], lines


def test_the_progress_bar_of_a_game_shows_each_players_return(capsys, monkeypatch):
    """A zero-sum game's summed return is 0 whoever wins: the bar read ret=0.0 alone."""
    from flowrl.run.runner import StopCriteria, _progress_bar, _show_progress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a bar redrawn at each result
    stop = StopCriteria(iters=2)
    bar, shown = _progress_bar(stop, enabled=True), {}
    players = {f"agent/player_{i}/episode_return_mean": r for i, r in enumerate((0.4, -0.4))}
    result = {"iteration": 1, "env_steps_sampled": 10, "episode_return_mean": 0.0, **players}
    _show_progress(bar, stop, result, shown)
    assert "ret=0.0, player_0=0.4, player_1=-0.4" in capsys.readouterr().err
    many = {f"agent/piston_{i}/episode_return_mean": 1.0 for i in range(5)}  # too many to show
    _show_progress(bar, stop, {"iteration": 2, "env_steps_sampled": 20, **many,
                               "episode_return_mean": 5.0}, shown)  # fmt: skip
    bar.close()
    err = capsys.readouterr().err
    assert "ret=5.0" in err and "piston" not in err


def test_the_progress_bar_rates_only_the_steps_sampled_while_it_runs(capsys):
    # the layout measurement's results (or a restored run's steps) come to the bar at once:
    # counted in its rate, 50k env steps in no time would read as millions a second
    from flowrl.run.runner import StopCriteria, _progress_bar, _show_progress

    stop = StopCriteria(timesteps=1_000_000)
    bar, shown = _progress_bar(stop, enabled=True, done=(50_000, 0)), {}
    for steps in (25_000, 50_000):  # made before the bar began
        _show_progress(bar, stop, {"env_steps_sampled": steps, "episode_return_mean": 9.0}, shown)
    assert bar.n == 50_000
    time.sleep(0.2)
    _show_progress(bar, stop, {"env_steps_sampled": 52_000, "episode_return_mean": 9.0}, shown)
    bar.close()
    number, kilo = re.findall(r"([\d.]+)(k?) steps/s", capsys.readouterr().err)[-1]
    rate = float(number) * (1000 if kilo else 1)
    assert bar.n == 52_000 and rate <= 2_000 / 0.2 * 1.05, rate  # 2k steps in 0.2 s or more


def test_the_package_shows_its_public_names_only():
    import flowrl

    names = dir(flowrl)
    assert "StopCriteria" in names and "Algorithm" in names
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(names)
    from flowrl import StopCriteria

    assert StopCriteria(iters=1).reason({"iteration": 1, "env_steps_sampled": 0}) == "iterations"


def test_messages_count_in_the_singular():
    from flowrl.apps.cli import _count

    assert (_count(1, "run"), _count(2, "run"), _count(0, "episode")) == (
        "1 run",
        "2 runs",
        "0 episodes",
    )


def test_a_warning_reads_as_the_commands_other_lines(tmp_path, capsys):
    """flowrl's warnings came out bare ("learning_starts is 1,000 env steps, ..."), where
    every other line of the command starts with "flowrl: "."""
    args = ["train", "dqn", "--stop-timesteps", "500", "--set", "learning_starts=1000"]
    assert main([*args, *QUICK[:2], "--no-progress", "--output", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "flowrl: learning_starts is 1,000 env steps, at or past this run's stop" in err[0]


def test_evaluate_and_export_of_a_folder_of_runs_name_the_best_one(run_dir, tmp_path, capsys):
    """flowrl evaluate SWEEP_OUTPUT (or a folder of runs) said "no checkpoint in
    SWEEP_OUTPUT/checkpoints", though it holds runs that have them."""
    import shutil

    import flowrl as flowrl_api
    from flowrl.core.config import ConfigError

    for name, last_return in (("a", 20.0), ("b", 80.0)):
        copy = shutil.copytree(run_dir, tmp_path / "runs" / name)
        rows = (copy / "result.jsonl").read_text().splitlines()
        last = {**json.loads(rows[-1]), "episode_return_mean": last_return}
        (copy / "result.jsonl").write_text("\n".join([*rows[:-1], json.dumps(last)]) + "\n")
    for command in (["evaluate"], ["export", "--out", str(tmp_path / "p.onnx")]):
        assert main([command[0], str(tmp_path / "runs"), *command[1:]]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds 2 runs, not a checkpoint" in err[0], err
        assert err[0].endswith(f"highest (80.0): {tmp_path / 'runs' / 'b'}"), err
    with pytest.raises(ConfigError, match="holds 2 runs, not a checkpoint"):
        flowrl_api.load_policy(tmp_path / "runs")  # in Python too


@pytest.mark.parametrize(
    "args",
    [
        ["train", "ppo", "--output", "s3://bucket/run"],
        ["train", "--resume", "gs://bucket/run"],
        ["train", "ppo", "--record-experiences", "s3://bucket/rec"],
        ["train", "bc", "--input", "s3://bucket/rec"],
        ["train", "ppo", "--set", "evaluation_video_dir=s3://bucket/v", "evaluation_interval=1"],
        ["tune", "ppo", "--grid", "lr=[0.001]", "--output", "s3://bucket/sweep"],
        ["evaluate", "s3://bucket/run", "--video", "v"],
        ["export", "s3://bucket/run"],
        ["plot", "s3://bucket/run"],
    ],
)
def test_a_uri_where_a_local_path_goes_is_one_line_and_writes_nothing(
    args, tmp_path, monkeypatch, capsys
):
    """``--output s3://bucket/run`` trained into a local directory named ``s3:``."""
    monkeypatch.chdir(tmp_path)
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "takes a path on this machine, not " in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_uri_given_to_the_python_api_for_a_run_s_files_is_a_config_error(tmp_path):
    from flowrl import Algorithm, ConfigError
    from flowrl.apps.sweeps import check_new_sweep
    from flowrl.run.runner import run

    with Algorithm("ppo", num_workers=0, train_batch_size=256) as algo:
        for write in (
            lambda: algo.save("s3://bucket/ckpt"),
            lambda: run(algo, stop={"iters": 1}, output_dir="gs://bucket/run"),
            lambda: check_new_sweep("s3://bucket/sweep"),  # sweep()'s check of its storage
        ):
            with pytest.raises(ConfigError, match="takes a path on this machine"):
                write()
        assert algo.iteration == 0  # refused before training
