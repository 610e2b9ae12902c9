"""The fault suite: what a careless user or a bad day does to a run, and what survives it.

Run directories, torn logs, damaged and half-written checkpoints, checkpoints that would
run code, NaN from the env or the loss, hung and killed workers past the old budget of 3,
a dead cluster address and a removed Ray node. The longer trials (SIGKILL of the driver
at random moments, a worker killed every 3 iterations until PPO solves CartPole) are
``benchmarks/faults.py``.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import fault_envs
import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl import Algorithm
from flowrl.core.config import ConfigError
from flowrl.core.sample_batch import NonFiniteError
from flowrl.run import checkpoints
from flowrl.run.checkpoints import META_FILE, STATE_FILE, CheckpointError
from flowrl.run.runner import FailureBudget, StopCriteria, run

QUICK = {"num_workers": 0, "num_envs_per_worker": 2, "train_batch_size": 128}


def iterations(run_dir: Path) -> list[int]:
    lines = (run_dir / "result.jsonl").read_text().splitlines()
    return [json.loads(line)["iteration"] for line in lines]


@pytest.fixture
def ppo_run(tmp_path):
    """A 3-iteration PPO run with checkpoints at 1, 2 and 3."""
    run_dir = tmp_path / "run"
    with Algorithm("ppo", env="CartPole-v1", **QUICK) as algo:
        run(algo, stop=StopCriteria(iters=3), output_dir=run_dir, checkpoint_every=1)
    return run_dir


# -- run directories -------------------------------------------------------------------------
def test_a_new_run_refuses_a_used_directory(ppo_run):
    algo = Algorithm("dqn", env="CartPole-v1", num_workers=0)
    with algo, pytest.raises(ConfigError, match="is not empty: continue that run with --resume"):
        run(algo, stop=StopCriteria(iters=1), output_dir=ppo_run)
    assert iterations(ppo_run) == [1, 2, 3], "the PPO run's files are untouched"


class InterruptAt:
    """A tracker whose ``log`` of iteration ``at`` is where Ctrl-C lands."""

    def __init__(self, at: int) -> None:
        self.at = at

    def start(self, name, meta):
        pass

    def log(self, result):
        if result["iteration"] == self.at:
            self.at = None
            raise KeyboardInterrupt

    def finish(self, summary):
        pass


def test_ctrl_c_while_the_measured_results_are_logged_keeps_every_row(tmp_path):
    """flowrl train's results from measuring the layout are logged when the run starts; a
    Ctrl-C then logged the first row alone, while the summary and checkpoint went on to the
    last (29 iterations, 2,048 env steps)."""
    algo = Algorithm("ppo", env="CartPole-v1", **QUICK)
    algo.unreported = [algo.train() for _ in range(3)]  # as Algorithm.auto leaves them
    summary = run(algo, stop=StopCriteria(iters=5), output_dir=tmp_path, trackers=[InterruptAt(2)])
    algo.stop()
    assert iterations(tmp_path) == [1, 2, 3] and summary["stopped_by"] == "interrupted"
    assert summary["env_steps_sampled"] == algo.last_result["env_steps_sampled"]


def test_resume_cuts_the_logs_back_to_the_checkpoint_and_drops_a_torn_line(ppo_run):
    shutil.rmtree(ppo_run / "checkpoints" / "checkpoint_000003")  # rows 3 outlived it
    with open(ppo_run / "result.jsonl", "a") as f:
        f.write('{"iteration": 4, "env_steps_sa')  # a kill in the middle of a write
    with Algorithm.from_checkpoint(ppo_run) as algo:
        assert algo.iteration == 2
        run(algo, stop=StopCriteria(iters=4), output_dir=ppo_run)
    assert iterations(ppo_run) == [1, 2, 3, 4]
    csv_rows = (ppo_run / "progress.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[0]) for row in csv_rows] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "dqn"], "holds a ppo run, not dqn"),
        (["train", "ppo", "--env", "Acrobot-v1"], "trains on CartPole-v1, not Acrobot-v1"),
        (["train", "ppo", "--output", "elsewhere"], "drop --output elsewhere"),
        (
            ["train", "ppo", "--set", "model_hiddens=[32]"],  # (torch's error alone named keys)
            "does not fit this config (its config differs: model_hiddens [64, 64] there, [32] "
            "here: Error(s) in loading state_dict",
        ),
    ],
)
def test_resume_refuses_another_algo_env_output_or_model(args, message, ppo_run, capsys):
    from flowrl.apps.cli import main

    assert main([*args, "--resume", str(ppo_run), "--num-workers", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_progress_csv_widens_when_a_column_appears(tmp_path):
    """Columns that appear later (a learner's stats once learning starts) are kept."""
    import csv

    from flowrl.run.logger import RunLogger

    log = RunLogger(tmp_path / "run")
    log.log({"iteration": 1, "env_steps_sampled": 10})
    log.log({"iteration": 2, "env_steps_sampled": 20, "learner/loss": 0.5})
    log.close()
    with open(tmp_path / "run" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["iteration"], r["learner/loss"]) for r in rows] == [("1", ""), ("2", "0.5")]


# -- checkpoints -----------------------------------------------------------------------------
def test_damaged_checkpoints_are_skipped_with_the_reason(ppo_run):
    ckpts = ppo_run / "checkpoints"
    (ckpts / "checkpoint_000003" / STATE_FILE).write_bytes(b"")  # 0 bytes
    (ckpts / "checkpoint_000002" / META_FILE).unlink()  # a kill between the two writes
    ckpt = checkpoints.latest(ppo_run)
    assert ckpt.path.name == "checkpoint_000001" and len(ckpt.skipped) == 2
    assert "damaged checkpoint" in ckpt.skipped[0] and "no checkpoint.json" in ckpt.skipped[1]
    state = ckpts / "checkpoint_000001" / STATE_FILE
    state.write_bytes(state.read_bytes()[:1000])  # truncated: none loads now
    with pytest.raises(CheckpointError, match=r"no checkpoint of .* loads"):
        checkpoints.latest(ppo_run)


def test_a_killed_checkpoint_write_leaves_the_old_checkpoint_whole(ppo_run, monkeypatch):
    with Algorithm.from_checkpoint(ppo_run) as algo:

        def killed(*args, **kwargs):
            raise KeyboardInterrupt  # as if the process died inside torch.save

        monkeypatch.setattr(torch, "save", killed)
        with pytest.raises(KeyboardInterrupt):
            algo.save(ppo_run / "checkpoints" / "checkpoint_000003")
    ckpt = checkpoints.latest(ppo_run)
    assert ckpt.path.name == "checkpoint_000003" and not ckpt.skipped
    assert ckpt.meta["iteration"] == 3


FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))  # a checkpoint is ~40 KB
from flowrl.apps.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_full_disk_names_the_checkpoint_it_could_not_write_and_leaves_none_of_it(tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", "ppo", "--num-workers", "0", "--stop-iters", "3", "--checkpoint-every", "1"]
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, *args, "--output", str(run_dir), "--no-progress"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("flowrl: error: CheckpointWriteError: checkpoint ")
    assert "checkpoint_000001 not written (" in line and "MB free there)" in line
    assert line.endswith(f"traceback in {run_dir / 'error.txt'}")
    assert not list((run_dir / "checkpoints").iterdir()), "nothing half-written is left"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped_by"] == "error" and summary["checkpoint"] is None
    assert iterations(run_dir) == [1], "the row of the iteration is kept"


def test_resume_removes_what_a_killed_checkpoint_write_left(ppo_run):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    ckpts = ppo_run / "checkpoints"
    (ckpts / f".checkpoint_000004.tmp-{gone}").mkdir()  # killed while writing
    (ckpts / "checkpoint_000003").rename(ckpts / f".checkpoint_000003.old-{gone}")  # mid-swap
    with Algorithm.from_checkpoint(ppo_run) as algo:
        run(algo, stop=StopCriteria(iters=4), output_dir=ppo_run)
    names = sorted(p.name for p in ckpts.iterdir())
    assert names == [f"checkpoint_00000{i}" for i in (1, 2, 3, 4)], names
    assert iterations(ppo_run) == [1, 2, 3, 4]


def test_keep_checkpoints_leaves_the_newest_on_disk(tmp_path):
    """A run whose checkpoints hold GBs of replay keeps only its newest few."""
    with Algorithm("ppo", env="CartPole-v1", num_workers=0) as algo:
        run(algo, stop=StopCriteria(iters=4), output_dir=tmp_path,
            checkpoint_every=1, keep_checkpoints=2)  # fmt: skip
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["checkpoint_000003", "checkpoint_000004"], names


def test_a_file_the_disk_cannot_hold_is_reported_and_the_run_goes_on(tmp_path, caplog):
    from flowrl.run.runner import _write_or_say

    full = tmp_path / "error.txt"
    full.symlink_to("/dev/full")  # every write: ENOSPC
    _write_or_say(full, "Traceback ...")
    assert "error.txt not written: [Errno 28] No space left on device" in caplog.text
    assert not full.exists() and not full.is_symlink()


def test_checkpoints_load_without_unpickling_code(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this ran",))

    path = tmp_path / "evil"
    path.mkdir()
    torch.save({"policy": Payload()}, path / STATE_FILE)
    meta = {"algo": "ppo", "config": {}, "format_version": checkpoints.FORMAT_VERSION}
    (path / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"damaged checkpoint .*Weights only load failed"):
        checkpoints.load(path)


def test_a_checkpoint_of_another_model_size_is_a_clear_error(ppo_run):
    """The reason was torch's heading alone: "Error(s) in loading state_dict for ActorCritic:"."""
    with pytest.raises(CheckpointError, match=r"does not fit .*ActorCritic: Unexpected key"):
        Algorithm.from_checkpoint(ppo_run, model_hiddens=[32])
    acrobot = Algorithm("ppo", env="Acrobot-v1", num_workers=0)
    try:  # (another env's observations: the likeliest cause, named)
        with pytest.raises(CheckpointError, match="trained on CartPole-v1, not Acrobot-v1: "):
            acrobot.restore(ppo_run / "checkpoints" / "checkpoint_000002")
    finally:
        acrobot.stop()


def test_checkpoint_round_trip_keeps_the_prioritized_replay_buffer(tmp_path):
    config = {"num_workers": 0, "prioritized_replay": True, "store_buffer_in_checkpoints": True}
    with Algorithm("dqn", env="CartPole-v1", **config) as algo:
        while algo.train()["env_steps_trained"] == 0:  # the buffer fills to learning_starts
            pass
        buffer = algo.plan.context.checkpointables["replay_buffer"].buffers["default"]
        path = algo.save(tmp_path / "ckpt")
    with Algorithm.from_checkpoint(path) as restored:
        restored.train()  # the plan registers its buffer on the first pull
        again = restored.plan.context.checkpointables["replay_buffer"].buffers["default"]
    assert again.num_added >= buffer.num_added and len(again) >= len(buffer)
    assert again.sampler.max_priority >= buffer.sampler.max_priority > 1.0


# -- non-finite numbers ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "message"),
    [("fault_envs:NanReward-v0", "non-finite reward"), ("fault_envs:NanObservation-v0", "obs")],
)
def test_a_nan_from_the_env_stops_the_run_and_keeps_the_good_checkpoint(env, message, tmp_path):
    with Algorithm("ppo", env=env, **QUICK) as algo:
        with pytest.raises(NonFiniteError, match=message):
            run(algo, stop=StopCriteria(iters=5), output_dir=tmp_path / "run")
        assert algo.iteration == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stopped_by"] == "error" and "NonFiniteError" in summary["error"]
    assert "Traceback" in (tmp_path / "run" / "error.txt").read_text()


def test_a_nan_from_the_env_is_exit_1_and_one_line_from_the_command(tmp_path, capsys):
    from flowrl.apps.cli import main

    args = ["--env", "fault_envs:NanReward-v0", "--num-workers", "0", "--no-progress"]
    assert main(["train", "ppo", *args, "--output", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NonFiniteError" in err[0] and "non-finite reward" in err[0]
    assert "error.txt" in err[0]


def test_a_nan_loss_is_caught_before_the_step_and_never_saved(tmp_path, monkeypatch):
    with Algorithm("ppo", env="CartPole-v1", **QUICK) as algo:
        algo.train()
        good = algo.save(tmp_path / "good")
        policy, learner = algo.workers.local_worker.policy, algo.workers.learner["default"]
        before = {k: v.copy() for k, v in policy.get_weights().items()}
        loss = learner.loss
        monkeypatch.setattr(learner, "loss", lambda b: (loss(b)[0] * math.nan, {}))
        with pytest.raises(NonFiniteError, match="the loss is nan on a finite batch"):
            algo.train()
        after = policy.get_weights()
        assert all(np.array_equal(before[k], after[k]) for k in before), "no step was applied"
        with torch.no_grad():
            next(policy.module.parameters())[0, 0] = math.nan
        with pytest.raises(NonFiniteError, match=r"weight module\..* is non-finite"):
            algo.save(tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert checkpoints.load(good).meta["iteration"] == 1


def test_nan_config_values_are_rejected():
    with pytest.raises(ConfigError, match="gamma must be a finite number"):
        Algorithm("ppo", env="CartPole-v1", num_workers=0, gamma=math.nan)


# -- workers that die or hang ---------------------------------------------------------------
def test_the_failure_budget_is_a_rate():
    budget = FailureBudget(burst=3, iterations_per_failure=2)
    for _ in range(20):  # a failure every 3 iterations, for as long as the run lasts
        assert budget.spend()
        for _ in range(3):
            budget.earn()
    broken = FailureBudget(burst=3, iterations_per_failure=2)
    assert [broken.spend() for _ in range(4)] == [True, True, True, False]


@pytest.mark.slow
def test_workers_killed_past_the_old_budget_of_three(ray_session):
    config = {**QUICK, "num_workers": 2, "num_envs_per_worker": 2}
    with Algorithm("ppo", env="CartPole-v1", **config) as algo:
        algo.train()
        for kills in range(1, 5):  # one past the old budget
            ray_session.kill(algo.workers.remote_workers[0])
            # (a kill after the round's fragment came is found by the next round: a
            # second kill before then would hit the same dead worker)
            summary = _run_until_restarted(algo, then_iters=1, restarts=kills)
        assert summary["stopped_by"] == "iterations"
        assert algo.last_result["num_worker_restarts"] == 4


@pytest.mark.slow
def test_a_worker_killed_while_a_round_is_asked_ahead_is_replaced(ray_session):
    config = {**QUICK, "num_workers": 2, "num_envs_per_worker": 2, "sample_ahead": True}
    with Algorithm("ppo", env="CartPole-v1", **config) as algo:
        algo.train()  # the next round is asked for already, and may be in
        ray_session.kill(algo.workers.remote_workers[0])
        summary = _run_until_restarted(algo, then_iters=2)  # found at the round after
        assert summary["stopped_by"] == "iterations"
        assert algo.last_result["num_worker_restarts"] == 1


def _run_until_restarted(
    algo: Algorithm, then_iters: int, limit_s: float = 90, restarts: int = 1
) -> dict:
    """Train an iteration at a time until ``restarts`` workers in all were replaced, then
    ``then_iters`` more."""
    deadline = time.monotonic() + limit_s
    while not algo.last_result or algo.last_result["num_worker_restarts"] < restarts:
        assert time.monotonic() < deadline, "no worker was replaced"
        run(algo, stop=StopCriteria(iters=algo.iteration + 1))
    return run(algo, stop=StopCriteria(iters=algo.iteration + then_iters))


@pytest.mark.parametrize("algo_name", ["ppo", "impala", "apex"])
@pytest.mark.slow
def test_a_hung_worker_is_restarted_and_the_run_goes_on(algo_name, ray_session):
    """The synchronous plan and both asynchronous ones: in an async plan the healthy
    worker's items keep coming, and the hung one must be killed all the same."""
    fault_envs.HANG_MARKER.unlink(missing_ok=True)
    config = {**QUICK, "num_workers": 2, "sample_timeout_s": 3.0}
    with Algorithm(algo_name, env="fault_envs:HangOnce-v0", **config) as algo:
        summary = _run_until_restarted(algo, then_iters=2)
        assert summary["stopped_by"] == "iterations"
        assert algo.last_result["num_worker_restarts"] == 1
    assert fault_envs.HANG_MARKER.exists(), "an env hung"
    fault_envs.HANG_MARKER.unlink(missing_ok=True)


@pytest.mark.slow
def test_a_worker_killed_for_a_slow_callback_names_the_timeout_the_env_and_the_callbacks(
    ray_session,
):
    from flowrl.run.runner import _train_with_recovery

    config = {**QUICK, "num_workers": 1, "sample_timeout_s": 1.0}
    slow = "custom_callbacks:SlowEpisodeEnd"
    algo = Algorithm("ppo", env="CartPole-v1", callbacks=slow, **config)
    with algo, pytest.raises(RuntimeError) as failed:
        _train_with_recovery(algo, FailureBudget(burst=1))
    message = str(failed.value)
    assert "the last: RolloutWorker gave no answer in 1 s, so it was killed" in message
    assert "env CartPole-v1 or the episode hooks of custom_callbacks:SlowEpisodeEnd" in message
    assert "sample_timeout_s=1" in message and "ActorDiedError" not in message


@pytest.mark.slow
def test_an_iteration_with_a_restart_counts_the_restart_time(ray_session):
    config = {**QUICK, "num_workers": 2}
    with Algorithm("ppo", env="CartPole-v1", **config) as algo:
        before = algo.train()["time_total_s"]
        killed = algo.workers.remote_workers[0]
        ray_session.kill(killed)
        # dead before the round asks it: ray.kill lands when it lands, and on a loaded host
        # the worker had answered the next round first (no restart, once in a suite)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:  # (a parked worker answers a plain call within 5 s)
                ray_session.get(killed.__ray_ready__.remote(), timeout=10)
            except ray_session.exceptions.RayActorError:
                break
            time.sleep(0.05)
        start = time.perf_counter()
        run(algo, stop=StopCriteria(iters=algo.iteration + 1))
        wall = time.perf_counter() - start
        result = algo.last_result
    assert result["num_worker_restarts"] == 1
    # the worker's replacement (~1-2 s) is most of it; a short PPO iteration is the rest
    assert result["time_total_s"] - before >= 0.9 * wall
    assert result["time_this_iter_s"] >= 0.9 * wall


@pytest.mark.slow
def test_replaced_and_restored_workers_go_on_with_the_runs_exploration(ray_session, tmp_path):
    """A new worker's epsilon follows the run's env steps, not its own from zero: with a
    worker killed every few iterations, Ape-X's workers otherwise acted at random."""

    def epsilons(algo: Algorithm) -> list[float]:
        calls = [
            w.__ray_call__.remote(lambda w: w.policy.epsilon()) for w in algo.workers.remote_workers
        ]
        return ray_session.get(calls)

    config = {**QUICK, "num_workers": 1, "exploration_timesteps": 1000, "learning_starts": 500}
    with Algorithm("dqn", env="CartPole-v1", **config) as algo:
        while algo.train()["env_steps_sampled"] < 1500:
            pass
        assert epsilons(algo) == [pytest.approx(0.02)]
        ray_session.kill(algo.workers.remote_workers[0])
        run(algo, stop=StopCriteria(iters=algo.iteration + 1))
        assert algo.last_result["num_worker_restarts"] == 1
        assert epsilons(algo) == [pytest.approx(0.02)]
        path = algo.save(tmp_path / "ckpt")
    with Algorithm.from_checkpoint(path) as restored:
        assert epsilons(restored) == [pytest.approx(0.02)]


@pytest.mark.slow
def test_an_env_that_raises_on_a_remote_worker_is_replaced(ray_session, caplog):
    """The warning names what the env raised and its line: "rollout worker 1 failed" alone
    left a user whose env raised on every worker now and then with nothing to go on."""
    fault_envs.RAISE_MARKER.unlink(missing_ok=True)
    config = {**QUICK, "num_workers": 2}
    with Algorithm("ppo", env="fault_envs:RaiseOnce-v0", **config) as algo:
        summary = _run_until_restarted(algo, then_iters=2)
        assert summary["stopped_by"] == "iterations"
        assert algo.last_result["num_worker_restarts"] == 1
    fault_envs.RAISE_MARKER.unlink(missing_ok=True)
    cause = "raised ValueError: the simulator crashed (raised at "
    replaced = [r.getMessage() for r in caplog.records if "training goes on" in r.getMessage()]
    assert len(replaced) == 1 and cause in replaced[0], replaced
    assert "fault_envs.py:" in replaced[0], "it points at the env's own line"


@pytest.mark.slow
def test_an_env_that_always_raises_ends_the_run_once_the_budget_is_spent(ray_session):
    config = {**QUICK, "num_workers": 1}
    budget = FailureBudget(burst=1, iterations_per_failure=1000)
    with Algorithm("ppo", env="fault_envs:RaiseAfter-v0", **config) as algo:
        with pytest.raises(RuntimeError) as raised:
            run(algo, stop=StopCriteria(iters=10_000), failure_budget=budget)
        assert algo.workers.remote_workers, "the first failure was replaced"
    message = str(raised.value)
    assert message.startswith("2 worker failures, faster than the run tolerates"), message
    assert "EnvError: env fault_envs:RaiseAfter-v0 (worker 1) raised ValueError" in message


def test_an_env_that_raises_in_process_is_exit_1_and_one_line(tmp_path, capsys):
    from flowrl.apps.cli import main

    args = ["--env", "fault_envs:RaiseAfter-v0", "--num-workers", "0", "--no-progress"]
    assert main(["train", "ppo", *args, "--output", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "EnvError: env fault_envs:RaiseAfter-v0 (worker 0) raised ValueError" in err[0]
    assert "fault_envs.py" in err[0], "it points at the env's own line"


@pytest.mark.parametrize(
    ("env", "meaning"),
    [
        ("ArrayReward", "an env's step returned a reward, terminated or truncated that is an"),
        ("OldGymStep", "step returned fewer than gymnasium's 5 values (obs, reward, terminated"),
    ],
)
def test_what_gymnasiums_vector_env_could_not_unpack_is_named(env, meaning, tmp_path, capsys):
    """They read only numpy's "setting an array element with a sequence" and "not enough
    values to unpack (expected 5, got 4)", raised in gymnasium's code."""
    from flowrl.apps.cli import main

    args = ["--env", f"fault_envs:{env}", "--num-workers", "0", "--no-progress"]
    assert main(["train", "ppo", *args, "--output", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and meaning in err[0], err


def test_a_train_call_that_hangs_in_the_process_is_reported(caplog):
    from types import SimpleNamespace

    from flowrl.run.runner import _train_with_recovery

    slow = SimpleNamespace(
        config=SimpleNamespace(sample_timeout_s=0.2), train=lambda: time.sleep(0.6) or {}
    )
    assert _train_with_recovery(slow, FailureBudget()) == {}
    assert "no env step for 0 s: an env step or the plan may hang" in caplog.text


def test_a_long_train_call_whose_plan_steps_on_is_not_reported_as_a_hang(caplog):
    from types import SimpleNamespace

    from flowrl.run.runner import _train_with_recovery

    counters = {"env_steps_sampled": 0}

    def train():  # 0.6 s, an env step every 0.02 s
        for _ in range(30):
            time.sleep(0.02)
            counters["env_steps_sampled"] += 1
        return {}

    slow = SimpleNamespace(
        config=SimpleNamespace(sample_timeout_s=0.2),
        plan=SimpleNamespace(context=SimpleNamespace(counters=counters)),
        train=train,
    )
    assert _train_with_recovery(slow, FailureBudget()) == {}
    assert "may hang" not in caplog.text


NODE_REMOVAL = """
import ray
from ray.cluster_utils import Cluster
from flowrl import Algorithm
from flowrl.run.runner import StopCriteria, run

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
nodes = [cluster.add_node(num_cpus=2) for _ in range(2)]
ray.init(address=cluster.address, logging_level="ERROR")
config = dict(num_workers=2, num_envs_per_worker=2, train_batch_size=128)
with Algorithm("ppo", env="CartPole-v1", **config) as algo:
    algo.train()
    actor = algo.workers.remote_workers[0]
    where = ray.get(actor.__ray_call__.remote(lambda w: ray.get_runtime_context().get_node_id()))
    cluster.remove_node(next(n for n in nodes if n.node_id == where))
    summary = run(algo, stop=StopCriteria(iters=algo.iteration + 3))
    print("RESULT", summary["stopped_by"], algo.last_result["num_worker_restarts"])
ray.shutdown()
cluster.shutdown()
"""


@pytest.mark.slow
def test_a_removed_node_does_not_end_the_run(cluster_env):
    """Three Ray nodes on this machine (a separate Ray from the suite's); one is removed
    mid-run, and the run goes on with its workers restarted on the nodes left."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NODE_REMOVAL)],
        capture_output=True,
        text=True,
        timeout=240,
        env=cluster_env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    stopped_by, restarts = proc.stdout.split("RESULT ")[1].split()
    assert stopped_by == "iterations" and int(restarts) >= 1, proc.stdout


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "ppo", "--set", "model_hiddens=[64,"], "expects a list such as [64, 64]"),
        (["train", "dqn", "--set", "model_hiddens=[]"], "model_hiddens needs at least 1"),
        (["train", "ppo", "--stop-time", "-5"], "--stop-time must be a number of seconds > 0"),
        (["train", "ppo", "--stop-iters", "0"], "--stop-iters must be >= 1"),
        (["train", "ppo", "--stop-reward", "nan"], "--stop-reward must be a finite number"),
        (["train", "ppo", "--set", "gamma=NaN"], "gamma must be a finite number"),
        (["train", "ppo", "--set", "lr=Infinity"], "lr must be a finite number"),
        (["train", "ppo", "--seed", "99999999999"], "seed must be <= 2147483647"),
        pytest.param(
            ["train", "ppo", "--set", "device=cuda", "--num-workers", "0"],
            "sees no CUDA GPU",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU"),
        ),
        (["train", "ppo", "--num-workers", "0", "--address", "127.0.0.1:1"], "runs in-process"),
        (["train", "ppo", "--address", "127.0.0.1:1"], "cannot reach a Ray cluster"),
        (["train", "ppo", "--output", "/proc/version"], "is a file, not a directory"),
        (["train", "ppo", "--output", "/proc/flowrl-run"], "cannot write to output directory"),
    ],
)
def test_what_was_silently_accepted_or_a_traceback_is_one_line(args, message, capsys):
    """The inputs this issue found accepted or answered with a traceback (in-process:
    tests/test_cli.py runs the older cases through the installed script)."""
    from flowrl.apps.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize(
    "command",
    [
        ["export", "{run}", "--out", "/proc/model.onnx"],
        ["export", "{run}", "--format", "torchscript", "--out", "{tmp}"],
        ["plot", "{run}", "--out", "/proc/curves.png"],
        ["plan", "ppo", "--num-workers", "0", "--out", "/proc/plan.txt"],
        ["plan", "ppo", "--num-workers", "0", "--format", "dot", "--out", "{tmp}"],
    ],
)
def test_an_unwritable_output_file_is_one_line(command, ppo_run, tmp_path, capsys):
    from flowrl.apps.cli import main

    args = [a.format(run=ppo_run, tmp=tmp_path) for a in command]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    out = args[args.index("--out") + 1]
    assert len(err) == 1 and f"cannot write {out}: " in err[0], err


def test_more_workers_than_cpus_is_refused_before_anything_starts():
    flowrl = str(Path(sys.executable).parent / "flowrl")
    args = [flowrl, "train", "impala", "--num-workers", "500", "--stop-iters", "1"]
    start = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and time.monotonic() - start < 10
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "500 rollout workers reserve 500 CPUs" in err[0], err
    assert "num_cpus_per_worker=" in err[0], "it says how to share CPUs on purpose"


@pytest.mark.slow
def test_workers_may_share_cpus_on_purpose(ray_session):
    cpus = int(ray_session.cluster_resources()["CPU"])
    config = {**QUICK, "num_workers": 2 * cpus, "num_cpus_per_worker": 0.5}
    with Algorithm("ppo", env="CartPole-v1", **config) as algo:
        assert len(algo.workers.remote_workers) == 2 * cpus
        assert algo.train()["env_steps_sampled"] > 0
    with pytest.raises(ConfigError, match=f"but the Ray cluster has {cpus}"):
        Algorithm("ppo", env="CartPole-v1", **{**config, "num_cpus_per_worker": 1})


def test_an_unreachable_ray_address_from_the_environment_fails_fast(monkeypatch, capsys):
    from flowrl.apps.cli import main

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    start = time.monotonic()
    assert main(["train", "ppo", "--num-workers", "1"]) == 2
    assert "cannot reach a Ray cluster at 127.0.0.1:1" in capsys.readouterr().err
    assert time.monotonic() - start < 30


def _plan_file(tmp_path: Path, body: str) -> Path:
    """A user plan file running with PPO's classes whose plan function is ``body``."""
    plan = tmp_path / "user_plan.py"
    plan.write_text(
        "from flowrl.algorithms.ppo import PPOConfig as Config, PPOPolicy as Policy\n"
        "from flowrl.algorithms.ppo import PPOLearner as Learner\n"
        f"def plan(workers, config):\n    {body}\n"
    )
    return plan


def test_a_plan_that_returns_no_iterator_is_one_line(tmp_path, capsys):
    from flowrl.apps.cli import main

    plan = _plan_file(tmp_path, "return None")
    assert main(["train", f"{plan}:plan", "--num-workers", "0"]) == 2
    assert "plan returned NoneType, not a LocalIterator" in capsys.readouterr().err


def test_a_plan_that_takes_other_arguments_is_one_line(tmp_path, capsys):
    """plan(workers) was a TypeError from inside Algorithm's build, exit 1."""
    from flowrl.apps.cli import main

    plan = _plan_file(tmp_path, "return None")
    plan.write_text(plan.read_text().replace("def plan(workers, config)", "def plan(workers)"))
    assert main(["train", f"{plan}:plan", "--num-workers", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["flowrl: error: plan must take (workers, config): too many positional "
                   "arguments"], err  # fmt: skip


def test_an_operator_given_a_bad_value_is_a_usage_error(tmp_path, capsys):
    """A plan's operator built with a value it cannot take was a ValueError, exit 1."""
    from flowrl.apps.cli import main

    ops = "from flowrl.ops import ParallelRollouts\n    "
    plan = _plan_file(tmp_path, ops + "return ParallelRollouts(workers, mode='sync')")
    assert main(["train", f"{plan}:plan", "--num-workers", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["flowrl: error: ParallelRollouts' mode must be bulk_sync, async or raw, "
                   "got 'sync'"], err  # fmt: skip


def test_a_plan_that_produces_no_result_dicts_is_one_line(tmp_path, capsys):
    """A plan without StandardMetricsReporting, or one mapping its results to a number,
    ended in "AttributeError: 'tuple' object has no attribute 'update'", raised in
    flowrl's Algorithm.train."""
    from flowrl.apps.cli import main

    ops = "from flowrl.ops import ParallelRollouts, TrainOneStep\n    "
    plan = _plan_file(
        tmp_path, ops + "return ParallelRollouts(workers).for_each(TrainOneStep(workers))"
    )
    args = ["train", f"{plan}:plan", "--num-workers", "0", "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["flowrl: error: plan produced a tuple, not a result dict (end the plan with "
                   "StandardMetricsReporting(...))"], err  # fmt: skip


@pytest.mark.parametrize(
    "train, message",
    [
        # the class ran as a constructor on every batch: the run went on without training
        ("combine(ConcatBatches(min_batch_size=200)).for_each(TrainOneStep)",
         "for_each(TrainOneStep) takes an operator, not its class: for_each(TrainOneStep(...))"),
        ("for_each(ConcatBatches(min_batch_size=200)).for_each(TrainOneStep(workers))",
         "learning takes a batch of experiences, got a list (ConcatBatches gives lists to "
         ".combine(), not to .for_each())"),
    ],
)  # fmt: skip
def test_an_operator_misapplied_in_a_plan_is_one_line(tmp_path, capsys, train, message):
    from flowrl.apps.cli import main

    ops = "from flowrl.ops import ConcatBatches, ParallelRollouts, TrainOneStep\n    "
    plan = _plan_file(tmp_path, ops + f"return ParallelRollouts(workers).{train}")
    args = ["train", f"{plan}:plan", "--num-workers", "0", "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"flowrl: error: {message}"), err


def test_a_plan_that_raises_is_its_own_error_and_where(tmp_path, capsys):
    from flowrl.apps.cli import main

    plan = _plan_file(tmp_path, "raise ValueError('my plan is broken')")
    assert main(["train", f"{plan}:plan", "--num-workers", "0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ValueError: my plan is broken" in err[0]
    assert f"raised at {plan}:4" in err[0]


# -- clean exits -----------------------------------------------------------------------------
def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _processes(pid: int, title: str) -> list[int]:
    """The live processes below ``pid`` whose command line starts with ``title`` (Ray
    names an actor's process ``ray::ClassName``)."""
    found = []
    for child in _alive(_descendants(pid)):
        try:
            cmdline = (Path("/proc") / str(child) / "cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(title.encode()):
            found.append(child)
    return found


def _kill_one(pids: list[int]) -> bool:
    """SIGKILL the first of ``pids`` still alive (one listed may have exited since: Ray
    retires idle worker processes); returns whether one was killed."""
    import os
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        return True
    return False


@pytest.mark.slow
def test_apex_with_a_replay_shard_killed_trains_on_and_exits(tmp_path):
    """A replaced shard used to leave the old plan's requests unclosed: after Ray's
    shutdown their clean-up started a new Ray, and the process never exited."""
    run_dir = tmp_path / "run"
    flowrl = str(Path(sys.executable).parent / "flowrl")
    stop = ["--stop-iters", "4"]  # the shard is killed after the first that trained
    args = [flowrl, "train", "apex", "--num-workers", "2", "--no-progress", "--seed", "0", *stop]
    args += ["--output", str(run_dir)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        killed = False
        # mid-run: after the first iteration that trained (the first report sampling alone)
        while not killed:
            assert time.monotonic() < deadline and proc.poll() is None, "no iteration trained"
            results = run_dir / "result.jsonl"
            rows = results.read_text().splitlines() if results.exists() else []
            if rows and json.loads(rows[-1])["env_steps_trained"] > 0:
                killed = _kill_one(_processes(proc.pid, "ray::ReplayActor"))
            time.sleep(0.1)
        ray_processes = _descendants(proc.pid)
        final_line_at = None
        for line in proc.stdout:
            if line.startswith("flowrl: stopped by"):
                final_line_at = time.monotonic()
        proc.wait(timeout=60)
        exited_at = time.monotonic()
        stderr = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert final_line_at is not None and exited_at - final_line_at < 10
    summary = json.loads((run_dir / "summary.json").read_text())
    first, *_, last = map(json.loads, (run_dir / "result.jsonl").read_text().splitlines())
    assert summary["stopped_by"] == "iterations" and last["num_worker_restarts"] >= 1
    assert last["env_steps_trained"] > first["env_steps_trained"], "training went on"
    deadline = time.monotonic() + 15
    while _alive(ray_processes) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _alive(ray_processes), "Ray processes of the run outlived it"


@pytest.mark.parametrize("moment", ["while Ray starts", "twice while training"])
@pytest.mark.slow
def test_ctrl_c_exits_without_a_traceback_and_leaves_no_ray_behind(moment, tmp_path):
    import signal

    flowrl = str(Path(sys.executable).parent / "flowrl")
    args = [flowrl, "train", "ppo", "--num-workers", "1", "--no-progress"]
    proc = subprocess.Popen(
        [*args, "--output", str(tmp_path / "run"), "--stop-timesteps", "100000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if moment == "while Ray starts" and _descendants(proc.pid):
                break  # Ray's first processes exist: it is starting
            if (tmp_path / "run" / "result.jsonl").exists():
                break
            time.sleep(0.01)
        ray_processes = _descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        if moment == "twice while training":
            time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode in (0, 130), stderr
    assert "Traceback" not in stderr
    deadline = time.monotonic() + 15
    while _alive(ray_processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(ray_processes), "Ray processes of the run outlived it"


def test_a_checkpoint_of_an_older_format_is_one_line_naming_both_versions(tmp_path, capsys):
    from flowrl.apps.cli import main

    with Algorithm("ppo", env="CartPole-v1", **QUICK) as algo:
        path = algo.save(tmp_path / "ckpt")
    meta = json.loads((path / META_FILE).read_text())
    del meta["format_version"]  # as flowrl wrote them before the policy / learner split
    (path / META_FILE).write_text(json.dumps(meta))
    for argv in (["evaluate", str(path)], ["export", str(path), "--out", str(tmp_path / "m.pt")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        expected = f"format version 1, but this flowrl reads version {checkpoints.FORMAT_VERSION}"
        assert len(err) == 1 and expected in err[0], err
    with pytest.raises(CheckpointError, match="format version 1"):
        Algorithm.from_checkpoint(path)


@pytest.mark.parametrize("env", ["CartPolesRaiseOnce", "TicTacToeRaiseOnce"])
@pytest.mark.slow
def test_a_multi_agent_env_that_raises_on_a_remote_worker_is_replaced(env, ray_session):
    """A Parallel env and a turn-based game get what a single-agent env gets: the worker
    whose env raised is replaced and training goes on."""
    fault_envs.RAISE_MARKER.unlink(missing_ok=True)
    config = {**QUICK, "num_workers": 2}
    with Algorithm("ppo", env=f"fault_envs:{env}", **config) as algo:
        summary = _run_until_restarted(algo, then_iters=2)
        assert summary["stopped_by"] == "iterations"
        assert algo.last_result["num_worker_restarts"] == 1
    fault_envs.RAISE_MARKER.unlink(missing_ok=True)


class Endless(gym.Env):
    """Episodes that never end: no terminal state, no time limit."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


def test_an_evaluation_names_an_env_that_raised_and_one_whose_episodes_never_end(monkeypatch):
    """An env's fault while evaluating read "ValueError: ..." alone and passed for a remote
    worker's (replaced nothing, three times over); an env whose episodes never end kept
    the evaluation, and an in-process run with it, waiting forever."""
    from flowrl.rollout import sampler
    from flowrl.rollout.envs import EndlessEpisodes, EnvError

    class CrashesAt5(fault_envs.RaiseAfter):
        LIMIT = 5

    monkeypatch.setattr(sampler, "MAX_EPISODE_STEPS", 500)
    with Algorithm("ppo", env=CrashesAt5, **QUICK) as algo:
        crashed = r"env CrashesAt5 \(worker 0\), evaluating, raised ValueError: the simulator"
        with pytest.raises(EnvError, match=crashed):
            algo.evaluate(1)
    with Algorithm("ppo", env=Endless, evaluation_interval=1, **QUICK) as algo:
        endless = r"Endless \(worker 0\), evaluating: no episode ended in 500 steps: .*TimeLimit"
        with pytest.raises(EndlessEpisodes, match=endless):
            run(algo, stop=StopCriteria(iters=2))
