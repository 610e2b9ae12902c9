"""bulk_sync rounds over a Ray compiled graph (flowrl.core.compiled, ``compiled_graphs``):
the same items as actor tasks, calls that reach every actor before its next item, and the
faults tasks survive (a killed worker, a hung one, an env that raises)."""

from __future__ import annotations

import fault_envs
import pytest

from flowrl import Algorithm
from flowrl.core.compiled import exclusive
from flowrl.core.iter import ParallelIterator, ParallelIteratorWorker
from flowrl.run.runner import StopCriteria, run

pytestmark = pytest.mark.ray

QUICK = {"num_envs_per_worker": 2, "train_batch_size": 128, "num_workers": 2}


class Counter(ParallelIteratorWorker):
    """Items tagged with the weights held when each was made."""

    def __init__(self, name):
        super().__init__(self.items)
        self.name, self.weights = name, None

    def items(self):
        for i in range(4):
            yield self.name, i, self.weights

    @exclusive
    def set_weights(self, weights):
        self.weights = weights


class NewWeightsEachRound:
    """Sends round ``r`` weights ``r`` as the calls of a compiled round; never as tasks."""

    def __init__(self):
        self.round = 0

    def __call__(self, ctx):
        raise AssertionError("a compiled round sends its calls in its input")

    def calls(self, ctx):
        self.round += 1
        return [("set_weights", (self.round,))]


def test_a_compiled_round_runs_its_calls_on_every_actor_before_its_item(ray_session):
    actors = [ray_session.remote(num_cpus=0)(Counter).remote(name) for name in "ab"]
    rounds = ParallelIterator.from_actors(
        actors, before_requests=NewWeightsEachRound(), request_timeout_s=30, compiled=True
    ).batch_across_shards()
    taken = rounds.take(5)  # the fifth round finds the shards exhausted
    assert taken == [[("a", i, i + 1), ("b", i, i + 1)] for i in range(4)]
    # torn down at the end: the actors take ordinary calls and other graphs again
    assert ray_session.get(actors[0].par_iter_next.remote()) is not None


@pytest.mark.slow
def test_ppo_learns_from_the_same_fragments_over_a_compiled_graph(ray_session):
    results = []
    for compiled in (False, True):
        with Algorithm("ppo", env="CartPole-v1", compiled_graphs=compiled, **QUICK) as algo:
            result = [algo.train() for _ in range(3)][-1]
            results.append({**result, **algo.plan.context.counters})
    tasks, graph = results
    assert graph["env_steps_sampled"] == tasks["env_steps_sampled"]
    assert graph["episode_return_mean"] == pytest.approx(tasks["episode_return_mean"])
    assert graph["num_weight_broadcasts"] == tasks["num_weight_broadcasts"] > 0


@pytest.mark.slow
def test_a_compiled_plan_replaces_killed_hung_and_raising_workers(ray_session):
    fault_envs.HANG_MARKER.unlink(missing_ok=True)
    config = {**QUICK, "compiled_graphs": True, "sample_timeout_s": 3.0}
    with Algorithm("ppo", env="fault_envs:HangOnce-v0", **config) as algo:
        while not algo.last_result or not algo.last_result["num_worker_restarts"]:
            run(algo, stop=StopCriteria(iters=algo.iteration + 1))  # the hung worker
        ray_session.kill(algo.workers.remote_workers[0])  # and a killed one
        summary = run(algo, stop=StopCriteria(iters=algo.iteration + 2))
        assert summary["stopped_by"] == "iterations"
        assert algo.last_result["num_worker_restarts"] == 2
    assert fault_envs.HANG_MARKER.exists(), "an env hung"
    fault_envs.HANG_MARKER.unlink(missing_ok=True)
    fault_envs.RAISE_MARKER.unlink(missing_ok=True)
    with Algorithm("ppo", env="fault_envs:RaiseOnce-v0", **config) as algo:
        while not algo.last_result or not algo.last_result["num_worker_restarts"]:
            run(algo, stop=StopCriteria(iters=algo.iteration + 1))
        assert run(algo, stop=StopCriteria(iters=algo.iteration + 1))["stopped_by"] == "iterations"
    fault_envs.RAISE_MARKER.unlink(missing_ok=True)
