"""The files a run writes: config.json, result.jsonl, progress.csv, TensorBoard events,
summary.json.

Examples:
    >>> import tempfile
    >>> log = RunLogger(Path(tempfile.mkdtemp()) / "run")
    >>> log.write_json("config.json", {"algo": "ppo"})
    >>> log.log({"iteration": 1, "env_steps_sampled": 100, "episode_return_mean": 20.0})
    >>> log.close()
"""

from __future__ import annotations

import csv
import fcntl
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

from flowrl.core.config import ConfigError, check_local_path
from flowrl.core.context import ITERATION
from flowrl.rollout.envs import probe_writable
from flowrl.run.checkpoints import remove_leftovers
from flowrl.run.tracking import metrics, step_of

#: Where a run that ended on an error writes its traceback.
ERROR_FILE = "error.txt"


def json_text(data: dict[str, Any]) -> str:
    """``data`` as indented JSON, with NaN and infinities as null."""
    return json.dumps({k: _jsonable(v) for k, v in data.items()}, indent=2) + "\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def check_new_run_dir(output_dir: Path) -> None:
    """A new run's directory must be absent or empty, and writable; a ConfigError names
    the problem and the way out. A refused run leaves no folder behind."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(f"output {output_dir} is a file, not a directory")
    if output_dir.is_dir() and any(output_dir.iterdir()):
        raise ConfigError(
            f"output directory {output_dir} is not empty: continue that run with "
            f"--resume {output_dir}, or choose another --output"
        )
    try:
        probe_writable(output_dir)  # (and removes what it made: the run makes it)
    except OSError as e:
        raise ConfigError(f"cannot write to output directory {output_dir}: {e.strerror}") from None


def check_output_file(path: str | Path) -> Path:
    """``path`` as a file a command can write (its folder made where missing), checked
    before the command's work begins; a ConfigError names the path and the reason.

    Examples:
        >>> check_output_file("/proc/plan.txt")
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: cannot write /proc/plan.txt: No such file or directory
    """
    out = Path(path)
    if out.is_dir():
        raise ConfigError(f"cannot write {out}: it is a directory; name a file")
    try:
        probe_writable(out.parent, keep=True)
    except OSError as e:
        raise ConfigError(f"cannot write {out}: {e.strerror or e}") from None
    return out


LOCK = ".flowrl.lock"  # held by the process that writes a run directory


def hold_run_dir(output_dir: Path) -> Any:
    """An exclusive lock on ``output_dir`` (its lock file, open), held until closed: one
    process writes a run directory at a time. A ConfigError when another holds it.

    Examples:
        >>> import tempfile
        >>> run_dir = Path(tempfile.mkdtemp())
        >>> held = hold_run_dir(run_dir)
        >>> hold_run_dir(run_dir)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: run directory ... is in use by another flowrl process ...
        >>> held.close()
    """
    handle = open(Path(output_dir) / LOCK, "a+")  # noqa: SIM115  (held while the run writes)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        pid = handle.read().strip() or "?"
        handle.close()
        raise ConfigError(
            f"run directory {output_dir} is in use by another flowrl process (pid {pid}): "
            "wait for it to end, or choose another --output"
        ) from None
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _whole_records(path: Path, last_iteration: int) -> list[str]:
    """The lines of result.jsonl that parse (a torn last line does not) and belong to
    iterations up to ``last_iteration``."""
    if not path.exists():
        return []
    kept = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get(ITERATION, 0) <= last_iteration:
            kept.append(line)
    return kept


def logged_result(output_dir: Path, iteration: int) -> dict[str, Any]:
    """The result a run's result.jsonl holds for ``iteration`` (empty where none)."""
    for line in reversed(_whole_records(Path(output_dir) / "result.jsonl", iteration)):
        record = json.loads(line)
        if record.get(ITERATION) == iteration:
            return record
    return {}


def _replace_file(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


class RunLogger:
    """Appends one whole line per result to result.jsonl and progress.csv, and writes the
    same scalars to TensorBoard (step = env steps sampled).

    A new run (``resume_iteration`` 0) needs an empty directory (see
    ``check_new_run_dir``). A resumed one first cuts its logs back to the checkpoint's
    iteration (the rows logged after it, and a torn last line, go; TensorBoard purges
    the steps after ``resume_env_steps``), so every iteration appears once.
    """

    def __init__(
        self, output_dir: Path, *, resume_iteration: int = 0, resume_env_steps: int = 0
    ) -> None:
        check_local_path("output_dir", output_dir)
        self.output_dir = Path(output_dir)
        if resume_iteration == 0:
            check_new_run_dir(self.output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._lock = hold_run_dir(self.output_dir)  # before any file is rewritten
        if (self.output_dir / "checkpoints").is_dir():
            remove_leftovers(self.output_dir / "checkpoints")
        self._purge_step = resume_env_steps + 1 if resume_iteration else None
        jsonl_path = self.output_dir / "result.jsonl"
        kept = _whole_records(jsonl_path, resume_iteration)
        _replace_file(jsonl_path, "".join(line + "\n" for line in kept))
        self._jsonl = open(jsonl_path, "a")  # noqa: SIM115
        self._csv: Any = None
        self._csv_writer: csv.DictWriter[str] | None = None
        self._rewrite_csv([json.loads(line) for line in kept])
        self._tb: Any = None
        #: the iteration of the last row written (a resumed run's: its checkpoint's)
        self.last_iteration = resume_iteration

    def write_json(self, name: str, data: dict[str, Any]) -> None:
        (self.output_dir / name).write_text(json_text(data))

    def log(self, result: dict[str, Any]) -> None:
        clean = {k: _jsonable(v) for k, v in result.items()}
        self._jsonl.write(json.dumps(clean) + "\n")  # one write per whole line
        self._jsonl.flush()
        self.last_iteration = result.get(ITERATION, self.last_iteration)
        self._write_csv(clean)
        self._tensorboard(result)

    def _write_csv(self, clean: dict[str, Any]) -> None:
        if self._csv_writer is not None and clean.keys() <= set(self._csv_writer.fieldnames):
            self._csv_writer.writerow(clean)
            self._csv.flush()
        else:  # a column appeared (learner stats once learning starts): widen the header
            jsonl = (self.output_dir / "result.jsonl").read_text().splitlines()
            self._rewrite_csv([json.loads(line) for line in jsonl])

    def _rewrite_csv(self, rows: list[dict[str, Any]]) -> None:
        """progress.csv afresh from ``rows``, its header every column they use."""
        if self._csv is not None:
            self._csv.close()
        fields = list(dict.fromkeys(k for row in rows for k in row))
        self._csv = open(self.output_dir / "progress.csv", "w", newline="")  # noqa: SIM115
        self._csv_writer = None
        if fields:
            self._csv_writer = csv.DictWriter(self._csv, fieldnames=fields)
            self._csv_writer.writeheader()
            self._csv_writer.writerows(rows)
        self._csv.flush()

    def _tensorboard(self, result: dict[str, Any]) -> None:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.output_dir), purge_step=self._purge_step)
        step = step_of(result)
        for key, value in metrics(result).items():
            self._tb.add_scalar(key, value, global_step=step)
        self._tb.flush()

    def discard(self) -> None:
        """Closed, and the directory of a new run that never began emptied again (it was
        empty or absent: ``check_new_run_dir``), so the same output takes the next try."""
        self.close()
        for path in self.output_dir.iterdir():
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def close(self) -> None:
        self._jsonl.close()
        self._csv.close()
        if self._tb is not None:
            self._tb.close()
        self._lock.close()  # the directory is free for the next writer
