"""Learning from recordings, per seed.

On CartPole-v1:

- **cloning an expert**: PPO trained to a mean return of 475, then 50k env steps of it
  recorded (``record_experiences``); ``bc`` on them, greedy evaluation after every
  iteration of 100 SGD steps: the iterations to 450 and the best return in 10;
- **a recording of mixed quality**: PPO's first ~16k env steps from scratch (returns from
  about 20 to 100); ``bc``, ``marwil`` and ``iql`` on it, the mean greedy evaluation
  return of the last half of ``MIXED_ITERATIONS`` iterations;
- **offline, then online**: ``examples/offline_to_online.py`` (its 1,000 cloning steps on the
  expert's recording, then PPO) against the same plan without the cloning: env steps to a
  mean return of 475.

On Pendulum-v1, **a recording of mixed quality**: SAC's first 20k env steps from scratch,
with its defaults and not its pendulum preset (returns from about -1,500 to -150); ``bc``,
``marwil`` and ``iql`` on it, as on CartPole.

    python benchmarks/offline.py [--seeds 0 1 2] [--part cartpole pendulum]

Writes benchmarks/results/offline.json (the parts run, each with its rows).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from common import print_table, write_results

ENV = "CartPole-v1"
MIXED_ITERATIONS = 100  # an offline run's default stop; iql needs more SGD steps than bc
OFFLINE = ("bc", "marwil", "iql")
PLAN = str(Path(__file__).parents[1] / "examples" / "offline_to_online.py") + ":plan"


def record(out: Path, seed: int, *, expert: bool, env: str = ENV) -> float:
    """An expert's 50k recorded env steps, or a learner's first steps (PPO's 16k on
    CartPole, SAC's 20k on Pendulum); their mean return."""
    from flowrl import Algorithm

    if expert:
        algo = Algorithm("ppo", env=env, num_workers=0, seed=seed)
        while not algo.train()["episode_return_mean"] >= 475:  # (NaN: no episode yet)
            pass
        path = algo.save(out.parent / f"expert_{seed}")
        algo.stop()
        algo = Algorithm.from_checkpoint(path, record_experiences=str(out))
        budget = 50_000
    elif env == ENV:
        algo = Algorithm("ppo", env=env, num_workers=0, seed=seed, record_experiences=str(out))
        budget = 16_000
    else:
        # the defaults (lr 3e-4) the recordings in results/offline.json were made with
        algo = Algorithm("sac", env=env, seed=seed, preset=False, record_experiences=str(out))
        budget = 20_000
    start = algo.plan.context.counters["env_steps_sampled"]
    returns = []
    while (result := algo.train())["env_steps_sampled"] - start < budget:
        returns.append(result["episode_return_mean"])
    algo.stop()
    return float(np.nanmean([*returns, result["episode_return_mean"]]))


def evaluations(
    algo_name: str, recording: Path, seed: int, iterations: int = 10, env: str = ENV
) -> list[float]:
    from flowrl import Algorithm

    with Algorithm(algo_name, env=env, input=str(recording), seed=seed) as algo:
        return [algo.train()["evaluation/episode_return_mean"] for _ in range(iterations)]


def mixed(row: dict, recording: Path, seed: int, env: str) -> None:
    """Each offline algorithm on the recording: its mean greedy evaluation return over the
    last half of ``MIXED_ITERATIONS`` iterations."""
    for name in OFFLINE:
        returns = evaluations(name, recording, seed, MIXED_ITERATIONS, env)
        row[f"{name}_mixed_last_half"] = float(np.mean(returns[MIXED_ITERATIONS // 2 :]))


def steps_to_475(recording: Path, seed: int, pretrain_updates: int) -> int:
    from flowrl import Algorithm
    from flowrl.run.spec import load_plan_file

    config = {"env": ENV, "num_workers": 0, "seed": seed, "input": str(recording),
              "pretrain_updates": pretrain_updates}  # fmt: skip
    with Algorithm(load_plan_file(PLAN), config) as algo:
        while not (result := algo.train())["episode_return_mean"] >= 475:  # (NaN: none yet)
            pass
    return result["env_steps_sampled"]


def cartpole_seed(seed: int, tmp: Path) -> dict:
    expert, recording = tmp / f"expert_rec_{seed}", tmp / f"mixed_rec_{seed}"
    row = {"seed": seed, "expert_return": record(expert, seed, expert=True)}
    cloned = evaluations("bc", expert, seed)
    row["bc_expert_best"] = max(cloned)
    row["bc_expert_iterations_to_450"] = next(
        (i + 1 for i, r in enumerate(cloned) if r >= 450), None
    )
    row["mixed_return"] = record(recording, seed, expert=False)
    mixed(row, recording, seed, ENV)
    row["o2o_steps_pretrained"] = steps_to_475(expert, seed, 1000)
    row["o2o_steps_scratch"] = steps_to_475(expert, seed, 0)
    return row


def pendulum_seed(seed: int, tmp: Path) -> dict:
    recording = tmp / f"pendulum_rec_{seed}"
    row = {"seed": seed, "mixed_return": record(recording, seed, expert=False, env="Pendulum-v1")}
    mixed(row, recording, seed, "Pendulum-v1")
    return row


PARTS = {"cartpole": (ENV, cartpole_seed), "pendulum": ("Pendulum-v1", pendulum_seed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--part", nargs="+", choices=list(PARTS), default=list(PARTS))
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for part in args.part:
            env, one_seed = PARTS[part]
            rows = []
            for seed in args.seeds:
                rows.append(one_seed(seed, Path(tmp)))
                print(part, rows[-1], flush=True)
            print_table(rows)
            results[part] = {"env": env, "mixed_iterations": MIXED_ITERATIONS, "rows": rows}
    write_results("offline", results)


if __name__ == "__main__":
    main()
