"""Memory per rollout worker: what one Ray actor that samples CartPole holds, as flowrl's
``RolloutWorker`` (PPO's and Ape-X's) acting in numpy without torch (the default) and with
torch (``numpy_acting=false``), beside the same work in a bare numpy loop (a numpy MLP over 8
gymnasium envs) and an idle Ray actor (Ray's own share).

How many workers fit in a machine's memory is set by what each holds on its own. Each
row gives, from ``/proc/<pid>/smaps_rollup`` after a few fragments:

- ``rss_mb``: resident memory, the pages shared with other processes counted in full;
- ``pss_mb``: the shared pages divided among the processes sharing them;
- ``uss_mb``: pages of this process alone (private), what each extra worker adds.

    python benchmarks/worker_memory.py [--workers 4]

Writes benchmarks/results/worker_memory.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

from common import print_table, start_ray, write_results


def memory_mb(pid: int) -> dict[str, float]:
    """Rss, Pss and private (Uss) memory of process ``pid``, in MB."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    private = fields["Private_Clean"] + fields["Private_Dirty"]
    return {"rss_mb": fields["Rss"], "pss_mb": fields["Pss"], "uss_mb": private}


class NumpyWorker:
    """A worker without torch: 8 CartPole envs stepped with a 64x64 numpy MLP."""

    def __init__(self, envs: int = 8) -> None:
        import gymnasium as gym

        self.env = gym.make_vec("CartPole-v1", num_envs=envs, vectorization_mode="sync")
        self.obs, _ = self.env.reset(seed=0)
        rng = np.random.default_rng(0)
        shapes = [(4, 64), (64, 64), (64, 2)]
        self.weights = [rng.standard_normal(s).astype(np.float32) * 0.1 for s in shapes]

    def sample(self, steps: int) -> int:
        for _ in range(steps):
            x = self.obs.astype(np.float32)
            for w in self.weights[:-1]:
                x = np.tanh(x @ w)
            actions = (x @ self.weights[-1]).argmax(-1)
            self.obs, *_ = self.env.step(actions)
        return steps * self.env.num_envs


class IdleActor:
    """Ray's own share of a worker."""


def measure(name: str, actors: list[Any], sample: Any) -> list[dict[str, Any]]:
    import ray

    if sample is not None:
        for _ in range(5):
            ray.get([sample(a) for a in actors])
    pids = ray.get([a.__ray_call__.remote(lambda _: os.getpid()) for a in actors])
    torch = ray.get([a.__ray_call__.remote(lambda _: "torch" in sys.modules) for a in actors])
    rows = [memory_mb(pid) for pid in pids]
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    return [{"worker": name, "workers": len(actors), "torch_imported": all(torch), **mean}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    import ray

    from flowrl import Algorithm

    start_ray(args.workers + 1)
    n = args.workers
    rows = []
    idle = [ray.remote(num_cpus=0)(IdleActor).remote() for _ in range(n)]
    rows += measure("idle Ray actor", idle, None)
    numpy_workers = [ray.remote(num_cpus=0)(NumpyWorker).remote() for _ in range(n)]
    rows += measure("numpy MLP + 8 envs, no torch", numpy_workers, lambda a: a.sample.remote(64))
    for algo_name, label in (("ppo", "PPO"), ("apex", "Ape-X")):
        for name, numpy_acting in (("numpy, no torch", True), ("torch", False)):
            settings = {"num_cpus_per_worker": 0, "numpy_acting": numpy_acting}
            with Algorithm(algo_name, env="CartPole-v1", num_workers=n, **settings) as algo:
                workers = algo.workers.remote_workers
                time.sleep(1)
                row = f"flowrl RolloutWorker ({label}), {name}"
                rows += measure(row, workers, lambda a: a.sample.remote())
    print_table(rows)
    write_results("worker_memory", {"results": rows})


if __name__ == "__main__":
    main()
