"""Channels (flowrl.core.channels): requests over a socket, their errors, taking turns."""

from __future__ import annotations

import multiprocessing
import threading
import time
from types import SimpleNamespace

import pytest
import ray

from flowrl.core.channels import (
    Channel,
    ChannelServer,
    NeedsRay,
    Parking,
    Turns,
    open_channels,
    receive,
    taking_turns,
)
from flowrl.core.context import PlanContext
from flowrl.core.iter import ParallelIteratorWorker, send_call, take_result, tell, wait_for


class Doubler:
    def __init__(self, delay=0.0):
        self.delay = delay

    def answer(self, x):
        time.sleep(self.delay)
        if x == "boom":
            raise ValueError("boom")
        return x * 2


def connected(answer):
    return Channel(None, ChannelServer(answer, host="127.0.0.1").address)


def wait_answered(tickets, timeout=10):
    deadline = time.monotonic() + timeout
    while not all(t.answered for t in tickets):
        assert time.monotonic() < deadline, "no reply"
        receive({t.channel for t in tickets}, 1)


def answers(tickets):
    wait_answered(tickets)
    return [t.take() for t in tickets]


def test_requests_in_flight_are_answered_in_order_by_ticket():
    channel = connected(Doubler().answer)
    tickets = [channel.send((i,)) for i in range(5)]
    assert answers(tickets) == [0, 2, 4, 6, 8]
    channel.close()


def test_an_exception_in_the_actor_comes_back_as_rays_task_error_of_its_type():
    channel = connected(Doubler().answer)
    ticket = channel.send(("boom",))
    receive([channel], 10)
    with pytest.raises(ValueError, match="boom") as raised:
        ticket.take()
    assert isinstance(raised.value, ray.exceptions.RayTaskError)
    assert ticket.answered, "taken, it stays answered (as a Ray ref stays ready): no drain waits"
    with pytest.raises(ValueError, match="boom"):
        ticket.take()
    channel.close()


def test_an_argument_holding_an_object_ref_needs_a_ray_task():
    channel = connected(Doubler().answer)
    ref = ray.ObjectRef.from_random()
    with pytest.raises(NeedsRay):
        channel.send(({"weights": ref},))
    assert answers([channel.send((3,))]) == [6], "the channel is still in order"
    channel.close()


def test_an_abandoned_request_s_reply_is_dropped_not_kept():
    channel = connected(Doubler(delay=0.2).answer)
    first, second = channel.send((1,)), channel.send((2,))
    channel.abandon(first)
    assert answers([second]) == [4]
    assert channel.replies == {} and not channel.unanswered


@pytest.mark.parametrize("how", ["closes at once", "sends a wrong answer", "says nothing"])
def test_a_client_that_fails_the_handshake_leaves_the_server_serving(how, monkeypatch):
    """A driver stopped mid-connect (two Ctrl-Cs) closed its socket during the handshake:
    the server's thread died with EOFError, and its traceback reached the user's terminal.
    One that stalls in it (says nothing) held the accept loop, keeping every other out."""
    import socket

    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    server = ChannelServer(Doubler().answer, host="127.0.0.1")
    (host, port), _ = server.address
    with socket.create_connection((host, port)) as sock:
        if how == "sends a wrong answer":
            challenge = sock.recv(256)
            assert challenge, "the server sends its challenge first"
            sock.sendall(len(b"wrong").to_bytes(4, "big") + b"wrong")
            sock.recv(256)  # its refusal
        if how != "says nothing":
            sock.close()
        channels = []  # the next client, connected in a thread: a stuck server never answers
        connecting = threading.Thread(
            target=lambda: channels.append(Channel(None, server.address)), daemon=True
        )
        connecting.start()
        connecting.join(timeout=10)
        assert channels, f"the next client is not served: {errors}"
        assert answers([channels[0].send((21,))]) == [42]
        channels[0].close()
    assert errors == []


class _Connecting:
    """An actor handle's stand-in whose channel address is ``address``."""

    def __init__(self, ray, address):
        self.par_iter_channel = SimpleNamespace(remote=lambda: ray.put(address))


def test_an_actor_that_dies_while_the_plan_connects_is_left_to_ray_tasks(ray_session):
    """Its end closed during the handshake (EOFError): the plan went down with it, where
    a Ray task would have failed as the actor's error, and the worker been replaced."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: listener.accept()[0].close(), daemon=True).start()
    actor = _Connecting(ray_session, (listener.getsockname(), b"k" * 16))
    known = {}
    open_channels([actor], known)
    assert known == {actor: None}
    listener.close()


def _serve_in_a_process(addresses):
    server = ChannelServer(Doubler(delay=60).answer, host="127.0.0.1")
    addresses.put(server.address)
    time.sleep(120)


def test_a_dead_actor_fails_its_requests_as_rays_actor_error():
    context = multiprocessing.get_context("spawn")
    addresses = context.Queue()
    process = context.Process(target=_serve_in_a_process, args=(addresses,), daemon=True)
    process.start()
    channel = Channel(None, addresses.get(timeout=60))
    tickets = [channel.send((1,)), channel.send((2,))]
    process.kill()
    wait_answered(tickets)
    for ticket in tickets:
        with pytest.raises(ray.exceptions.RayActorError, match="channel closed"):
            ticket.take()
    assert not channel.open


def test_turns_are_granted_in_the_order_asked():
    turns, order = Turns(), []
    holder_in, release = threading.Event(), threading.Event()

    def hold():
        with turns:
            holder_in.set()
            release.wait(10)
            order.append("holder")

    def wait_turn(name):
        with turns:
            order.append(name)

    threads = [threading.Thread(target=hold)]
    threads[0].start()
    holder_in.wait(10)
    for name in ("a", "b", "c"):
        threads.append(threading.Thread(target=wait_turn, args=(name,)))
        threads[-1].start()
        time.sleep(0.05)  # each asks after the one before
    release.set()
    for thread in threads:
        thread.join(10)
    assert order == ["holder", "a", "b", "c"]


class Tally:
    def __init__(self):
        self.inside, self.overlaps = 0, 0

    def touch(self):
        self.inside += 1
        self.overlaps += self.inside > 1
        time.sleep(0.001)
        self.inside -= 1


def test_a_class_taking_turns_runs_one_call_at_a_time_once_it_has_turns():
    tally = taking_turns(Tally)()
    tally._turn = Turns()
    threads = [
        threading.Thread(target=lambda: [tally.touch() for _ in range(50)]) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert tally.overlaps == 0


@pytest.mark.slow
@pytest.mark.ray
def test_a_plan_over_channels_learns_exactly_what_it_learns_over_ray_tasks(ray_session):
    from flowrl import Algorithm

    def two_iterations(channels):
        config = dict(num_workers=2, num_envs_per_worker=2, train_batch_size=256, seed=3)
        with Algorithm("ppo", env="CartPole-v1", request_channels=channels, **config) as algo:
            results = [algo.train() for _ in range(2)]
            opened = list(algo.plan.context.channels.values())
        return [(r["episode_return_mean"], r["learner/policy_loss"]) for r in results], opened

    over_ray, none_opened = two_iterations(False)
    over_channels, opened = two_iterations(True)
    assert over_channels == over_ray
    assert not none_opened and len(opened) == 2 and all(isinstance(c, Channel) for c in opened)


@pytest.mark.slow
@pytest.mark.ray
def test_a_worker_killed_under_a_channel_is_replaced_and_gets_a_channel_of_its_own(ray_session):
    from flowrl import Algorithm
    from flowrl.run.runner import StopCriteria, run

    config = dict(num_workers=2, num_envs_per_worker=2, train_batch_size=256)
    with Algorithm("impala", env="CartPole-v1", **config) as algo:
        algo.train()
        ray_session.kill(algo.workers.remote_workers[0])
        summary = run(algo, stop=StopCriteria(iters=algo.iteration + 2))
        assert summary["stopped_by"] == "iterations"
        assert algo.last_result["num_worker_restarts"] == 1
        channels = algo.plan.context.channels
        assert all(isinstance(channels.get(w), Channel) for w in algo.workers.remote_workers)
        assert all(channels[w].open for w in algo.workers.remote_workers), "connected anew"


def test_a_plan_uses_channels_for_small_replies_of_at_most_two_fragments_or_replayed_rows():
    import dataclasses
    from types import SimpleNamespace

    from flowrl.algorithms.impala import IMPALAConfig
    from flowrl.algorithms.ppo import PPOConfig, PPOPolicy
    from flowrl.ops.rollouts import replies_fit_channels, requests_over_channels
    from flowrl.rollout.worker import WorkerSet

    local = WorkerSet(policy_cls=PPOPolicy, config=PPOConfig(num_workers=0)).local_worker

    def workers(config_cls=IMPALAConfig, **config):
        config = dataclasses.replace(config_cls(num_workers=0), **config)
        return SimpleNamespace(config=config, local_worker=local)

    def channels(config_cls=IMPALAConfig, **config):
        return requests_over_channels(workers(config_cls, **config))

    assert channels(num_workers=64) and channels(num_workers=8)
    assert not channels(num_workers=128), "IMPALA: 4 fragments per request, Ray tasks"
    assert channels(PPOConfig, num_workers=128), "PPO keeps one fragment per request"
    assert not channels(num_workers=8, request_channels=False)
    assert not channels(num_workers=8, rollout_fragment_length=50_000), "over 1 MB"
    assert replies_fit_channels(workers(), 512), "Ape-X's replay requests on CartPole"
    assert not replies_fit_channels(workers(), 50_000)


class Shard(ParallelIteratorWorker):
    """Items are what was added to it, in order."""

    def __init__(self):
        self.added = []
        super().__init__(lambda: iter(self.added))

    def add(self, x):
        self.added.append(x)


def test_a_channel_carries_the_actors_other_calls_in_order_with_its_requests():
    shard = taking_turns(Shard)()
    shard.par_iter_init([])
    ctx = PlanContext()
    ctx.channels[shard] = Channel(shard, shard.par_iter_channel())
    tell(ctx, shard, "add", "told")  # its reply is dropped
    added = [send_call(ctx, shard, "add", x) for x in ("a", "b")]
    first, private = send_call(ctx, shard, "par_iter_next"), send_call(ctx, shard, "_turn")
    wait_for([*added, first, private], 4, 10)
    assert [take_result(r) for r in added] == [None, None]
    assert take_result(first) == "told", "each call runs in the order sent"
    with pytest.raises(AttributeError, match="not a public method"):
        take_result(private)
    assert not ctx.channels[shard].replies
    ctx.channels[shard].close()


def test_a_gathers_requests_go_over_the_channel_with_a_carry_or_without():
    from flowrl.core.channels import Ticket
    from flowrl.core.iter import Carry, Requests

    shard = taking_turns(Shard)()
    shard.par_iter_init([])
    shard.add("x")
    requests = Requests("Shard", None, {shard: Channel(shard, shard.par_iter_channel())})
    sent = [requests.send(shard), requests.send(shard, Carry("add", "y"))]
    assert all(isinstance(r, Ticket) for r in sent), "no Ray task where a channel is open"
    wait_for(sent, 2, 10)
    assert requests.take(sent) == ["x", "y"]
    requests.channels[shard].close()


class Reporter(ParallelIteratorWorker):
    """Each item takes a while to sample; ``report`` says what a rollout worker's does."""

    def __init__(self):
        super().__init__(lambda: iter(lambda: time.sleep(0.3) or "fragment", None))

    def report(self):
        return 1, [(10.0, 10)], {"epsilon": 0.5}, {}


def reporting_over_a_channel():
    """A ``Reporter`` with a plan's channel open to it, and the plan's ``WorkerReports``."""
    from flowrl.rollout.worker import WorkerReports

    worker = taking_turns(Reporter)()
    worker.par_iter_init([])
    ctx = PlanContext()
    ctx.channels[worker] = Channel(worker, worker.par_iter_channel())
    return worker, ctx, WorkerReports(local_worker=None)


def test_a_worker_is_asked_for_its_report_over_its_channel_in_turn_with_its_requests():
    from flowrl.core.channels import Ticket

    worker, ctx, reports = reporting_over_a_channel()
    sampling = send_call(ctx, worker, "par_iter_next")
    assert reports.collect([worker], timeout_s=0, plan=ctx) == ([], {}), "busy: asked later"
    assert isinstance(reports.pending[worker], Ticket), "no Ray task where a channel is open"
    reported = reports.collect([worker], timeout_s=10, plan=ctx)
    assert reported == ([(10.0, 10)], {1: {"epsilon": 0.5}})
    assert not reports.pending and take_result(sampling) == "fragment"
    ctx.channels[worker].close()


def test_a_report_asked_on_a_channel_its_plan_closed_is_taken_or_asked_anew():
    from flowrl.core.channels import close_all

    worker, ctx, reports = reporting_over_a_channel()
    send_call(ctx, worker, "par_iter_next")
    assert reports.collect([worker], timeout_s=0, plan=ctx) == ([], {})
    close_all(ctx.channels, timeout=10)  # the plan closes: the reply due comes in first
    assert not ctx.channels
    assert reports.collect([worker], timeout_s=0, plan=ctx)[0] == [(10.0, 10)]
    ctx.channels[worker] = Channel(worker, worker.par_iter_channel())  # a plan built anew
    send_call(ctx, worker, "par_iter_next")
    assert reports.collect([worker], timeout_s=0, plan=ctx) == ([], {})
    close_all(ctx.channels, timeout=0)  # closed before the reply came
    ctx.channels[worker] = Channel(worker, worker.par_iter_channel())
    assert reports.collect([worker], timeout_s=10, plan=ctx)[0] == [(10.0, 10)], "asked anew"
    close_all(ctx.channels, timeout=10)


def test_an_actor_parks_once_its_main_thread_is_quiet_and_a_park_ends_when_asked():
    turns, sent = Turns(), []
    parking = Parking(turns, submit=lambda: sent.append("park"))
    parking.QUIET_S = 0.1
    time.sleep(0.1)
    parking.settle()
    assert not sent, "no connection open: nothing would end a park"
    parking.connected(1)
    with turns:  # the main thread ran a Ray call just now
        pass
    parking.settle()
    assert not sent, "the main thread is not quiet yet"
    time.sleep(0.1)
    parking.settle()
    parking.settle()
    assert sent == ["park"], "one park at a time"
    holding = threading.Thread(target=parking.hold)
    holding.start()
    holding.join(0.2)
    assert holding.is_alive(), "parked until ended"
    parking.end()
    holding.join(5)
    assert not holding.is_alive()
    parking.settle()
    assert sent == ["park"], "the Ray call that ended the park runs before the next"
    time.sleep(0.1)
    parking.settle()
    parking.end()  # the plan ends the park before it starts: it does not hold
    start = time.monotonic()
    parking.hold()
    assert sent == ["park", "park"] and time.monotonic() - start < 1
    time.sleep(0.1)
    parking.settle()
    parking.connected(-1)  # a closed connection ends the park
    start = time.monotonic()
    parking.hold()
    assert time.monotonic() - start < 1
    parking.settle()
    assert len(sent) == 3, "nothing connected: no park"


def test_a_park_ends_once_no_request_came_for_a_while():
    parking = Parking(Turns(), submit=lambda: None)
    parking.QUIET_S, parking.IDLE_S = 0.0, 0.3
    parking.connected(1)
    parking.settle()  # a request answered: parked
    start = time.monotonic()
    parking.hold()
    assert 0.25 < time.monotonic() - start < 2, "the plan stopped asking: the park ends"


class Parker(ParallelIteratorWorker):
    """A channel actor that parks after 0.1 s quiet, for up to a minute, requests or not."""

    def __init__(self):
        Parking.QUIET_S, Parking.PARK_S, Parking.IDLE_S = 0.1, 60.0, 60.0
        super().__init__(lambda: iter(range(10**9)))

    def ping(self):
        return "pong"


def parked(ray):
    """A ``Parker`` parked under an open channel: (actor, channel)."""
    actor = ray.remote(num_cpus=0)(taking_turns(Parker)).remote()
    channel = Channel(actor, ray.get(actor.par_iter_channel.remote()))
    time.sleep(0.2)
    answers([channel.send(("ping",))])  # answered, it parks
    time.sleep(0.3)  # the park it sent itself is under way
    ready, _ = ray.wait([actor.ping.remote()], timeout=1)
    assert not ready, "a Ray call waits while the actor is parked"
    return actor, channel


@pytest.mark.slow  # the quick tier has the park's logic without Ray, above
def test_a_parked_actor_answers_a_plan_s_ray_call_at_once_and_others_once_its_channel_closes(
    ray_session,
):
    from flowrl.core.iter import ray_call

    ray = ray_session
    actor, channel = parked(ray)
    assert answers([channel.send(("ping",))]) == ["pong"], "the channel answers a parked actor"
    assert ray.get(ray_call(actor, "ping"), timeout=5) == "pong", "the plan's call ends the park"
    time.sleep(0.2)
    answers([channel.send(("ping",))])  # quiet again: parked again
    time.sleep(0.3)
    waiting = actor.ping.remote()
    assert not ray.wait([waiting], timeout=1)[0]
    channel.close()
    assert ray.get(waiting, timeout=5) == "pong", "a closed channel ends the park"
    ray.kill(actor)
