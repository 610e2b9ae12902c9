"""The cost of one round of communication with rollout workers, before any sampling: the
weights out to every worker and one fragment back from each, as ``bulk_sync`` does, with
payloads of the sizes flowrl's plans move.

- **Ray actor tasks**: ``worker.step.remote(weights)`` to each, then ``ray.get`` (today's
  operators);
- **a Ray compiled graph** (``ray.dag``, ``experimental_compile``): the same calls as one
  graph compiled once, over shared-memory channels;
- **flowrl's channels** (``flowrl.core.channels``, what ``ParallelRollouts`` uses where
  fragments are small): the same actors, each answering over a socket of its own;
- **plain pipes** (the baseline): a ``multiprocessing`` process per worker, weights sent
  down a pipe and the fragment back, pickled.

Each worker answers at once with a fragment it holds, so the figure is communication
alone. A second table, **waiting**, has every worker take 20 ms before it answers (its
sampling) and the driver 20 ms between rounds (its learning), and gives the CPU the driver
and each worker spend per round on top of that: a reader that spins while it waits shows
there (Ray 2.60's compiled-graph channels do; flowrl's block in the kernel).

Payloads: PPO's CartPole weights and a 640-step fragment (8 envs x 80 steps) taken
from a real worker, and an Atari-sized one (84x84x4 frames, 8 envs x 32 steps).

    python benchmarks/call_cost.py [--workers 1 2 4] [--rounds 300]

Writes benchmarks/results/call_cost.json: microseconds per round, and each path against
the pipes in the same run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import pickle
import time
from typing import Any

import numpy as np

from common import print_table, start_ray, time_per_call, write_results


class Worker:
    """What the round asks of a rollout worker, without the sampling: take the weights,
    give back a fragment."""

    def __init__(self, fragment: Any) -> None:
        self.fragment = fragment
        self.weights = None

    def step(self, weights: Any) -> Any:
        self.weights = weights
        return self.fragment

    def sample(self, weights: Any) -> Any:
        """``step`` after 20 ms of sampling (a sleep: no CPU of its own)."""
        time.sleep(WAIT_S)
        return self.step(weights)

    def channel(self, method: str) -> Any:
        """Open a channel that answers ``method`` (``step`` or ``sample``); its address."""
        from flowrl.core.channels import ChannelServer

        self.server = ChannelServer(getattr(self, method))
        return self.server.address

    def cpu_s(self) -> float:
        return time.process_time()  # every thread's, the compiled graph's too


#: what a worker takes to sample and the driver to learn, per round, in ``waiting``
WAIT_S = 0.02


def cartpole_payload() -> tuple[Any, Any]:
    """PPO's CartPole weights and one worker's fragment, as the plan sends and gets them."""
    from flowrl import Algorithm

    config = {"num_workers": 0, "num_envs_per_worker": 8, "rollout_fragment_length": 80}
    with Algorithm("ppo", env="CartPole-v1", **config) as algo:
        worker = algo.workers.local_worker
        return worker.get_weights(), worker.sample()


def atari_payload(weights: Any) -> tuple[Any, Any]:
    """Frames of 8 envs x 32 steps, with the small columns beside them."""
    n = 8 * 32
    fragment = {
        "obs": np.zeros((n, 4, 84, 84), np.uint8),
        "actions": np.zeros(n, np.int64),
        "rewards": np.zeros(n, np.float32),
        "vf_preds": np.zeros(n, np.float32),
        "action_dist_inputs": np.zeros((n, 6), np.float32),
    }
    return weights, fragment


def nbytes(value: Any) -> int:
    return len(pickle.dumps(value, protocol=5))


def actor_tasks(actors: list[Any], weights: Any) -> Any:
    import ray

    def round_trip() -> None:
        ref = ray.put(weights)  # once per round, as WorkerSet broadcasts
        ray.get([a.step.remote(ref) for a in actors])

    return round_trip


def compiled_graph(actors: list[Any], weights: Any) -> tuple[Any, Any]:
    import ray
    from ray.dag import InputNode, MultiOutputNode

    with InputNode() as weights_in:
        dag = MultiOutputNode([a.step.bind(weights_in) for a in actors])
    compiled = dag.experimental_compile()

    def round_trip() -> None:
        ray.get(compiled.execute(weights))

    return round_trip, compiled


def channels(actors: list[Any], weights: Any, method: str = "step") -> tuple[Any, Any]:
    """A round over flowrl's channels: the weights pickled once, a request to each actor,
    then every reply in."""
    import ray

    from flowrl.core.channels import Channel, dumps, receive

    addresses = ray.get([a.channel.remote(method) for a in actors])
    ends = [Channel(a, address) for a, address in zip(actors, addresses, strict=True)]

    def round_trip() -> None:
        pickled = dumps((weights,))
        tickets = [end.send((weights,), pickled) for end in ends]
        while not all(t.answered for t in tickets):
            receive(ends, None)
        for t in tickets:
            t.take()

    return round_trip, lambda: [end.close() for end in ends]


def waiting(actors: list[Any], weights: Any, rounds: int) -> list[dict[str, Any]]:
    """CPU per round of the driver and of each worker beyond the work itself, as tasks
    and compiled, with workers that sample ``WAIT_S`` and a driver that learns as long."""
    import ray
    from ray.dag import InputNode, MultiOutputNode

    def measure(path: str, round_trip: Any) -> dict[str, Any]:
        round_trip()
        workers_before = ray.get([a.cpu_s.remote() for a in actors])
        driver_before, wall_before = time.process_time(), time.perf_counter()
        for _ in range(rounds):
            round_trip()
            time.sleep(WAIT_S)  # the learner's turn: the workers wait for the next round
        driver = (time.process_time() - driver_before) / rounds
        wall = (time.perf_counter() - wall_before) / rounds
        workers = np.subtract(ray.get([a.cpu_s.remote() for a in actors]), workers_before)
        return {"path": path, "workers": len(actors), "ms_per_round": wall * 1e3,
                "driver_cpu_ms_per_round": driver * 1e3,
                "worker_cpu_ms_per_round": float(workers.mean()) / rounds * 1e3}  # fmt: skip

    def tasks() -> None:
        ref = ray.put(weights)
        ray.get([a.sample.remote(ref) for a in actors])

    rows = [measure("Ray actor tasks", tasks)]
    channel_round, close = channels(actors, weights, "sample")
    rows.append(measure("flowrl channels", channel_round))
    close()
    # compiled after the tasks ran: a worker in a graph waits on its input all the while
    with InputNode() as weights_in:
        graph = MultiOutputNode([a.sample.bind(weights_in) for a in actors])
    compiled = graph.experimental_compile()
    rows.append(measure("Ray compiled graph", lambda: ray.get(compiled.execute(weights))))
    compiled.teardown()
    return rows


def _pipe_worker(conn: Any, fragment: Any) -> None:
    while True:
        weights = conn.recv()
        if weights is None:
            return
        conn.send(fragment)


def pipes(n: int, weights: Any, fragment: Any) -> tuple[Any, Any]:
    context = mp.get_context("fork")
    ends = [context.Pipe() for _ in range(n)]
    procs = [context.Process(target=_pipe_worker, args=(child, fragment), daemon=True)
             for _, child in ends]  # fmt: skip
    for p in procs:
        p.start()

    def round_trip() -> None:
        for parent, _ in ends:
            parent.send(weights)
        for parent, _ in ends:
            parent.recv()

    def stop() -> None:
        for parent, _ in ends:
            parent.send(None)
        for p in procs:
            p.join()

    return round_trip, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    import ray

    weights, fragment = cartpole_payload()
    payloads = {"cartpole": (weights, fragment), "atari": atari_payload(weights)}
    start_ray(max(args.workers) + 1)
    remote = ray.remote(num_cpus=0)(Worker)
    rows = []
    for name, (w, f) in payloads.items():
        for n in args.workers:
            pipe_round, stop = pipes(n, w, f)
            base = time_per_call(pipe_round, repeats=args.rounds)
            stop()
            actors = [remote.remote(f) for _ in range(n)]
            ray.get([a.step.remote(None) for a in actors])  # started
            tasks = time_per_call(actor_tasks(actors, w), repeats=args.rounds)
            channel_round, close = channels(actors, w)
            channel = time_per_call(channel_round, repeats=args.rounds)
            close()
            graph_round, compiled = compiled_graph(actors, w)
            graph = time_per_call(graph_round, repeats=args.rounds)
            compiled.teardown()
            for a in actors:
                ray.kill(a)
            for path, seconds in (("plain pipes", base), ("Ray actor tasks", tasks),
                                  ("flowrl channels", channel),
                                  ("Ray compiled graph", graph)):  # fmt: skip
                rows.append({"payload": name, "workers": n, "path": path,
                             "weights_kb": nbytes(w) / 1e3, "fragment_kb": nbytes(f) / 1e3,
                             "us_per_round": seconds * 1e6, "x pipes": seconds / base})  # fmt: skip
    print_table(rows)
    actors = [remote.remote(fragment) for _ in range(2)]
    waits = waiting(actors, weights, rounds=max(20, args.rounds // 10))
    print_table(waits)
    write_results("call_cost", {"rounds": args.rounds, "results": rows, "waiting": waits})


if __name__ == "__main__":
    main()
