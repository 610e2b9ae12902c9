"""Prioritized replay: time to sample a batch of 256 from a full 1,000,000-row buffer and
to update its priorities, against uniform sampling of the same buffer (the baseline).

    python benchmarks/replay.py [--capacity 1000000] [--batch 256]

Writes benchmarks/results/replay.json.
"""

from __future__ import annotations

import argparse

import numpy as np

from flowrl.core.sample_batch import SampleBatch
from flowrl.replay import PrioritizedSampler, ReplayBuffer, UniformSampler

from common import print_table, time_per_call, write_results


def filled(capacity: int, sampler) -> ReplayBuffer:
    """A full buffer of CartPole-sized transitions (DQN's columns)."""
    buf = ReplayBuffer(capacity, sampler=sampler, seed=0)
    rng = np.random.default_rng(0)
    chunk = 100_000
    for _ in range(capacity // chunk):
        buf.add(SampleBatch(
            obs=rng.normal(size=(chunk, 4)).astype(np.float32),
            next_obs=rng.normal(size=(chunk, 4)).astype(np.float32),
            actions=rng.integers(0, 2, chunk), rewards=np.ones(chunk, np.float32),
            terminateds=np.zeros(chunk, bool), discounts=np.full(chunk, 0.99, np.float32),
        ))  # fmt: skip
    return buf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2_000)
    args = parser.parse_args()
    n, rng = args.batch, np.random.default_rng(1)

    uniform = filled(args.capacity, UniformSampler())
    baseline = time_per_call(lambda: uniform.sample(n), repeats=args.repeats)
    rows = [{"operation": "uniform sample (baseline)", "ms": baseline * 1e3, "x baseline": 1.0}]
    for normalize_by in ("batch", "buffer"):
        sampler = PrioritizedSampler(args.capacity, alpha=0.6, beta=0.4, normalize_by=normalize_by)
        buf = filled(args.capacity, sampler)
        buf.update_priorities(np.arange(args.capacity), rng.exponential(size=args.capacity))
        batch = buf.sample(n)
        sample = time_per_call(lambda b=buf: b.sample(n), repeats=args.repeats)
        update = time_per_call(
            lambda b=buf, idx=batch["batch_indexes"]: b.update_priorities(idx, rng.random(n)),
            repeats=args.repeats,
        )
        for op, secs in (("sample", sample), ("update priorities", update)):
            label = f"prioritized {op} (weights by {normalize_by})"
            rows.append({"operation": label, "ms": secs * 1e3, "x baseline": secs / baseline})
    print(f"buffer of {args.capacity:,} rows, batches of {n}, median of {args.repeats} calls")
    print_table(rows)
    write_results("replay", {"capacity": args.capacity, "batch_size": n, "results": rows})


if __name__ == "__main__":
    main()
