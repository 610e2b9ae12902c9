"""The learner-thread operators: back-pressure, counting, weight broadcasts, errors."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from flowrl import Algorithm
from flowrl.core.context import LEARNER_INFO, STEPS_TRAINED, WEIGHT_BROADCASTS, PlanContext
from flowrl.core.iter import LocalIterator, NotReady
from flowrl.core.sample_batch import SampleBatch
from flowrl.ops import (
    BroadcastWeights,
    Concurrently,
    Dequeue,
    Enqueue,
    LearnerThread,
    LearnerThreadError,
    MixInReplay,
)


class FakeWorker:
    """Learns by recording batch sizes; ``gate`` holds every update until it is set."""

    def __init__(self, fail: bool = False) -> None:
        self.learned: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = fail

    def learn_on_batch(self, batch, **kwargs):
        self.gate.wait()
        if self.fail:
            raise ValueError("loss is NaN")
        self.learned.append(len(batch))
        return {"default": {"loss": float(len(batch)), "td_error": np.zeros(len(batch))}}

    def get_weights(self):
        return {"w": np.full(2, len(self.learned), np.float32)}


def batch(n: int) -> SampleBatch:
    return SampleBatch(x=np.arange(n))


def test_a_full_inbox_holds_the_batch_and_the_next_one_waits_for_room():
    worker = FakeWorker()
    worker.gate.clear()  # the learner takes one batch and blocks on it
    learner = LearnerThread(worker, inbox_size=1)
    enqueue = Enqueue(learner)
    enqueue.bind(PlanContext())
    assert enqueue(batch(1)) is not NotReady
    deadline = time.time() + 5
    while learner.inbox.qsize() and time.time() < deadline:  # the thread took it
        time.sleep(0.01)
    assert enqueue(batch(2)) is not NotReady  # into the inbox
    assert enqueue(batch(3)) is NotReady  # held: the inbox is full
    threading.Timer(0.3, worker.gate.set).start()
    started = time.perf_counter()
    enqueue(batch(4))  # waits until the held batch fits, then holds or queues this one
    assert time.perf_counter() - started >= 0.2
    enqueue(batch(5))
    steps = [len(b) for b, _ in Dequeue(learner).take(4)]
    assert steps == [1, 2, 3, 4], "in order, nothing dropped, nothing twice"
    learner.stop()
    assert not learner.is_alive()


def test_dequeue_counts_steps_trained_and_reports_scalar_stats():
    learner = LearnerThread(FakeWorker())
    feed = LocalIterator.from_items([batch(5), batch(7)]).for_each(Enqueue(learner))
    plan = Concurrently([feed, Dequeue(learner)], mode="async", output_indexes=[1])
    assert [len(b) for b, _ in plan.take(2)] == [5, 7]
    assert plan.context.counters[STEPS_TRAINED] == 12
    assert plan.context.info[LEARNER_INFO] == {"loss": 7.0}  # per-row td_error left out
    plan.close()
    assert not learner.is_alive(), "closing the plan stops the thread"


def test_an_error_in_the_learner_thread_surfaces_in_the_plan():
    learner = LearnerThread(FakeWorker(fail=True))
    feed = LocalIterator.from_items([batch(3)]).for_each(Enqueue(learner))
    plan = Concurrently([feed, Dequeue(learner)], mode="async", output_indexes=[1])
    with pytest.raises(LearnerThreadError, match="ValueError: loss is NaN"):
        plan.take(1)


def test_learner_weights_are_a_snapshot_between_updates():
    worker = FakeWorker()
    learner = LearnerThread(worker)
    learner.start()
    for n in range(20):
        learner.inbox.put(batch(n + 1))
    while learner.version < 20:
        weights = learner.get_weights()["w"]
        assert weights[0] == weights[1]
        time.sleep(0.001)
    learner.stop()


def test_latest_weights_come_from_after_an_update_without_waiting_for_the_one_under_way():
    worker = FakeWorker()
    learner = LearnerThread(worker)
    assert learner.latest_weights()[0] == 0  # not started: taken now
    learner.start()
    learner.inbox.put(batch(1))  # asked for above: the thread takes one after this update
    while learner.latest_weights()[0] < 1:
        time.sleep(0.001)
    worker.gate.clear()  # the next update is held
    learner.inbox.put(batch(2))
    started = time.perf_counter()
    version, weights = learner.latest_weights()
    assert time.perf_counter() - started < 0.05, "did not wait for the held update"
    assert version == 1 and weights["w"][0] == 1
    worker.gate.set()
    deadline = time.monotonic() + 5
    while learner.latest_weights()[0] < 2:  # asked for during update 2, taken after it
        assert time.monotonic() < deadline, "no snapshot after the released update"
        time.sleep(0.001)
    learner.stop()


def test_mix_in_replay_adds_the_proportion_on_average():
    mix = MixInReplay(capacity=10, replay_proportion=0.5, seed=3)
    out = [len(mix(batch(i + 1))) for i in range(2_000)]
    assert abs(np.mean(out) - 1.5) < 0.05
    none = MixInReplay(capacity=2, replay_proportion=0.0)
    assert [len(none(batch(2))) for _ in range(5)] == [1] * 5


def broadcaster(**settings):
    """A BroadcastWeights on a fake learner, bound to a fresh context, and the (actor,
    weights ref) pairs it sends with the actors' next requests."""
    learner, sent = LearnerThread(FakeWorker()), []
    op = BroadcastWeights(learner, **settings)
    ctx = PlanContext()
    ctx.send_with_next_request = lambda actor, carry: sent.append((actor, carry.arg))
    op.bind(ctx)
    return learner, sent, op, ctx


@pytest.mark.ray
def test_broadcast_weights_every_interval_once_per_version(ray_session):
    learner, sent, op, ctx = broadcaster(broadcast_interval=2)
    a, b = "worker-a", "worker-b"
    for actor in (a, a, b, b):  # version 0: nothing has changed, nothing is sent
        ctx.current_actor = actor
        op(batch(1))
    assert sent == []
    learner.version = 1
    for actor in (a, a, b, b, a, a):  # every 2nd item of an actor, once per version
        ctx.current_actor = actor
        op(batch(1))
    assert [actor for actor, _ in sent] == [a, b]
    assert sent[0][1] is sent[1][1], "one payload serves every worker"
    assert ctx.counters[WEIGHT_BROADCASTS] == 2


@pytest.mark.ray
def test_broadcast_weights_waits_for_min_env_steps_of_the_worker(ray_session):
    learner, sent, op, ctx = broadcaster(min_env_steps=100)
    sent_after = []
    for i in range(12):  # 30 env steps per item; a new version before every item
        learner.version = i + 1
        ctx.current_actor = "worker-a"
        op(batch(30))
        sent_after.append(len(sent))
    # sent once 100 steps have passed since the last push: after items 4, 8, 12
    assert sent_after == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
    assert len({id(ref) for _, ref in sent}) == 3, "one payload per version sent"


def test_impala_learner_thread_stops_with_the_algorithm_and_errors_surface(monkeypatch):
    algo = Algorithm("impala", env="CartPole-v1", num_workers=0, train_batch_size=200)
    assert algo.train()["env_steps_trained"] >= 200
    algo.stop()
    assert not [t for t in threading.enumerate() if t.name == "flowrl-learner"]
    broken = Algorithm("impala", env="CartPole-v1", num_workers=0, train_batch_size=200)

    def fail(*args, **kwargs):
        raise FloatingPointError("non-finite loss")

    monkeypatch.setattr(broken.workers.local_worker, "learn_on_batch", fail)
    with pytest.raises(LearnerThreadError, match="FloatingPointError: non-finite loss"):
        broken.train()
    broken.stop()


@pytest.mark.slow
def test_a_script_that_ends_without_stop_exits_cleanly_with_the_learner_thread_running():
    # torch aborted the interpreter's teardown under the daemon thread: exit 134 and
    # "terminate called without an active exception"
    script = (
        "from flowrl import Algorithm\n"
        "algo = Algorithm('impala', env='CartPole-v1', num_workers=0, train_batch_size=200)\n"
        "for _ in range(3): algo.train()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and "terminate" not in done.stderr, done.stderr[-2000:]


def test_impala_trains_on_atari_frames_through_the_cnn():
    algo = Algorithm(
        "impala", env="ALE/Pong-v5", num_workers=0, num_envs_per_worker=2,
        rollout_fragment_length=16, train_batch_size=64, min_time_s_per_iteration=0,
    )  # fmt: skip
    for _ in range(3):
        result = algo.train()
    assert result["env_steps_trained"] >= 3 * 64 and np.isfinite(result["learner/vf_loss"])
    algo.stop()


def test_appo_checkpoint_keeps_its_target_policy_and_kl_coeff(tmp_path):
    algo = Algorithm("appo", env="CartPole-v1", num_workers=0, train_batch_size=200, kl_coeff=0.2)
    algo.train()
    algo.stop()  # the learner thread has stopped: nothing changes after the save
    learner = algo.workers.learner["default"]
    path = algo.save(tmp_path / "ckpt")
    restored = Algorithm.from_checkpoint(path)
    clone = restored.workers.learner["default"]
    assert clone.kl.coeff == learner.kl.coeff
    copied = algo.plan.context.checkpointables["update_targets"].get_state()
    assert restored.plan.context.pending_state["update_targets"] == copied
    for a, b in zip(clone.target.parameters(), learner.target.parameters(), strict=True):
        assert (a == b).all()
    restored.stop()
