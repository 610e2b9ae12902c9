"""Callbacks a user writes, for tests/test_callbacks.py (imported by Ray workers too)."""

from __future__ import annotations

import json
from pathlib import Path

from flowrl import Callbacks


class CoinCallbacks(Callbacks):
    """Reports each episode's coins (from the env's info) and steps seen by the step hook;
    the driver notes each iteration and checkpoint."""

    def on_episode_start(self, *, episode):
        episode.user_data["steps"] = 0

    def on_episode_step(self, *, episode, info):
        episode.user_data["steps"] += 1

    def on_episode_end(self, *, episode, info):
        episode.custom_metrics["coins"] = info["coins"]
        episode.custom_metrics["steps_seen"] = episode.user_data["steps"] - episode.length

    def on_fragment_postprocessed(self, *, batch, worker_index):
        self.fragments = getattr(self, "fragments", 0) + 1

    def on_train_result(self, *, algorithm, result):
        result["custom/driver_saw_iteration"] = result["iteration"]

    def on_checkpoint(self, *, algorithm, path):
        Path(path).parent.joinpath("checkpoints_seen.txt").open("a").write(
            json.dumps(str(Path(path).name)) + "\n"
        )
