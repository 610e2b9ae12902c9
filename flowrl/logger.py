"""The files a run writes: config.json, result.jsonl, progress.csv, TensorBoard events,
summary.json.

Example:
    >>> log = RunLogger(Path("/tmp/run"))
    >>> log.write_json("config.json", {"algo": "ppo"})
    >>> log.log({"iteration": 1, "env_steps_sampled": 100, "episode_return_mean": 20.0})
    >>> log.close()
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLogger:
    """Appends one line per result to result.jsonl and progress.csv, and writes the same
    scalars to TensorBoard (step = env steps sampled). Appends when the files exist, so a
    resumed run continues its own files."""

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.output_dir / "result.jsonl", "a")  # noqa: SIM115
        csv_path = self.output_dir / "progress.csv"
        self._csv_fields: list[str] | None = None
        if csv_path.exists() and csv_path.stat().st_size > 0:
            with open(csv_path) as f:
                self._csv_fields = next(csv.reader(f))
        self._csv = open(csv_path, "a", newline="")  # noqa: SIM115
        self._csv_writer: csv.DictWriter[str] | None = None
        self._tb: Any = None

    def write_json(self, name: str, data: dict[str, Any]) -> None:
        text = json.dumps({k: _jsonable(v) for k, v in data.items()}, indent=2)
        (self.output_dir / name).write_text(text + "\n")

    def log(self, result: dict[str, Any]) -> None:
        clean = {k: _jsonable(v) for k, v in result.items()}
        self._jsonl.write(json.dumps(clean) + "\n")
        self._jsonl.flush()
        if self._csv_writer is None:
            header_needed = self._csv_fields is None
            self._csv_fields = self._csv_fields or list(result)
            self._csv_writer = csv.DictWriter(
                self._csv, fieldnames=self._csv_fields, extrasaction="ignore"
            )
            if header_needed:
                self._csv_writer.writeheader()
        self._csv_writer.writerow(clean)
        self._csv.flush()
        self._tensorboard(result)

    def _tensorboard(self, result: dict[str, Any]) -> None:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.output_dir))
        step = int(result.get("env_steps_sampled", result.get("iteration", 0)))
        for key, value in result.items():
            if isinstance(value, int | float) and math.isfinite(value):
                self._tb.add_scalar(key, value, global_step=step)
        self._tb.flush()

    def close(self) -> None:
        self._jsonl.close()
        self._csv.close()
        if self._tb is not None:
            self._tb.close()
