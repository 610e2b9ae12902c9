"""Experiment tracking with the real libraries: MLflow's local store, wandb offline."""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from flowrl import Algorithm
from flowrl.apps.cli import main
from flowrl.run.runner import StopCriteria, run
from flowrl.run.tracking import MLflowTracker, WandbTracker, local_store, make_trackers


def short_run(tmp_path, trackers, iters=3):
    algo = Algorithm("ppo", num_workers=0, train_batch_size=256)
    try:
        run(algo, stop=StopCriteria(iters=iters), output_dir=tmp_path / "run", trackers=trackers)
    finally:
        algo.stop()
    return [json.loads(line) for line in (tmp_path / "run" / "result.jsonl").open()]


def test_mlflow_holds_every_iteration_the_config_and_the_summary(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = local_store(tmp_path / "mlruns")
    tracker = MLflowTracker(uri)
    rows = short_run(tmp_path, [tracker])
    client = MlflowClient(uri)
    history = client.get_metric_history(tracker.run_id, "episode_return_mean")
    assert [(m.step, m.value) for m in history] == [
        (r["env_steps_sampled"], r["episode_return_mean"]) for r in rows
    ]
    entropy = client.get_metric_history(tracker.run_id, "learner/entropy")
    assert len(entropy) == 3  # nested result keys keep their slash
    saved = client.get_run(tracker.run_id)
    assert saved.info.status == "FINISHED" and saved.info.run_name == "run"
    assert saved.data.params["algo"] == "ppo" and saved.data.params["train_batch_size"] == "256"
    assert saved.data.tags["summary.stopped_by"] == "iterations"


@pytest.mark.slow
def test_wandb_offline_holds_every_iteration_and_the_summary(tmp_path, monkeypatch):
    from wandb_records import history_and_summary

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    rows = short_run(tmp_path, [WandbTracker(directory=tmp_path / "run")])
    logged, summary = history_and_summary(tmp_path / "run")
    assert [(r["_step"], r["episode_return_mean"]) for r in logged] == [
        (r["env_steps_sampled"], r["episode_return_mean"]) for r in rows
    ]
    assert summary["stopped_by"] == "iterations" and summary["iterations"] == 3


def test_several_trackers_at_once_and_unknown_ones_refused(tmp_path, monkeypatch):
    from flowrl.core.config import ConfigError

    monkeypatch.setenv("WANDB_MODE", "offline")
    trackers = make_trackers(
        ["mlflow", "wandb", "mlflow"], run_dir=tmp_path, mlflow_uri=local_store(tmp_path)
    )
    assert [type(t).__name__ for t in trackers] == ["MLflowTracker", "WandbTracker"]
    with pytest.raises(ConfigError, match="unknown logger 'neptune'"):
        make_trackers(["neptune"], run_dir=None)


def test_bad_tracking_flags_are_one_line(capsys):
    assert main(["train", "ppo", "--num-workers", "0", "--mlflow-uri", "sqlite:///x.db"]) == 2
    err = capsys.readouterr().err
    assert "add --logger mlflow" in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as exit_:
        main(["train", "ppo", "--logger", "neptune"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "invalid choice: 'neptune'" in err and err.count("\n") == 1


def test_a_resumed_run_goes_on_in_the_runs_it_started(tmp_path, monkeypatch):
    """--resume started a second MLflow run (and wandb run) of the same name, the curve in
    two pieces."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    uri, out = local_store(tmp_path / "mlruns"), tmp_path / "run"
    tracking = ["--logger", "mlflow", "--logger", "wandb", "--mlflow-uri", uri, "--no-progress"]
    first = ["--num-workers", "0", "--set", "train_batch_size=256", "--output", str(out)]
    assert main(["train", "ppo", *first, "--stop-iters", "2", *tracking]) == 0
    assert main(["train", "ppo", "--resume", str(out), "--stop-iters", "3", *tracking]) == 0
    client = MlflowClient(uri)
    (only,) = client.search_runs([client.get_experiment_by_name("flowrl").experiment_id])
    steps = [m.step for m in client.get_metric_history(only.info.run_id, "iteration")]
    rows = [json.loads(line) for line in (out / "result.jsonl").open()]
    assert steps == [r["env_steps_sampled"] for r in rows] and len(rows) == 3
    assert only.data.tags["summary.iterations"] == "3"
    wandb_runs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(wandb_runs) == 2 and len({p.name.split("-")[3] for p in wandb_runs}) == 1  # its id


def _closed_port() -> int:
    """A port nothing listens on: connecting to it is refused at once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_mlflow_server_that_does_not_answer_is_one_line_before_the_run(tmp_path, capsys):
    """--mlflow-uri naming a server that was down waited four minutes (MLflow's retries)
    after building the run, then ended with MLflow's exception."""
    import time

    uri = f"http://127.0.0.1:{_closed_port()}"
    args = ["train", "ppo", "--num-workers", "0", "--stop-iters", "1", "--logger", "mlflow"]
    began = time.perf_counter()
    assert main([*args, "--mlflow-uri", uri, "--output", str(tmp_path / "run")]) == 2
    assert time.perf_counter() - began < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"MLflow at {uri} does not answer" in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_tracking_server_gone_mid_run_is_a_warning_and_the_run_goes_on(
    tmp_path, monkeypatch, caplog
):
    """A real MLflow server, stopped after the second iteration: the run ended with
    MLflow's error (after four minutes of retries per call). Its results stay in the run's
    files, and training goes on."""
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from flowrl import Callbacks

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # (fails at once)
    port = _closed_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"

    def stop_server():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()

    class ServerGone(Callbacks):
        def on_train_result(self, *, algorithm, result):
            if result["iteration"] == 2:
                stop_server()

    try:
        for _ in range(240):  # it starts in about 10 s here
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{uri}/health", timeout=1).close()
                break
            time.sleep(0.25)
        tracker = MLflowTracker(uri)
        algo = Algorithm("ppo", num_workers=0, train_batch_size=256, callbacks=ServerGone)
        with algo:
            summary = run(algo, stop=StopCriteria(iters=4), output_dir=tmp_path / "run",
                          trackers=[tracker])  # fmt: skip
    finally:
        stop_server()
    assert summary["stopped_by"] == "iterations" and summary["iterations"] == 4
    rows = (tmp_path / "run" / "result.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in rows] == [1, 2, 3, 4]
    warned = [r.message for r in caplog.records if "the run goes on without it" in r.message]
    assert len(warned) == 1 and warned[0].startswith("MLflowTracker failed ("), warned


@pytest.mark.slow
def test_a_tracker_that_failed_once_still_ends_its_run(tmp_path, caplog):
    """After one failed log (a server's blip) the tracker was skipped to the end, finish
    too: its MLflow run showed as running for ever."""
    from mlflow.tracking import MlflowClient

    class Blip(MLflowTracker):
        def log(self, result):
            if result["iteration"] == 2:
                raise ConnectionError("the server went away for a moment")
            super().log(result)

    tracker = Blip(local_store(tmp_path / "mlruns"))
    short_run(tmp_path, [tracker])
    saved = MlflowClient(tracker.tracking_uri).get_run(tracker.run_id)
    assert saved.info.status == "FINISHED" and saved.data.tags["summary.iterations"] == "3"
    history = MlflowClient(tracker.tracking_uri).get_metric_history(tracker.run_id, "iteration")
    assert [m.value for m in history] == [1.0]  # the run went on without it after the blip
    warned = [r.message for r in caplog.records if "the run goes on without it" in r.message]
    assert len(warned) == 1, warned


def test_mlflow_leaves_the_process_tracking_uri_and_active_run_alone(tmp_path):
    """The tracker set MLflow's process-wide tracking URI and active run: a notebook's own
    mlflow calls went to flowrl's store, and a run left active by a failure refused the
    next ("Run ... is already active")."""
    import mlflow

    before = mlflow.get_tracking_uri()
    short_run(tmp_path, [MLflowTracker(local_store(tmp_path / "mlruns"))], iters=1)
    assert mlflow.get_tracking_uri() == before and mlflow.active_run() is None


def test_wandb_without_an_api_key_is_one_line_and_leaves_the_output_free(
    tmp_path, monkeypatch, capsys
):
    """wandb online without a key ended with its UsageError after the run had written its
    files, so the same --output was then refused as another run's."""
    import wandb

    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no ~/.config/wandb
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    args = ["train", "ppo", "--num-workers", "0", "--stop-iters", "1", "--no-progress"]
    out = ["--output", str(tmp_path / "run")]
    wandb.teardown()  # wandb's settings are the process's: read afresh from these, and
    try:  # again by the next test from its own
        with open(os.devnull) as nobody:  # no terminal to type a key at (a job's)
            monkeypatch.setattr("sys.stdin", nobody)
            assert main([*args, "--logger", "wandb", *out]) == 2
    finally:
        wandb.teardown()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "wandb cannot start: " in err[0] and "WANDB_MODE=offline" in err[0]
    assert main([*args, *out]) == 0  # the directory holds nothing of the first
