"""Experiment tracking: a run's config, every result and its summary sent to MLflow or
Weights & Biases (the ``tracking`` extra), beside the files it writes anyway.

``flowrl train ... --logger mlflow --logger wandb`` (any number of them), or in Python
``run(algo, trackers=[MLflowTracker()])``. MLflow writes to ``--mlflow-uri`` (default:
``MLFLOW_TRACKING_URI``, else a local store in ``mlruns/``); wandb follows its own settings, so
``WANDB_MODE=offline`` keeps the run on disk (``wandb sync`` uploads it later).

Metrics are a result's numbers, at step ``env_steps_sampled``; keys keep their slashes
(``learner/entropy``, ``evaluation/episode_return_mean``), which both trackers group by.

Examples:
    >>> import tempfile
    >>> tracker = MLflowTracker(local_store(tempfile.mkdtemp()))
    >>> tracker.start("demo", {"algo": "ppo", "config": {"lr": 0.001}})
    >>> tracker.log({"iteration": 1, "env_steps_sampled": 100, "episode_return_mean": 20.0})
    >>> tracker.finish({"stopped_by": "iterations", "episode_return_mean": 20.0})
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from flowrl.core.config import ConfigError
from flowrl.core.context import ITERATION, STEPS_SAMPLED
from flowrl.core.errors import one_line

NAMES = ("mlflow", "wandb")
logger = logging.getLogger(__name__)


class Tracker(Protocol):
    """What ``flowrl.run.runner.run`` calls: once at the start, once per result, once at
    the end (also when training failed or was interrupted)."""

    def start(self, name: str, meta: dict[str, Any]) -> None: ...

    def log(self, result: dict[str, Any]) -> None: ...

    def finish(self, summary: dict[str, Any]) -> None: ...


def metrics(result: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a result (booleans and strings left out)."""
    return {
        k: float(v)
        for k, v in result.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def step_of(result: dict[str, Any]) -> int:
    """A result's x axis: env steps sampled (the iteration when a plan reports none)."""
    return int(result.get(STEPS_SAMPLED, result.get(ITERATION, 0)))


def params(meta: dict[str, Any]) -> dict[str, Any]:
    """The algorithm, env and every config value, flat (``config.lr`` -> ``lr``)."""
    config = meta.get("config", {})
    return {"algo": meta.get("algo"), **{k: str(v) for k, v in config.items()}}


def local_store(directory: str = "mlruns") -> str:
    """MLflow's local store in ``directory`` (an SQLite file: MLflow 3 keeps its plain file
    store for reading old runs only); ``mlflow ui --backend-store-uri`` opens it."""
    path = Path(directory).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path / 'mlflow.db'}"


@contextlib.contextmanager
def quiet_loggers(*names: str, level: int = logging.WARNING) -> Iterator[None]:
    """Inside, the named libraries' loggers say only what is at ``level`` or worse and
    their warnings are not shown (their progress lines are not the run's output)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(level)
        try:
            yield
        finally:
            for logger, before in zip(loggers, levels, strict=True):
                logger.setLevel(before)


#: where a run directory keeps the ids of its tracked runs, which a resumed run goes on in
TRACKED = "tracked.json"


def tracked(directory: str | os.PathLike[str] | None) -> dict[str, dict[str, Any]]:
    """The runs ``directory`` (a run's) remembers, by tracker ({}: none)."""
    path = None if directory is None else Path(directory) / TRACKED
    try:
        return json.loads(path.read_text()) if path is not None and path.is_file() else {}
    except (OSError, ValueError):  # unreadable: the resumed run gets a tracked run anew
        return {}


def remember(directory: str | os.PathLike[str] | None, tracker: str, run: dict[str, Any]) -> None:
    """Keep ``run`` (its id) as ``directory``'s run in ``tracker``, for a resume."""
    if directory is not None:
        path = Path(directory) / TRACKED
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**tracked(directory), tracker: run}, indent=1))


@functools.cache  # a server that answered is not asked again (flowrl train asks first)
def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """A ConfigError when ``uri``, an MLflow tracking server's address (http or https),
    does not answer within ``timeout_s``: MLflow retries for four minutes before it says
    so. A server that answers at all (with a proxy's 401, say) passes.

    Examples:
        >>> check_server("sqlite:///mlruns/mlflow.db")  # a local store: nothing to ask
    """
    if not uri.startswith(("http://", "https://")):
        return
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return
    except OSError as e:  # (URLError and timeouts among them)
        raise ConfigError(
            f"MLflow at {uri} does not answer ({getattr(e, 'reason', e)}): start its server "
            "(mlflow server), or leave out --mlflow-uri to log to ./mlruns"
        ) from None


class MLflowTracker:
    """One MLflow run per training run, in the experiment ``experiment``; a run resumed in
    ``directory`` (its run directory) goes on in the MLflow run it started, in the same
    store. It talks to its store through a client of its own: MLflow's process-wide
    tracking URI and active run (a notebook's own ``mlflow.start_run()``) stay as they were."""

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str = "flowrl",
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        try:
            import mlflow
        except ImportError:
            raise ConfigError(
                '--logger mlflow needs mlflow: pip install "flowrl-ray[tracking]"'
            ) from None
        self._mlflow = mlflow
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or local_store()
        check_server(self.tracking_uri)
        self.experiment, self.directory = experiment, directory
        self.run_id: str | None = None
        self._client: Any = None

    def start(self, name: str, meta: dict[str, Any]) -> None:
        from mlflow.entities import Param

        client = self._client = self._mlflow.MlflowClient(self.tracking_uri)
        with quiet_loggers("mlflow", "alembic"):  # creating the store's tables, the experiment
            experiment = client.get_experiment_by_name(self.experiment)
            experiment_id = (
                experiment.experiment_id
                if experiment
                else client.create_experiment(self.experiment)
            )
        known = tracked(self.directory).get("mlflow", {})
        if known.get("tracking_uri") == self.tracking_uri:  # resumed: its params are there
            with contextlib.suppress(self._mlflow.exceptions.MlflowException):  # (deleted since)
                client.update_run(known["run_id"], status="RUNNING")
                self.run_id = known["run_id"]
                return
        self.run_id = client.create_run(experiment_id, run_name=name).info.run_id
        client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in params(meta).items()])
        remember(
            self.directory, "mlflow", {"run_id": self.run_id, "tracking_uri": self.tracking_uri}
        )

    def log(self, result: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        at, step = int(time.time() * 1000), step_of(result)
        values = [Metric(k, v, at, step) for k, v in metrics(result).items()]
        self._client.log_batch(self.run_id, metrics=values)

    def reachable(self) -> bool:
        """Whether the store answers now (at once for a local one): a server gone need not
        hold the run's end for the four minutes MLflow retries."""
        try:
            check_server.__wrapped__(self.tracking_uri)
        except ConfigError:
            return False
        return True

    def finish(self, summary: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        tags = [RunTag(f"summary.{k}", str(v)) for k, v in summary.items()]
        self._client.log_batch(self.run_id, tags=tags)
        status = "FAILED" if summary.get("stopped_by") == "error" else "FINISHED"
        self._client.set_terminated(self.run_id, status=status)


class WandbTracker:
    """One wandb run per training run, in the project ``project``; its files go to
    ``directory`` (the run directory under ``flowrl train``), and a run resumed there goes
    on in the wandb run it started (``resume="allow"``: wandb takes the steps after the
    last it holds)."""

    def __init__(self, project: str = "flowrl", directory: str | os.PathLike[str] | None = None):
        try:
            import wandb
        except ImportError:
            raise ConfigError(
                '--logger wandb needs wandb: pip install "flowrl-ray[tracking]"'
            ) from None
        self._wandb = wandb
        self.project, self.directory = project, directory
        self.run: Any = None

    def start(self, name: str, meta: dict[str, Any]) -> None:
        if self.directory is not None:
            Path(self.directory).mkdir(parents=True, exist_ok=True)
        known = tracked(self.directory).get("wandb", {})
        resumed = (
            {"id": known["id"], "resume": "allow"} if known.get("project") == self.project else {}
        )
        try:
            self.run = self._wandb.init(
                project=self.project,
                name=name,
                config={"algo": meta.get("algo"), **meta.get("config", {})},
                dir=None if self.directory is None else str(self.directory),
                reinit="finish_previous",
                **resumed,
            )
        except self._wandb.errors.UsageError as e:  # no API key, say
            raise ConfigError(
                f"wandb cannot start: {e} (WANDB_MODE=offline keeps the run on disk, and "
                "wandb sync uploads it later)"
            ) from None
        remember(self.directory, "wandb", {"id": self.run.id, "project": self.project})

    def log(self, result: dict[str, Any]) -> None:
        self.run.log(metrics(result), step=step_of(result))

    def finish(self, summary: dict[str, Any]) -> None:
        for key, value in summary.items():
            self.run.summary[key] = value
        self.run.finish(exit_code=1 if summary.get("stopped_by") == "error" else 0)


class Guarded:
    """``tracker`` whose failures after its start (its server gone, a full disk) are a
    warning, once: the run goes on without it, and the run's own files keep every result.
    It is still finished at the end where it is ``reachable`` (a tracker without that
    method always is), so a server back by then marks its run ended, not running forever.

    Examples:
        >>> class Broken:
        ...     def log(self, result): raise ConnectionError("gone")
        >>> Guarded(Broken()).log({})  # warns, and the run goes on
    """

    def __init__(self, tracker: Tracker) -> None:
        self.tracker, self.failed = tracker, False

    def start(self, name: str, meta: dict[str, Any]) -> None:
        self.tracker.start(name, meta)

    def log(self, result: dict[str, Any]) -> None:
        self._call("log", result)

    def finish(self, summary: dict[str, Any]) -> None:
        if not self.failed:
            self._call("finish", summary)
        elif getattr(self.tracker, "reachable", lambda: True)():
            try:
                self.tracker.finish(summary)
            except Exception as e:  # (warned once already)
                logger.debug("%s could not finish: %s", type(self.tracker).__name__, one_line(e))

    def _call(self, method: str, arg: dict[str, Any]) -> None:
        if self.failed:
            return
        try:
            getattr(self.tracker, method)(arg)
        except Exception as e:
            self.failed = True
            logger.warning(
                "%s failed (%s); the run goes on without it, its files keeping every result",
                type(self.tracker).__name__, one_line(e),
            )  # fmt: skip


def make_trackers(
    names: list[str], *, run_dir: Path | None, mlflow_uri: str | None = None
) -> list[Tracker]:
    """Trackers by name (``mlflow``, ``wandb``), each once; a ConfigError for others."""
    trackers: list[Tracker] = []
    for name in dict.fromkeys(names):
        if name == "mlflow":
            trackers.append(MLflowTracker(mlflow_uri, directory=run_dir))
        elif name == "wandb":
            trackers.append(WandbTracker(directory=run_dir))
        else:
            raise ConfigError(f"unknown logger '{name}'; available: {', '.join(NAMES)}")
    return trackers
