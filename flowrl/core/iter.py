"""Lazy dataflow iterators: ``LocalIterator`` in one process, ``ParallelIterator``
over Ray actors (one shard per actor).

Transforms return new iterators and append themselves to the name, so ``print(plan)``
shows the whole pipeline. Nothing runs until the last iterator of a chain is pulled; an
iterator is built (and so consumed) once: use ``LocalIterator.duplicate`` to fan out.

Examples:
    >>> it = LocalIterator.from_items([1, 2, 3, 4]).for_each(lambda x: x * 10).batch(2)
    >>> it.take(2)
    [[10, 20], [30, 40]]
    >>> print(it)
    LocalIterator[items].for_each(<lambda>).batch(2)
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from flowrl.core import channels as ch
from flowrl.core.channels import ChannelServer
from flowrl.core.config import ArgumentTypeError
from flowrl.core.context import IDLE, PlanContext

T = TypeVar("T")
U = TypeVar("U")

# build(context, timeout) -> iterator. timeout None blocks; 0 asks sources not to block.
BuildFn = Callable[[PlanContext, "float | None"], Iterator[Any]]


class _Sentinel:
    """A named singleton that keeps its identity through pickling (and so through Ray)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __reduce__(self) -> str:
        return self._name


NotReady = _Sentinel("NotReady")
"""Yielded by a non-blocking source that has nothing yet; every transform passes it on."""

_END = _Sentinel("_END")

logger = logging.getLogger(__name__)
_DRAIN_TIMEOUT_S = 60.0  # how long a closed gather waits for its requests in flight


class Operator:
    """Base class of transforms that use the plan's shared ``PlanContext``.

    The context is bound when the plan is built (``self.context``); an operator instance
    belongs to one plan. Its public attributes are its settings and name it in
    ``print(plan)``; handles it holds (workers, buffers, callbacks) start with ``_``.

    Examples:
        >>> class CountItems(Operator):
        ...     def __call__(self, item):
        ...         self.context.counters["items"] += 1
        ...         return item
    """

    context: PlanContext
    # what its time counts as in a profile's bottleneck line: "sample", "learn" or None
    role: str | None = None
    # a queue, buffer or learner thread it hands items to (an edge of the plan's graph)
    sends_to: Any = None

    def bind(self, context: PlanContext) -> None:
        bound = self.__dict__.get("context")
        if bound is not None and bound is not context:
            raise ValueError(f"{self!r} already belongs to another plan; make a new one")
        self.context = context

    def __repr__(self) -> str:
        settings = [
            f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_") and k != "context"
        ]
        return f"{type(self).__name__}({', '.join(settings)})"


class PlanNode:
    """What the plan's graph (``flowrl.diagnostics.graph``) and profile
    (``flowrl.diagnostics.profiler``) read from an iterator: the iterators it pulls
    from, the function it applies, its label, what its time counts as (``role``), a queue
    or buffer a source takes its items from, and whether it is an internal step both skip
    (``hidden``)."""

    def _init_node(
        self,
        parents: Sequence[Any],
        op: Any,
        label: str,
        role: str | None = None,
        receives_from: Any = None,
    ) -> None:
        self.parents = tuple(parents)
        self.op = op
        self.label = label
        self.role = role if role is not None else getattr(op, "role", None)
        self.receives_from = receives_from
        self.hidden = False


def walk(plan: PlanNode) -> list[Any]:
    """Every iterator ``plan`` pulls from, directly or not, each once, parents first.

    Examples:
        >>> it = LocalIterator.from_items([1]).for_each(abs)
        >>> [node.label for node in walk(it)]
        ['LocalIterator[items]', 'for_each(abs)']
    """
    order: list[Any] = []
    seen: set[int] = set()

    def visit(node: Any) -> None:
        if id(node) not in seen:
            seen.add(id(node))
            for parent in node.parents:
                visit(parent)
            order.append(node)

    visit(plan)
    return order


def _describe(fn: Any) -> str:
    if isinstance(fn, Operator):
        return repr(fn)
    return getattr(fn, "__name__", None) or repr(fn)


def _applied(method: str, fn: Any) -> str:
    """``fn``'s name in the plan's description, once it is something ``method`` can apply
    to each item. An operator's class (``for_each(TrainOneStep)``) would be built from each
    item instead, and the plan would go on without ever training."""
    if isinstance(fn, type) and issubclass(fn, Operator):
        raise ArgumentTypeError(
            f"{method}({fn.__name__}) takes an operator, not its class: "
            f"{method}({fn.__name__}(...)), with the arguments it takes"
        )
    if not callable(fn):
        raise ArgumentTypeError(f"{method} takes a function of each item, got {fn!r}")
    return _describe(fn)


def _bind(fn: Any, context: PlanContext) -> None:
    if isinstance(fn, Operator):
        fn.bind(context)


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at each ``sep`` outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char in "([{") - (char in ")]}")
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
    return [*parts, text[start:]]


def wrap_name(name: str, width: int = 88, indent: str = "") -> str:
    """An iterator's name as lines of at most about ``width``: one stage (``.for_each(...)``)
    a line, and the branches of a union or a ``Concurrently`` one a line, indented.

    Examples:
        >>> print(wrap_name("Source.for_each(Train()).filter(bool)", width=20))
        Source
            .for_each(Train())
            .filter(bool)
    """
    if len(indent) + len(name) <= width:
        return indent + name
    dot = "." if name.startswith(".") else ""
    stages = _split_top(name.removeprefix("."), ".")
    if len(stages) > 1:
        inner = indent + "    "
        rest = [wrap_name("." + stage, width, inner) for stage in stages[1:]]
        return "\n".join([wrap_name(dot + stages[0], width, indent), *rest])
    head, paren, body = name.partition("(")
    branches = _split_top(body[:-1], ", ") if paren and name.endswith(")") else []
    if len(branches) < 2:
        return indent + name
    inner = indent + "    "
    lines = [wrap_name(branch, width, inner) + "," for branch in branches]
    return "\n".join([f"{indent}{head}(", *lines, f"{indent})"])


class LocalIterator(PlanNode, Generic[T]):
    """A lazy, pull-based iterator over the items of one process.

    Examples:
        >>> LocalIterator.from_items(range(6)).filter(lambda x: x % 2 == 0).take(3)
        [0, 2, 4]
    """

    def __init__(
        self,
        build: BuildFn,
        *,
        context: PlanContext | None = None,
        name: str = "LocalIterator",
        parents: Sequence[Any] = (),
        op: Any = None,
        label: str | None = None,
        role: str | None = None,
        receives_from: Any = None,
    ) -> None:
        self._build_fn = build
        self.context = context if context is not None else PlanContext()
        self.name = name
        self._built = False
        self._it: Iterator[T] | None = None
        self._init_node(parents, op, label or name, role, receives_from)

    # -- sources -------------------------------------------------------------------------
    @classmethod
    def from_items(cls, items: Iterable[T], *, repeat: bool = False) -> LocalIterator[T]:
        """Iterate over ``items`` (forever, cycling, when ``repeat``)."""
        items = list(items)
        return cls(
            lambda ctx, timeout: itertools.cycle(items) if repeat else iter(items),
            name="LocalIterator[items]",
        )

    @classmethod
    def from_generator(cls, make: Callable[[], Iterable[T]], *, name: str) -> LocalIterator[T]:
        """Iterate over what ``make()`` returns, called when the plan is built."""
        return cls(lambda ctx, timeout: iter(make()), name=name)

    # -- building and pulling ------------------------------------------------------------
    def build(self, context: PlanContext, timeout: float | None) -> Iterator[T]:
        """Build the chain under ``context``; parents are built by their children."""
        if self._built:
            raise RuntimeError(
                f"{self.name} is already being consumed; use duplicate() to read it twice"
            )
        self._built = True
        it = iter(self._build_fn(context, timeout))
        if hasattr(it, "close"):  # a union's inputs and a gather's requests end with the plan
            context.on_close(it.close)
        if context.profiler is not None and not self.hidden:
            it = context.profiler.timed(self, it)
        return it

    @property
    def built(self) -> bool:
        """Whether the chain is built: pulled, or read by a child that was."""
        return self._built

    def __iter__(self) -> LocalIterator[T]:
        return self

    def __next__(self) -> T:
        if self._it is None:
            self._it = self.build(self.context, None)
        return next(self._it)

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        """The name, one stage a line once it is longer than a line (``print(plan)``)."""
        return wrap_name(self.name)

    def close(self) -> None:
        """Stop pulling: close every iterator the chain built, not only those reached
        through this one's generator (a union's inputs too); a ``gather_async`` source
        waits for the requests it has in flight, so its actors are idle afterwards.
        Closing twice is harmless.

        Examples:
            >>> it = LocalIterator.from_items([1, 2, 3]); next(it); it.close()
            1
        """
        if self._it is not None and hasattr(self._it, "close"):
            self._it.close()
        self.context.close()

    def _derive(
        self,
        gen: Callable[[Iterator[Any], PlanContext], Iterator[U]],
        suffix: str,
        op: Any = None,
    ):
        parent = self

        def build(ctx: PlanContext, timeout: float | None) -> Iterator[U]:
            return gen(parent.build(ctx, timeout), ctx)

        name = f"{self.name}.{suffix}"
        return LocalIterator(
            build, context=self.context, name=name, parents=(self,), op=op, label=suffix
        )

    # -- transforms ----------------------------------------------------------------------
    def for_each(self, fn: Callable[[T], U]) -> LocalIterator[U]:
        """Apply ``fn`` to every item."""

        def gen(it: Iterator[T], ctx: PlanContext) -> Iterator[U]:
            _bind(fn, ctx)
            for item in it:
                yield item if item is NotReady else fn(item)

        return self._derive(gen, f"for_each({_applied('for_each', fn)})", op=fn)

    def filter(self, fn: Callable[[T], bool]) -> LocalIterator[T]:
        """Keep the items for which ``fn`` is true."""

        def gen(it: Iterator[T], ctx: PlanContext) -> Iterator[T]:
            _bind(fn, ctx)
            for item in it:
                if item is NotReady or fn(item):
                    yield item

        return self._derive(gen, f"filter({_applied('filter', fn)})", op=fn)

    def gate(self, is_open: Callable[[], bool]) -> LocalIterator[T]:
        """Pull from upstream only while ``is_open()`` is true; ``NotReady`` while it is
        false, without pulling. A source that sends requests when pulled (such as
        ``ParallelIterator.gather_async``) sends none while the gate is shut.

        Examples:
            >>> shut_once = iter([True, False, True])
            >>> it = LocalIterator.from_items([1, 2]).gate(lambda: next(shut_once))
            >>> [next(it), next(it), next(it)]
            [1, NotReady, 2]
        """
        gen = functools.partial(_gated, is_open)
        return self._derive(gen, f"gate({_describe(is_open)})", op=is_open)

    def combine(self, fn: Callable[[T], Iterable[U]]) -> LocalIterator[U]:
        """Apply ``fn`` (which returns a list) to every item and flatten the lists."""
        name = f"combine({_applied('combine', fn)})"
        return self._derive(functools.partial(_combined, fn), name, op=fn)

    def flatten(self) -> LocalIterator[Any]:
        """Turn a stream of lists into a stream of their elements."""
        return self._derive(functools.partial(_combined, None), "flatten()")

    def batch(self, n: int) -> LocalIterator[list[T]]:
        """Group items into lists of ``n``."""
        if n < 1:
            raise ValueError(f"batch size must be >= 1, got {n}")
        return self._derive(functools.partial(_batched, n), f"batch({n})")

    def take(self, n: int) -> list[T]:
        """Pull the next ``n`` items (skipping NotReady) and return them as a list."""
        out: list[T] = []
        while len(out) < n:
            try:
                item = next(self)
            except StopIteration:
                break
            if item is not NotReady:
                out.append(item)
        return out

    def duplicate(self, n: int) -> list[LocalIterator[T]]:
        """Return ``n`` iterators that each see every item of this one.

        Items wait in a per-copy queue until that copy reads them, so copies that are
        read at very different rates buffer the difference.
        """
        queues: list[collections.deque[T]] = [collections.deque() for _ in range(n)]
        shared: dict[str, Iterator[T]] = {}  # this iterator's stream, built by the first copy
        return [
            LocalIterator(
                _duplicate_build(self, queues, shared, i),
                context=self.context,
                name=f"{self.name}.duplicate[{i}]",
                parents=(self,),
                label=f"duplicate[{i}]",
            )
            for i in range(n)
        ]

    def union(
        self,
        *others: LocalIterator[Any],
        deterministic: bool = False,
        round_robin_weights: Sequence[int | str] | None = None,
    ) -> LocalIterator[Any]:
        """Merge this iterator with ``others`` into one stream.

        ``deterministic=False`` (async): pull from whichever input has an item ready.
        ``deterministic=True``: round robin, ``round_robin_weights[i]`` items from input
        ``i`` per round (``"*"``: as many as are ready). A round that produced nothing
        yields ``NotReady`` so the consumer gets control back.
        """
        children = [self, *others]
        weights = _union_weights(round_robin_weights, len(children))
        deterministic = deterministic or round_robin_weights is not None

        names = ", ".join(c.name for c in children)
        mode = f"round_robin{list(weights)}" if deterministic else "async"
        return LocalIterator(
            _union_build(children, weights, deterministic),
            context=self.context,
            name=f"Union[{mode}]({names})",
            parents=children,
            label=f"Union[{mode}]",
        )


def _gated(is_open: Callable[[], bool], it: Iterator[T], ctx: PlanContext) -> Iterator[T]:
    """``LocalIterator.gate``'s stream: NotReady, without pulling, while shut."""
    _bind(is_open, ctx)
    while True:
        if not is_open():
            yield NotReady
            continue
        try:
            item = next(it)
        except StopIteration:
            return
        yield item


def _combined(fn: Callable[[Any], Iterable[Any]] | None, it: Iterator[Any], ctx: PlanContext):
    """The elements of ``fn(item)`` for every item (of the items themselves: flatten)."""
    if fn is not None:
        _bind(fn, ctx)
    for item in it:
        if item is NotReady:
            yield item
        else:
            yield from (item if fn is None else fn(item))


def _batched(n: int, it: Iterator[T], ctx: PlanContext) -> Iterator[list[T]]:
    """``LocalIterator.batch``'s stream: lists of ``n`` items."""
    buf: list[T] = []
    for item in it:
        if item is NotReady:
            yield item
            continue
        buf.append(item)
        if len(buf) == n:
            yield buf
            buf = []


def _duplicate_build(
    parent: LocalIterator[T],
    queues: list[collections.deque[T]],
    shared: dict[str, Iterator[T]],
    i: int,
) -> BuildFn:
    """Copy ``i`` of ``LocalIterator.duplicate``: the parent's items through queue
    ``i``; the first copy built builds the parent's stream (``shared``) for all."""

    def build(ctx: PlanContext, timeout: float | None) -> Iterator[T]:
        if "it" not in shared:
            shared["it"] = parent.build(ctx, timeout)
        while True:
            if not queues[i]:
                try:
                    item = next(shared["it"])
                except StopIteration:
                    return
                if item is NotReady:
                    yield item
                    continue
                for q in queues:
                    q.append(item)
            yield queues[i].popleft()

    return build


def _union_weights(weights: Sequence[int | str] | None, n: int) -> list[int | str]:
    """Round-robin weights checked against ``n`` inputs (1 each when none are given)."""
    if weights is None:
        return [1] * n
    if len(weights) != n:
        raise ValueError(f"{len(weights)} round_robin_weights for {n} inputs")
    for w in weights:
        if w != "*" and not (isinstance(w, int) and w >= 1):
            raise ValueError(f"round_robin weight must be an int >= 1 or '*', got {w!r}")
    return list(weights)


def _union_build(
    children: list[LocalIterator[Any]], weights: list[int | str], deterministic: bool
) -> BuildFn:
    """``LocalIterator.union``'s stream: round robin by ``weights``, or async."""

    def build(ctx: PlanContext, timeout: float | None) -> Iterator[Any]:
        non_blocking = [not deterministic or w == "*" for w in weights]
        its = [
            c.build(ctx, 0.0 if nb else timeout)
            for c, nb in zip(children, non_blocking, strict=True)
        ]
        active = dict(enumerate(its))
        nap = _MIN_NAP_S
        while active:
            produced = yield from _union_round(active, weights)
            if produced:
                nap = _MIN_NAP_S
            elif active:
                if not deterministic and timeout is None:
                    with ctx.span(IDLE):  # nothing ready anywhere: don't spin a core
                        time.sleep(nap)
                    nap = min(2 * nap, _MAX_NAP_S)
                yield NotReady

    return build


# An idle async union naps between polls of its inputs, longer while none has an item: a
# poll (one ray.wait per remote input) holds the GIL for ~0.25 ms, which a learner thread
# in this process needs; 4 ms at most delays an item by less than a CartPole fragment takes.
_MIN_NAP_S, _MAX_NAP_S = 0.0005, 0.004


def _union_round(active: dict[int, Iterator[Any]], weights: list[int | str]):
    """One round robin pass: up to ``weights[i]`` items from each active input (``"*"``:
    until it is not ready). Drops exhausted inputs; returns whether anything was yielded."""
    produced = False
    for i, it in list(active.items()):
        pulled = 0
        while weights[i] == "*" or pulled < weights[i]:
            try:
                item = next(it)
            except StopIteration:
                del active[i]
                break
            if item is NotReady:
                break
            pulled += 1
            produced = True
            yield item
    return produced


class ParallelIteratorWorker:
    """Mixin for Ray actors that serve as the shards of a ``ParallelIterator``.

    Examples:
        >>> class Counter(ParallelIteratorWorker):
        ...     def __init__(self):
        ...         super().__init__(lambda: iter(range(3)))
    """

    def __init__(self, item_source: Callable[[], Iterable[Any]]) -> None:
        self._item_source = item_source
        self._par_it: LocalIterator[Any] | None = None
        self._channel: ChannelServer | None = None

    def par_iter_init(self, transforms: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Build this shard's local iterator with the transforms recorded by the driver."""
        it = LocalIterator.from_generator(self._item_source, name="shard")
        it.context.worker = self
        for method, args in transforms:
            it = getattr(it, method)(*args)
        self._par_it = it

    def par_iter_channel(self) -> tuple[Any, bytes]:
        """Open this shard's channel (``flowrl.core.channels``) once; its address. The
        actor's class must be ``taking_turns``: its Ray calls then wait for the
        channel's."""
        if self._channel is None:
            self._turn = ch.Turns()
            self._parking = ch.Parking(self._turn, _park_sender())
            self._channel = ChannelServer(self._call_in_turn, parking=self._parking)
        return self._channel.address

    def par_iter_park(self) -> None:
        """Hold the main thread while the channel's thread works (``channels.Parking``)."""
        self._parking.hold()

    def par_iter_unpark(self) -> None:
        """End the park (``channels.end_park`` sends this over the channel)."""
        self._parking.end()

    def _call_in_turn(self, method: str, *args: Any) -> Any:
        """A request over the channel: ``self.method(*args)`` (a public method:
        ``par_iter_next``, or a call such as a replay shard's ``add``), in its turn."""
        if method.startswith("_"):
            raise AttributeError(f"{type(self).__name__}.{method} is not a public method")
        with self._turn:
            return getattr(self, method)(*args)

    def par_iter_next(self, method: str | None = None, arg: Any = None) -> Any:
        """The shard's next item, or the end marker once it is exhausted; first
        ``self.method(arg)`` where the request carries a call (a ``Carry``)."""
        if self._par_it is None:
            raise RuntimeError("par_iter_init must be called before par_iter_next")
        if method is not None:
            getattr(self, method)(arg)
        try:
            return next(self._par_it)
        except StopIteration:
            return _END


def _park_sender() -> Callable[[], None] | None:
    """What sends this actor a park (a Ray call to its own ``par_iter_park``, recorded by
    no task event); None outside a Ray actor, which never parks."""
    import ray

    if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
        return None
    park = ray.get_runtime_context().current_actor.par_iter_park.options(enable_task_events=False)
    return lambda: park.remote()


class _ItemShard(ParallelIteratorWorker):
    def __init__(self, items: list[Any], repeat: bool) -> None:
        super().__init__(lambda: itertools.cycle(items) if repeat else iter(items))


class Carry(NamedTuple):
    """A call an actor makes before its next item, sent with that request instead of as a
    Ray call of its own (one task per request, not two): what ``before_requests`` returns,
    such as a round's new weights, ``Carry("set_weights", ref)``. Each actor gets the
    latest ``Carry`` once, with its next request; an ``ObjectRef`` arg reaches the actor
    as its value."""

    method: str
    arg: Any


def _rounds(
    shards: ParallelIterator[Any], ctx: PlanContext, timeout: float | None, ahead: bool
) -> Iterator[Any]:
    """The rounds of ``ParallelIterator.batch_across_shards``. With ``ahead``, an actor is
    asked for its item of the next round as soon as its item of this one is in, so it
    does not wait for the slowest actor of the round; the request carries what a request
    sent once the whole round was in would (``before_requests`` runs as a round begins,
    after the consumer's work on the round before)."""
    shards._start()
    channels = shards.open_channels(ctx)
    carried = _Carried(shards.before_requests)

    def ask(round_: _Round, actors: Iterable[Any]) -> _Round:
        for actor in actors:
            round_.ask(actor, carried.take(actor, ctx))
        return round_

    current: _Round | None = None
    upcoming: _Round | None = None  # ahead: the next round, asked actor by actor
    try:
        while True:
            if current is None:  # a round begins: asked ahead already, or now
                carried.refresh(ctx)
                current = upcoming or ask(_Round(shards, channels), shards.actors)
                upcoming = _Round(shards, channels) if ahead else None
            while current.unanswered:
                answered = current.collect(timeout, each=upcoming is not None)
                if upcoming is not None:
                    ask(upcoming, answered)
                if not answered and timeout is not None:
                    break
            if current.unanswered:
                yield NotReady
                continue
            items, current = current.items_in_order(), None
            if any(item is _END for item in items):
                return
            yield [shards._emit(a, x) for a, x in zip(shards.actors, items, strict=True)]
    finally:  # closed early: let the requests in flight finish, so the actors go idle
        for round_ in filter(None, (current, upcoming)):
            round_.requests.drain()


class _Round:
    """One round of ``batch_across_shards``: a request to each actor, and the items in."""

    def __init__(self, shards: ParallelIterator[Any], channels: dict[Any, Any] | None) -> None:
        self.actors = shards.actors
        self.requests = Requests(shards.actors_name, shards.request_timeout_s, channels)
        self.unanswered: dict[Any, Any] = {}  # request ref -> actor
        self.items: dict[Any, Any] = {}  # actor -> its item

    def ask(self, actor: Any, carry: Carry | None) -> None:
        self.unanswered[self.requests.send(actor, carry)] = actor

    def collect(self, timeout: float | None, *, each: bool) -> list[Any]:
        """Take in the items ready within ``timeout`` (None: once one is, ``each``, or
        once all are); returns their actors."""
        n = len(self.unanswered)
        ready, _ = self.requests.wait(1 if each and timeout is None else n, timeout)
        if each and timeout is None and len(ready) < n:  # with any others in by now
            ready, _ = wait_for(list(self.unanswered), n, 0)
        answered = []
        for ref, item in zip(ready, self.requests.take(ready), strict=True):
            answered.append(self.unanswered.pop(ref))
            self.items[answered[-1]] = item
        return answered

    def items_in_order(self) -> list[Any]:
        return [self.items[a] for a in self.actors]


class _Carried:
    """The latest ``Carry`` a gather's ``before_requests`` returned, and the actors that
    have had it."""

    def __init__(self, before_requests: Callable[[PlanContext], Any] | None) -> None:
        self.before_requests = before_requests
        self.latest: Carry | None = None
        self.had: set[Any] = set()

    def refresh(self, ctx: PlanContext) -> None:
        """Run ``before_requests``; a new ``Carry`` it returns is for every actor."""
        carry = self.before_requests(ctx) if self.before_requests is not None else None
        if isinstance(carry, Carry) and carry is not self.latest:
            self.latest, self.had = carry, set()

    def take(self, actor: Any, ctx: PlanContext) -> Carry | None:
        """What ``actor``'s next request carries: the ``Carry`` the plan gave it
        (``PlanContext.send_with_next_request``), else the latest if it has not had it."""
        own = ctx.carries.pop(actor, None)
        if own is None and (self.latest is None or actor in self.had):
            return None
        self.had.add(actor)
        return own or self.latest


class Requests:
    """The requests a gather has in flight (request -> (actor, time sent)), and their
    deadline: with ``timeout_s``, every ``wait`` kills the actors whose requests passed
    it, whether or not other requests are ready (a healthy worker must not keep a hung one
    alive), and a blocking wait wakes for the oldest request's deadline. A killed actor's
    request then resolves to an actor error, which the runner answers with a replacement.
    A request is a Ray task's ref, or a ``channels.Ticket`` where ``channels`` holds the
    actor's channel.
    """

    def __init__(
        self, name: str, timeout_s: float | None, channels: dict[Any, Any] | None = None
    ) -> None:
        self.name, self.timeout_s = name, timeout_s
        self.channels = channels or {}
        self.pending: dict[Any, tuple[Any, float]] = {}
        self.killed: set[Any] = set()  # the requests of actors killed for lateness
        self._pickled: tuple[Any, Any] = (self, None)  # the last carry sent, pickled (none yet)

    def get(self, refs: Any) -> Any:
        """The answers of answered requests. The actor error of one whose actor this
        gather killed says so (``timed_out``), for the run's error to name the cause."""
        import ray

        single = not isinstance(refs, list)
        many = [refs] if single else refs
        try:
            if not any(isinstance(r, ch.Ticket) for r in many):
                return ray.get(refs)
            items = [r.take() if isinstance(r, ch.Ticket) else ray.get(r) for r in many]
            return items[0] if single else items
        except ray.exceptions.RayActorError as e:
            if self.killed.intersection(many):
                late = f"{self.name} gave no answer in {self.timeout_s:g} s"
                e.timed_out = f"{late}, so it was killed"
            raise

    def take(self, refs: list[Any]) -> list[Any]:
        """``get`` of answered requests, which are then no longer pending."""
        items = self.get(refs)
        for ref in refs:
            self.pending.pop(ref, None)
        return items

    def send(self, actor: Any, carry: Carry | None = None) -> Any:
        """Ask ``actor`` for its next item, with the call ``carry`` holds if any; returns
        the request (over the actor's channel where it has one and ``carry`` holds no
        ``ObjectRef``)."""
        call = ("par_iter_next", *(carry or ()))
        channel = self.channels.get(actor)
        if channel is not None and self._pickled[0] is not carry:  # a round's carry: once
            try:
                self._pickled = (carry, ch.dumps(call))
            except ch.NeedsRay:
                self._pickled = (carry, None)
        pickled = self._pickled[1] if channel is not None else None
        request = _request(channel if pickled is not None else None, actor, call, pickled)
        self.pending[request] = (actor, time.monotonic())
        return request

    def wait(self, num_returns: int, timeout: float | None) -> tuple[list[Any], list[Any]]:
        """Wait on the pending requests for at most ``timeout`` seconds (None: until
        ``num_returns`` are ready), killing late actors on the way."""
        refs = list(self.pending)
        if not self.timeout_s:
            return wait_for(refs, num_returns, timeout)
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            now = time.monotonic()
            oldest = min(sent for _, sent in self.pending.values())
            wait_s = max(0.0, oldest + self.timeout_s - now)  # inf: all killed
            if end is not None:
                wait_s = min(wait_s, max(0.0, end - now))
            ready, rest = wait_for(refs, num_returns, None if math.isinf(wait_s) else wait_s)
            self._kill_late(rest)
            if len(ready) >= num_returns or (end is not None and time.monotonic() >= end):
                return ready, rest

    def _kill_late(self, unanswered: list[Any]) -> None:
        """Kill the actors of the ``unanswered`` requests sent ``timeout_s`` ago or more
        (once each: their time sent becomes infinite)."""
        import ray

        now = time.monotonic()
        for ref in unanswered:
            actor, sent = self.pending[ref]
            if now - sent < self.timeout_s or wait_for([ref], 1, 0)[0]:
                continue
            logger.warning(
                "%s: no answer from an actor in %.0f s; killing it so it is replaced",
                self.name,
                self.timeout_s,
            )
            ray.kill(actor, no_restart=True)
            for other, (same, _) in self.pending.items():  # its other requests fail with it
                if same is actor:
                    self.pending[other] = (actor, math.inf)
                    self.killed.add(other)

    def drain(self) -> None:
        """Let the requests in flight finish (for at most the drain or request timeout),
        so the actors go idle; not once Ray is down (a wait would start a new Ray), nor
        as Python shuts down (a generator left open is closed then)."""
        if not self.pending or sys.meta_path is None:
            return
        import ray

        if ray.is_initialized():
            drain_s = min(_DRAIN_TIMEOUT_S, self.timeout_s or math.inf)
            wait_for(list(self.pending), len(self.pending), drain_s)
        for request in self.pending:
            if isinstance(request, ch.Ticket):
                request.channel.abandon(request)


def send_call(ctx: PlanContext | None, actor: Any, method: str, *args: Any) -> Any:
    """``actor.method(*args)`` over the plan's channel to ``actor`` where one is open (a
    ``channels.Ticket``), else as a Ray task (its ref): a replay shard's ``add``, say, on
    the channel its sample requests take (an operator not in a plan has no ``ctx``).
    ``wait_for`` and ``take_result`` take either.

    Examples:
        >>> ref = send_call(plan.context, shard, "add", batch)  # doctest: +SKIP
        >>> take_result(ref)  # doctest: +SKIP
    """
    channel = ctx.channels.get(actor) if ctx is not None else None
    return _request(channel, actor, (method, *args))


def _request(channel: Any, actor: Any, call: tuple, pickled: Any = None) -> Any:
    """``call`` (a method's name and its args) to ``actor``: over ``channel`` where it is
    open and the args hold no ``ObjectRef`` (``pickled``: ``call`` already pickled), else
    as a Ray task."""
    if channel is not None and channel.open:
        try:
            return channel.send(call, pickled)
        except ch.NeedsRay:
            pass
    return ray_call(actor, *call)


def ray_call(actor: Any, method: str, *args: Any) -> Any:
    """``actor.method.remote(*args)``, the actor's park ended first where a channel to it
    is open (``channels.end_park``): its ref."""
    ch.end_park(actor)
    return getattr(actor, method).remote(*args)


def tell(ctx: PlanContext | None, actor: Any, method: str, *args: Any) -> None:
    """``send_call`` not waited for: its reply, or error, is dropped."""
    request = send_call(ctx, actor, method, *args)
    if isinstance(request, ch.Ticket):
        request.channel.abandon(request)


def take_result(request: Any) -> Any:
    """What an answered ``send_call`` returned; raises what the actor raised."""
    import ray

    return request.take() if isinstance(request, ch.Ticket) else ray.get(request)


def wait_for(requests: list[Any], num_returns: int, timeout: float | None) -> tuple[list, list]:
    """``ray.wait`` over Ray refs and channel tickets alike (``send_call``'s requests):
    (ready, not ready), each in the order of ``requests``. With both kinds pending it
    polls the refs every 2 ms."""
    import ray

    tickets = [r for r in requests if isinstance(r, ch.Ticket)]
    if not tickets:
        return ray.wait(requests, num_returns=num_returns, timeout=timeout)
    refs = [r for r in requests if not isinstance(r, ch.Ticket)]
    end = None if timeout is None else time.monotonic() + timeout
    read = False  # the sockets read once at least, even with no time to wait
    while True:
        done = {t for t in tickets if t.answered}
        if refs:
            done.update(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        left = None if end is None else max(0.0, end - time.monotonic())
        if len(done) >= num_returns or (read and left == 0):
            ready = [r for r in requests if r in done]
            return ready, [r for r in requests if r not in done]
        step = left if not refs else min(0.002, 0.002 if left is None else left)
        ch.receive({t.channel for t in tickets if not t.answered}, step)
        read = True


class ParallelIterator(PlanNode, Generic[T]):
    """An iterator split into shards, one per Ray actor; transforms run on the actors.

    Examples:
        >>> it = ParallelIterator.from_items([1, 2, 3, 4], num_shards=2)  # doctest: +SKIP
        >>> sorted(it.for_each(lambda x: x + 1).gather_sync().take(4))  # doctest: +SKIP
        [2, 3, 4, 5]
    """

    def __init__(
        self,
        actors: Sequence[Any],
        *,
        name: str,
        transforms: tuple[tuple[str, tuple[Any, ...]], ...] = (),
        with_actor: bool = False,
        before_requests: Callable[[PlanContext], Any] | None = None,
        request_timeout_s: float = 0.0,
        parents: Sequence[Any] = (),
        op: Any = None,
        label: str | None = None,
        receives_from: Any = None,
        actors_name: str = "",
        channels: bool = False,
    ) -> None:
        if not actors:
            raise ValueError("a ParallelIterator needs at least one actor")
        self.actors = list(actors)
        self.name = name
        self.actors_name = actors_name or name  # before the transforms: what errors name
        self.transforms = transforms
        self.with_actor = with_actor
        self.before_requests = before_requests
        self.request_timeout_s = request_timeout_s
        self.channels = channels
        # in the plan's graph: the shards' actors, then each transform on them
        label = label or f"{len(self.actors)} x {name} (Ray actors)"
        self._init_node(parents, op, label, receives_from=receives_from)

    @classmethod
    def from_actors(
        cls,
        actors: Sequence[Any],
        *,
        name: str = "ParallelIterator",
        before_requests: Callable[[PlanContext], Any] | None = None,
        request_timeout_s: float = 0.0,
        receives_from: Any = None,
        channels: bool = False,
    ) -> Any:
        """Shards served by actors that mix in ``ParallelIteratorWorker``.
        ``before_requests(context)`` runs before every round of requests to the actors; a
        ``Carry`` it returns goes to each actor with its next request (ParallelRollouts's
        carries the weights the learner deferred). An actor whose
        request is unanswered after ``request_timeout_s`` (0: no limit) is killed, so the
        pull fails with Ray's actor error and the runner replaces it (a hung env).
        ``receives_from``: the buffer the actors serve, for the plan's graph. With
        ``channels``, the requests go over a socket to each actor (``flowrl.core.channels``;
        its class ``taking_turns``), not as Ray tasks."""
        return cls(
            actors,
            name=name,
            before_requests=before_requests,
            request_timeout_s=request_timeout_s,
            receives_from=receives_from,
            channels=channels,
        )

    @classmethod
    def from_items(
        cls, items: Iterable[T], *, num_shards: int = 2, repeat: bool = False
    ) -> ParallelIterator[T]:
        """Spread ``items`` over ``num_shards`` small actors (shard ``i`` gets ``items[i::n]``)."""
        import ray

        items = list(items)
        actor_cls = ray.remote(num_cpus=0)(_ItemShard)
        actors = [actor_cls.remote(items[i::num_shards], repeat) for i in range(num_shards)]
        return cls(actors, name=f"ParallelIterator[items, shards={num_shards}]")

    def __repr__(self) -> str:
        return self.name

    @property
    def num_shards(self) -> int:
        return len(self.actors)

    def _with(self, method: str, *args: Any, suffix: str) -> ParallelIterator[Any]:
        return ParallelIterator(
            self.actors,
            name=f"{self.name}.{suffix}",
            transforms=(*self.transforms, (method, args)),
            with_actor=self.with_actor,
            before_requests=self.before_requests,
            request_timeout_s=self.request_timeout_s,
            channels=self.channels,
            parents=(self,),
            op=args[0] if args else None,
            label=f"{suffix} on the actors",
            actors_name=self.actors_name,
        )

    def for_each(self, fn: Callable[[T], U]) -> ParallelIterator[U]:
        """Apply ``fn`` to every item, on the actors."""
        return self._with("for_each", fn, suffix=f"for_each({_applied('for_each', fn)})")

    def filter(self, fn: Callable[[T], bool]) -> ParallelIterator[T]:
        """Keep the items for which ``fn`` is true, on the actors."""
        return self._with("filter", fn, suffix=f"filter({_applied('filter', fn)})")

    def combine(self, fn: Callable[[T], Iterable[U]]) -> ParallelIterator[U]:
        """for_each + flatten, on the actors."""
        return self._with("combine", fn, suffix=f"combine({_applied('combine', fn)})")

    def flatten(self) -> ParallelIterator[Any]:
        return self._with("flatten", suffix="flatten()")

    def batch(self, n: int) -> ParallelIterator[list[T]]:
        return self._with("batch", n, suffix=f"batch({n})")

    def zip_with_source_actor(self) -> ParallelIterator[tuple[Any, T]]:
        """Gathered items become ``(actor, item)`` pairs."""
        out = self._with("for_each", _identity, suffix="zip_with_source_actor()")
        out.with_actor = True
        return out

    def _start(self) -> None:
        transforms = list(self.transforms)
        refs = [ray_call(actor, "par_iter_init", transforms) for actor in self.actors]
        if self.channels:  # a channel's request must not overtake its actor's Ray calls
            import ray

            ray.get(refs)

    def open_channels(self, ctx: PlanContext) -> dict[Any, Any] | None:
        """The plan's channels to the actors, opened where not yet (None: Ray tasks)."""
        if not self.channels:
            return None
        if not ctx.channels:
            ctx.on_close(lambda: ch.close_all(ctx.channels, _DRAIN_TIMEOUT_S))
        ch.open_channels(self.actors, ctx.channels)
        return ctx.channels

    def _emit(self, actor: Any, item: Any) -> Any:
        return (actor, item) if self.with_actor else item

    def batch_across_shards(self, *, ahead: bool = False) -> LocalIterator[list[T]]:
        """One list per round holding the next item of every shard (a barrier). A round
        is asked for when the consumer asks for it; with ``ahead``, each shard is asked
        for its item of the next round as soon as its item of this one is in, so the
        shards work while the consumer does and a fast one does not wait for the slowest
        (what the plan sends them meanwhile, new weights say, then reaches them a round
        later)."""
        suffix = "batch_across_shards(ahead=True)" if ahead else "batch_across_shards()"
        return self._gathered(lambda ctx, timeout: _rounds(self, ctx, timeout, ahead), suffix)

    def gather_sync(self) -> LocalIterator[T]:
        """One item from every shard per round, in shard order (a barrier per round)."""
        rounds = self.batch_across_shards()
        rounds.hidden = True  # one step in the graph and the profile
        actors = self.actors

        def build(ctx: PlanContext, timeout: float | None) -> Iterator[Any]:
            for items in rounds.build(ctx, timeout):
                if items is NotReady:
                    yield items
                    continue
                for actor, item in zip(actors, items, strict=True):
                    ctx.current_actor = actor
                    yield item

        return self._gathered(build, "gather_sync()", parent=rounds)

    def gather_async(self, num_async: int = 1) -> LocalIterator[T]:
        """Items in completion order, with ``num_async`` requests in flight per shard.

        A shard's next request is sent when the consumer asks for the item after the one
        it produced, so whatever the plan sent that actor meanwhile (new weights, say)
        reaches it first. ``context.current_actor`` is the actor of the current item.
        """

        if num_async < 1:
            raise ValueError(f"num_async must be >= 1, got {num_async}")

        def build(ctx: PlanContext, timeout: float | None) -> Iterator[Any]:
            self._start()
            carried = _Carried(self.before_requests)
            carried.refresh(ctx)
            requests = Requests(self.actors_name, self.request_timeout_s, self.open_channels(ctx))
            for actor in self.actors:
                for _ in range(num_async):
                    requests.send(actor, carried.take(actor, ctx))
            resubmit = None
            try:
                while requests.pending or resubmit is not None:
                    if resubmit is not None:
                        carried.refresh(ctx)
                        requests.send(resubmit, carried.take(resubmit, ctx))
                        resubmit = None
                    ready, _ = requests.wait(1, timeout)
                    if not ready:
                        yield NotReady
                        continue
                    actor, _ = requests.pending.pop(ready[0])
                    item = requests.get(ready[0])
                    if item is _END:
                        continue
                    resubmit = actor
                    ctx.current_actor = actor
                    yield self._emit(actor, item)
            finally:  # closed early: let the requests in flight finish, so the actors go idle
                requests.drain()

        return self._gathered(build, f"gather_async(num_async={num_async})")

    def _gathered(self, build: BuildFn, suffix: str, parent: Any = None) -> LocalIterator[Any]:
        """The local end of the shards: items come to this process here."""
        parents = (parent if parent is not None else self,)
        return LocalIterator(build, name=f"{self.name}.{suffix}", parents=parents, label=suffix)


def _identity(x: Any) -> Any:
    return x
