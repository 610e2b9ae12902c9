"""Evaluation while training: greedy episodes every ``evaluation_interval`` iterations.

With Ray, the episodes run on an evaluation worker of their own (a remote
``RolloutWorker`` that never samples for training), so training goes
on meanwhile; an evaluation's results join the first training result after they arrive,
with ``evaluation/iteration`` naming the iteration whose weights they scored. Without Ray
the local worker runs them in place, between two iterations. A dead evaluation worker is
replaced and its evaluation started again, as is one whose env raised (twice in a row: the
run ends); training never waits for it. With
``evaluation_video_dir``, each evaluation's episodes are written as MP4s under
``DIR/iteration_N`` (on the evaluation worker's node).

Examples:
    >>> from flowrl import Algorithm
    >>> algo = Algorithm("ppo", num_workers=0, evaluation_interval=1, evaluation_episodes=2)
    >>> algo.train()["evaluation/episodes"]
    2
    >>> algo.stop()
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from flowrl.core.context import EPISODE_LEN_MEAN, EPISODE_RETURN_MEAN, ITERATION
from flowrl.learning.acting import Weights
from flowrl.ops.metrics import agent_returns
from flowrl.rollout.envs import EnvError
from flowrl.rollout.worker import Episode, WorkerSet

logger = logging.getLogger(__name__)

PREFIX = "evaluation/"
EVAL_RETURN_MEAN = PREFIX + EPISODE_RETURN_MEAN
#: the iteration whose weights an evaluation scored
EVAL_ITERATION = PREFIX + ITERATION


def episode_stats(episodes: list[Episode]) -> dict[str, float]:
    """Count, mean/min/max return and mean length of ``episodes``; the
    mean return of each agent and policy of multi-agent ones."""
    returns = [ep.episode_return for ep in episodes]
    return {
        "episodes": len(episodes),
        EPISODE_RETURN_MEAN: sum(returns) / len(returns),
        "episode_return_min": min(returns),
        "episode_return_max": max(returns),
        EPISODE_LEN_MEAN: sum(ep.length for ep in episodes) / len(episodes),
        **agent_returns(episodes),
    }


class EvaluationBar:
    """An evaluation's progress on stderr (``enabled``; None: when it is a terminal, as
    under ``flowrl evaluate``): the episodes ended, and the steps taken, which move while
    an episode runs long (a greedy policy that stalls until its time limit: 27,000 steps
    of Breakout). Called after every step with the episodes it ended.

    Examples:
        >>> with EvaluationBar(10, enabled=False) as bar:
        ...     bar([])
    """

    def __init__(self, episodes: int, enabled: bool | None = None) -> None:
        from tqdm import tqdm

        disable = None if enabled is None else not enabled
        self.bar = tqdm(total=episodes, unit=" episodes", disable=disable, mininterval=0.5)
        self.steps = 0

    def __enter__(self) -> EvaluationBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, finished: list[Any]) -> None:
        self.steps += 1
        if finished:
            self.bar.update(len(finished))
        if self.steps % 500 == 0:
            self.bar.set_postfix_str(f"{self.steps:,} steps", refresh=False)

    def close(self) -> None:
        self.bar.close()


class Evaluation:
    """Starts an evaluation every ``interval`` iterations (one at a time) and hands back
    its results; keeps the weights it scored, for a best checkpoint."""

    def __init__(
        self, workers: WorkerSet, *, interval: int, episodes: int, video_dir: str = ""
    ) -> None:
        self.workers, self.interval, self.episodes = workers, interval, episodes
        self.video_dir = video_dir
        self._actor: Any = None
        self._pending: tuple[Any, int, dict[str, Weights]] | None = (
            None  # (ref, iteration, weights)
        )
        #: The weights the last finished evaluation scored.
        self.scored_weights: dict[str, Weights] | None = None
        self._env_raised = False  # in the last evaluation

    @property
    def running(self) -> int | None:
        """The iteration whose weights the evaluation still running scores (None: none)."""
        return None if self._pending is None else self._pending[1]

    def step(self, iteration: int) -> dict[str, Any]:
        """``evaluation/...`` results that finished since the last call (empty if none);
        starts the next evaluation when ``iteration`` is due and none is running."""
        if self.interval <= 0:
            return {}
        out = self._collect()
        if self._pending is None and iteration % self.interval == 0:
            self._start(iteration)
            if not self.workers.remote_workers:  # in-process: it has finished already
                out = self._collect()
        return out

    def _start(self, iteration: int) -> None:
        local = self.workers.local_worker
        with local.lock:  # whole learner-thread updates only (get_weights copies)
            weights = local.get_weights()
        video_dir = f"{self.video_dir}/iteration_{iteration:06d}" if self.video_dir else None
        if not self.workers.remote_workers:
            episodes = local.evaluate(self.episodes, video_dir=video_dir)
            self._pending = (episodes, iteration, weights)
            return
        if self._actor is None:
            self._actor = self.workers.make_evaluation_worker()
        ref = self._actor.evaluate_with.remote(weights, self.episodes, video_dir)
        self._pending = (ref, iteration, weights)

    def _collect(self) -> dict[str, Any]:
        if self._pending is None:
            return {}
        handle, iteration, weights = self._pending
        if self.workers.remote_workers:
            import ray

            if not ray.wait([handle], timeout=0)[0]:
                return {}
            try:
                handle = ray.get(handle)
            except (ray.exceptions.RayActorError, EnvError) as e:
                self._start_again(iteration, e)
                return {}
        self._pending, self.scored_weights, self._env_raised = None, weights, False
        stats = {PREFIX + k: v for k, v in episode_stats(handle).items()}
        return {**stats, EVAL_ITERATION: iteration}

    def _start_again(self, iteration: int, error: Exception) -> None:
        """The evaluation of ``iteration`` started again on a new evaluation worker, where
        the last one died or its env raised; an env that raised in two evaluations in a
        row ends the run (a new worker would not help: an env that cannot render, say)."""
        self.stop()
        self._pending = None
        what = getattr(error, "cause", error)  # (Ray's error: the env's, with its traceback)
        if isinstance(error, EnvError):
            if self._env_raised:
                raise RuntimeError(f"the env raised in two evaluations in a row: {what}")
            self._env_raised = True
        else:
            what = "the evaluation worker died"
        logger.warning("%s; starting the evaluation again on a new evaluation worker", what)
        self._start(iteration)

    def finish(
        self, timeout_s: float = 120.0, *, waiting: Callable[[str], None] | None = None
    ) -> dict[str, Any]:
        """The results of the evaluation still running on the evaluation worker, waited for
        up to ``timeout_s`` (empty when none runs, or it takes longer): a run's last
        iteration started one on its final weights. ``waiting`` is told what is awaited
        when it is not done within a second."""
        if self._pending is None or not self.workers.remote_workers:
            return {}
        import ray

        ref, iteration = self._pending[0], self._pending[1]
        if not ray.wait([ref], timeout=min(1.0, timeout_s))[0] and waiting is not None:
            waiting(f"the evaluation of iteration {iteration} ({self.episodes} episodes)")
        ray.wait([ref], timeout=max(0.0, timeout_s - 1.0))
        return self._collect()

    def score_last(
        self, iteration: int, *, waiting: Callable[[str], None] | None = None
    ) -> dict[str, Any]:
        """The results of an evaluation of the weights of ``iteration``, a run's last (they
        have not changed since), where it is due and an evaluation worker scores it: the
        one running on them, or one started now, waited for as ``finish`` waits. Empty
        where it is not due, or another evaluation still runs."""
        due = self.interval > 0 and iteration % self.interval == 0
        if not due or not self.workers.remote_workers:  # (in-process: its row holds it)
            return {}
        if self._pending is None:
            self._start(iteration)
        return self.finish(waiting=waiting) if self.running == iteration else {}

    def stop(self) -> None:
        if self._actor is not None:
            import ray

            ray.kill(self._actor)
            self._actor = None
