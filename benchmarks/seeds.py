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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import print_table, write_results

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
    """One ``flowrl train`` run to the algorithm's target (``more``: further arguments);
    its summary and wall time."""
    env, reward, budget, extra = TARGETS[algo]
    command = [sys.executable, "-m", "flowrl", "train", algo.removesuffix("-discrete"),
               "--env", env, "--seed", str(seed), "--stop-reward", str(reward),
               "--stop-timesteps", str(budget), "--output", str(out), "--no-progress",
               *extra, *more]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        return {"algo": algo, "seed": seed, "error": " ".join(tail), "seconds": seconds}
    summary = json.loads((out / "summary.json").read_text())
    return {"algo": algo, "seed": seed, "reached": summary["stopped_by"] == "reward",
            "env_steps": summary["env_steps_sampled"], "return": summary["episode_return_mean"],
            "seconds": round(seconds, 1), "layout": _layout(summary),
            "curve": _curve(out / "result.jsonl")}  # fmt: skip


def _curve(log: Path, every: int = 10_000) -> list[tuple[int, float]]:
    """The run's mean return about every ``every`` env steps: whether a miss learned
    slowly or learned and then fell back."""
    curve, next_at = [], 0
    for line in log.read_text().splitlines():
        row = json.loads(line)
        if row["env_steps_sampled"] >= next_at and row.get("episode_return_mean") is not None:
            curve.append((row["env_steps_sampled"], round(row["episode_return_mean"], 1)))
            next_at = row["env_steps_sampled"] + every
    return curve


def _layout(summary: dict) -> str:
    layout = summary.get("layout") or {}
    return "x".join(str(layout.get(k, "?")) for k in
                    ("num_workers", "num_envs_per_worker", "rollout_fragment_length"))  # fmt: skip


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
