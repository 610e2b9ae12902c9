"""Running the branches of one plan side by side: Concurrently, and a learner thread fed
by Enqueue and drained by Dequeue (sampling never waits for SGD).

Examples:
    >>> evens = LocalIterator.from_items([0, 2, 4])
    >>> odds = LocalIterator.from_items([1, 3, 5])
    >>> Concurrently([evens, odds], mode="round_robin", round_robin_weights=[1, 2]).take(6)
    [0, 1, 3, 2, 5, 4]
"""

from __future__ import annotations

import atexit
import functools
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from flowrl.core.config import ConfigError
from flowrl.core.context import (
    LEARNER_INFO,
    STEPS_TRAINED,
    SYNC,
    WEIGHT_BROADCASTS,
    PlanContext,
    TimerStat,
)
from flowrl.core.iter import LocalIterator, NotReady, Operator
from flowrl.core.sample_batch import MultiAgentBatch
from flowrl.learning.multi import PolicyStats, scalar_stats
from flowrl.rollout.worker import weights_carry, weights_payload

T = TypeVar("T")


def Concurrently(
    ops: Sequence[LocalIterator[Any]],
    *,
    mode: str = "round_robin",
    output_indexes: Sequence[int] | None = None,
    round_robin_weights: Sequence[int | str] | None = None,
    warm_up_indexes: Sequence[int] = (),
) -> LocalIterator[Any]:
    """Run several branches of one plan; only the branches in ``output_indexes`` reach the
    output (the others still run, for their side effects). The branches in
    ``warm_up_indexes`` reach it too until an output branch yields its first item: a replay
    plan's rollouts report while its buffer fills up to ``learning_starts``, so its run
    shows progress and meets a step budget from the start.

    ``round_robin``: deterministic turns, ``round_robin_weights[i]`` items from branch ``i``
    per turn (``"*"``: as many as are ready). ``async``: whichever branch has an item.

    Examples:
        >>> Concurrently(
        ...     [store_op, train_op], output_indexes=[1], round_robin_weights=[1, 4]
        ... )  # doctest: +SKIP
        >>> filling = LocalIterator.from_items(["stored 1", "stored 2", "stored 3"])
        >>> training = LocalIterator.from_items([NotReady, "trained 1", "trained 2"])
        >>> Concurrently([filling, training], output_indexes=[1], warm_up_indexes=[0]).take(4)
        ['stored 1', 'stored 2', 'trained 1', 'trained 2']
    """
    if mode not in ("round_robin", "async"):
        raise ConfigError(f"Concurrently's mode must be round_robin or async, got {mode!r}")
    if round_robin_weights is not None and mode != "round_robin":
        raise ConfigError("Concurrently's round_robin_weights need mode='round_robin'")
    outputs = set(range(len(ops)) if output_indexes is None else output_indexes)
    for name, indexes in (("output_indexes", outputs), ("warm_up_indexes", warm_up_indexes)):
        if not set(indexes) <= set(range(len(ops))):
            raise ConfigError(
                f"Concurrently's {name} {sorted(indexes)} out of range for {len(ops)} ops"
            )
    tagged = [op.for_each(_Tag(i)) for i, op in enumerate(ops)]
    merged = tagged[0].union(
        *tagged[1:],
        deterministic=mode == "round_robin",
        round_robin_weights=round_robin_weights,
    )
    kept = merged.filter(_Outputs(outputs, warm_up=set(warm_up_indexes)))
    out = kept.for_each(_untag)
    reach = f"outputs={sorted(outputs)}"
    if warm_up_indexes:
        reach += f", warm_up={sorted(warm_up_indexes)}"
    out.name = f"Concurrently[{mode}, {reach}]({', '.join(o.name for o in ops)})"
    weights = f", weights={list(round_robin_weights)}" if round_robin_weights else ""
    out.label = f"Concurrently({mode}{weights}, {reach})"
    for step in (*tagged, merged, kept):  # the graph and the profile show one step
        step.hidden = True
    return out


class _Outputs:
    """Whether a tagged item reaches a ``Concurrently``'s output: its branch is an output,
    or a warm-up branch while no output branch has yielded yet."""

    def __init__(self, outputs: set[int], *, warm_up: set[int]) -> None:
        self.outputs, self.warm_up = outputs, warm_up
        self.warming_up = bool(warm_up)

    def __call__(self, item: tuple[int, Any]) -> bool:
        if item[0] in self.outputs:
            self.warming_up = False
            return True
        return self.warming_up and item[0] in self.warm_up

    def __repr__(self) -> str:
        return f"outputs{sorted(self.outputs)}"


class _Tag:
    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, item: Any) -> tuple[int, Any]:
        return self.index, item

    def __repr__(self) -> str:
        return f"tag[{self.index}]"


def _untag(item: tuple[int, Any]) -> Any:
    return item[1]


class LearnerThreadError(RuntimeError):
    """The learner thread failed; ``__cause__`` is its exception."""


class LearnerThread(threading.Thread):
    """A thread that owns learning on ``worker``'s policy, so sampling never waits for SGD.

    Batches arrive on a bounded ``inbox`` (at most ``inbox_size``: the plan feels
    back-pressure instead of memory growing); each gets ``num_sgd_iter`` passes of
    minibatch SGD, and ``(batch, learner stats)`` goes on the ``outbox``, as
    ``TrainOneStep`` yields them. ``get_weights`` returns a consistent
    snapshot (never half an optimiser step), ``latest_weights`` one the thread took
    after an update (no wait for the update under way), ``between_updates`` runs a
    function on the policy between two updates, and ``version`` counts the updates. An
    exception stops the thread; ``check`` then raises it in the caller as a
    ``LearnerThreadError``.

    Examples:
        >>> learner = LearnerThread(workers.local_worker, inbox_size=4)  # doctest: +SKIP
        >>> batches.for_each(Enqueue(learner)); Dequeue(learner)  # doctest: +SKIP
    """

    def __init__(
        self,
        worker: Any,
        *,
        inbox_size: int = 16,
        num_sgd_iter: int = 1,
        sgd_minibatch_size: int = 0,
    ) -> None:
        super().__init__(name="flowrl-learner", daemon=True)
        if inbox_size < 1:
            raise ConfigError(f"LearnerThread's inbox_size must be >= 1, got {inbox_size}")
        self.worker = worker
        self.inbox: queue.Queue[MultiAgentBatch] = queue.Queue(maxsize=inbox_size)
        self.outbox: queue.Queue[tuple[MultiAgentBatch, PolicyStats]] = queue.Queue()
        self.num_sgd_iter, self.sgd_minibatch_size = num_sgd_iter, sgd_minibatch_size
        self.version = 0
        self.learn_timer = TimerStat()
        self._lock = getattr(worker, "lock", None) or threading.Lock()
        self._snapshot: tuple[int, Any] | None = None  # (version, weights) for latest_weights
        self._snapshot_wanted = False
        self._stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    batch = self.inbox.get(timeout=0.1)
                except queue.Empty:
                    continue
                with self._lock, self.learn_timer:
                    stats = self.worker.learn_on_batch(
                        batch,
                        num_sgd_iter=self.num_sgd_iter,
                        minibatch_size=self.sgd_minibatch_size,
                    )
                    self.version += 1
                    if self._snapshot_wanted:
                        self._snapshot_wanted = False
                        self._snapshot = (self.version, self.worker.get_weights())
                self.outbox.put((batch, stats))
        except BaseException as e:  # surfaced in the plan by check()
            self.error = e

    def start(self) -> None:
        """Start the thread; it is stopped at the interpreter's exit if nothing stopped it
        before (a script that ends without ``Algorithm.stop()``: torch aborts the process
        when it is torn down under an update)."""
        super().start()
        atexit.register(self.stop)

    def __repr__(self) -> str:
        return f"LearnerThread(inbox_size={self.inbox.maxsize}, num_sgd_iter={self.num_sgd_iter})"

    def get_weights(self) -> Any:
        """The policy's weights between two updates."""
        with self._lock:
            return self.worker.get_weights()

    def latest_weights(self) -> tuple[int, Any]:
        """``(version, weights)``: the newest snapshot the running thread took after an
        update, without waiting for the update under way (one takes milliseconds: waiting
        for it held a plan up); asking makes the thread take the next one. Before the
        thread's first snapshot, one taken now."""
        self._snapshot_wanted = True
        snapshot = self._snapshot
        if snapshot is None or not self.is_alive():
            with self._lock:
                return self.version, self.worker.get_weights()
        return snapshot

    def has_room(self) -> bool:
        """Whether the inbox takes a batch now: a gate for a source that should not pull
        batches the learner cannot take yet (``replay.gate(learner.has_room)``)."""
        return not self.inbox.full()

    def between_updates(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` made to run between two of the learner's updates (a target network
        copied in the main thread never reads half an optimiser step).

        Examples:
            >>> update = learner.between_updates(policy.update_target)  # doctest: +SKIP
            >>> UpdateTargets(update, period=500)  # doctest: +SKIP
        """

        @functools.wraps(fn)
        def locked(*args: Any, **kwargs: Any) -> T:
            with self._lock:
                return fn(*args, **kwargs)

        return locked

    def check(self) -> None:
        """Raise the thread's exception, if it died of one."""
        if self.error is not None:
            raise LearnerThreadError(
                f"the learner thread failed: {type(self.error).__name__}: {self.error}"
            ) from self.error

    def stop(self) -> None:
        """Finish the update in progress and end the thread."""
        atexit.unregister(self.stop)
        self._stopped.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=30)


class Enqueue(Operator):
    """Hands each batch to a learner thread. A full inbox never drops a batch: it is held
    (the item yields ``NotReady``) and the next batch waits until it fits, so the plan
    samples at most one batch ahead of a busy learner.

    Examples:
        >>> batches.for_each(Enqueue(learner))  # doctest: +SKIP
    """

    def __init__(self, learner: LearnerThread) -> None:
        self._learner = learner
        self._held: MultiAgentBatch | None = None

    @property
    def sends_to(self) -> LearnerThread:
        return self._learner

    def bind(self, context: PlanContext) -> None:
        super().bind(context)
        if not self._learner.is_alive() and self._learner.error is None:
            self._learner.start()
            context.on_close(self._learner.stop)
        if context.profiler is not None:
            timer = self._learner.learn_timer
            context.profiler.watch_thread("learner", lambda: timer.total_s)

    def __call__(self, batch: MultiAgentBatch) -> Any:
        learner = self._learner
        if self.context.profiler is not None:
            self.context.profiler.queue_depth("learner_inbox", learner.inbox.qsize())
        while self._held is not None:  # back-pressure: wait for room for the held batch
            learner.check()
            try:
                learner.inbox.put(self._held, timeout=0.1)
                self._held = None
            except queue.Full:
                continue
        learner.check()
        try:
            learner.inbox.put_nowait(batch)
        except queue.Full:
            self._held = batch
            return NotReady
        return batch


def Dequeue(learner: LearnerThread) -> LocalIterator[tuple[MultiAgentBatch, PolicyStats]]:
    """What a learner thread finished: ``(batch, stats)`` items, the batch's rows counted
    as env steps trained and the stats reported as the learner's; ``NotReady`` while there
    is none. Closing the plan stops the thread (``Enqueue`` started it and registered
    its stop with the plan, which runs even if this branch was never pulled).

    Examples:
        >>> Dequeue(learner).take(1)  # doctest: +SKIP
    """

    def build(ctx: PlanContext, timeout: float | None):
        while True:
            learner.check()
            try:  # a blocking pull still wakes up every 0.1 s to check the thread
                if timeout == 0:
                    batch, stats = learner.outbox.get_nowait()
                else:
                    batch, stats = learner.outbox.get(timeout=0.1)
            except queue.Empty:
                yield NotReady
                continue
            ctx.counters[STEPS_TRAINED] += len(batch)
            ctx.info[LEARNER_INFO] = scalar_stats(stats)
            ctx.timers["learn"] = learner.learn_timer
            yield batch, stats

    return LocalIterator(build, name="Dequeue(learner)", receives_from=learner)


class BroadcastWeights(Operator):
    """After the learner changed, sends its weights to the worker the current item came
    from (``context.current_actor``), at most once every ``broadcast_interval`` of that
    worker's items and ``min_env_steps`` of its env steps (rows). One payload per learner
    version serves every worker (``weights_payload``: inline, or put once); a worker that
    already has the current version gets nothing. They go with that worker's next sample
    request (``PlanContext.send_with_next_request``).

    Examples:
        >>> rollouts.for_each(BroadcastWeights(learner))  # doctest: +SKIP
    """

    def __init__(
        self,
        learner: LearnerThread,
        *,
        broadcast_interval: int = 1,
        min_env_steps: int = 0,
    ):
        if broadcast_interval < 1 or min_env_steps < 0:
            raise ConfigError(
                f"BroadcastWeights needs broadcast_interval >= 1 and min_env_steps >= 0, got "
                f"{broadcast_interval} and {min_env_steps}"
            )
        self._learner = learner
        self.broadcast_interval, self.min_env_steps = broadcast_interval, min_env_steps
        self._payload: Any = None
        self._payload_version = -1
        # actor -> (version it has, items and env steps since it got it)
        self._sent: dict[Any, tuple[int, int, int]] = {}

    def __call__(self, item: Any) -> Any:
        actor = self.context.current_actor
        if actor is None:  # sampled in-process: the local worker is the learner's
            return item
        version, items, steps = self._sent.get(actor, (0, 0, 0))
        items, steps = items + 1, steps + len(item)
        due = items >= self.broadcast_interval and steps >= self.min_env_steps
        if self._learner.version != version and due:
            with self.context.span(SYNC):
                latest, weights = self._learner.latest_weights()
                if latest != version:  # the snapshot may not have caught up yet
                    if self._payload_version != latest:
                        self._payload_version, self._payload = latest, weights_payload(weights)
                    self.context.send_with_next_request(actor, weights_carry(self._payload))
                    self.context.counters[WEIGHT_BROADCASTS] += 1
                    version, items, steps = latest, 0, 0
        self._sent[actor] = (version, items, steps)
        return item
