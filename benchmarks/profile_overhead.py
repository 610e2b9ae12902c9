"""What profiling costs (issue 20): the same plan with ``profile=False`` and ``True``,
trained in alternating windows, as env steps per second (the ratio is on / off).

- PPO on CartPole-v1 in-process (few, large items: a fragment per pull);
- IMPALA on CartPole-v1 with 2 Ray workers (many small items, an async union that polls
  its branches: the most pulls per env step of the shipped plans);
- a bare chain of five ``for_each`` steps over plain items: nanoseconds per item and step.

With ``profile=False`` no iterator is wrapped (``tests/test_profile.py`` checks it), so
the plan runs the same code as before profiling existed.

    python benchmarks/profile_overhead.py
"""

from __future__ import annotations

import argparse
import time

from common import interleaved, print_table, ratio_spread, start_ray, write_results


class Training:
    """``algo.train()`` for a window of wall-clock: env steps sampled and seconds."""

    def __init__(self, algo_name: str, **config) -> None:
        from flowrl import Algorithm

        self.algo = Algorithm(algo_name, env="CartPole-v1", seed=0, **config)
        self.algo.train()  # warm-up: actors, first weights

    def measure(self, seconds: float) -> tuple[float, float]:
        start = time.perf_counter()
        steps0 = self.algo.plan.context.counters["env_steps_sampled"]
        while time.perf_counter() - start < seconds:
            self.algo.train()
        steps = self.algo.plan.context.counters["env_steps_sampled"] - steps0
        return steps, time.perf_counter() - start

    def close(self) -> None:
        self.algo.stop()


def per_item_ns(profile: bool, items: int = 200_000) -> float:
    """Nanoseconds per item of a five-step chain over plain items."""
    from flowrl.core.iter import LocalIterator
    from flowrl.diagnostics.profiler import Profiler

    plan = LocalIterator.from_items(range(10), repeat=True)
    for _ in range(5):
        plan = plan.for_each(abs)
    if profile:
        plan.context.profiler = Profiler()
    next(plan)
    start = time.perf_counter()
    for _ in range(items):
        next(plan)
    return 1e9 * (time.perf_counter() - start) / items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    start_ray(8)  # both runs' workers, taking turns
    rows = []
    for name, config in (
        ("ppo in-process", {"num_workers": 0}),
        ("impala, 2 workers", {"num_workers": 2}),
    ):
        algo_name = name.split()[0].rstrip(",")
        runs = {
            "off": Training(algo_name, **config),
            "on": Training(algo_name, profile=True, **config),
        }
        try:
            rates, per_round = interleaved(
                {k: r.measure for k, r in runs.items()}, args.rounds, args.seconds
            )
        finally:
            for r in runs.values():
                r.close()
        rows.append(
            {
                "plan": name,
                "off env steps/s": rates["off"],
                "on env steps/s": rates["on"],
                "on / off": rates["on"] / rates["off"],
                "p10-p90": ratio_spread(per_round, "on", "off"),
            }
        )
    off, on = per_item_ns(False), per_item_ns(True)
    rows.append(
        {
            "plan": "5 x for_each, plain items (ns/item)",
            "off env steps/s": off,
            "on env steps/s": on,
            "on / off": off / on,
            "p10-p90": f"+{(on - off) / 6:.0f} ns per step and item",
        }
    )
    print_table(rows)
    write_results(
        "profile_overhead", {"rows": rows, "rounds": args.rounds, "window_s": args.seconds}
    )


if __name__ == "__main__":
    main()
