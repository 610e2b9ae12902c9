"""Learning on every seed: each algorithm's learning-test target and budget, run as a user
runs it (``flowrl train``, layout auto) on seeds never used to choose its defaults.

For each algorithm: how many seeds reach the target within the budget, the median and worst
env steps and seconds to it (over the seeds that reach it), and each seed's final return.
Seeds 100-109 by default: the defaults and learning tests were chosen on seeds 0-47.

    python benchmarks/seeds.py [--algos dqn ppo] [--seeds 100 101 ...] [--name seeds_dqn]
        [--train-args "--num-workers 0"]

Writes benchmarks/results/<name>.json (default ``seeds``), one row per algorithm and seed,
after every run, so an interrupted benchmark keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from common import print_table, train_cli, write_results

# the learning tests' targets (tests/test_learning.py): env, return, env-step budget, settings
TARGETS = {
    "ppo": ("CartPole-v1", 450, 150_000, []),
    "dqn": ("CartPole-v1", 450, 200_000, []),
    "apex": ("CartPole-v1", 450, 400_000, []),
    "impala": ("CartPole-v1", 450, 500_000, []),
    "appo": ("CartPole-v1", 450, 500_000, []),
    "a3c": ("CartPole-v1", 150, 200_000, []),
    "sac": ("Pendulum-v1", -250, 20_000, []),
    "sac-discrete": ("CartPole-v1", 150, 100_000, ["--set", "discrete=true"]),
}


def run_seed(algo: str, seed: int, out: Path, more: list[str]) -> dict:
    """One ``flowrl train`` run to the algorithm's target (``more``: further arguments)."""
    env, reward, budget, extra = TARGETS[algo]
    row = train_cli(algo.removesuffix("-discrete"), env, seed, budget, out, [*extra, *more],
                    stop_reward=reward)  # fmt: skip
    row["algo"] = algo
    if "error" not in row:
        row["reached"] = row["stopped_by"] == "reward"
    return row


def table(rows: list[dict]) -> list[dict]:
    """One line per algorithm: seeds reaching the target, median and worst steps and
    seconds to it, and the worst final return."""
    lines = []
    for algo in dict.fromkeys(r["algo"] for r in rows):
        mine = [r for r in rows if r["algo"] == algo]
        hit = [r for r in mine if r.get("reached")]
        steps = [r["env_steps"] for r in hit] or [float("nan")]
        secs = [r["seconds"] for r in hit] or [float("nan")]
        worst = min((r.get("return", float("nan")) for r in mine), default=float("nan"))
        lines.append({"algo": algo, "reached": f"{len(hit)}/{len(mine)}",
                      "median steps": np.median(steps), "worst steps": max(steps),
                      "median s": np.median(secs), "worst s": max(secs),
                      "worst return": worst})  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(100, 110)))
    parser.add_argument("--name", default="seeds")
    parser.add_argument("--train-args", default="", help='more train arguments: "--num-workers 0"')
    args = parser.parse_args()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for algo in args.algos:
            for seed in args.seeds:
                row = run_seed(algo, seed, Path(tmp) / f"{algo}_{seed}", args.train_args.split())
                rows.append(row)
                print(json.dumps(row), flush=True)
                targets = {a: TARGETS[a][:3] for a in args.algos}
                write_results(args.name, {"targets": targets, "train_args": args.train_args,
                                          "rows": rows})  # fmt: skip
    print_table(table(rows))


if __name__ == "__main__":
    main()
