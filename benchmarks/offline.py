"""Learning from recordings on CartPole-v1, per seed:

- **cloning an expert**: PPO trained to a mean return of 475, then 50k env steps of it
  recorded (``record_experiences``); ``bc`` on them, greedy evaluation after every
  iteration of 100 SGD steps: the iterations to 450 and the best return in 10;
- **a recording of mixed quality**: PPO's first ~16k env steps from scratch (returns from
  about 20 to 100); ``bc`` against ``marwil`` on it, the mean greedy evaluation return of
  iterations 6 to 10;
- **offline, then online**: ``examples/offline_to_online.py`` (300 cloning steps on the
  expert's recording, then PPO) against the same plan without the cloning: env steps to a
  mean return of 475.

    python benchmarks/offline.py [--seeds 0 1 2]

Writes benchmarks/results/offline.json.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from common import print_table, write_results

ENV = "CartPole-v1"
PLAN = str(Path(__file__).parents[1] / "examples" / "offline_to_online.py") + ":plan"


def record(out: Path, seed: int, *, expert: bool) -> float:
    """An expert's 50k recorded env steps, or a learner's first 16k; their mean return."""
    from flowrl import Algorithm

    if expert:
        algo = Algorithm("ppo", env=ENV, num_workers=0, seed=seed)
        while not algo.train()["episode_return_mean"] >= 475:  # (NaN: no episode yet)
            pass
        path = algo.save(out.parent / f"expert_{seed}")
        algo.stop()
        algo = Algorithm.from_checkpoint(path, record_experiences=str(out))
    else:
        algo = Algorithm("ppo", env=ENV, num_workers=0, seed=seed, record_experiences=str(out))
    start, budget = algo.plan.context.counters["env_steps_sampled"], 50_000 if expert else 16_000
    returns = []
    while (result := algo.train())["env_steps_sampled"] - start < budget:
        returns.append(result["episode_return_mean"])
    algo.stop()
    return float(np.nanmean([*returns, result["episode_return_mean"]]))


def evaluations(algo_name: str, recording: Path, seed: int, iterations: int = 10) -> list[float]:
    from flowrl import Algorithm

    with Algorithm(algo_name, env=ENV, input=str(recording), seed=seed) as algo:
        return [algo.train()["evaluation/episode_return_mean"] for _ in range(iterations)]


def steps_to_475(recording: Path, seed: int, pretrain_updates: int) -> int:
    from flowrl import Algorithm
    from flowrl.run.spec import load_plan_file

    config = {"env": ENV, "num_workers": 0, "seed": seed, "input": str(recording),
              "pretrain_updates": pretrain_updates}  # fmt: skip
    with Algorithm(load_plan_file(PLAN), config) as algo:
        while not (result := algo.train())["episode_return_mean"] >= 475:  # (NaN: none yet)
            pass
    return result["env_steps_sampled"]


def one_seed(seed: int, tmp: Path) -> dict:
    expert, mixed = tmp / f"expert_rec_{seed}", tmp / f"mixed_rec_{seed}"
    row = {"seed": seed, "expert_return": record(expert, seed, expert=True)}
    cloned = evaluations("bc", expert, seed)
    row["bc_expert_best"] = max(cloned)
    row["bc_expert_iterations_to_450"] = next(
        (i + 1 for i, r in enumerate(cloned) if r >= 450), None
    )
    row["mixed_return"] = record(mixed, seed, expert=False)
    for name in ("bc", "marwil"):
        row[f"{name}_mixed_last5"] = float(np.mean(evaluations(name, mixed, seed)[5:]))
    row["o2o_steps_pretrained"] = steps_to_475(expert, seed, 300)
    row["o2o_steps_scratch"] = steps_to_475(expert, seed, 0)
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one_seed(seed, Path(tmp)) for seed in args.seeds]
    print_table(rows)
    write_results("offline", {"env": ENV, "rows": rows})


if __name__ == "__main__":
    main()
