"""Where a plan's time goes: each operator's own time, items and ``NotReady`` count, the
depth of its queues, a learner thread's busy time, and one line naming the bottleneck.

A plan is profiled when its context has a ``Profiler`` (``Config(profile=True)``,
``flowrl train --profile``) before it is first pulled; otherwise no iterator is wrapped
and profiling costs nothing. With it, every step of the plan is wrapped once when the plan
is built, and each pull records the step's own time: its time minus that of the steps it
pulled from (an exclusive-time profile, as a call-graph profiler keeps). Weight transfers
are timed as spans inside the step that makes them, and remote workers report how long
they spent sampling and loading weights, so a driver that waits for workers busy loading
weights counts that wait as weight sync, not sampling.

Examples:
    >>> from flowrl.core.iter import LocalIterator
    >>> it = LocalIterator.from_items(range(100), repeat=True).for_each(abs)
    >>> it.context.profiler = Profiler()  # before the first pull
    >>> _ = it.take(50)
    >>> [(row.label, row.items) for row in it.context.profiler.profile().rows]
    [('LocalIterator[items]', 50), ('for_each(abs)', 50)]
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from flowrl.core.context import LEARN, SAMPLE, SYNC, WORKER_SAMPLE_S, WORKER_WEIGHTS_S
from flowrl.core.iter import NotReady
from flowrl.core.tables import format_table

LEARNER_BUSY_BOUND = 0.8  # a learner thread busy this share of the time is the bottleneck


@dataclass
class OpStat:
    """One step of a plan (or a span of work inside one): cumulative figures."""

    label: str
    key: str  # short and unique in the plan: the step's name in results (timers/<key>/...)
    role: str | None = None
    own_s: float = 0.0
    items: int = 0
    not_ready: int = 0


@dataclass
class QueueStat:
    samples: int = 0
    total: float = 0.0
    max: int = 0


@dataclass
class Row:
    """A step's figures over a window of wall-clock time."""

    key: str
    label: str
    role: str | None
    own_s: float
    share: float
    items: int
    items_per_s: float
    not_ready: int


@dataclass
class Profile:
    """Figures of a window: each step, each queue's mean and largest depth, each learner
    thread's busy share, and what the remote workers spent their time on."""

    wall_s: float
    rows: list[Row]
    queues: dict[str, tuple[float, int]] = field(default_factory=dict)
    threads: dict[str, float] = field(default_factory=dict)  # name -> busy share
    worker_sync_share: float = 0.0  # of the workers' busy time, loading weights

    def shares(self) -> dict[str, float]:
        """Shares of wall-clock spent waiting for experience, learning in the plan's own
        thread and syncing weights (the wait for workers that were loading weights
        counts as syncing)."""
        by_role = {SAMPLE: 0.0, LEARN: 0.0, SYNC: 0.0}
        for row in self.rows:
            if row.role in by_role:
                by_role[row.role] += row.share
        moved = by_role[SAMPLE] * self.worker_sync_share
        by_role[SAMPLE] -= moved
        by_role[SYNC] += moved
        return by_role

    def bottleneck(self) -> str:
        """One line: ``sampling-bound``, ``learner-bound`` or ``weight-sync-bound``, with
        the figures that say so."""
        shares = self.shares()
        figures = ", ".join(f"{name} {share:.0%}" for name, share in shares.items())
        if self.threads:
            name, busy = max(self.threads.items(), key=lambda kv: kv[1])
            if busy >= LEARNER_BUSY_BOUND:
                return f"learner-bound: {name} busy {busy:.0%} of the time ({figures})"
            if shares[SYNC] > shares[SAMPLE]:
                return f"weight-sync-bound: {name} idle {1 - busy:.0%} ({figures})"
            return f"sampling-bound: {name} idle {1 - busy:.0%} ({figures})"
        top = max(shares, key=shares.get)
        verdict = {SAMPLE: "sampling-bound", LEARN: "learner-bound", SYNC: "weight-sync-bound"}
        return f"{verdict[top]}: {figures} of wall-clock"

    def table(self) -> str:
        """Steps by share of wall-clock, then queues and learner threads."""
        rows = [
            {
                "operator": r.label,
                "share": f"{r.share:.1%}",
                "items/s": round(r.items_per_s, 1),
                "NotReady": r.not_ready,
            }
            for r in sorted(self.rows, key=lambda r: -r.own_s)
        ]
        outside = 1 - sum(r.share for r in self.rows)
        if outside >= 0.005:  # the caller's own work between pulls (logging, evaluation)
            row = {"operator": "(outside the plan)", "share": f"{outside:.1%}"}
            rows.append({**row, "items/s": "", "NotReady": ""})
        lines = [format_table(rows)]
        for name, (mean, peak) in self.queues.items():
            lines.append(f"queue {name}: mean depth {mean:.1f}, max {peak}")
        for name, busy in self.threads.items():
            lines.append(f"{name}: busy {busy:.0%}")
        lines.append(self.bottleneck())
        return "\n".join(lines)

    def results(self) -> dict[str, float]:
        """``timers/<step>/share``, ``items_per_s`` and ``not_ready``, queue depths and
        thread busy shares, as result entries."""
        out: dict[str, float] = {}
        for r in self.rows:
            out[f"timers/{r.key}/share"] = r.share
            out[f"timers/{r.key}/items_per_s"] = r.items_per_s
            out[f"timers/{r.key}/not_ready"] = r.not_ready
        for name, (mean, peak) in self.queues.items():
            out[f"timers/{name}/depth_mean"] = mean
            out[f"timers/{name}/depth_max"] = peak
        for name, busy in self.threads.items():
            out[f"timers/{name}/busy"] = busy
        return out

    def __str__(self) -> str:
        return self.table()


def _short(label: str) -> str:
    """A step's name in results: its operator's name (``TrainOneStep`` for
    ``for_each(TrainOneStep(...))``), or its label up to the first parenthesis."""
    head, _, rest = label.partition("(")
    if head in ("for_each", "filter", "combine", "gate") and rest:
        head = rest.partition("(")[0].rstrip(")")
    return head or label


class Profiler:
    """Collects a plan's figures; ``profile`` reads them since the start, and
    ``window`` since its last call (one result per iteration)."""

    def __init__(self) -> None:
        self.ops: dict[str, OpStat] = {}  # by the step's full name: stable over rebuilds
        self.queues: dict[str, QueueStat] = {}
        self.threads: dict[str, Callable[[], float]] = {}  # name -> busy seconds so far
        self.workers: dict[int, tuple[float, float]] = {}  # index -> (sample_s, weights_s)
        self._local = threading.local()
        self.start = time.perf_counter()
        self._window = self._snapshot()
        self.last_window: Profile | None = None  # what the last window() returned

    # -- recording ---------------------------------------------------------------------
    def _stat(self, name: str, label: str, role: str | None) -> OpStat:
        stat = self.ops.get(name)
        if stat is None:
            short = _short(label)
            taken = {s.key for s in self.ops.values()}
            key, n = short, 2
            while key in taken:
                key, n = f"{short}_{n}", n + 1
            stat = self.ops[name] = OpStat(label, key, role)
        return stat

    def _stack(self) -> list[float]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def timed(self, node: Any, it: Iterator[Any]) -> Iterator[Any]:
        """``it`` (what ``node`` built), recording each pull's own time and item."""
        return self._timed(self._stat(node.name, node.label, node.role), it)

    def _timed(self, stat: OpStat, it: Iterator[Any]) -> Iterator[Any]:
        try:
            while True:
                stack = self._stack()
                stack.append(0.0)  # time of the steps this pull pulls from
                start = time.perf_counter()
                try:
                    item = next(it)
                except StopIteration:
                    return
                finally:
                    elapsed = time.perf_counter() - start
                    stat.own_s += elapsed - stack.pop()
                    if stack:
                        stack[-1] += elapsed
                if item is NotReady:
                    stat.not_ready += 1
                else:
                    stat.items += 1
                yield item
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    @contextlib.contextmanager
    def span(self, label: str, role: str | None = None):
        """Time a piece of work inside a step as its own row (and not the step's); its role
        is its label unless given (``span(SYNC)`` counts as weight sync)."""
        stat = self._stat(f"span:{label}", label, role if role is not None else label)
        stack = self._stack()
        stack.append(0.0)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            stat.own_s += elapsed - stack.pop()
            stat.items += 1
            if stack:
                stack[-1] += elapsed

    def queue_depth(self, name: str, depth: int) -> None:
        """Record one reading of a queue's depth."""
        q = self.queues.setdefault(name, QueueStat())
        q.samples, q.total, q.max = q.samples + 1, q.total + depth, max(q.max, depth)

    def watch_thread(self, name: str, busy_s: Callable[[], float]) -> None:
        """A thread whose busy seconds so far ``busy_s()`` returns (a learner thread)."""
        self.threads[name] = busy_s

    def worker_busy(self, by_worker: dict[int, dict[str, float]]) -> None:
        """The remote workers' reported seconds sampling and loading weights."""
        for index, metrics in by_worker.items():
            if index and WORKER_SAMPLE_S in metrics:
                self.workers[index] = (metrics[WORKER_SAMPLE_S], metrics[WORKER_WEIGHTS_S])

    # -- reading -----------------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        return {
            "time": time.perf_counter(),
            "ops": {k: (s.own_s, s.items, s.not_ready) for k, s in self.ops.items()},
            "queues": {k: (q.samples, q.total) for k, q in self.queues.items()},
            "threads": {k: fn() for k, fn in self.threads.items()},
            "workers": dict(self.workers),
        }

    def _between(self, old: dict[str, Any], new: dict[str, Any]) -> Profile:
        wall = max(new["time"] - old["time"], 1e-9)
        rows = []
        for name, (own, items, not_ready) in new["ops"].items():
            own0, items0, nr0 = old["ops"].get(name, (0.0, 0, 0))
            stat = self.ops[name]
            rows.append(
                Row(
                    stat.key,
                    stat.label,
                    stat.role,
                    own - own0,
                    (own - own0) / wall,
                    items - items0,
                    (items - items0) / wall,
                    not_ready - nr0,
                )
            )
        queues = {}
        for name, (n, total) in new["queues"].items():
            n0, total0 = old["queues"].get(name, (0, 0.0))
            if n > n0:
                queues[name] = ((total - total0) / (n - n0), self.queues[name].max)
        threads = {
            name: min(1.0, (busy - old["threads"].get(name, 0.0)) / wall)
            for name, busy in new["threads"].items()
        }
        sampling = weights = 0.0
        for index, (s, w) in new["workers"].items():
            s0, w0 = old["workers"].get(index, (0.0, 0.0))
            sampling, weights = sampling + s - s0, weights + w - w0
        sync_share = weights / (sampling + weights) if sampling + weights > 0 else 0.0
        return Profile(wall, rows, queues, threads, sync_share)

    def profile(self) -> Profile:
        """The figures since the profiler started."""
        start = {"time": self.start, "ops": {}, "queues": {}, "threads": {}, "workers": {}}
        return self._between(start, self._snapshot())

    def window(self) -> Profile:
        """The figures since the last call (or the start)."""
        now = self._snapshot()
        self.last_window, self._window = self._between(self._window, now), now
        return self.last_window
