"""Time to reward: wall-clock from process start to an episode return of 450 on CartPole-v1
for flowrl PPO (its defaults: 2 Ray workers; and with ``--num-workers 0``, which suits
CartPole on a 2-core machine) and RLlib PPO (its tuned CartPole settings, when
``ray[rllib]`` is installed), each in a fresh process, in one run.

    python benchmarks/time_to_reward.py [--seeds 0 1 2] [--reward 450]

Writes benchmarks/results/time_to_reward.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import print_table, write_results

RLLIB_PPO = """
import sys, time
start = time.time()
from ray.rllib.algorithms.ppo import PPOConfig
reward, budget, seed = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
# RLlib's tuned example for CartPole-v1 (tuned_examples/ppo/cartpole_ppo.py)
config = (
    PPOConfig().environment("CartPole-v1").debugging(seed=seed)
    .env_runners(num_env_runners=2, num_envs_per_env_runner=8)
    .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.01)
)
algo = config.build_algo()
steps, ret = 0, float("-inf")
while ret < reward and steps < budget:
    result = algo.train()
    runners = result["env_runners"]
    steps = result.get("num_env_steps_sampled_lifetime",
                       runners.get("num_env_steps_sampled_lifetime", 0))
    ret = runners.get("episode_return_mean", float("-inf"))
print("RESULT", ret >= reward, steps, time.time() - start)
"""


def flowrl_ppo(reward: float, budget: int, seed: int, num_workers: int | None = None) -> dict:
    """``flowrl train ppo`` as a user runs it; the clock includes imports and Ray start.
    ``num_workers`` None keeps PPO's default (2 Ray workers)."""
    flowrl = str(Path(sys.executable).parent / "flowrl")
    workers = [] if num_workers is None else ["--num-workers", str(num_workers)]
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run(
            [flowrl, "train", "ppo", "--env", "CartPole-v1", "--seed", str(seed),
             "--stop-reward", str(reward), "--stop-timesteps", str(budget), "--no-progress",
             "--output", out, *workers],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - start
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"reached": summary["stopped_by"] == "reward",
            "env_steps": summary["env_steps_sampled"], "wall_s": wall}  # fmt: skip


def rllib_ppo(reward: float, budget: int, seed: int) -> dict | None:
    try:
        import ray.rllib  # noqa: F401
    except ImportError:
        return None
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", RLLIB_PPO, str(reward), str(budget), str(seed)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT"))
    _, reached, steps, _ = line.split()
    return {"reached": reached == "True", "env_steps": int(float(steps)), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--reward", type=float, default=450.0)
    parser.add_argument("--budget", type=int, default=500_000, help="env steps before giving up")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        contenders = {
            "flowrl ppo (2 workers)": flowrl_ppo,
            # CartPole on 2 cores: sampling in the learner's process, no Ray to start
            "flowrl ppo (num_workers=0)": lambda r, b, s: flowrl_ppo(r, b, s, num_workers=0),
            "rllib ppo": rllib_ppo,
        }
        for name, fn in contenders.items():
            result = fn(args.reward, args.budget, seed)
            if result is not None:
                rows.append({"contender": name, "seed": seed, **result})
    summary = []
    for name in dict.fromkeys(r["contender"] for r in rows):
        mine = [r for r in rows if r["contender"] == name]
        summary.append({"contender": name,
                        "median_wall_s": sorted(r["wall_s"] for r in mine)[len(mine) // 2],
                        "reached": f"{sum(r['reached'] for r in mine)}/{len(mine)}"})  # fmt: skip
    rllib = next((s["median_wall_s"] for s in summary if s["contender"] == "rllib ppo"), None)
    for s in summary:
        s["x rllib"] = None if rllib is None else s["median_wall_s"] / rllib
    print(f"CartPole-v1: wall-clock from process start to return {args.reward:g}")
    print_table(rows)
    print_table(summary)
    write_results("time_to_reward", {"reward": args.reward, "runs": rows, "summary": summary})


if __name__ == "__main__":
    main()
