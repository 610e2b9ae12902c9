"""Operators on plain lists and a local worker, without Ray."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from flowrl.algorithms.ppo import PPOConfig, PPOLearner, PPOPolicy
from flowrl.core.config import ConfigError
from flowrl.core.context import STEPS_SAMPLED, STEPS_TRAINED, WEIGHT_BROADCASTS
from flowrl.core.iter import LocalIterator
from flowrl.core.sample_batch import SINGLE, MultiAgentBatch, SampleBatch
from flowrl.ops import (
    AggregatedRollouts,
    ApplyGradients,
    AsyncGradients,
    ConcatBatches,
    ParallelRollouts,
    SelectExperiences,
    StandardizeFields,
    StandardMetricsReporting,
    TrainOneStep,
)
from flowrl.ops.metrics import OncePerIteration
from flowrl.ops.rollouts import REPORTS
from flowrl.rollout.worker import WorkerSet


def rows(n: int) -> MultiAgentBatch:
    return MultiAgentBatch({SINGLE: SampleBatch(x=np.arange(n))}, env_steps=n)


def test_concat_batches_emits_once_enough_steps_are_buffered():
    batches = [rows(n) for n in (3, 3, 5, 2, 1)]
    out = LocalIterator.from_items(batches).combine(ConcatBatches(min_batch_size=6)).take(5)
    assert [len(b) for b in out] == [6, 7]
    assert out[1][SINGLE]["x"].tolist() == [0, 1, 2, 3, 4, 0, 1]


def test_an_iteration_ends_at_the_runs_step_budget_before_its_least_time_and_steps():
    """A run of A3C (0.5 s iterations) asked for 2,000 env steps sampled 21,632."""

    def sampled(plan: LocalIterator, steps: int) -> list[int]:
        def sample(_):
            plan.context.counters[STEPS_SAMPLED] += 100
            return plan.context.counters[STEPS_SAMPLED]

        return plan.for_each(sample).filter(OncePerIteration(min_time_s=60, min_env_steps=steps))

    plan = LocalIterator.from_items(range(20))
    plan.context.step_budget = 250
    assert sampled(plan, 1000).take(2) == [300, 400]  # then every item: the run stops there
    plan = LocalIterator.from_items(range(20))
    assert sampled(plan, 1000).take(1) == []  # no budget: the least time holds it back


def test_standardize_fields_on_each_policys_rows_that_have_them():
    values = np.array([1.0, 2.0, 3.0, 6.0])
    a, b = SampleBatch(a=values.copy(), b=values.copy()), SampleBatch(b=values.copy())
    out = StandardizeFields(["a"])(MultiAgentBatch({"p": a, "q": b}, env_steps=4))
    assert abs(out["p"]["a"].mean()) < 1e-6 and abs(out["p"]["a"].std() - 1) < 1e-6
    assert out["p"]["b"].tolist() == out["q"]["b"].tolist() == [1.0, 2.0, 3.0, 6.0]
    # a misspelt field standardised nothing, silently
    with pytest.raises(ConfigError, match=r"no policy's rows hold c; their columns: a, b"):
        StandardizeFields(["c"])(MultiAgentBatch({"p": a, "q": b}, env_steps=4))


def test_select_experiences_of_a_policy_the_workers_lack_says_so():
    """A misspelt policy id selected nothing, and the branch trained nothing, silently."""
    from flowrl.core.context import PlanContext

    batch = MultiAgentBatch({"default": SampleBatch(x=np.ones(2))}, env_steps=2)
    select = SelectExperiences(["ppo"])
    assert select(batch).policy_ids == []  # no plan: no policies to check against
    select.bind(PlanContext(policy_ids=["default", "dqn"]))
    with pytest.raises(ConfigError, match="names ppo, which the workers have no policy of; "
                                          "theirs: default, dqn"):  # fmt: skip
        select(batch)


def test_concat_batches_after_the_training_step_says_so():
    """It raised AttributeError: 'tuple' object has no attribute 'policy_batches'."""
    with pytest.raises(ConfigError, match="got a tuple: put it before the training step"):
        ConcatBatches(min_batch_size=4)((MultiAgentBatch({}, env_steps=0), {}))


def test_local_plan_counts_steps_and_reports_results():
    cfg = PPOConfig(num_workers=0, num_envs_per_worker=2, rollout_fragment_length=32)
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
    before = workers.local_worker.get_weights()
    train_op = (
        ParallelRollouts(workers, mode="bulk_sync")
        .combine(ConcatBatches(min_batch_size=100))
        .for_each(TrainOneStep(workers, num_sgd_iter=2, sgd_minibatch_size=32))
    )
    plan = StandardMetricsReporting(train_op, workers, cfg)
    first, second = plan.take(2)
    ctx = plan.context
    assert second["iteration"] == 2 and second["env_steps_sampled"] == ctx.counters[STEPS_SAMPLED]
    assert ctx.counters[STEPS_TRAINED] >= 200
    assert "learner/policy_loss" in first and "timers/learn_ms" in first
    before, after = before[SINGLE], workers.local_worker.get_weights()[SINGLE]
    assert any(not np.array_equal(before[k], after[k]) for k in before)


def test_sampling_ahead_in_process_samples_as_bulk_sync():
    cfg = PPOConfig(num_workers=0, num_envs_per_worker=2, rollout_fragment_length=8)
    workers = WorkerSet(policy_cls=PPOPolicy, config=cfg)
    rollouts = ParallelRollouts(workers, mode="bulk_sync", ahead=True)
    assert repr(rollouts) == "ParallelRollouts(bulk_sync, local)"
    assert len(next(rollouts)) == 16


def test_async_gradients_locally_apply_and_count():
    cfg = PPOConfig(num_workers=0, num_envs_per_worker=2, rollout_fragment_length=16)
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
    plan = AsyncGradients(workers).for_each(ApplyGradients(workers, update_all=False))
    infos = plan.take(3)
    assert all(info["batch_count"] > 0 for info in infos)
    assert plan.context.counters[STEPS_TRAINED] == sum(i["batch_count"] for i in infos)
    assert workers.learner["default"].num_updates == 3


@pytest.mark.ray
def test_remote_gradients_bring_their_workers_reports(ray_session):
    cfg = PPOConfig(num_workers=1, num_envs_per_worker=2, rollout_fragment_length=64)
    workers = WorkerSet(
        policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg, workers_learn=True
    )
    try:
        grads = AsyncGradients(workers)
        _, info = next(grads)
        assert REPORTS not in info and workers.reports.reported == {1}  # taken off
        episodes, _ = workers.collect_metrics(plan=grads.context)
        assert episodes and not workers.reports.pending  # 128 random steps; none asked
        grads.close()
    finally:
        workers.stop()


def remote_match_local(ray, workers: WorkerSet) -> list[bool]:
    """Whether each remote worker holds the local worker's weights."""
    local = workers.local_worker.get_weights()[SINGLE]
    remote = ray.get([w.get_weights.remote() for w in workers.remote_workers])
    return [all(np.array_equal(r[SINGLE][k], local[k]) for k in local) for r in remote]


@pytest.mark.ray
def test_parallel_rollouts_async_and_raw_modes(ray_session):
    cfg = PPOConfig(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=16)
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
    try:
        rollouts = ParallelRollouts(workers, mode="async", num_async=2)
        batches = rollouts.take(6)
        assert rollouts.context.counters[STEPS_SAMPLED] == sum(len(b) for b in batches)
        assert rollouts.context.current_actor in workers.remote_workers
        raw = ParallelRollouts(workers, mode="raw")
        assert raw.num_shards == 2
        assert len(raw.for_each(len).gather_sync().take(2)) == 2
        with pytest.raises(ValueError, match="ahead is for bulk_sync rounds"):
            ParallelRollouts(workers, mode="async", ahead=True)
    finally:
        workers.stop()


@pytest.mark.ray
def test_a_worker_answers_a_request_with_fragments_per_call_fragments(ray_session):
    cfg = PPOConfig(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=16,
                    fragments_per_call=3)  # fmt: skip
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
    try:
        for mode in ("async", "bulk_sync"):
            rollouts = ParallelRollouts(workers, mode=mode)
            batches = rollouts.take(2)
            per_worker = 3 * 2 * 16 * (1 if mode == "async" else 2)
            assert [b.env_steps for b in batches] == [per_worker] * 2
            assert rollouts.context.counters[STEPS_SAMPLED] == sum(len(b) for b in batches)
            rollouts.close()
    finally:
        workers.stop()


@pytest.mark.ray
@pytest.mark.parametrize("mode", ["bulk_sync", "async"])
def test_weights_of_several_updates_go_out_once_before_the_next_sample(ray_session, mode):
    ray = ray_session
    cfg = PPOConfig(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=16)
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)

    try:
        rollouts = ParallelRollouts(workers, mode=mode, num_async=1)
        batch = next(rollouts)
        for _ in range(3):  # three updates with no sampling in between
            workers.local_worker.learn_on_batch(batch)
            workers.defer_weight_sync()
        assert remote_match_local(ray, workers) == [False, False]  # deferred: nothing sent yet
        if mode == "bulk_sync":
            next(rollouts)  # the next round's requests send them first, once
        else:  # a worker's request after its next item does (one asked before the updates
            # may bring its item first), so until each worker has brought two
            brought = collections.Counter()
            while len(brought) < 2 or min(brought.values()) < 2:
                next(rollouts)
                brought[rollouts.context.current_actor] += 1
        assert rollouts.context.counters[WEIGHT_BROADCASTS] == 1
        rollouts.close()  # their requests done: a Ray call may overtake one over a channel
        assert remote_match_local(ray, workers) == [True, True]
    finally:
        workers.stop()


@pytest.mark.ray
@pytest.mark.parametrize("mode", ["bulk_sync", "async"])
def test_fragments_bring_their_workers_reports_and_nobody_is_asked(ray_session, mode):
    cfg = PPOConfig(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=64)
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)
    try:
        rollouts = ParallelRollouts(workers, mode=mode)
        batches = rollouts.take(4)
        assert all(b.reports == () for b in batches), "taken off where they arrive"
        reported = set(workers.reports.reported)  # async: in completion order, maybe one
        assert reported == {1, 2} if mode == "bulk_sync" else reported in ({1}, {2}, {1, 2})
        episodes, _ = workers.collect_metrics(timeout_s=30)
        if mode == "bulk_sync":
            assert not workers.reports.pending, "a worker that reported is not asked"
        # untrained CartPole episodes are short: many ended in the env steps sampled
        assert 0 < sum(ep.length for ep in episodes) <= sum(len(b) for b in batches)
        rollouts.close()
    finally:
        workers.stop()


@pytest.mark.ray
@pytest.mark.slow
def test_aggregated_rollouts_concatenate_off_the_plan_and_pass_the_weights_on(ray_session):
    ray = ray_session
    cfg = PPOConfig(num_workers=2, num_envs_per_worker=2, rollout_fragment_length=8)
    workers = WorkerSet(policy_cls=PPOPolicy, learner_cls=PPOLearner, config=cfg)

    try:
        rollouts = AggregatedRollouts(workers, num_aggregators=2, min_batch_size=40)
        batches = rollouts.take(4)  # 16-row fragments, three to a batch
        assert [len(b) >= 40 for b in batches] == [True] * 4
        assert rollouts.context.counters[STEPS_SAMPLED] == sum(len(b) for b in batches)
        assert rollouts.context.current_actor not in workers.remote_workers  # an aggregator
        rollouts.close()
        one = AggregatedRollouts(workers, num_aggregators=1, min_batch_size=40)
        batch = next(one)
        workers.local_worker.learn_on_batch(batch)
        assert remote_match_local(ray, workers) == [False, False]
        workers.sync_weights([one.context.current_actor])  # as BroadcastWeights sends them
        one.take(3)  # the aggregator passes them on before each worker's next request
        assert remote_match_local(ray, workers) == [True, True]
        with pytest.raises(ValueError, match="num_aggregators"):
            AggregatedRollouts(workers, num_aggregators=0, min_batch_size=40)
    finally:
        workers.stop()


def test_raw_rollouts_need_remote_workers():
    workers = WorkerSet(policy_cls=PPOPolicy, config=PPOConfig(num_workers=0))
    with pytest.raises(ValueError, match="remote workers"):
        ParallelRollouts(workers, mode="raw")
