"""The iterator algebra on plain lists, without Ray."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowrl.core.config import ArgumentTypeError
from flowrl.core.context import PlanContext
from flowrl.core.iter import LocalIterator, NotReady, Operator

ints = st.lists(st.integers(-100, 100), max_size=40)


def items(xs):
    return LocalIterator.from_items(xs)


def drain(it):
    return [x for x in it if x is not NotReady]


@given(ints)
def test_for_each_filter_combine_match_list_semantics(xs):
    assert drain(items(xs).for_each(lambda x: x * 2)) == [x * 2 for x in xs]
    assert drain(items(xs).filter(lambda x: x > 0)) == [x for x in xs if x > 0]
    assert drain(items(xs).combine(lambda x: [x, x])) == [y for x in xs for y in (x, x)]


@given(ints, st.integers(1, 7))
def test_batch_then_flatten_is_identity_up_to_the_incomplete_tail(xs, n):
    out = drain(items(xs).batch(n))
    assert all(len(b) == n for b in out)
    assert drain(items(xs).batch(n).flatten()) == xs[: len(xs) // n * n]


@given(ints, st.integers(0, 50))
def test_take(xs, n):
    assert items(xs).take(n) == xs[:n]


@given(ints, st.integers(1, 4))
def test_duplicate_gives_every_copy_every_item(xs, n):
    copies = items(xs).duplicate(n)
    # read the copies at different paces: all of copy 0 first, then the others
    outs = [drain(c) for c in copies]
    assert outs == [xs] * n


@given(st.lists(ints, min_size=1, max_size=4), st.data())
def test_union_round_robin_order_follows_weights(lists, data):
    weights = [data.draw(st.integers(1, 3)) for _ in lists]
    its = [items(xs) for xs in lists]
    merged = drain(its[0].union(*its[1:], round_robin_weights=weights))
    # reference: take weights[i] from list i per round until all are exhausted
    ref, pos = [], [0] * len(lists)
    while any(p < len(xs) for p, xs in zip(pos, lists, strict=True)):
        for i, xs in enumerate(lists):
            ref.extend(xs[pos[i] : pos[i] + weights[i]])
            pos[i] = min(pos[i] + weights[i], len(xs))
    assert merged == ref


@given(st.lists(ints, min_size=1, max_size=4))
def test_async_union_yields_every_item_exactly_once(lists):
    its = [items(xs) for xs in lists]
    merged = drain(its[0].union(*its[1:]))
    assert sorted(merged) == sorted(x for xs in lists for x in xs)


def _sometimes_not_ready(xs):
    def build(ctx, timeout):
        for x in xs:
            yield NotReady
            yield x

    return LocalIterator(build, name="flaky")


def test_star_weight_takes_what_is_ready_and_not_ready_passes_through():
    a = items([1, 2, 3])
    b = _sometimes_not_ready([10, 20])
    out = list(a.union(b, round_robin_weights=[1, "*"]))
    # b is not ready on its first turn, then has one item ready on each later turn
    assert [x for x in out if x is not NotReady] == [1, 2, 10, 3, 20]
    assert drain(_sometimes_not_ready([1, 2]).for_each(lambda x: x + 1)) == [2, 3]


def test_union_rejects_bad_weights():
    with pytest.raises(ValueError, match="round_robin weight"):
        items([1]).union(items([2]), round_robin_weights=[0, 1])
    with pytest.raises(ValueError, match="2 inputs"):
        items([1]).union(items([2]), round_robin_weights=[1])


class Count(Operator):
    def __call__(self, x):
        self.context.counters["seen"] += 1
        return x


def test_operators_share_the_context_of_the_outermost_iterator():
    a, b = items([1, 2]).for_each(Count()), items([3]).for_each(Count())
    plan = a.union(b, deterministic=True)
    assert drain(plan) == [1, 3, 2]
    assert plan.context.counters["seen"] == 3
    assert isinstance(plan.context, PlanContext)


def test_an_operator_belongs_to_one_plan():
    op = Count()
    drain(items([1]).for_each(op))
    with pytest.raises(ValueError, match="another plan"):
        drain(items([1]).for_each(op))


def test_an_iterator_is_consumed_once():
    it = items([1, 2])
    child = it.for_each(lambda x: x)
    next(child)
    with pytest.raises(RuntimeError, match="duplicate"):
        next(it.for_each(lambda x: x))


def test_names_describe_the_pipeline():
    plan = items([1]).for_each(Count()).filter(bool).batch(2)
    assert str(plan) == "LocalIterator[items].for_each(Count()).filter(bool).batch(2)"


@given(st.lists(st.integers(), max_size=20), st.lists(st.booleans(), min_size=1, max_size=50))
def test_gate_pulls_only_while_open_and_loses_nothing(xs, openings):
    pulled = []
    source = LocalIterator.from_items(xs).for_each(lambda x: pulled.append(x) or x)
    states = iter(openings + [True] * (len(xs) + 1))
    it = source.gate(lambda: next(states))
    out = []
    for is_open in openings:
        item = next(it, None)
        if item is None:  # exhausted
            break
        if not is_open:
            assert item is NotReady
        else:
            out.append(item)
        assert pulled == out, "nothing is pulled while the gate is shut"
    out += [x for x in it if x is not NotReady]
    assert out == xs


def test_gate_binds_an_operator_to_the_plan_context():
    class Below(Operator):
        def __call__(self):
            return self.context.counters["n"] < 2

    it = LocalIterator.from_items([1, 2, 3]).gate(Below())
    assert next(it) == 1
    it.context.counters["n"] = 2
    assert next(it) is NotReady


@pytest.mark.parametrize("method", ["for_each", "filter", "combine"])
def test_an_operators_class_or_a_value_is_refused_where_a_function_of_items_goes(method):
    class Double(Operator):
        def __call__(self, item):
            return 2 * item

    items = LocalIterator.from_items([1, 2])
    with pytest.raises(ArgumentTypeError, match=rf"{method}\(Double\) takes an operator, not"):
        getattr(items, method)(Double)
    with pytest.raises(ArgumentTypeError, match=f"{method} takes a function of each item, got 5"):
        getattr(items, method)(5)
    assert items.for_each(Double()).take(2) == [2, 4]
