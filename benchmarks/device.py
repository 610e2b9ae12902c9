"""The learner on a CUDA GPU against the CPU of the same machine (``device=cuda`` against
``device=cpu``): SGD updates per second of DQN's Nature CNN on Atari frames and of PPO's
CartPole MLP, env steps per second of DQN on Breakout in-process, and seconds for PPO and
DQN to reach 450 on CartPole in-process. Needs a GPU.

    python benchmarks/device.py [--seconds 20] [--rounds 4]

Writes benchmarks/results/device.json.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch

from common import interleaved, print_table, ratio_spread, steady, write_results
from learner import dqn, ppo

DEVICES = ("cpu", "cuda")


def learner_rows(name: str, make, seconds: float, rounds: int) -> list[dict]:
    """flowrl's update (``learner.py``'s) on each device, in turns."""
    steps = {device: make(device)[1] for device in DEVICES}
    rates, per_round = interleaved(
        {d: (lambda s, d=d: steady(steps[d], s)) for d in DEVICES}, rounds, seconds / rounds
    )
    return [
        {"measure": f"{name}: SGD updates/s", "device": d, "value": rates[d],
         "x cpu": rates[d] / rates["cpu"], "x cpu p10-p90": ratio_spread(per_round, d, "cpu")}
        for d in DEVICES
    ]  # fmt: skip


def dqn_breakout_rate(device: str, seconds: float) -> dict[str, float]:
    """Env steps/s of in-process DQN on Breakout once learning has begun (4 envs, 32 rows
    trained per 4 env steps, as suite.py's Breakout runs)."""
    from flowrl import Algorithm

    algo = Algorithm("dqn", env="ALE/Breakout-v5", num_workers=0, device=device, seed=0,
                     num_envs_per_worker=4, rollout_fragment_length=1, learning_starts=2_000,
                     buffer_size=20_000, min_env_steps_per_iteration=1_000)  # fmt: skip
    steps = 0
    while steps < 3_000:  # past learning_starts, warm
        steps = algo.train()["env_steps_sampled"]
    start, first = time.perf_counter(), steps
    while time.perf_counter() - start < seconds:
        steps = algo.train()["env_steps_sampled"]
    rate = (steps - first) / (time.perf_counter() - start)
    algo.stop()
    return {"env steps/s": rate}


def to_450(algo_name: str, seed: int, device: str) -> dict[str, float]:
    """Seconds from building an in-process run on CartPole to a mean return of 450 and
    its env steps (its learning test's seed): runs on two devices differ in rounding, so
    they learn along different paths; env steps/s is their speed."""
    from flowrl import Algorithm
    from flowrl.run.runner import StopCriteria

    start = time.perf_counter()
    algo = Algorithm(algo_name, env="CartPole-v1", num_workers=0, device=device, seed=seed)
    summary = algo.run(stop=StopCriteria(reward=450, timesteps=500_000))
    algo.stop()
    seconds, steps = time.perf_counter() - start, summary["env_steps_sampled"]
    reached = summary["stopped_by"] == "reward"
    return {"seconds to 450": seconds if reached else float("nan"), "env steps/s": steps / seconds}


def run_rows(name: str, measure) -> list[dict]:
    """One row per device and figure of ``measure(device)`` (a dict of figures)."""
    values = {d: measure(d) for d in DEVICES}
    return [
        {"measure": f"{name}: {unit}", "device": d, "value": values[d][unit],
         "x cpu": values[d][unit] / values["cpu"][unit], "x cpu p10-p90": "-"}
        for unit in values["cpu"]
        for d in DEVICES
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per contender and measure")
    parser.add_argument("--rounds", type=int, default=4, help="windows per contender")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("device.py: torch sees no CUDA GPU here")
    torch.manual_seed(0)
    s, r = args.seconds, args.rounds
    measures = [
        lambda: learner_rows("DQN, Nature CNN, 32 Atari rows", partial(dqn, atari=True), s, r),
        lambda: learner_rows("PPO, CartPole MLP, 2048 rows", ppo, s, r),
        lambda: run_rows("DQN on Breakout in-process", lambda d: dqn_breakout_rate(d, s)),
        lambda: run_rows("PPO on CartPole in-process", lambda d: to_450("ppo", 1, d)),
        lambda: run_rows("DQN on CartPole in-process", lambda d: to_450("dqn", 0, d)),
    ]
    rows = []
    for measure in measures:
        rows += (landed := measure())
        print_table(landed)  # as each lands
    gpu = torch.cuda.get_device_name(0)
    threads = torch.get_num_threads()
    print(f"{gpu}; torch {torch.__version__}, CPU threads: {threads}")
    print_table(rows)
    about = {"gpu": gpu, "torch": torch.__version__, "torch_threads": threads}
    write_results("device", {**about, "results": rows})


if __name__ == "__main__":
    main()
