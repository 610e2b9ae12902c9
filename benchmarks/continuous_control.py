"""The MuJoCo presets, measured on Hopper-v5 (issue 18): SAC's env steps to a return of
1,000 within 100k, and PPO with observation and reward normalisation (both: the preset's,
whose lr now anneals to 0 at 1M env steps), each alone and neither, on the same env-step
budget and seeds (ratios are against neither).

Each run trains in this process (both presets run without Ray). Returns are the mean of
the last episodes the run finished (10 for SAC, 100 for PPO) and of 10 greedy episodes at
the end.

Example:
    $ python benchmarks/continuous_control.py --part sac --seeds 0
    $ python benchmarks/continuous_control.py --part ppo --seeds 0 1 2 --ppo-steps 500000 --jobs 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from common import print_table, write_results

ENV = "Hopper-v5"


# PPO's normalisation settings compared: (normalize_observations, normalize_rewards)
NORMALISATION = {
    "none": (False, False),
    "observations": (True, False),
    "rewards": (False, True),
    "both": (True, True),  # the preset's
}


def train(algo_name: str, seed: int, budget: int, target: float | None, **config: Any) -> dict:
    """Train until ``budget`` env steps; the step at which the training return first
    reached ``target``, the learning curve, the final training return and a greedy
    evaluation. One torch thread, so that runs in parallel processes do not compete."""
    import torch

    from flowrl import Algorithm

    torch.set_num_threads(1)
    algo = Algorithm(algo_name, env=ENV, seed=seed, **config)
    start, reached_at, result, curve = time.perf_counter(), None, {}, []
    while not result or result["env_steps_sampled"] < budget:
        result = algo.train()
        ret = result.get("episode_return_mean")
        if target is not None and reached_at is None and ret is not None and ret >= target:
            reached_at = result["env_steps_sampled"]
        curve.append((result["env_steps_sampled"], ret))
        print(f"  {algo_name} {config} seed {seed}: {curve[-1][0]} steps, return {ret}", flush=True)
    greedy = algo.evaluate(10)["episode_return_mean"]
    algo.stop()
    return {
        "seed": seed,
        "env_steps": result["env_steps_sampled"],
        "wall_s": time.perf_counter() - start,
        "return_mean": result["episode_return_mean"],
        "greedy_return_mean": greedy,
        "reached_target_at": reached_at,
        "curve": curve,
    }


def sac(seeds: list[int], budget: int, jobs: int) -> list[dict]:
    runs = run_all([("sac", seed, budget, 1000.0, {}) for seed in seeds], jobs)
    return [{"algo": "sac (preset)", **run} for run in runs]


def return_at(curve: list[tuple[int, float]], steps: int) -> float:
    """The training return of the first iteration that reached ``steps`` env steps."""
    return next(ret for at, ret in curve if at >= steps)


def ppo(seeds: list[int], budget: int, jobs: int, settings: list[str]) -> list[dict]:
    """Each normalisation setting on every seed, then per setting the mean return over the
    seeds at checkpoints along the budget, as a ratio to no normalisation."""
    tasks = []
    for name in settings:
        obs, rew = NORMALISATION[name]
        flags = {"normalize_observations": obs, "normalize_rewards": rew}
        tasks += [("ppo", seed, budget, None, flags) for seed in seeds]
    runs = run_all(tasks, jobs)
    by_setting = {
        name: runs[i * len(seeds) : (i + 1) * len(seeds)] for i, name in enumerate(settings)
    }
    rows = [
        {"algo": f"ppo (preset, normalise {name})", **run}
        for name, group in by_setting.items()
        for run in group
    ]
    marks = sorted({budget // 4, budget // 2, 3 * budget // 4, budget})
    for name, group in by_setting.items():
        row = {"algo": f"ppo normalise {name}: mean of {len(seeds)} seeds"}
        for mark in marks:
            row[f"return_at_{mark // 1000}k"] = float(
                np.mean([return_at(r["curve"], mark) for r in group])
            )
        row["greedy_return_mean"] = float(np.mean([r["greedy_return_mean"] for r in group]))
        if "none" in by_setting:
            plain = by_setting["none"]
            row["vs_none_at_budget"] = row[f"return_at_{budget // 1000}k"] / float(
                np.mean([return_at(r["curve"], budget) for r in plain])
            )
        rows.append(row)
    return rows


def run_all(tasks: list[tuple], jobs: int) -> list[dict]:
    """``train(*task)`` for each task, ``jobs`` processes at a time, in the tasks' order."""
    if jobs <= 1:
        return [train(*task[:4], **task[4]) for task in tasks]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [pool.submit(train, *task[:4], **task[4]) for task in tasks]
        return [f.result() for f in futures]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["sac", "ppo", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--sac-steps", type=int, default=100_000)
    parser.add_argument("--ppo-steps", type=int, default=300_000)
    parser.add_argument(
        "--normalise", nargs="+", choices=list(NORMALISATION), default=list(NORMALISATION)
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    args = parser.parse_args()

    rows = []
    if args.part in ("sac", "both"):
        rows += sac(args.seeds, args.sac_steps, args.jobs)
    if args.part in ("ppo", "both"):
        rows += ppo(args.seeds, args.ppo_steps, args.jobs, args.normalise)
    print_table([r for r in rows if "mean of" in r["algo"]] or rows)
    name = "continuous_control" if args.part == "both" else f"continuous_control_{args.part}"
    write_results(name, {"env": ENV, "rows": rows, "seeds": args.seeds})


if __name__ == "__main__":
    main()
