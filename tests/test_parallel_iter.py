"""ParallelIterator over Ray actors: gather_sync order, gather_async completion order; the
tests with ``channels`` run once with Ray tasks and once over channels."""

from __future__ import annotations

import time

import pytest

from flowrl.core.channels import Channel, taking_turns
from flowrl.core.iter import Carry, Operator, ParallelIterator, ParallelIteratorWorker

pytestmark = pytest.mark.ray


def actors_of(ray, cls, channels, *args_each):
    """An actor of ``cls`` per args tuple, taking turns where the requests use channels."""
    remote = ray.remote(num_cpus=0)(taking_turns(cls) if channels else cls)
    return [remote.remote(*args) for args in args_each]


def over(actors, channels, **kwargs):
    return ParallelIterator.from_actors(actors, channels=channels, **kwargs)


def test_gather_sync_takes_one_item_per_shard_per_round(ray_session):
    it = ParallelIterator.from_items(list(range(6)), num_shards=2)
    # shard 0 holds 0, 2, 4 and shard 1 holds 1, 3, 5
    assert it.for_each(lambda x: x * 10).gather_sync().take(6) == [0, 10, 20, 30, 40, 50]
    rounds = ParallelIterator.from_items(list(range(4)), num_shards=2).batch_across_shards()
    assert rounds.take(3) == [[0, 1], [2, 3]]


def test_transforms_run_on_the_shards_and_names_describe_them(ray_session):
    it = ParallelIterator.from_items(list(range(8)), num_shards=2).filter(lambda x: x % 2 == 0)
    assert "filter(<lambda>)" in str(it)
    assert sorted(it.gather_async().take(4)) == [0, 2, 4, 6]


class Sleeper(ParallelIteratorWorker):
    """Three items, each after ``delay`` seconds; holds the weights the plan sends it."""

    def __init__(self, name, delay):
        super().__init__(self.items)
        self.name, self.delay, self.weights, self.loads = name, delay, 0, 0

    def items(self):
        for i in range(3):
            time.sleep(self.delay)
            yield self.name, i

    def set_weights(self, w):
        self.weights, self.loads = w, self.loads + 1

    def weight_loads(self):
        return self.loads


class WithWeights(Operator):
    """Runs on the shard: tags each item with the weights its worker holds."""

    def __call__(self, item):
        return (*item, self.context.worker.weights)


def test_gather_async_yields_in_completion_order(ray_session, channels):
    fast, slow = actors_of(ray_session, Sleeper, channels, ("fast", 0.01), ("slow", 1.0))
    # both up first: on a loaded host the fast one's process started a second late, and the
    # slow one's first item came before the fast one's third (seen once in a whole suite)
    ray_session.get([actor.__ray_ready__.remote() for actor in (fast, slow)])
    it = over([slow, fast], channels).for_each(WithWeights()).gather_async()
    names = [name for name, _, _ in it.take(4)]
    assert names[:3] == ["fast", "fast", "fast"] and names[3] == "slow"
    opened = list(it.context.channels.values())
    assert len(opened) == (2 if channels else 0) and all(isinstance(c, Channel) for c in opened)


def test_gather_async_sends_next_request_after_the_item_is_consumed(ray_session):
    ray = ray_session
    actor = ray.remote(num_cpus=0)(Sleeper).remote("a", 0.0)
    it = ParallelIterator.from_actors([actor]).for_each(WithWeights())
    it = it.zip_with_source_actor().gather_async()
    source, (_, _, weights) = next(it)
    assert source is actor and weights == 0
    source.set_weights.remote(7)  # what the plan sends back before pulling again
    _, (_, _, weights) = next(it)
    assert weights == 7


@pytest.mark.parametrize(
    ("gather", "inline"),  # two of the four in the quick tier, each gather and carry once
    [
        pytest.param("gather_sync", True, id="gather_sync-inline"),
        pytest.param("gather_async", False, id="gather_async-ref"),
        pytest.param("gather_sync", False, id="gather_sync-ref", marks=pytest.mark.slow),
        pytest.param("gather_async", True, id="gather_async-inline", marks=pytest.mark.slow),
    ],
)
def test_a_carry_goes_with_each_actors_next_request_once(ray_session, gather, channels, inline):
    ray = ray_session
    actors = actors_of(ray, Sleeper, channels, ("a", 0.0), ("b", 0.0))
    # a ref arrives as its value (a Ray task carries it, channels or not)
    carries = iter([Carry("set_weights", 7 if inline else ray.put(7))])
    it = over(actors, channels, before_requests=lambda ctx: next(carries, None))
    items = getattr(it.for_each(WithWeights()), gather)().take(6)
    assert [weights for _, _, weights in items] == [7] * 6  # loaded before the first item
    assert ray.get([actor.weight_loads.remote() for actor in actors]) == [1, 1]


def test_the_plan_sends_a_call_with_the_current_actors_next_request(ray_session, channels):
    ray = ray_session
    actors = actors_of(ray, Sleeper, channels, ("a", 0.0), ("b", 0.0))
    it = over(actors, channels).for_each(WithWeights()).gather_async()
    first, *_ = next(it)
    sender = it.context.current_actor
    it.context.send_with_next_request(sender, Carry("set_weights", 5))
    seen = {name: weights for name, _, weights in it.take(5)}  # each sends its other two
    assert seen[first] == 5 and seen[({"a", "b"} - {first}).pop()] == 0
    assert ray.get(sender.weight_loads.remote()) == 1


class Counter(ParallelIteratorWorker):
    """Endless items, each after ``delay`` seconds; counts the items it has finished."""

    def __init__(self, delay):
        super().__init__(self.items)
        self.delay, self.done = delay, 0

    def items(self):
        while True:
            time.sleep(self.delay)
            self.done += 1
            yield self.done

    def finished(self):
        return self.done


def test_closing_gather_async_waits_for_the_requests_in_flight(ray_session, channels):
    ray = ray_session
    (actor,) = actors_of(ray, Counter, channels, (0.3,))
    it = over([actor], channels).gather_async(num_async=3)
    assert it.take(1) == [1]
    it.close()  # two requests were still in flight: both finish before close returns
    start = time.perf_counter()
    assert ray.get(actor.finished.remote()) == 3
    assert time.perf_counter() - start < 0.2, "the actor was idle, not still sampling"
    it.close()


def test_rounds_asked_ahead_are_sampled_while_the_consumer_works(ray_session, channels):
    ray = ray_session
    actors = actors_of(ray, Counter, channels, (0.0,), (0.0,))
    ahead = over(actors, channels).batch_across_shards(ahead=True)
    assert next(ahead) == [1, 1]
    deadline = time.monotonic() + 30  # the consumer's turn (an SGD phase): the next round
    while ray.get([actor.finished.remote() for actor in actors]) != [2, 2]:  # is done meanwhile
        assert time.monotonic() < deadline, "the next round was not asked for ahead"
        time.sleep(0.05)
    assert next(ahead) == [2, 2]
    ahead.close()  # the round asked ahead finishes before close returns
    assert ray.get([actor.finished.remote() for actor in actors]) == [3, 3]
    on_demand = over(actors, channels).batch_across_shards()
    assert next(on_demand) == [4, 4]
    time.sleep(0.2)
    assert ray.get([actor.finished.remote() for actor in actors]) == [4, 4]


class Stamped(ParallelIteratorWorker):
    """Endless items, each after ``delay`` seconds; keeps the time each was finished."""

    def __init__(self, delay):
        super().__init__(self.items)
        self.delay, self.stamps = delay, []

    def items(self):
        while True:
            time.sleep(self.delay)
            self.stamps.append(time.monotonic())
            yield len(self.stamps)

    def finished_at(self):
        return self.stamps


@pytest.mark.slow
def test_an_actor_that_answers_early_is_asked_ahead_without_waiting_for_the_slowest(ray_session):
    """With ahead, the fast actor's item of the next round is asked for as soon as its
    item of this round is in, not once the slow actor's is; and never a round further."""
    ray = ray_session
    fast, slow = (ray.remote(num_cpus=0)(Stamped).remote(delay) for delay in (0.0, 1.0))
    ray.get([fast.finished_at.remote(), slow.finished_at.remote()])  # both up: times compare
    rounds = ParallelIterator.from_actors([fast, slow]).batch_across_shards(ahead=True)
    assert next(rounds) == [1, 1]
    fast_at, slow_at = ray.get([fast.finished_at.remote(), slow.finished_at.remote()])
    assert len(fast_at) == 2 and fast_at[1] < slow_at[0] - 0.5, (fast_at, slow_at)
    assert next(rounds) == [2, 2]
    assert len(ray.get(fast.finished_at.remote())) == 3, "one round ahead, no more"
    rounds.close()


def test_weights_sent_while_a_round_is_asked_ahead_reach_the_round_after(ray_session, channels):
    ray = ray_session
    actors = actors_of(ray, Sleeper, channels, ("a", 0.0), ("b", 0.0))
    updates = []  # the weights of the consumer's updates, for the next round asked
    it = over(actors, channels, before_requests=lambda ctx: updates.pop(0) if updates else None)
    rounds = it.for_each(WithWeights()).batch_across_shards(ahead=True)
    first = next(rounds)  # the second round is asked already
    updates.append(Carry("set_weights", ray.put(7)))  # trained on the first round
    second, third = next(rounds), next(rounds)
    assert [[w for *_, w in r] for r in (first, second, third)] == [[0, 0], [0, 0], [7, 7]]
