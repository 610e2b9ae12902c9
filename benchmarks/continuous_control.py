"""The MuJoCo presets, measured on Hopper-v5 (issue 18): SAC's env steps to a return of
1,000 within 100k, and PPO with observation and reward normalisation against the same
preset without it, on the same env-step budget and seeds (the ratio is normalised / plain).

Each run trains in this process (both presets run without Ray). Returns are the mean of
the last episodes the run finished (10 for SAC, 100 for PPO) and of 10 greedy episodes at
the end.

Example:
    $ python benchmarks/continuous_control.py --part sac --seeds 0
    $ python benchmarks/continuous_control.py --part ppo --seeds 0 1 --ppo-steps 300000
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from common import print_table, write_results

ENV = "Hopper-v5"


def train(algo_name: str, seed: int, budget: int, target: float | None, **config: Any) -> dict:
    """Train until ``budget`` env steps; the step at which the training return first
    reached ``target``, the final training return and a greedy evaluation."""
    from flowrl import Algorithm

    algo = Algorithm(algo_name, env=ENV, seed=seed, **config)
    start, reached_at, result = time.perf_counter(), None, {}
    while not result or result["env_steps_sampled"] < budget:
        result = algo.train()
        ret = result.get("episode_return_mean")
        if target is not None and reached_at is None and ret is not None and ret >= target:
            reached_at = result["env_steps_sampled"]
        print(
            f"  {algo_name} seed {seed}: {result['env_steps_sampled']} steps, return {ret}",
            flush=True,
        )
    greedy = algo.evaluate(10)["episode_return_mean"]
    algo.stop()
    return {
        "seed": seed,
        "env_steps": result["env_steps_sampled"],
        "wall_s": time.perf_counter() - start,
        "return_mean": result["episode_return_mean"],
        "greedy_return_mean": greedy,
        "reached_target_at": reached_at,
    }


def sac(seeds: list[int], budget: int) -> list[dict]:
    rows = []
    for seed in seeds:
        run = train("sac", seed, budget, 1000.0)
        rows.append({"algo": "sac (preset)", **run})
    return rows


def ppo(seeds: list[int], budget: int) -> list[dict]:
    rows = []
    for seed in seeds:
        normalised = train("ppo", seed, budget, None)
        plain = train(
            "ppo", seed, budget, None, normalize_observations=False, normalize_rewards=False
        )
        rows.append({"algo": "ppo (preset, normalised)", **normalised})
        rows.append(
            {
                "algo": "ppo (preset, not normalised)",
                **plain,
                "normalised_vs_plain": normalised["return_mean"] / plain["return_mean"],
                "greedy_normalised_vs_plain": (
                    normalised["greedy_return_mean"] / plain["greedy_return_mean"]
                ),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["sac", "ppo", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--sac-steps", type=int, default=100_000)
    parser.add_argument("--ppo-steps", type=int, default=300_000)
    args = parser.parse_args()

    rows = []
    if args.part in ("sac", "both"):
        rows += sac(args.seeds, args.sac_steps)
    if args.part in ("ppo", "both"):
        rows += ppo(args.seeds, args.ppo_steps)
    print_table(rows)
    name = "continuous_control" if args.part == "both" else f"continuous_control_{args.part}"
    write_results(name, {"env": ENV, "rows": rows, "seeds": args.seeds})


if __name__ == "__main__":
    main()
