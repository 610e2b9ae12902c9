"""What an actor costs while it waits for its channel's requests, parked or not.

Ray wakes an idle actor's main thread every 10 ms to check for signals; a task running on
that thread is not woken. A channel actor whose work comes only over its channel parks its
main thread in a task of its own (``flowrl.core.channels.Parking``). Here N actors answer
a request over their channels every ``--period`` seconds (a rollout worker between its
fragments), first with parking off, then on, in turn for ``--rounds``; the figure is each
actor's CPU (all its threads) per second, and the GCS's, from ``/proc``.

    python benchmarks/standing_cost.py [--actors 16 64] [--period 0.2] [--rounds 2]

Writes benchmarks/results/standing_cost.json: CPU-ms a second per actor, parked against
not parked in the same run.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import psutil

from flowrl.core.channels import Channel, Parking, taking_turns
from flowrl.core.context import PlanContext
from flowrl.core.iter import ParallelIteratorWorker, send_call, take_result, wait_for

from common import print_table, start_ray, write_results


class Waiter(ParallelIteratorWorker):
    """A channel actor that answers at once; ``parks`` False turns parking off."""

    def __init__(self, parks: bool) -> None:
        if not parks:
            Parking.QUIET_S = math.inf
        super().__init__(lambda: iter(int, 1))

    def pid(self) -> int:
        return os.getpid()

    def work(self) -> int:
        return 1


def _cpu_s(processes: list[psutil.Process]) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in processes)


def measure(ray: Any, n: int, parks: bool, period: float, seconds: float) -> dict[str, float]:
    """CPU-ms a second of each of ``n`` actors (and of the GCS) answering a request every
    ``period`` seconds over ``seconds``."""
    actors = [ray.remote(num_cpus=1)(taking_turns(Waiter)).remote(parks) for _ in range(n)]
    actor_procs = [psutil.Process(p) for p in ray.get([a.pid.remote() for a in actors])]
    gcs = [p for p in psutil.process_iter(["cmdline"]) if "gcs_server" in str(p.info["cmdline"])]
    ctx = PlanContext()
    for actor in actors:
        ctx.channels[actor] = Channel(actor, ray.get(actor.par_iter_channel.remote()))

    def requests_for(duration: float) -> None:
        end = time.monotonic() + duration
        while time.monotonic() < end:
            sent = [send_call(ctx, a, "work") for a in actors]
            wait_for(sent, len(sent), 30)
            [take_result(r) for r in sent]
            time.sleep(period)

    requests_for(3.0)  # each parks after a quiet second
    start, actors_s, gcs_s = time.monotonic(), _cpu_s(actor_procs), _cpu_s(gcs)
    requests_for(seconds)
    elapsed = time.monotonic() - start
    per_actor = 1e3 * (_cpu_s(actor_procs) - actors_s) / elapsed / n
    gcs_ms = 1e3 * (_cpu_s(gcs) - gcs_s) / elapsed
    for channel in ctx.channels.values():
        channel.close()
    for actor in actors:
        ray.kill(actor)
    return {"actor_cpu_ms_per_s": per_actor, "gcs_cpu_ms_per_s": gcs_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--period", type=float, default=0.2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import ray

    start_ray(max(args.actors))
    runs = []
    for n in args.actors:
        for round_ in range(args.rounds):
            for parks in (False, True):
                run = {"actors": n, "parked": parks, "round": round_}
                run.update(measure(ray, n, parks, args.period, args.seconds))
                runs.append(run)
                print(f"{n} actors, {'parked' if parks else 'not parked'}: "
                      f"{run['actor_cpu_ms_per_s']:.2f} CPU-ms/s each, "
                      f"GCS {run['gcs_cpu_ms_per_s']:.1f}", flush=True)  # fmt: skip
    rows = []
    for n in args.actors:
        mean = {
            parks: sum(
                r["actor_cpu_ms_per_s"] for r in runs if (r["actors"], r["parked"]) == (n, parks)
            )
            / args.rounds
            for parks in (False, True)
        }
        rows.append({"actors": n, "not parked, CPU-ms/s each": mean[False],
                     "parked": mean[True], "parked / not": mean[True] / mean[False]})  # fmt: skip
    print_table(rows)
    write_results("standing_cost", {"period_s": args.period, "seconds": args.seconds, "runs": runs})


if __name__ == "__main__":
    main()
