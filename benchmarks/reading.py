"""Reading recorded experiences: rows per second from a recording's Parquet files, and into
the learner, each against a baseline measured in the same run.

- **read**: ``read_experiences`` (manifest, Parquet, columns back to numpy, the finiteness
  check) against ``pyarrow.parquet.read_table`` of the same files alone;
- **into the learner**: ``ReadExperiences -> TrainOneStep`` with ``bc``'s learner (512-row
  batches) against the same learner stepping on slices of arrays already in memory.

- **streamed** (``input_stream``: Ray Data reads the files in Ray tasks, for recordings
  larger than memory): ``stream_experiences`` over two passes of a recording ten times
  the size (the files copied), and ``ReadExperiences(stream=True) -> bc``, with Ray given
  1 CPU and then 2 (the read tasks run on as many workers), against the same in-memory
  baselines. Each pass starts Ray Data's read anew, which a small recording pays often.
- **reader actors** (``input_readers``: each reads a share of the episodes and makes the
  batches): ``ReadExperiences(readers=N)``'s batches alone and into the learner, N the
  CPUs Ray is given, on the same large recording.

The recording is ``--steps`` env steps of PPO on CartPole-v1, one worker.

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

    from flowrl.algorithms.bc import BCConfig, BCLearner
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
        learners = Learners({"default": BCLearner(policy, config)})
        data = read_experiences(out)["default"]
        batch, n = config.train_batch_size, args.updates * config.train_batch_size

        def in_memory() -> None:
            for i in range(args.updates):
                at = (i * batch) % (len(data) - batch)
                part = SampleBatch({k: v[at : at + batch] for k, v in data.items()
                                    if v.dtype != object})  # fmt: skip
                learners.learn_on_batch(MultiAgentBatch({"default": part}, batch))

        stream = ReadExperiences(out, batch_size=batch)
        next(stream)  # the recording read once, before timing

        def from_recording() -> None:
            for _ in range(args.updates):
                learners.learn_on_batch(next(stream))

        plain_learn = rows_per_s(in_memory, n, args.rounds)
        flowrl_learn = rows_per_s(from_recording, n, args.rounds)
        big = ten_times(out, Path(tmp) / "ten_times")
        streamed = {cpus: with_ray(big, 10 * rows, cpus, learners, args) for cpus in (1, 2)}
    results = [
        {"path": "read: pyarrow read_table alone", "rows_per_s": plain_read, "x baseline": 1.0},
        {"path": "read: read_experiences", "rows_per_s": flowrl_read,
         "x baseline": flowrl_read / plain_read},
        {"path": "learn: bc from arrays in memory", "rows_per_s": plain_learn, "x baseline": 1.0},
        {"path": "learn: ReadExperiences -> bc", "rows_per_s": flowrl_learn,
         "x baseline": flowrl_learn / plain_learn},
    ]  # fmt: skip
    for cpus, (read, learn, served, served_learn) in streamed.items():
        results += [
            {"path": f"read: stream_experiences, Ray on {cpus} CPU", "rows_per_s": read,
             "x baseline": read / plain_read},
            {"path": f"learn: ReadExperiences(stream) -> bc, Ray on {cpus} CPU",
             "rows_per_s": learn, "x baseline": learn / plain_learn},
            {"path": f"read: ReadExperiences(readers={cpus}) batches alone", "rows_per_s": served,
             "x baseline": served / plain_read},
            {"path": f"learn: ReadExperiences(readers={cpus}) -> bc", "rows_per_s": served_learn,
             "x baseline": served_learn / plain_learn},
        ]  # fmt: skip
    print_table(results)
    write_results("reading", {"rows": rows, "results": results})


def ten_times(out: Path, big: Path) -> Path:
    """The recording with each of its files ten times."""
    import shutil

    (big / "default").mkdir(parents=True)
    for name in ("manifest.json", "spaces.pkl"):
        shutil.copy(out / name, big / name)
    for f in (out / "default").glob("*.parquet"):
        for i in range(10):
            shutil.copy(f, big / "default" / f"{f.stem}-{i}.parquet")
    return big


def with_ray(out: Path, rows: int, cpus: int, learners, args) -> tuple[float, ...]:
    """With Ray given ``cpus`` CPUs: rows/s streamed over two passes of the recording, and
    into the learner; and the batches of ``cpus`` reader actors alone, and into the
    learner."""
    import ray

    from flowrl.ops import ReadExperiences
    from flowrl.rollout.experiences import stream_experiences

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        batch, passes = 4096, 2
        batches = passes * rows // batch

        def read() -> None:
            stream = stream_experiences(out, batch_size=batch)
            for _ in range(batches):
                next(stream)
            stream.close()

        read_rate = rows_per_s(read, batches * batch, min(args.rounds, 2))
        stream = ReadExperiences(out, batch_size=512, stream=True)
        next(stream)  # Ray Data's first pass under way before timing

        def learn() -> None:
            for _ in range(args.updates):
                learners.learn_on_batch(next(stream))

        learn_rate = rows_per_s(learn, args.updates * 512, args.rounds)
        stream.close()
        readers = ReadExperiences(out, batch_size=512, readers=cpus)
        next(readers)  # the actors started and their shares read before timing

        def served() -> None:
            for _ in range(args.updates):
                next(readers)

        def learn_served() -> None:
            for _ in range(args.updates):
                learners.learn_on_batch(next(readers))

        served_rate = rows_per_s(served, args.updates * 512, args.rounds)
        served_learn_rate = rows_per_s(learn_served, args.updates * 512, args.rounds)
        readers.close()
        return read_rate, learn_rate, served_rate, served_learn_rate
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
