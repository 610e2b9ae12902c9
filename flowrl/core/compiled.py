"""Rounds of requests over a Ray compiled graph: every shard's next item per round, over
shared-memory channels compiled once, instead of one Ray actor task per item.

A Ray actor task costs about 1 ms of scheduling and bookkeeping in the caller, the raylet
and the actor; a compiled graph (``ray.dag``, ``experimental_compile``) runs the same
fixed pattern of calls without them (``benchmarks/call_cost.py``: 2 workers' round of
weights out and a CartPole fragment back, 2,658 us as tasks, 514 us compiled).
``ParallelIterator.batch_across_shards`` runs its rounds this way when asked
(``ParallelRollouts`` with ``compiled_graphs``) and Ray can (``CompiledRounds.start``),
and as actor tasks otherwise.

Off by default: in Ray 2.60 a channel's reader spins while it waits. The driver spends
most of a core waiting for each round, and every idle worker a fifth of one waiting for
the next; on 2 cores bulk_sync sampling fell from 83-90k to 40-51k env steps/s (CartPole,
2 and 4 workers). Turn it on where every worker and the driver have a core to spare.

What the graph changes for the actors: its calls run on a thread of their own, beside the
actor's ordinary calls, so a shard's methods that touch what its items are made of hold
``shard_lock`` (``exclusive``). And calls made to the actors as ordinary tasks are not
ordered before the graph's next item: what must reach them first (new weights) travels
in the round's input as ``(method, args)`` calls (``par_iter_next_after``).

Examples:
    >>> rounds = CompiledRounds.start(actors, name="RolloutWorker", timeout_s=120)  # doctest: +SKIP
    >>> items = rounds.next([("set_weights", (weights,))])  # doctest: +SKIP
    >>> rounds.close()  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

Method = TypeVar("Method", bound=Callable[..., Any])

#: calls to make on every actor before its next item: ``(method name, args)``
Calls = list[tuple[str, tuple[Any, ...]]]


def exclusive(method: Method) -> Method:
    """A shard's method that runs under its ``shard_lock``: never while a compiled graph's
    thread makes an item on the same actor.

    Examples:
        >>> class Shard(ParallelIteratorWorker):  # doctest: +SKIP
        ...     @exclusive
        ...     def set_weights(self, weights): ...
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.shard_lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class CompiledRounds:
    """One compiled graph: the round's calls in, every actor's ``par_iter_next_after``
    out. A request unanswered after ``timeout_s`` (0: no limit) kills its actor, so the
    round fails with Ray's actor error and the runner replaces it, as with tasks."""

    def __init__(self, actors: Sequence[Any], graph: Any, name: str, timeout_s: float) -> None:
        self.actors, self.graph, self.name, self.timeout_s = list(actors), graph, name, timeout_s

    @classmethod
    def start(cls, actors: Sequence[Any], *, name: str, timeout_s: float) -> CompiledRounds | None:
        """The actors' rounds compiled, or None where Ray cannot compile them (a Ray
        without compiled graphs, or one that refuses these actors): the caller then sends
        tasks. The actors must have their shard iterators built."""
        try:
            from ray.dag import InputNode, MultiOutputNode

            with InputNode() as calls:
                outputs = [actor.par_iter_next_after.bind(calls) for actor in actors]
                graph = MultiOutputNode(outputs).experimental_compile()
        except Exception as e:  # noqa: BLE001 (any refusal means: use tasks)
            logger.info("%s: no compiled graph (%s); rounds are actor tasks", name, e)
            return None
        return cls(actors, graph, name, timeout_s)

    def next(self, calls: Calls) -> list[Any]:
        """Every actor's next item, after ``calls`` on each."""
        refs = self.graph.execute(calls)
        deadline = time.monotonic() + self.timeout_s if self.timeout_s else None
        return [self._get(actor, ref, deadline) for actor, ref in zip(self.actors, refs)]

    def _get(self, actor: Any, ref: Any, deadline: float | None) -> Any:
        import ray

        if deadline is None:  # (-1: Ray's own default is 10 s)
            return ray.get(ref, timeout=-1)
        try:
            return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.RayChannelTimeoutError:
            logger.warning(
                "%s: no answer from an actor in %.0f s; killing it so it is replaced",
                self.name,
                self.timeout_s,
            )
            ray.kill(actor, no_restart=True)
            error = ray.exceptions.RayActorError()
            error.timed_out = f"{self.name} gave no answer in {self.timeout_s:g} s, so it was killed"
            raise error from None

    def close(self) -> None:
        """Tear the graph down: its actors can then take ordinary calls alone, or join
        another graph (an actor is in one at a time)."""
        try:
            self.graph.teardown()
        except Exception as e:  # noqa: BLE001 (Ray already down, an actor dead)
            logger.debug("%s: teardown: %s", self.name, e)
