"""Learning operators: TrainOneStep (minibatch SGD on the local worker) and ApplyGradients.

Example:
    >>> train = TrainOneStep(workers, num_sgd_iter=10, sgd_minibatch_size=256)  # doctest: +SKIP
    >>> train_op = batches.for_each(train)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowrl.context import LEARN, LEARNER_INFO, STEPS_TRAINED, SYNC
from flowrl.iter import Operator
from flowrl.ops.rollouts import Gradients
from flowrl.sample_batch import SampleBatch
from flowrl.worker import WorkerSet


def scalar_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """The learner statistics that go into results: per-row ones (a DQN's ``td_error``,
    for priorities) stay out.

    Example:
        >>> scalar_stats({"loss": 0.5, "td_error": np.zeros(3)})
        {'loss': 0.5}
    """
    return {k: v for k, v in stats.items() if np.ndim(v) == 0}


class TrainOneStep(Operator):
    """Learns on the local worker; the new weights go to the remote workers (one
    ``ray.put``, sent without waiting) before they next sample
    (:meth:`WorkerSet.defer_weight_sync`). Counts env steps trained.

    Passes on ``(batch, stats)``; per-row stats (a DQN's ``td_error``) stay out of the
    results, which get the scalar ones.

    Example:
        >>> train = TrainOneStep(workers, num_sgd_iter=10, sgd_minibatch_size=256)  # doctest: +SKIP
        >>> batches.for_each(train)  # doctest: +SKIP
    """

    role = LEARN

    def __init__(
        self, workers: WorkerSet, *, num_sgd_iter: int = 1, sgd_minibatch_size: int = 0
    ) -> None:
        self._workers = workers
        self.num_sgd_iter = num_sgd_iter
        self.sgd_minibatch_size = sgd_minibatch_size

    def __call__(self, batch: SampleBatch) -> tuple[SampleBatch, dict[str, Any]]:
        with self.context.timer("learn"):
            stats = self._workers.local_worker.learn_on_batch(
                batch, num_sgd_iter=self.num_sgd_iter, minibatch_size=self.sgd_minibatch_size
            )
        self.context.counters[STEPS_TRAINED] += len(batch)
        self.context.info[LEARNER_INFO] = scalar_stats(stats)
        self._workers.defer_weight_sync()
        return batch, stats


class ApplyGradients(Operator):
    """Applies a ``(gradients, info)`` item on the local worker; the new weights go to all
    remote workers before they next sample (``update_all``, as in :class:`TrainOneStep`),
    or at once to the worker the gradient came from.

    Example:
        >>> grads = AsyncGradients(workers)  # doctest: +SKIP
        >>> grads.for_each(ApplyGradients(workers, update_all=False))  # doctest: +SKIP
    """

    role = LEARN

    def __init__(self, workers: WorkerSet, *, update_all: bool = True) -> None:
        self._workers = workers
        self.update_all = update_all

    def __call__(self, item: Gradients) -> dict[str, float]:
        grads, info = item
        with self.context.timer("apply"):
            self._workers.local_worker.apply_gradients(grads)
        self.context.counters[STEPS_TRAINED] += info["batch_count"]
        self.context.info[LEARNER_INFO] = info
        if self.update_all:
            self._workers.defer_weight_sync()
        elif self.context.current_actor is not None:
            with self.context.span(SYNC):
                self._workers.sync_weights([self.context.current_actor])
        return info
