"""Channels: a plan's requests to its actors over a socket each, not a Ray task each.

A Ray actor task has a cost of its own per call, whatever it carries (scheduling,
ownership, an object per reply; ``benchmarks/call_cost.py`` measures it beside a
socket). A gather's requests are the same call again and again, so an actor that mixes
in ``ParallelIteratorWorker`` can answer them over a socket instead:
``par_iter_channel()`` opens one, served by a thread of the actor's own that blocks in
``recv`` (no spinning, unlike Ray's compiled graphs), and every other call on the actor
takes turns with it (``taking_turns``). Requests whose arguments hold an ``ObjectRef``
(weights put in the object store) still go as Ray tasks, and an actor that died surfaces
as Ray's ``RayActorError``, a remote exception as Ray's ``RayTaskError``, so the runner
replaces a dead worker as before.

Examples:
    >>> class Echo:
    ...     def answer(self, x):
    ...         return x * 2
    >>> server = ChannelServer(Echo().answer, host="127.0.0.1")
    >>> channel = Channel(None, server.address)
    >>> ticket = channel.send((21,))
    >>> receive([channel], timeout=5)
    >>> ticket.take()
    42
    >>> channel.close()
"""

from __future__ import annotations

import collections
import functools
import inspect
import io
import itertools
import math
import os
import pickle
import socket
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Listener, answer_challenge, deliver_challenge
from multiprocessing.connection import wait as readable
from typing import Any, TypeVar

C = TypeVar("C", bound=type)


class NeedsRay(Exception):
    """A request's arguments hold an ``ObjectRef``: only a Ray task resolves it."""


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if type(obj).__name__ == "ObjectRef":
            raise NeedsRay
        return NotImplemented


def dumps(value: Any) -> memoryview:
    """``value`` pickled (protocol 5); ``NeedsRay`` if it holds an ``ObjectRef``."""
    out = io.BytesIO()
    _Pickler(out, protocol=5).dump(value)
    return out.getbuffer()


#: what a connection's handshake raises when the other end breaks it off (closes: EOFError)
#: or answers with another key
HANDSHAKE_FAILED = (OSError, EOFError, AuthenticationError)

#: the ticket of a request that wants no reply (``Channel.notify``)
NO_REPLY = 2**64 - 1


class ChannelServer:
    """The actor's end: a listening socket and a thread that answers each request of one
    connection at a time with ``answer(*args)``; ``parking`` (if any) hears of each
    connection and of each request answered."""

    def __init__(
        self, answer: Callable[..., Any], host: str | None = None, parking: Parking | None = None
    ) -> None:
        if host is None:
            import ray

            host = ray.util.get_node_ip_address()
        self._answer = answer
        self._parking = parking
        self._key = os.urandom(16)
        self._listener = Listener((host, 0))  # (no key: each connection's thread checks it)
        #: what a ``Channel`` connects with: (host, port) and the key
        self.address = (self._listener.address, self._key)
        threading.Thread(target=self._serve, name="flowrl-channel", daemon=True).start()

    def _serve(self) -> None:
        while True:  # a thread per connection: a plan rebuilt connects anew
            try:
                conn = self._listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer_all, args=(conn,), daemon=True).start()

    def _answer_all(self, conn: Any) -> None:
        # the handshake Listener.accept makes with a key, made here on the connection's own
        # thread: a client that stalls in it keeps no other client out
        try:
            deliver_challenge(conn, self._key)
            answer_challenge(conn, self._key)
            _no_delay(conn)
        except HANDSHAKE_FAILED:  # a client that broke it off (a driver stopped mid-connect)
            conn.close()
            return
        if self._parking is not None:
            self._parking.connected(1)
        try:
            with conn:
                self._answer_each(conn)
        finally:
            if self._parking is not None:
                self._parking.connected(-1)

    def _answer_each(self, conn: Any) -> None:
        while True:
            try:
                message = conn.recv_bytes()
            except (EOFError, OSError):
                return
            ticket = int.from_bytes(message[:8], "little")
            try:
                reply = _reply(ticket, self._answer(*pickle.loads(memoryview(message)[8:])))
            except Exception as e:
                reply = _error_reply(ticket, e)
            if ticket == NO_REPLY:
                continue
            try:
                conn.send_bytes(reply)
            except OSError:
                return
            if self._parking is not None:
                self._parking.settle()


def _no_delay(conn: Any) -> None:
    """Send each message at once: a large one goes out as two writes, and Nagle's
    algorithm would hold the second for the first's acknowledgement (40 ms)."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    finally:
        sock.close()


def _reply(ticket: int, value: Any) -> bytes | memoryview:
    """``value`` as a reply: pickled, or where plain pickle cannot (a lambda in a custom
    metric, say) cloudpickled, as Ray would."""
    try:
        return dumps((ticket, True, value))
    except (pickle.PicklingError, AttributeError, TypeError):
        from ray import cloudpickle

        return cloudpickle.dumps((ticket, True, value), protocol=5)


def _error_reply(ticket: int, error: Exception) -> bytes:
    """What raising ``error`` in the actor sends: Ray's ``RayTaskError`` around it."""
    import ray
    from ray import cloudpickle

    wrapped = ray.exceptions.RayTaskError(
        "par_iter_next", traceback.format_exc(), error, pid=os.getpid()
    )
    try:
        return cloudpickle.dumps((ticket, False, wrapped))
    except Exception:
        plain = RuntimeError(f"{type(error).__name__}: {error}")
        text = traceback.format_exc()
        return cloudpickle.dumps(
            (ticket, False, ray.exceptions.RayTaskError("par_iter_next", text, plain))
        )


class Ticket:
    """One request sent over a channel: ``answered`` once its reply is in (and after it is
    taken, as a Ray ref stays ready), then ``take``."""

    __slots__ = ("channel", "number", "reply")

    def __init__(self, channel: Channel, number: int) -> None:
        self.channel, self.number = channel, number
        self.reply: tuple[bool, Any] | None = None  # once taken

    @property
    def answered(self) -> bool:
        return self.reply is not None or self.number in self.channel.replies

    def take(self) -> Any:
        """The reply's value; raises what the actor raised (or ``RayActorError``)."""
        if self.reply is None:
            self.reply = self.channel.replies.pop(self.number)
        ok, value = self.reply
        if ok:
            return value
        raise value.as_instanceof_cause() if hasattr(value, "as_instanceof_cause") else value


class Channel:
    """The plan's end of an actor's channel: requests out, replies in by ticket."""

    _numbers = itertools.count()

    def __init__(self, actor: Any, address: tuple[Any, bytes]) -> None:
        self.actor = actor
        self.conn = Client(address[0], authkey=address[1])
        _no_delay(self.conn)
        self.replies: dict[int, tuple[bool, Any]] = {}
        self.unanswered: set[int] = set()
        self.abandoned: set[int] = set()
        self._sending = threading.Lock()  # a health check's thread may end a park
        if actor is not None:
            _open[actor] = self

    def send(self, args: tuple[Any, ...], pickled: memoryview | None = None) -> Ticket:
        """Send a request: ``args``, or ``pickled`` (``dumps(args)``, made once for many
        actors); ``NeedsRay`` if ``args`` hold an ``ObjectRef``."""
        pickled = dumps(args) if pickled is None else pickled
        number = next(self._numbers)
        self.unanswered.add(number)
        self._send_bytes(number, pickled)
        return Ticket(self, number)

    def notify(self, args: tuple[Any, ...]) -> None:
        """Send a request that wants no reply, nor its error."""
        self._send_bytes(NO_REPLY, dumps(args))

    def _send_bytes(self, number: int, pickled: memoryview) -> None:
        try:
            with self._sending:
                self.conn.send_bytes(number.to_bytes(8, "little") + pickled)
        except OSError as e:
            self._broken(e)

    def read(self) -> None:
        """Take in one reply (the connection is readable)."""
        try:
            number, ok, value = pickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError) as e:
            self._broken(e)
            return
        self.unanswered.discard(number)
        if number in self.abandoned:
            self.abandoned.discard(number)
        else:
            self.replies[number] = (ok, value)

    def _broken(self, cause: BaseException) -> None:
        """The actor is gone: every request unanswered fails as Ray's would."""
        import ray

        error = ray.exceptions.RayActorError(
            error_msg=f"the actor's channel closed ({type(cause).__name__}): it died"
        )
        for number in self.unanswered - self.abandoned:
            self.replies[number] = (False, error)
        self.unanswered.clear()
        self.close()

    def abandon(self, ticket: Ticket) -> None:
        """Nobody will take ``ticket``'s reply: drop it when it comes."""
        self.replies.pop(ticket.number, None)
        if ticket.number in self.unanswered:
            self.abandoned.add(ticket.number)

    @property
    def open(self) -> bool:
        return not self.conn.closed

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()
        if self.actor is not None and _open.get(self.actor) is self:
            del _open[self.actor]


#: the last channel opened to each actor, while it is open: what ``end_park`` sends on
_open: weakref.WeakValueDictionary[Any, Channel] = weakref.WeakValueDictionary()


def end_park(actor: Any) -> None:
    """Before a Ray call to ``actor``: end its park (``Parking``) where a channel to it is
    open, so the call runs now, not when the park ends by itself."""
    channel = _open.get(actor)
    if channel is not None and channel.open:
        channel.notify(("par_iter_unpark",))


def receive(channels: Iterable[Channel], timeout: float | None) -> None:
    """Read the replies that come in on ``channels`` within ``timeout`` seconds (None:
    until one does), blocking in the kernel meanwhile."""
    by_conn = {c.conn: c for c in channels if c.open and c.unanswered}
    if not by_conn:
        return
    for conn in readable(list(by_conn), timeout):
        by_conn[conn].read()


def close_all(channels: dict[Any, Channel | None], timeout: float) -> None:
    """Close ``channels`` (a plan's, as it closes) once the replies still due on them are
    in, for at most ``timeout`` seconds (a report asked for, say: its reply is then taken
    later, not lost; one later still is dropped), and forget them, so that a plan built
    next, after a worker was replaced, connects anew to every actor."""
    opened = [c for c in channels.values() if c is not None and c.open]
    end = time.monotonic() + timeout
    while due := [c for c in opened if c.open and c.unanswered]:
        left = end - time.monotonic()
        if left <= 0:
            break
        receive(due, left)
    for channel in opened:
        channel.close()
    channels.clear()


def open_channels(actors: Iterable[Any], known: dict[Any, Channel | None]) -> None:
    """Open a channel to each of ``actors`` not in ``known`` yet (None where the actor
    cannot: a Ray task then carries its requests)."""
    import ray

    new = [a for a in actors if a not in known]
    if not new:
        return
    refs = [a.par_iter_channel.remote() for a in new]
    for actor, ref in zip(new, refs, strict=True):
        try:
            known[actor] = Channel(actor, ray.get(ref))
        except (ray.exceptions.RayError, *HANDSHAKE_FAILED):
            known[actor] = None  # (gone mid-handshake: its Ray task fails as it died)


class Turns:
    """A reentrant lock granted in the order it was asked for. Python's own is not fair:
    the channel's thread, releasing it between two requests and asking again, could win
    it every time, and a Ray call (a health check, the metrics) would wait for ever.

    Examples:
        >>> turns = Turns()
        >>> with turns, turns:
        ...     pass
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._owner: int | None = None
        self._depth = 0
        self._queue: collections.deque[int] = collections.deque()
        self._main = threading.main_thread().ident  # where an actor runs its Ray calls
        self._main_last = time.monotonic()

    def __enter__(self) -> Turns:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return self
            self._queue.append(me)
            while self._owner is not None or self._queue[0] != me:
                self._cond.wait()
            self._queue.popleft()
            self._owner, self._depth = me, 1
        return self

    def __exit__(self, *exc: object) -> None:
        if threading.get_ident() == self._main:
            self._main_last = time.monotonic()
        with self._cond:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()

    def main_idle_s(self) -> float:
        """How long the main thread (where an actor runs its Ray calls) has neither held a
        turn nor waited for one."""
        with self._cond:
            if self._owner == self._main or self._main in self._queue:
                return 0.0
            return time.monotonic() - self._main_last


class Parking:
    """A channel actor's main thread held in a Ray task (a park) while the actor's work
    comes over its channels only.

    Ray wakes an idle actor's main thread every 10 ms to check for signals, a standing
    cost per actor that a task running on that thread does not pay (``docs/performance.md``,
    "Ray's standing cost"). So after answering a request, an actor whose main thread has
    run no Ray call for ``QUIET_S`` sends itself a park: ``hold`` waits on that thread while
    requests keep coming, up to ``PARK_S``. A Ray call to a parked actor waits for the park
    to end: the plan ends it first over the channel (``end_park``, the
    ``par_iter_unpark`` request), a closed connection ends it, and so do ``IDLE_S``
    without a request (a plan between iterations: a call from a notebook then waits at
    most ``IDLE_S`` and half a second). ``submit`` sends the park (a Ray call to the
    actor's own ``par_iter_park``; None: never park); ``turns`` tells when the main thread
    last ran a call.

    Examples:
        >>> parking = Parking(Turns(), submit=lambda: None)
        >>> parking.end()
    """

    #: how long the main thread must have run no Ray call before it parks
    QUIET_S = 1.0
    #: the longest park: the most a Ray call that did not end it waits
    PARK_S = 5.0
    #: a park ends this long after the last request answered
    IDLE_S = 1.0

    def __init__(self, turns: Turns, submit: Callable[[], None] | None) -> None:
        self._turns, self._submit = turns, submit
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._pending = False  # a park sent and not over
        self._connections = 0
        self._ended_at = -math.inf  # a Ray call follows an end: no park before it runs
        self._answered_at = time.monotonic()

    def connected(self, change: int) -> None:
        """A channel's connection opened (+1) or closed (-1, which ends a park)."""
        with self._lock:
            self._connections += change
        if change < 0:
            self.end()

    def settle(self) -> None:
        """After a request answered: park, unless a park is under way, nothing is
        connected or the main thread ran a Ray call lately."""
        self._answered_at = time.monotonic()
        with self._lock:
            if self._pending or not self._connections or self._submit is None:
                return
            ended_s = time.monotonic() - self._ended_at
            if min(ended_s, self._turns.main_idle_s()) < self.QUIET_S:
                return
            self._pending = True
            self._ended.clear()
        self._submit()

    def hold(self) -> None:
        """The park, on the main thread: until ``end``, ``IDLE_S`` without a request or
        ``PARK_S`` (it looks twice a second, not a hundred times)."""
        until = time.monotonic() + self.PARK_S
        while not self._ended.wait(min(0.5, self.IDLE_S)):
            now = time.monotonic()
            if now >= until or now - self._answered_at >= self.IDLE_S:
                break
        with self._lock:
            self._pending = False

    def end(self) -> None:
        """End the park under way, or the one sent and not started yet; the next waits
        ``QUIET_S`` (the Ray call that asked for the end runs first)."""
        with self._lock:
            self._ended_at = time.monotonic()
        self._ended.set()


def taking_turns(cls: C) -> C:
    """``cls`` with each public method taking the instance's ``_turn`` (``Turns``) once it
    has one (``par_iter_channel`` makes it), so a Ray call and the channel's thread never
    run at once on one actor.

    Examples:
        >>> class Tally:
        ...     def add(self, n):
        ...         return n + 1
        >>> taking_turns(Tally)().add(1)
        2
    """

    def locked(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            turn = self.__dict__.get("_turn")
            if turn is None:
                return fn(self, *args, **kwargs)
            with turn:
                return fn(self, *args, **kwargs)

        return call

    methods = {
        name: locked(fn)
        for name, fn in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name not in ("par_iter_channel", "par_iter_park")
    }
    return type(cls.__name__, (cls,), {**methods, "__module__": cls.__module__})
