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


class WordMetric(Callbacks):
    """Reports a custom metric that is not a number."""

    def on_episode_end(self, *, episode, info):
        episode.custom_metrics["mood"] = "cheerful"


class RaisingResult(Callbacks):
    """The driver's result hook raises at the second iteration."""

    def on_train_result(self, *, algorithm, result):
        if result["iteration"] == 2:
            raise KeyError("no_such_key")


class RaisingCheckpoint(Callbacks):
    """The checkpoint hook raises."""

    def on_checkpoint(self, *, algorithm, path):
        raise OSError("the backup disk is gone")


class SlowEpisodeEnd(Callbacks):
    """An episode hook slower than the test's ``sample_timeout_s``."""

    def on_episode_end(self, *, episode, info):
        import time

        time.sleep(3)


class TeamEpisodes(Callbacks):
    """For a Parallel multi-agent env: an episode is an env copy's, its info each agent's
    by id; reports the copy's total reward, its length and how many agents the last step's
    info named, and counts the fragments postprocessed."""

    fragments = 0

    def on_episode_end(self, *, episode, info):
        episode.custom_metrics["total"] = episode.total_reward
        episode.custom_metrics["length"] = episode.length
        episode.custom_metrics["agents_at_end"] = len(info)

    def on_fragment_postprocessed(self, *, batch, worker_index):
        TeamEpisodes.fragments += 1


class EpisodeSteps(Callbacks):
    """Reports each episode's steps as its hooks counted them, in any kind of env."""

    def on_episode_start(self, *, episode):
        episode.user_data["steps"] = 0

    def on_episode_step(self, *, episode, info):
        episode.user_data["steps"] += 1

    def on_episode_end(self, *, episode, info):
        episode.custom_metrics["steps"] = episode.user_data["steps"]
