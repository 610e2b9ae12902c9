"""Learning operators: TrainOneStep (minibatch SGD on the learner), ApplyGradients, and the
periodic updates a plan shows as steps of its own: UpdateTargets.

Examples:
    >>> train = TrainOneStep(workers, num_sgd_iter=10, sgd_minibatch_size=256)  # doctest: +SKIP
    >>> train_op = batches.for_each(train)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowrl.core.config import ArgumentTypeError, ConfigError
from flowrl.core.context import (
    LEARN,
    LEARNER_INFO,
    NUM_TARGET_UPDATES,
    STEPS_SAMPLED,
    STEPS_TRAINED,
    SYNC,
    PlanContext,
)
from flowrl.core.iter import Operator
from flowrl.core.sample_batch import MultiAgentBatch
from flowrl.learning.multi import POLICY_PREFIX, Learners, PolicyStats, scalar_stats
from flowrl.ops.rollouts import Gradients
from flowrl.rollout.worker import WorkerSet, weights_carry, weights_payload


def steps_trained(policy_id: str) -> str:
    """The counter of policy ``policy_id``'s rows trained (a multi-agent run's)."""
    return f"{POLICY_PREFIX}{policy_id}/{STEPS_TRAINED}"


class TrainOneStep(Operator):
    """Learns on the local worker; the new weights go to the remote workers (inside their
    next sample requests, or put once where they are large: ``weights_payload``) before
    they next sample (``WorkerSet.defer_weight_sync``). Counts env steps trained.

    Each trainable policy of the batch learns on its own rows, with ``learner`` when given
    (another loss for the same policies: offline pre-training) or the local worker's.
    Passes on ``(batch, stats)``, stats by policy id; per-row stats (a DQN's ``td_error``)
    stay out of the results, which get the scalar ones. Rows trained are counted per
    policy too, so a branch that trains some policies keeps the others' results.

    Examples:
        >>> train = TrainOneStep(workers, num_sgd_iter=10, sgd_minibatch_size=256)  # doctest: +SKIP
        >>> batches.for_each(train)  # doctest: +SKIP
    """

    role = LEARN

    def __init__(
        self,
        workers: WorkerSet,
        *,
        num_sgd_iter: int = 1,
        sgd_minibatch_size: int = 0,
        learner: Learners | None = None,
    ) -> None:
        self._workers, self._learner = workers, learner
        self.num_sgd_iter = num_sgd_iter
        self.sgd_minibatch_size = sgd_minibatch_size

    def __call__(self, batch: MultiAgentBatch) -> tuple[MultiAgentBatch, PolicyStats]:
        with self.context.timer("learn"):
            learner = self._learner or self._workers.local_worker
            stats = learner.learn_on_batch(
                batch, num_sgd_iter=self.num_sgd_iter, minibatch_size=self.sgd_minibatch_size
            )
        self.context.counters[STEPS_TRAINED] += len(batch)
        for pid in stats:
            self.context.counters[steps_trained(pid)] += len(batch[pid])
        self.context.info.setdefault(LEARNER_INFO, {}).update(scalar_stats(stats))
        self._workers.defer_weight_sync()
        return batch, stats


class ApplyGradients(Operator):
    """Applies a ``(gradients, info)`` item on the local worker; the new weights go to all
    remote workers before they next sample (``update_all``, as in ``TrainOneStep``),
    or with the next request of the worker the gradient came from.

    Examples:
        >>> grads = AsyncGradients(workers)  # doctest: +SKIP
        >>> grads.for_each(ApplyGradients(workers, update_all=False))  # doctest: +SKIP
    """

    role = LEARN

    def __init__(self, workers: WorkerSet, *, update_all: bool = True) -> None:
        self._workers = workers
        self.update_all = update_all

    def __call__(self, item: Gradients) -> dict[str, Any]:
        grads, info = item
        with self.context.timer("apply"):
            self._workers.local_worker.apply_gradients(grads)
        self.context.counters[STEPS_TRAINED] += info["batch_count"]
        self.context.info[LEARNER_INFO] = info
        if self.update_all:
            self._workers.defer_weight_sync()
        elif (actor := self.context.current_actor) is not None:
            with self.context.span(SYNC):
                payload = weights_payload(self._workers.local_worker.get_weights())
            self.context.send_with_next_request(actor, weights_carry(payload))
        return info


class UpdateTargets(Operator):
    """Copies the online network into the target network once ``period`` env steps
    (trained, or sampled when ``by="sampled"``) have passed since the last copy, or, with
    ``tau``, blends it in softly after every item (Polyak averaging). With ``policy_id``
    (a branch of a multi-agent plan), the period counts that policy's rows trained and
    only that policy's targets move: ``update_fn`` is called with ``policy_id=``
    (``Learners.update_targets``); without, every policy's targets move.

    Examples:
        >>> train_op.for_each(UpdateTargets(update_fn, period=500))  # doctest: +SKIP
    """

    def __init__(
        self,
        update_fn: Callable[[float], None],
        *,
        period: int = 0,
        tau: float | None = None,
        by: str = "trained",
        policy_id: str | None = None,
    ) -> None:
        if not callable(update_fn):  # (RLlib's UpdateTargetNetwork takes the workers)
            raise ArgumentTypeError(
                f"UpdateTargets takes the function that moves the targets "
                f"(workers.learner.update_targets), got a {type(update_fn).__name__}"
            )
        if (tau is None) == (period <= 0):
            raise ConfigError(
                "UpdateTargets takes either period > 0 (hard copies) or tau (soft updates)"
            )
        if by not in ("trained", "sampled"):
            raise ConfigError(f"UpdateTargets' by must be trained or sampled, got {by!r}")
        self._update_fn = update_fn
        self.period, self.tau, self.by = period, tau, by
        self._counter = STEPS_TRAINED if by == "trained" else STEPS_SAMPLED
        if policy_id is not None:  # shown in the plan's graph
            self.policy_id = policy_id
            self._counter = steps_trained(policy_id) if by == "trained" else self._counter
        self._last = 0  # the steps counted at the last copy; checkpoints keep it

    def bind(self, context: PlanContext) -> None:
        super().bind(context)
        context.register_checkpointable("update_targets", self)

    def get_state(self) -> dict[str, int]:
        return {"last": self._last}

    def set_state(self, state: dict[str, int]) -> None:
        self._last = state["last"]

    def _update(self, tau: float) -> None:
        if hasattr(self, "policy_id"):
            self._update_fn(tau, policy_id=self.policy_id)
        else:
            self._update_fn(tau)

    def __call__(self, item: Any) -> Any:
        if self.tau is not None:
            self._update(self.tau)
            return item
        steps = self.context.counters[self._counter]
        if steps - self._last >= self.period:
            self._update(1.0)
            self._last = steps
            self.context.counters[NUM_TARGET_UPDATES] += 1
        return item
