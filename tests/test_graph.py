"""The plan as a graph: built from the iterators themselves for every shipped algorithm
and a user plan file, printed as text, Mermaid and DOT, drawn as a PNG, and on the CLI."""

from __future__ import annotations

import pytest

from flowrl import Algorithm
from flowrl.algorithms import NAMES
from flowrl.apps.cli import main
from flowrl.core.iter import LocalIterator
from flowrl.diagnostics.graph import plan_graph
from flowrl.ops import Concurrently

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

BUFFER = "ReplayBuffer(capacity=50000, UniformSampler) per policy"
TRAIN_ONE_STEP = "for_each(TrainOneStep(num_sgd_iter=1, sgd_minibatch_size=0))"


def labels(graph):
    return [n.label for n in graph.nodes]


def edges(graph):
    by_id = {n.id: n.label for n in graph.nodes}
    return {(by_id[e.source], by_id[e.target], e.queue) for e in graph.edges}


def test_a_chain_is_a_path_and_edges_point_forward():
    plan = LocalIterator.from_items([1, 2]).for_each(abs).filter(bool).batch(2)
    graph = plan_graph(plan)
    assert labels(graph) == ["LocalIterator[items]", "for_each(abs)", "filter(bool)", "batch(2)"]
    assert len(graph.edges) == 3
    order = {n.id: i for i, n in enumerate(graph.nodes)}
    assert all(order[e.source] < order[e.target] for e in graph.edges)


def test_concurrently_is_one_node_over_its_branches():
    a, b = LocalIterator.from_items([1]), LocalIterator.from_items([2]).for_each(abs)
    graph = plan_graph(Concurrently([a, b], mode="round_robin", output_indexes=[1]))
    (join,) = [n for n in graph.nodes if n.label.startswith("Concurrently")]
    by_id = {n.id: n.label for n in graph.nodes}
    assert [by_id[i] for i in graph.inputs(join.id)] == ["LocalIterator[items]", "for_each(abs)"]
    assert not any("tag" in n.label or "Union" in n.label for n in graph.nodes)


def test_duplicates_share_their_parent():
    left, right = LocalIterator.from_items([1, 2]).duplicate(2)
    graph = plan_graph(left.union(right))
    assert labels(graph).count("LocalIterator[items]") == 1
    assert ("LocalIterator[items]", "duplicate[0]", False) in edges(graph)
    assert ("LocalIterator[items]", "duplicate[1]", False) in edges(graph)


# what each shipped algorithm's graph must show, in-process (its branches, queues, learner)
EXPECTED = {
    "ppo": [("ParallelRollouts(bulk_sync, local)", "combine(ConcatBatches(min_batch_size=2048))")],
    "a3c": [("for_each(ComputeGradients())", "for_each(ApplyGradients(update_all=False))")],
    "dqn": [
        ("for_each(StoreToReplayBuffer())", BUFFER),
        (BUFFER, "Replay(batch_size=64)"),
    ],
    "sac": [
        ("Replay(batch_size=256)", "for_each(TrainOneStep(num_sgd_iter=1, sgd_minibatch_size=0))")
    ],
    "impala": [  # in process: sampled one batch ahead of the learner at most
        ("ParallelRollouts(async, local)", "gate(has_room)"),
        ("for_each(Enqueue())", "LearnerThread(inbox_size=1, num_sgd_iter=2)"),
        ("LearnerThread(inbox_size=1, num_sgd_iter=2)", "Dequeue(learner)"),
    ],
    "appo": [("LearnerThread(inbox_size=4, num_sgd_iter=4)", "Dequeue(learner)")],
    "apex": [
        ("for_each(StoreToReplayBuffer())", "replay: 2 shards"),
        ("replay: 2 shards", "2 x ReplayActor (Ray actors)"),
        ("LearnerThread(inbox_size=4, num_sgd_iter=1)", "Dequeue(learner)"),
    ],
    "bc": [
        ("ReadExperiences(batch_size=512)", TRAIN_ONE_STEP),
        (TRAIN_ONE_STEP, "batch(100)"),
    ],
    "marwil": [("ReadExperiences(batch_size=512)", TRAIN_ONE_STEP)],
    "iql": [
        ("ReadExperiences(batch_size=256)", TRAIN_ONE_STEP),
        (TRAIN_ONE_STEP, "for_each(UpdateTargets(period=0, tau=0.005, by='trained'))"),
    ],
}


@pytest.mark.parametrize("name", NAMES)
def test_every_shipped_algorithm_has_a_graph(ray_session, name):
    env = "Pendulum-v1" if name == "sac" else "CartPole-v1"
    algo = Algorithm(name, env=env, num_workers=0)
    try:
        graph = algo.graph()
    finally:
        algo.stop()
    found = {(a, b) for a, b, _ in edges(graph)}
    for edge in EXPECTED[name]:
        assert edge in found, f"{name}: no edge {edge} in\n{graph}"
    assert graph.nodes[-1].label.startswith("for_each(CollectMetrics")
    assert len(graph.to_text().splitlines()) == len(graph.nodes) + 1  # and its title
    assert graph.to_mermaid().startswith("%%") and "-->" in graph.to_mermaid()
    assert graph.to_dot().rstrip().endswith("}")
    assert graph.to_png().startswith(PNG_MAGIC)


def test_remote_workers_are_actors_behind_the_source(ray_session):
    algo = Algorithm("impala", num_workers=2)
    try:
        graph = algo.graph()
    finally:
        algo.stop()
    (actors,) = [n for n in graph.nodes if n.kind == "actors"]
    assert actors.label == "2 x RolloutWorker (Ray actors)"
    assert (actors.label, "gather_async(num_async=2)", False) in edges(graph)
    assert {n.kind for n in graph.nodes} >= {"actors", "step", "queue"}


@pytest.mark.parametrize("algo", ["ppo", "a3c", "dqn", "sac", "impala", "appo", "apex"])
def test_every_algorithm_draws_its_plan_without_an_env(algo, capsys):
    """Without --env, the plan is drawn on an env the algorithm fits: its default."""
    assert main(["plan", algo, "--num-workers", "0"]) == 0
    env = "Pendulum-v1" if algo == "sac" else "CartPole-v1"
    assert capsys.readouterr().out.startswith(f"{algo} on {env}\n")


def test_cli_prints_and_draws_a_plan(tmp_path, capsys, monkeypatch):
    assert main(["plan", "dqn", "--num-workers", "0"]) == 0
    text = capsys.readouterr().out
    assert BUFFER in text and "<- " in text
    assert main(["plan", "ppo", "--num-workers", "0", "--format", "mermaid"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "flowchart TD"
    out = tmp_path / "ppo.png"
    assert main(["plan", "ppo", "--num-workers", "0", "--format", "png", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_MAGIC)
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "ppo", "--num-workers", "0", "--format", "png"]) == 0
    assert (tmp_path / "plan.png").read_bytes().startswith(PNG_MAGIC)  # its default file
    assert main(["plan", "ppo", "--num-workers", "0", "--out", "drawn.png"]) == 0
    assert (tmp_path / "drawn.png").read_bytes().startswith(PNG_MAGIC)  # the suffix says png
    assert main(["plan", "ppo", "--num-workers", "0", "--out", "drawn.dot"]) == 0
    assert (tmp_path / "drawn.dot").read_text().startswith("digraph")
    capsys.readouterr()
    assert main(["plan", "ppo", "--num-workers", "0", "--format", "dot", "--out", "x.png"]) == 2
    assert "--out x.png names a png file, but --format is dot" in capsys.readouterr().err


PLAN_FILE = '''
from flowrl.algorithms.ppo import PPOConfig as Config, PPOLearner as Learner, PPOPolicy as Policy
from flowrl.ops import ConcatBatches, ParallelRollouts, StandardMetricsReporting, TrainOneStep


def plan(workers, config):
    """Train on every other fragment."""
    fragments = ParallelRollouts(workers, mode="bulk_sync").filter(lambda b: len(b) > 0)
    train = fragments.combine(ConcatBatches(min_batch_size=256)).for_each(TrainOneStep(workers))
    return StandardMetricsReporting(train, workers, config)
'''


def test_a_user_plan_file_has_a_graph(tmp_path, capsys):
    path = tmp_path / "my_plan.py"
    path.write_text(PLAN_FILE)
    assert main(["plan", f"{path}:plan", "--num-workers", "0", "--format", "dot"]) == 0
    dot = capsys.readouterr().out
    assert 'label="filter(<lambda>)"' in dot and "TrainOneStep" in dot
    assert dot.count("->") == 5  # source, filter, combine, train, OncePerIteration, metrics


@pytest.mark.parametrize("algo", ["ppo", "impala"])
def test_print_plan_shows_one_stage_a_line(algo):
    built = Algorithm(algo, num_workers=0)
    try:
        text = str(built.plan)
    finally:
        built.stop()
    lines = text.splitlines()
    assert len(lines) > 2 and max(map(len, lines)) <= 100
    assert "".join(line.strip() for line in lines).replace(",", ", ").count("for_each") == (
        repr(built.plan).count("for_each")
    )
