"""Concurrently and the replay operators on plain iterators, without Ray."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl.core.context import STEPS_SAMPLED, STEPS_TRAINED, PlanContext
from flowrl.core.iter import LocalIterator, NotReady, Operator
from flowrl.core.sample_batch import SINGLE, MultiAgentBatch, SampleBatch
from flowrl.ops import (
    Concurrently,
    Replay,
    SamplingLead,
    StoreToReplayBuffer,
    TrainingIntensity,
    UpdatePriorities,
    UpdateTargets,
)
from flowrl.replay import PolicyBuffers, PrioritizedSampler, ReplayBuffer


def items(xs):
    return LocalIterator.from_items(xs)


def drain(it):
    return [x for x in it if x is not NotReady]


def test_round_robin_weights_and_output_indexes():
    seen = []
    a = items(["a1", "a2", "a3"]).for_each(lambda x: seen.append(x) or x)
    b = items(["b1", "b2", "b3", "b4", "b5", "b6"])
    out = drain(Concurrently([a, b], output_indexes=[1], round_robin_weights=[1, 2]))
    assert out == ["b1", "b2", "b3", "b4", "b5", "b6"]
    assert seen == ["a1", "a2", "a3"], "the non-output branch still runs"


def test_round_robin_interleaves_all_outputs_by_default():
    out = drain(Concurrently([items([1, 2]), items([10, 20])]))
    assert out == [1, 10, 2, 20]


def test_async_mode_yields_everything_once():
    out = drain(Concurrently([items([1, 2, 3]), items([10, 20])], mode="async"))
    assert sorted(out) == [1, 2, 3, 10, 20]


@pytest.mark.parametrize("mode", ["round_robin", "async"])
def test_a_warm_up_branch_reaches_the_output_until_an_output_branch_yields(mode):
    """A replay plan's rollouts report while its buffer fills: the training branch is not
    ready until it holds learning_starts rows, and then reports alone."""
    filled = []
    stored = items(range(6)).for_each(lambda i: filled.append(i) or f"stored {i}")
    trained = items([NotReady, NotReady, NotReady, "trained 0", "trained 1"])
    plan = Concurrently([stored, trained], mode=mode, output_indexes=[1], warm_up_indexes=[0])
    out = drain(plan)
    first = out.index("trained 0")
    assert out[first:] == ["trained 0", "trained 1"], "only the output branch after it yields"
    assert out[:first] == [f"stored {i}" for i in range(first)] and first >= 3
    assert filled == [0, 1, 2, 3, 4, 5], "the warm-up branch runs on after it reports"
    assert "warm_up=[0]" in plan.label


def test_bad_arguments():
    with pytest.raises(ValueError, match="out of range"):
        Concurrently([items([1])], output_indexes=[1])
    with pytest.raises(ValueError, match="warm_up_indexes \\[2\\] out of range"):
        Concurrently([items([1]), items([2])], output_indexes=[1], warm_up_indexes=[2])
    with pytest.raises(ValueError, match="round_robin_weights need"):
        Concurrently([items([1])], mode="async", round_robin_weights=[1])


def frag(start, n):
    obs = np.arange(start, start + n, dtype=np.float32)[:, None]
    return MultiAgentBatch({SINGLE: SampleBatch(obs=obs)}, env_steps=n)


def test_store_then_replay_waits_for_learning_starts():
    buf = PolicyBuffers(lambda i: ReplayBuffer(100))
    store = items([frag(0, 4), frag(4, 4), frag(8, 4)]).for_each(StoreToReplayBuffer(buf))
    replay = Replay(buf, batch_size=3, learning_starts=8)
    plan = Concurrently([store, replay], output_indexes=[1])
    first = next(x for x in plan if x is not NotReady)
    assert len(buf) == 8 and len(first) == 3 and len(first[SINGLE]) == 3


def test_a_plain_buffer_is_a_clear_error():
    with pytest.raises(TypeError, match="expected PolicyBuffers"):
        StoreToReplayBuffer(ReplayBuffer(100))


def test_update_priorities_uses_the_rows_a_batch_came_from():
    buf = PolicyBuffers(
        lambda i: ReplayBuffer(4, sampler=PrioritizedSampler(4, alpha=1.0, eps=0.0))
    )
    buf.add(frag(0, 4))
    batch = buf.sample_after(2, learning_starts=0)
    UpdatePriorities(buf)((batch, {SINGLE: {"td_error": np.array([-3.0, 3.0])}}))
    probs = buf.buffers[SINGLE].sampler.probabilities(batch[SINGLE]["batch_indexes"])
    assert (probs > 0.25).all()


class Train(Operator):
    def __call__(self, n):
        self.context.counters[STEPS_TRAINED] += n
        return n


def test_update_targets_hard_copies_on_period_and_soft_with_tau():
    calls = []
    plan = items([10] * 10).for_each(Train()).for_each(UpdateTargets(calls.append, period=25))
    drain(plan)
    # copies at 30, 60 and 90 trained steps (each 25+ after the last)
    assert calls == [1.0, 1.0, 1.0] and plan.context.counters["num_target_updates"] == 3
    soft = []
    drain(items([1, 2, 3]).for_each(UpdateTargets(soft.append, tau=0.005)))
    assert soft == [0.005] * 3
    with pytest.raises(ValueError, match="either period"):
        UpdateTargets(soft.append)
    # the workers, as RLlib's UpdateTargetNetwork takes them: a TypeError at the first copy
    with pytest.raises(TypeError, match=r"\(workers.learner.update_targets\), got a list"):
        UpdateTargets([], period=25)


def test_two_update_targets_in_one_plan_keep_two_states_across_a_resume():
    def plan(steps):
        first, second = UpdateTargets(print, period=25), UpdateTargets(print, period=45)
        return items(steps).for_each(Train()).for_each(first).for_each(second), first, second

    trained, first, second = plan([10] * 5)
    drain(trained)  # 50 steps trained: copies at 30 (first) and 50 (second)
    state = trained.context.get_state()
    assert sorted(state["plan_state"]) == ["update_targets", "update_targets_2"]
    resumed, first_again, second_again = plan([0])
    resumed.context.set_state(state)
    next(resumed)  # builds the plan: each operator takes its own state back
    assert (first_again._last, second_again._last) == (first._last, second._last) == (30, 50)


def test_update_targets_of_one_policy_moves_that_policy_s_targets_only():
    from flowrl.learning.multi import Learners
    from flowrl.ops.train import steps_trained

    class Targets:
        targets, moved = ["a target"], 0

        def update_targets(self, tau):
            self.moved += 1

    class TrainA(Operator):
        def __call__(self, n):
            self.context.counters[steps_trained("dqn_a")] += n
            return n

    learners = Learners({"dqn_a": Targets(), "dqn_b": Targets()})
    update = UpdateTargets(learners.update_targets, period=10, policy_id="dqn_a")
    drain(items([10]).for_each(TrainA()).for_each(update))
    assert (learners["dqn_a"].moved, learners["dqn_b"].moved) == (1, 0)
    learners.update_targets(1.0)  # without a policy id: every policy's
    assert (learners["dqn_a"].moved, learners["dqn_b"].moved) == (2, 1)


def test_training_intensity_gate_keeps_trained_within_the_ratio_of_sampled():
    sampled = items(list(range(100))).for_each(CountAs(STEPS_SAMPLED, 10))
    trained = items(list(range(1000))).gate(TrainingIntensity(2.5))
    trained = trained.for_each(CountAs(STEPS_TRAINED, 4))
    plan = Concurrently([sampled, trained], mode="async", output_indexes=[1])
    counters = plan.context.counters
    for _ in range(700):  # sampling ends after 100 items (625 pulls); the gate then stays shut
        next(plan)
        # the gate opens only below the ratio, and one item adds 4 trained steps
        assert counters[STEPS_TRAINED] < 2.5 * counters[STEPS_SAMPLED] + 4
    assert counters[STEPS_TRAINED] > 2.5 * counters[STEPS_SAMPLED] - 8, "and trains up to it"


def test_sampling_lead_holds_sampling_within_its_lead_of_a_slow_learner():
    # the learner branch trains 2 env steps per item where intensity 2 needs 20 per sampled 10
    sampled = items(list(range(1000))).gate(SamplingLead(2.0, lead=30, learning_starts=50))
    sampled = sampled.for_each(CountAs(STEPS_SAMPLED, 10))
    trained = items(list(range(200))).for_each(CountAs(STEPS_TRAINED, 2))
    plan = Concurrently([sampled, trained], mode="async", output_indexes=[1])
    counters = plan.context.counters
    for _ in range(200):
        next(plan)
        caught_up = 50 + counters[STEPS_TRAINED] / 2.0
        # the gate opens only within the lead, and one item adds 10 sampled steps
        assert counters[STEPS_SAMPLED] <= caught_up + 30 + 10
    assert counters[STEPS_SAMPLED] >= 50 + 200 * 2 / 2.0 + 30 - 10, "and samples up to it"
    with pytest.raises(ValueError, match="intensity"):
        SamplingLead(0.0, lead=1)


def test_sampling_lead_counts_from_the_plans_start():
    # a resumed run far ahead of its learner still samples learning_starts into its empty buffer
    gate = SamplingLead(2.0, lead=0, learning_starts=50)
    gate.bind(PlanContext())
    gate.context.counters.update({STEPS_SAMPLED: 10_000, STEPS_TRAINED: 100})
    assert gate()
    gate.context.counters[STEPS_SAMPLED] += 50
    assert gate()
    gate.context.counters[STEPS_SAMPLED] += 1
    assert not gate()
    assert SamplingLead(2.0, lead=None)()


class CountAs(Operator):
    def __init__(self, counter: str, steps: int) -> None:
        self.counter, self.steps = counter, steps

    def __call__(self, item):
        self.context.counters[self.counter] += self.steps
        return item


def test_a_single_buffer_is_refused_with_the_per_policy_form_named():
    """A plan of your own that passed a ReplayBuffer was told only what was expected."""
    with pytest.raises(TypeError, match=r"a buffer per policy, PolicyBuffers\(lambda i: Repl"):
        StoreToReplayBuffer(ReplayBuffer(10))
