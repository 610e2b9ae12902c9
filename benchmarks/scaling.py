"""The driver's ceiling: env steps/s against the number of rollout workers, on a Ray cluster
of several nodes made on this machine (``ray.cluster_utils.Cluster``), with envs whose step
sleeps (``toy_envs:SleepyVectorEnv``: I/O-bound, so 2 cores host many workers).

Every fragment, weight push and replay request of a plan passes through the driver (the
plan's process), so past some number of workers it, not the workers, sets the pace. Each
row runs one algorithm's own plan with N workers for ``--seconds`` after a warm-up and
reports:

- env steps/s, and the share of linear scaling: the rate over N times the rate per worker
  of the smallest N;
- the driver's CPU (the plan's process: plan thread, learner thread, Ray's threads) per
  1,000 env steps, and the ceiling it implies: the env steps/s at which the driver would
  use all of one core, the most its plan thread can have.
- the CPU per 1,000 env steps of the raylets, the GCS, the rollout workers, the other
  actors and the whole machine (from ``/proc``: where the rest of the cores goes); with
  ``--profile``, each step of the plan and its share of the driver's wall-clock.

The bound: N plain processes (no Ray, no driver), each stepping the same 8 sleeping envs
with the same torch network, one batched forward pass per step. The bound of synchronous
rounds (PPO's): the same processes in lockstep, each answering a 10-step fragment over a
pipe, the next round asked for when all have answered. The bound of on-policy PPO: those
rounds gathered up to PPO's train batch, then PPO's update on it in plain torch while the
processes wait (``learner.py``'s plain loop), its processes acting in numpy as PPO's
workers do. The bound of Ape-X: the processes sampling in turns as long as a
fragment's 10 steps, each asked again as soon as it answers, beside Ape-X's update in
plain torch in this process, held to Ape-X's two gates (3 rows trained per env step
sampled, sampling at most 4,096 env steps ahead): what its SGD leaves of two cores to
sampling. Where the bounds fall short of
linear, the machine, not the driver, is what runs out (each wake-up from a sleep finds cold
caches, and torch's forward pass then costs several times its warm cost).

Contenders: PPO (bulk_sync rounds, and with the next round sampled while the learner
trains: ``sample_ahead``), IMPALA with the plan taking every fragment in, IMPALA
with aggregation workers (``num_aggregation_workers``: actors concatenate the fragments
and pass the weights on), and Ape-X (fragments into replay shards, replay to the
learner; with its gate open, and with its learner at a hundredth of its pace, which
leaves the cores to sampling).
Past 32 workers a request brings several fragments (``fragments_per_call``: one per 32
workers), except PPO's, whose rounds would only grow its SGD batch: IMPALA is also
measured with one fragment per request, as before that default, and PPO with four.

    python benchmarks/scaling.py                          # 2..64 workers, every contender
    python benchmarks/scaling.py --workers 2 16 64 --only impala   # other rows kept

PPO's, IMPALA's and Ape-X's workers act in numpy without torch (about 85 MB of private
memory each, ``worker_memory.py``); the bound's processes hold torch (about 205 MB),
which bounds how many fit in this machine's memory. Writes
benchmarks/results/scaling.json and scaling.png (``--output NAME``: NAME.json and NAME.png, for a
run on another host that must not replace the reference rows).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from common import RESULTS, print_table, write_results

ENV = "flowrl.rollout.toy_envs:SleepyVectorEnv"

# name -> (algorithm, its settings); every one samples 8 envs x 10 steps per fragment
BOUND = "plain processes (bound)"
LOCKSTEP = "plain processes in lockstep (bound of rounds)"
# the lockstep rounds with PPO's SGD in plain torch between them, as its on-policy plan has
ON_POLICY = "plain processes in lockstep, PPO's SGD between rounds (bound of on-policy PPO)"
# the processes sampling in turns beside Ape-X's SGD at its training_intensity and lead
OFF_POLICY = "plain processes beside Ape-X's SGD (bound of apex)"
CONTENDERS: dict[str, tuple[str, dict[str, Any]]] = {
    BOUND: ("", {}),
    LOCKSTEP: ("", {}),
    ON_POLICY: ("", {}),
    OFF_POLICY: ("", {}),
    "ppo (bulk_sync)": ("ppo", {}),
    "ppo (bulk_sync), 4 fragments per call": ("ppo", {"fragments_per_call": 4}),
    # the next round sampled while the learner trains on this one (one update behind)
    "ppo (bulk_sync), sampling ahead": ("ppo", {"sample_ahead": True}),
    "impala": ("impala", {"num_sgd_iter": 1}),
    "impala, a fragment per call": ("impala", {"num_sgd_iter": 1, "fragments_per_call": 1}),
    "impala + aggregation": ("impala", {"num_sgd_iter": 1, "num_aggregation_workers": "auto"}),
    "apex (replay shards)": ("apex", {"replay_shards": 2, "learning_starts": 1000}),
    # its sampling held to the learner's pace no more (SamplingLead), as IMPALA's one SGD
    # pass: what the plan's communication allows, not what 3 rows trained per env step do
    "apex, sampling free of the learner": (
        "apex",
        {"replay_shards": 2, "learning_starts": 1000, "max_sampling_lead": 0},
    ),
    # the same with its learner at a hundredth of its pace (training_intensity 3 -> 0.03):
    # what sampling and storing to the shards cost, nearly without SGD on the same cores
    "apex, sampling free of the learner, learning 1/100": (
        "apex",
        {
            "replay_shards": 2,
            "learning_starts": 1000,
            "max_sampling_lead": 0,
            "training_intensity": 0.03,
        },
    ),
}


def aggregators_for(workers: int) -> int:
    """One aggregation worker per 16 rollout workers, at least one."""
    return max(1, math.ceil(workers / 16))


def start_cluster(nodes: int, max_workers: int) -> Any:
    """A head node for the driver's actors (aggregators, replay shards: no CPUs asked) and
    ``nodes`` nodes sharing the rollout workers' logical CPUs."""
    import ray
    from ray.cluster_utils import Cluster

    from flowrl.run.ray_start import RAY_SYSTEM_CONFIG

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "_system_config": RAY_SYSTEM_CONFIG},
    )
    for _ in range(nodes):
        cluster.add_node(num_cpus=math.ceil(max_workers / nodes) + 1)
    ray.init(address=cluster.address, logging_level="ERROR")
    return cluster


def measure_bound(name: str, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    """Env steps/s of ``workers`` plain processes stepping at once (sampling.py's limit), or
    in lockstep rounds (``LOCKSTEP``: a 10-step fragment from each over a pipe per round;
    ``ON_POLICY``: rounds gathered up to PPO's train batch, then PPO's SGD on it while the
    processes wait; ``OFF_POLICY``: Ape-X's SGD while they sample, at its pace)."""
    from sampling import PlainLockstep, PlainOffPolicy, PlainOnPolicy, PlainProcesses

    start = time.perf_counter()
    env_config = {"step_s": args.step_s, "length": 100}
    if name == BOUND:
        plain = PlainProcesses(ENV, workers, 8, env_config=env_config)
    elif name == LOCKSTEP:
        plain = PlainLockstep(ENV, workers, 8, 10, env_config=env_config)
    elif name == OFF_POLICY:
        # a turn of 10 steps, as long as a contender's fragment
        plain = PlainOffPolicy(ENV, workers, 8, turn_s=10 * args.step_s, env_config=env_config)
    else:
        plain = PlainOnPolicy(ENV, workers, 8, 10, env_config=env_config)
    try:
        up_s = time.perf_counter() - start
        plain.measure(1.0)  # every process awake
        machine0, own0 = process_cpu_s()["machine"], _cpu_s()
        steps, elapsed = plain.measure(args.seconds)
        machine, own = process_cpu_s()["machine"] - machine0, _cpu_s() - own0
    finally:
        plain.close()
    print(
        f"  {name}, {workers} workers: {steps / elapsed:,.0f} env steps/s, "
        f"{machine / elapsed:.2f} cores busy, this process {own / elapsed:.0%} of a core"
    )
    return {"contender": name, "workers": workers, "env_steps_per_s": steps / elapsed,
            "workers_up_s": up_s, "driver_cpu_share": own / elapsed,
            "machine_cpu_ms_per_1k_steps": 1e6 * machine / max(steps, 1)}  # fmt: skip


def measure(name: str, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    from flowrl import Algorithm

    if name in (BOUND, LOCKSTEP, ON_POLICY, OFF_POLICY):
        return measure_bound(name, workers, args)
    algo_name, settings = CONTENDERS[name]
    settings = dict(settings)
    if settings.get("num_aggregation_workers") == "auto":
        settings["num_aggregation_workers"] = aggregators_for(workers)
    env_config = {"step_s": args.step_s, "length": 100}
    start = time.perf_counter()
    algo = Algorithm(algo_name, env=ENV, env_config=env_config, num_workers=workers,
                     num_envs_per_worker=8, rollout_fragment_length=10, seed=0,
                     min_time_s_per_iteration=1.0, profile=args.profile, **settings)  # fmt: skip
    try:
        up_s = time.perf_counter() - start
        for _ in range(2):  # warm-up: every worker sampling, the learner going
            algo.train()
        steps0, cpu0, t0 = algo.train()["env_steps_sampled"], _cpu_s(), time.perf_counter()
        processes0 = process_cpu_s()
        result = algo.train()
        while time.perf_counter() - t0 < args.seconds:
            result = algo.train()
        elapsed, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        processes = {k: v - processes0.get(k, 0.0) for k, v in process_cpu_s().items()}
        steps = result["env_steps_sampled"] - steps0
        profile = algo.profile() if args.profile else None
    finally:
        algo.stop()
    rate, cpu_per_step = steps / elapsed, cpu / max(steps, 1)
    per_k = 1e6 * cpu_per_step  # CPU-ms per 1,000 env steps
    row = {"contender": name, "workers": workers, "env_steps_per_s": rate,
           "driver_cpu_ms_per_1k_steps": per_k, "driver_cpu_share": cpu / elapsed,
           "driver_ceiling_env_steps_per_s": 1 / cpu_per_step if cpu else None,
           "workers_up_s": up_s}  # fmt: skip
    for kind, seconds in processes.items():
        row[f"{kind}_cpu_ms_per_1k_steps"] = 1e6 * seconds / max(steps, 1)
    if profile is not None:
        print(profile.table())
        row["profile"] = {r.label: r.share for r in profile.rows}
    if "num_aggregation_workers" in settings:
        row["aggregators"] = settings["num_aggregation_workers"]
    print(f"  {name}, {workers} workers: {rate:,.0f} env steps/s, driver "
          f"{per_k:.1f} CPU-ms per 1k steps ({cpu / elapsed:.0%} of a core)")  # fmt: skip
    return row


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


#: the processes whose CPU a row reports beside the driver's, by their name's start
PROCESS_KINDS = {"raylet": "raylets", "gcs_server": "gcs", "ray::RolloutWor": "workers",
                 "ray::": "other_actors"}  # fmt: skip


def process_cpu_s() -> dict[str, float]:
    """CPU seconds so far of this machine's raylets, GCS, rollout workers and other Ray
    actors, by kind (``/proc``), and of the whole machine (``/proc/stat``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals = dict.fromkeys(PROCESS_KINDS.values(), 0.0)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # gone since the listing
            continue
        comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        kind = next((k for prefix, k in PROCESS_KINDS.items() if comm.startswith(prefix)), None)
        if kind is not None:  # utime and stime: fields 14 and 15 of the line
            totals[kind] += (int(fields[11]) + int(fields[12])) / ticks
    cpu = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    totals["machine"] = (sum(map(int, cpu)) - int(cpu[3]) - int(cpu[4])) / ticks  # not idle
    return totals


def plot(rows: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for name in dict.fromkeys(r["contender"] for r in rows):
        pts = [r for r in rows if r["contender"] == name]
        style = {"color": "black", "linestyle": "--"} if name == BOUND else {}
        xs = [r["workers"] for r in pts]
        ax.plot(xs, [r["env_steps_per_s"] for r in pts], marker="o", label=name, **style)
        ax2.plot(xs, [r["share_of_linear"] for r in pts], marker="o", label=name, **style)
    ax.set(xlabel="rollout workers", ylabel="env steps / s", title="throughput")
    ax2.set(xlabel="rollout workers", ylabel="share of linear", title="scaling", ylim=(0, 1.2))
    ax2.axhline(0.8, color="grey", linestyle=":", linewidth=1)
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
    ax.legend(fontsize="small", loc="upper left")
    fig.suptitle("sleep-bound envs on a local Ray cluster")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8, 32, 64])
    parser.add_argument("--only", nargs="+", metavar="WORD",
                        help="only the contenders whose names hold one of the words")  # fmt: skip
    parser.add_argument("--nodes", type=int, default=3, help="nodes for the rollout workers")
    parser.add_argument("--step-s", type=float, default=0.02, help="seconds an env step sleeps")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured per row")
    parser.add_argument("--output", default="scaling",
                        help="results name: benchmarks/results/NAME.json and NAME.png")  # fmt: skip
    parser.add_argument("--profile", action="store_true",
                        help="run the plans with the profiler (share of wall by step)")  # fmt: skip
    args = parser.parse_args()

    import ray

    names = [n for n in CONTENDERS if not args.only or any(w in n for w in args.only)]
    cluster = start_cluster(args.nodes, max(args.workers))
    rows = earlier_rows(names, args)
    try:
        for name in names:
            print(name)
            for workers in sorted(args.workers):
                rows.append(measure(name, workers, args))
                report(rows, args)  # after every row: a run cut short keeps what it measured
    finally:
        ray.shutdown()
        cluster.shutdown()
    print_table([{k: v for k, v in row.items() if k != "profile"} for row in rows])
    plot(rows, RESULTS / f"{args.output}.png")


def earlier_rows(names: list[str], args: argparse.Namespace) -> list[dict]:
    """The rows of the results file for contenders this run does not measure, where it was
    measured alike (so ``--only`` adds to the file instead of replacing it)."""
    path = RESULTS / f"{args.output}.json"
    if not path.exists():
        return []
    earlier = json.loads(path.read_text())
    alike = all(earlier.get(k) == v for k, v in settings(args).items() if k != "seconds")
    return [r for r in earlier["results"] if r["contender"] not in names] if alike else []


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"env": ENV, "step_s": args.step_s, "envs_per_worker": 8, "fragment": 10,
            "nodes": args.nodes, "seconds": args.seconds}  # fmt: skip


def report(rows: list[dict], args: argparse.Namespace) -> None:
    """Each row's share of linear scaling (against its contender's fewest workers), and
    the results file."""
    for name in dict.fromkeys(r["contender"] for r in rows):
        pts = [r for r in rows if r["contender"] == name]
        base = pts[0]["env_steps_per_s"] / pts[0]["workers"]
        for r in pts:
            r["share_of_linear"] = r["env_steps_per_s"] / (base * r["workers"])
    write_results(args.output, {**settings(args), "results": rows})


if __name__ == "__main__":
    main()
