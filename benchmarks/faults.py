"""Fault trials too long for the test suite.

``kills``: PPO, IMPALA, APPO and Ape-X on CartPole-v1 with 2 Ray workers, a rollout worker
killed every 3 iterations until the mean return reaches 450, and Ape-X with a replay shard
killed twice (every 3 iterations): how many kills each survived and how long it took,
beside the same seed without kills. The asynchronous algorithms report every 0.2 s here
(their default is 1 s), so a run to 450 holds enough iterations for 6 kills or more.

``sigkill``: the driver of ``flowrl train`` is SIGKILLed at a random moment (some trials
as soon as a checkpoint write begins), then ``--resume`` continues: every trial must resume
from a whole checkpoint, and its result.jsonl and progress.csv must hold each iteration once.

Example:
    $ python benchmarks/faults.py kills sigkill --trials 10
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import print_table, write_results

FLOWRL = str(Path(sys.executable).parent / "flowrl")
# (algorithm, what is killed, most kills): the rows of ``kills``
KILL_ROWS = [("ppo", "worker", None), ("impala", "worker", None), ("appo", "worker", None),
             ("apex", "worker", None), ("apex", "replay shard", 2)]  # fmt: skip
ASYNC_ITERATION_S = 0.2


def _victims(algo, what: str) -> list:
    return algo.workers.remote_workers if what == "worker" else algo.workers.keep("replay", list)


def kills_trial(
    algo_name: str,
    seed: int,
    kill_every: int | None,
    what: str = "worker",
    max_kills: int | None = None,
    budget_s: float = 300.0,
) -> dict:
    import ray

    from flowrl import Algorithm
    from flowrl.run.runner import StopCriteria, run

    rng = random.Random(seed)
    settings = {} if algo_name == "ppo" else {"min_time_s_per_iteration": ASYNC_ITERATION_S}
    start = time.perf_counter()
    kills = 0
    with Algorithm(algo_name, env="CartPole-v1", num_workers=2, seed=seed, **settings) as algo:
        while time.perf_counter() - start < budget_s:
            step = kill_every or 1
            summary = run(algo, stop=StopCriteria(reward=450, iters=algo.iteration + step))
            if summary["stopped_by"] == "reward":
                break
            if kill_every and (max_kills is None or kills < max_kills):
                ray.kill(rng.choice(_victims(algo, what)))
                kills += 1
        result = algo.last_result
    return {
        "algo": algo_name,
        "trial": f"{what} killed every {kill_every} iterations" if kill_every else "no kills",
        "seed": seed,
        "reached_450": result["episode_return_mean"] >= 450,
        "wall_s": round(time.perf_counter() - start, 1),
        "iterations": result["iteration"],
        "env_steps": result["env_steps_sampled"],
        "kills": kills,
        "restarts": result["num_worker_restarts"],
    }


def kills_rows(seeds: list[int], algos: list[str]) -> list[dict]:
    """For each algorithm: a run without kills, then its kill trials, on each seed; the
    wall-clock of a trial with kills as a ratio to the run without (same seed)."""
    rows = []
    for seed in seeds:
        for algo_name in algos:
            base = kills_trial(algo_name, seed, None)
            rows.append({**base, "wall_vs_no_kills": 1.0})
            for name, what, most in KILL_ROWS:
                if name == algo_name:
                    row = kills_trial(name, seed, 3, what, most)
                    ratio = round(row["wall_s"] / base["wall_s"], 2)
                    rows.append({**row, "wall_vs_no_kills": ratio})
    return rows


def _iterations_once(run_dir: Path) -> bool:
    """result.jsonl and progress.csv hold iterations 1..n, each once, in order."""
    lines = (run_dir / "result.jsonl").read_text().splitlines()
    jsonl = [json.loads(line)["iteration"] for line in lines]
    with open(run_dir / "progress.csv") as f:
        rows = [int(r["iteration"]) for r in csv.DictReader(f)]
    return jsonl == rows == list(range(1, len(jsonl) + 1))


def sigkill_trial(trial: int, mid_checkpoint: bool) -> dict:
    """Train DQN (its replay buffer in every checkpoint, so a write takes a while) with a
    checkpoint per iteration, SIGKILL the driver, resume for 2 more iterations."""
    run_dir = Path(tempfile.mkdtemp()) / "run"
    args = ["--num-workers", "0", "--no-progress", "--checkpoint-every", "1", "--seed", trial,
            "--set", "store_buffer_in_checkpoints=true", "learning_starts=500"]  # fmt: skip
    args = [str(a) for a in args]
    proc = subprocess.Popen(
        [FLOWRL, "train", "dqn", "--output", str(run_dir), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpts = run_dir / "checkpoints"
    deadline = time.monotonic() + random.Random(trial).uniform(4.0, 15.0)
    caught_writing = False
    while time.monotonic() < deadline or mid_checkpoint:
        names = os.listdir(ckpts) if mid_checkpoint and ckpts.is_dir() else []
        # once the first checkpoints exist, kill at the next write's temporary directory
        if len(names) >= 2 and any(name.startswith(".") for name in names):
            caught_writing = True
            break
        time.sleep(0.0005 if mid_checkpoint else 0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = sorted(p.name for p in ckpts.iterdir()) if ckpts.is_dir() else []
    from flowrl.run import checkpoints

    latest = checkpoints.latest(run_dir)  # what --resume will take; --stop-iters is absolute
    resumed_at = latest.meta["iteration"]
    stop = ["--stop-iters", str(resumed_at + 2)]
    resumed = subprocess.run(
        [FLOWRL, "train", "dqn", "--resume", str(run_dir), *stop, *args],
        capture_output=True,
        text=True,
    )
    ok = (
        resumed.returncode == 0
        and f"resuming from {latest.path}" in resumed.stdout
        and _iterations_once(run_dir)
    )
    return {
        "trial": trial,
        "mid_checkpoint": caught_writing,
        "checkpoints_at_kill": len([n for n in before if not n.startswith(".")]),
        "temp_left": sum(n.startswith(".") for n in before),
        "resumed_at": resumed_at,
        "resumed_whole_and_logs_once": ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="+", choices=["kills", "sigkill"])
    parser.add_argument("--trials", type=int, default=10, help="SIGKILL trials")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--algos", nargs="+", default=sorted({name for name, _, _ in KILL_ROWS}))
    args = parser.parse_args()
    payload = {}
    if "kills" in args.what:
        import ray

        from flowrl import init_ray

        init_ray(num_cpus=2, include_dashboard=False, logging_level="ERROR")
        rows = kills_rows(args.seeds, args.algos)
        ray.shutdown()
        print_table(rows)
        payload["kills"] = rows
    if "sigkill" in args.what:
        rows = [sigkill_trial(t, mid_checkpoint=t % 3 == 0) for t in range(args.trials)]
        print_table(rows)
        payload["sigkill"] = rows
    write_results("faults", payload)


if __name__ == "__main__":
    main()
