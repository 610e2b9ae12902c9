"""The cost of evaluation while training (issue 18): env steps/s of PPO on CartPole-v1
with 2 Ray workers, evaluating every iteration and every 5 iterations (10 greedy episodes
on the evaluation worker), against the same run without evaluation, measured in
interleaved windows in one process (the machine is noisy).

Example:
    $ python benchmarks/evaluation.py --rounds 6 --seconds 20
"""

from __future__ import annotations

import argparse

from common import interleaved, print_table, ratio_spread, start_ray, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()

    from flowrl import Algorithm

    start_ray(6)  # three algorithms' workers, one training at a time
    contenders = {"none": 0, "every 5": 5, "every 1": 1}
    algos = {
        name: Algorithm("ppo", env="CartPole-v1", num_workers=2, evaluation_interval=interval)
        for name, interval in contenders.items()
    }

    def measure(algo: Algorithm):
        def window(seconds: float) -> tuple[float, float]:
            import time

            start_steps = algo.train()["env_steps_sampled"]
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                steps = algo.train()["env_steps_sampled"]
            return steps - start_steps, time.perf_counter() - start

        return window

    rates, per_round = interleaved(
        {name: measure(algo) for name, algo in algos.items()}, args.rounds, args.seconds
    )
    rows = [
        {
            "evaluation": name,
            "env_steps_per_s": rates[name],
            "vs_none": rates[name] / rates["none"],
            "spread": ratio_spread(per_round, name, "none"),
        }
        for name in contenders
    ]
    print_table(rows)
    write_results("evaluation", {"rows": rows, "rounds": args.rounds, "seconds": args.seconds})
    for algo in algos.values():
        algo.stop()


if __name__ == "__main__":
    main()
