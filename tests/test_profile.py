"""Where a plan's time goes: own times, items and NotReady per operator, spans, queue
depths, a learner thread's busy share, and the bottleneck line, first on plain iterators
with known costs, then on three real plans built to be sampling-, learner- and sync-bound."""

from __future__ import annotations

import time

import pytest

from flowrl import Algorithm
from flowrl.core.context import LEARN, SAMPLE, SYNC
from flowrl.core.iter import LocalIterator, NotReady, Operator
from flowrl.diagnostics.profiler import Profile, Profiler, Row
from flowrl.ops import ParallelRollouts, StandardMetricsReporting, TrainOneStep


def sleeping_source(seconds: float, role: str | None = SAMPLE) -> LocalIterator[int]:
    def build(ctx, timeout):
        n = 0
        while True:
            time.sleep(seconds)
            n += 1
            yield n

    return LocalIterator(build, name="source", role=role)


class Sleep(Operator):
    def __init__(self, seconds: float, role: str | None = None, span: str | None = None):
        self.seconds, self.role, self._span = seconds, role, span

    def __call__(self, item):
        if self._span:
            with self.context.span(self._span):
                time.sleep(self.seconds)
        else:
            time.sleep(self.seconds)
        return item


def profiled(plan: LocalIterator, items: int) -> Profile:
    plan.context.profiler = Profiler()
    plan.take(items)
    return plan.context.profiler.profile()


def test_own_time_excludes_what_a_step_pulls_from():
    plan = sleeping_source(0.004).for_each(Sleep(0.002, role=LEARN))
    profile = profiled(plan, 20)
    own = {r.key: r.own_s for r in profile.rows}
    assert own["source"] == pytest.approx(20 * 0.004, rel=0.3)
    assert own["Sleep"] == pytest.approx(20 * 0.002, rel=0.4)
    assert {r.key: r.items for r in profile.rows} == {"source": 20, "Sleep": 20}
    assert sum(r.share for r in profile.rows) <= 1.0


def test_not_ready_is_counted_and_items_are_not():
    plan = LocalIterator.from_items([1, NotReady, 2, NotReady, NotReady, 3])
    plan.context.profiler = Profiler()
    assert list(plan) == [1, NotReady, 2, NotReady, NotReady, 3]
    (row,) = plan.context.profiler.profile().rows
    assert (row.items, row.not_ready) == (3, 3)


def test_a_span_is_its_own_row_and_leaves_its_step():
    plan = sleeping_source(0.001).for_each(Sleep(0.004, span=SYNC))
    profile = profiled(plan, 10)
    own = {r.key: r.own_s for r in profile.rows}
    assert own[SYNC] == pytest.approx(10 * 0.004, rel=0.3)
    assert own["Sleep"] < 0.01


def test_without_a_profiler_nothing_is_wrapped():
    plan = LocalIterator.from_items([1, 2]).for_each(abs)
    assert plan.take(2) == [1, 2]
    assert plan.context.profiler is None
    assert plan._it.__name__ == "gen"  # the operator's own generator, not a timed wrapper


@pytest.mark.parametrize(
    ("sample_s", "learn_s", "sync_s", "verdict"),
    [
        (0.006, 0.001, 0.0, "sampling-bound"),
        (0.001, 0.006, 0.0, "learner-bound"),
        (0.001, 0.001, 0.006, "weight-sync-bound"),
    ],
)
def test_the_bottleneck_is_the_largest_share(sample_s, learn_s, sync_s, verdict):
    plan = sleeping_source(sample_s).for_each(Sleep(learn_s, role=LEARN))
    plan = plan.for_each(Sleep(sync_s, span=SYNC))
    line = profiled(plan, 15).bottleneck()
    assert line.startswith(verdict + ":"), line


def row(role: str, share: float) -> Row:
    return Row(role, role, role, share, share, 1, 1.0, 0)


def test_a_learner_thread_busy_most_of_the_time_is_the_bottleneck():
    busy = Profile(1.0, [row(SAMPLE, 0.1)], threads={"learner": 0.93})
    idle = Profile(1.0, [row(SAMPLE, 0.1)], threads={"learner": 0.3})
    assert busy.bottleneck().startswith("learner-bound: learner busy 93%")
    assert idle.bottleneck().startswith("sampling-bound: learner idle 70%")


def test_waiting_for_workers_that_load_weights_counts_as_weight_sync():
    profile = Profile(1.0, [row(SAMPLE, 0.8), row(LEARN, 0.1)], worker_sync_share=0.75)
    assert profile.shares()[SYNC] == pytest.approx(0.6)
    assert profile.bottleneck().startswith("weight-sync-bound")


def test_results_and_table_name_every_step():
    plan = sleeping_source(0.001).for_each(Sleep(0.001, role=LEARN))
    profile = profiled(plan, 5)
    results = profile.results()
    assert {"timers/source/share", "timers/Sleep/items_per_s", "timers/Sleep/not_ready"} <= set(
        results
    )
    table = profile.table()
    assert "for_each(Sleep(" in table and table.splitlines()[-1] == profile.bottleneck()


# -- real plans, on Ray -------------------------------------------------------------------
def weights_every_round(workers, config):
    """Samples one step per round and marks the weights changed every round, without
    learning: each round ships the (large) weights to the workers."""

    def changed(batch):
        workers.defer_weight_sync()
        return batch

    return StandardMetricsReporting(
        ParallelRollouts(workers, mode="bulk_sync").for_each(changed), workers, config
    )


def learn_many_times(workers, config):
    """PPO's plan shape with many SGD passes per batch."""
    rollouts = ParallelRollouts(workers, mode="bulk_sync")
    train = TrainOneStep(workers, num_sgd_iter=config.num_sgd_iter, sgd_minibatch_size=64)
    return StandardMetricsReporting(rollouts.for_each(train), workers, config)


@pytest.mark.parametrize(
    ("plan", "overrides", "verdict"),
    [
        (  # an env step costs 3 ms; learning is one small pass
            learn_many_times,
            {"env": "custom_envs:SlowCorridor", "env_config": {"delay_s": 0.003}},
            "sampling-bound",
        ),
        (  # a wide network and 100 passes over each batch (30 passes were half sampling
            # on a loaded 2-core host: 48-52% of wall-clock)
            learn_many_times,
            {"num_sgd_iter": 100, "model_hiddens": (512, 512)},
            "learner-bound",
        ),
        (  # 38 MB of weights to a torch worker for each step it samples (a numpy worker
            # acts on views of them as they came, each step reading all 38 MB, so its plan
            # is half sampling: 41-55% of wall-clock)
            weights_every_round,
            {
                "model_hiddens": (1536, 1536, 1536),
                "rollout_fragment_length": 1,
                "numpy_acting": False,
            },
            "weight-sync-bound",
        ),
    ],
    ids=["sampling", "learner", "sync"],
)
@pytest.mark.slow
def test_the_bottleneck_line_is_right_on_plans_built_for_it(ray_session, plan, overrides, verdict):
    config = {
        "num_workers": 1,
        "num_envs_per_worker": 2,
        "rollout_fragment_length": 32,
        "num_sgd_iter": 1,
        "min_time_s_per_iteration": 1.0,
        "profile": True,
        **overrides,
    }
    algo = Algorithm("ppo", plan=plan, **config)
    try:
        algo.train()  # warm-up: actors start, first weights
        result = algo.train()
        line = algo.profile(since_start=False).bottleneck()
    finally:
        algo.stop()
    assert line.startswith(verdict + ":"), line
    assert any(k.startswith("timers/") and k.endswith("/share") for k in result)


def test_cli_train_profile_prints_a_table_and_the_bottleneck(tmp_path, capsys):
    from flowrl.apps.cli import main

    args = ["train", "ppo", "--num-workers", "0", "--stop-iters", "3", "--no-progress"]
    assert main([*args, "--profile", "--output", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "flowrl: where the time went" in out
    assert "for_each(TrainOneStep(" in out and "ParallelRollouts(bulk_sync, local)" in out
    assert any(
        line.split(":")[0] in ("sampling-bound", "learner-bound") for line in out.splitlines()
    )
    csv_header = (tmp_path / "run" / "progress.csv").read_text().splitlines()[0]
    assert "timers/TrainOneStep/share" in csv_header
