"""Reading recorded experiences: rows per second from a recording's Parquet files, and into
the learner, each against a baseline measured in the same run.

- **read**: ``read_experiences`` (manifest, Parquet, columns back to numpy, the finiteness
  check) against ``pyarrow.parquet.read_table`` of the same files alone;
- **into the learner**: ``ReadExperiences -> TrainOneStep`` with ``bc``'s learner (512-row
  batches) against the same learner stepping on slices of arrays already in memory.

The recording is ``--steps`` env steps of PPO on CartPole-v1, one worker. Reading from
several workers (a recording sharded over them) is not built yet.

    python benchmarks/reading.py [--steps 100000] [--rounds 5]

Writes benchmarks/results/reading.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from common import print_table, write_results


def record(out: Path, steps: int) -> None:
    from flowrl import Algorithm

    with Algorithm("ppo", env="CartPole-v1", num_workers=0, record_experiences=str(out)) as algo:
        while algo.train()["env_steps_sampled"] < steps:
            pass


def rows_per_s(fn, rows: int, rounds: int) -> float:
    """The best of ``rounds`` timings of ``fn`` (which handles ``rows`` rows)."""
    best = np.inf
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return rows / best


def main() -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flowrl.algorithms.bc import BCConfig
    from flowrl.algorithms.marwil import MARWILLearner
    from flowrl.core.sample_batch import MultiAgentBatch, SampleBatch
    from flowrl.learning.multi import Learners
    from flowrl.learning.policy import Policy
    from flowrl.ops import ReadExperiences
    from flowrl.rollout.experiences import read_experiences, read_manifest

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=200, help="SGD steps per timing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "recorded"
        record(out, args.steps)
        files = sorted(out.glob("default/*.parquet"))
        rows = len(read_experiences(out)["default"])
        plain_read = rows_per_s(lambda: pa.concat_tables([pq.read_table(f) for f in files]),
                                rows, args.rounds)  # fmt: skip
        flowrl_read = rows_per_s(lambda: read_experiences(out), rows, args.rounds)

        _, spaces = read_manifest(out)
        config = BCConfig(input=str(out))
        policy = Policy(*spaces["default"], config)
        learners = Learners({"default": MARWILLearner(policy, config)})
        data = read_experiences(out)["default"]
        data["returns"] = np.zeros(len(data), np.float32)
        batch, n = config.train_batch_size, args.updates * config.train_batch_size

        def in_memory() -> None:
            for i in range(args.updates):
                at = (i * batch) % (len(data) - batch)
                part = SampleBatch({k: v[at : at + batch] for k, v in data.items()
                                    if v.dtype != object})  # fmt: skip
                learners.learn_on_batch(MultiAgentBatch({"default": part}, batch))

        stream = ReadExperiences(out, batch_size=batch, prepare=_with_returns)
        next(stream)  # the recording read once, before timing

        def from_recording() -> None:
            for _ in range(args.updates):
                learners.learn_on_batch(next(stream))

        plain_learn = rows_per_s(in_memory, n, args.rounds)
        flowrl_learn = rows_per_s(from_recording, n, args.rounds)
    results = [
        {"path": "read: pyarrow read_table alone", "rows_per_s": plain_read, "x baseline": 1.0},
        {"path": "read: read_experiences", "rows_per_s": flowrl_read,
         "x baseline": flowrl_read / plain_read},
        {"path": "learn: bc from arrays in memory", "rows_per_s": plain_learn, "x baseline": 1.0},
        {"path": "learn: ReadExperiences -> bc", "rows_per_s": flowrl_learn,
         "x baseline": flowrl_learn / plain_learn},
    ]  # fmt: skip
    print_table(results)
    write_results("reading", {"rows": rows, "results": results})


def _with_returns(rows):
    rows["returns"] = np.zeros(len(rows), np.float32)
    return rows


if __name__ == "__main__":
    main()
