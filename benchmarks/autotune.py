"""The automatic layout (``--num-workers auto``) against hand-picked layouts (issue 20).

1. ``--part cartpole``: PPO on CartPole-v1, wall-clock to a mean return of 450, as a user
   runs it (``flowrl train ... --stop-reward 450`` in a fresh process, Ray's start and the
   layout's measurement included) for every layout of num_workers {0, 1, 2} x
   num_envs_per_worker {4, 8, 16} and for ``auto``, each on the same seeds, taken in turn.
   Every layout keeps PPO's 2048-step round (fragment length = 2048 / (workers x envs)).
   Figure: auto's mean time over the best hand-picked layout's (<= 1.10 is the target).
2. ``--part pong``: sampling ALE/Pong-v5 (``ParallelRollouts(bulk_sync)``, PPO's Atari
   network): the layout auto picks for a sampling-only plan against the hand-picked
   2 workers x 4 envs, in alternating windows (as ``sampling.py`` measures).

    python benchmarks/autotune.py --part cartpole --seeds 0 1 2
    python benchmarks/autotune.py --part pong
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import interleaved, print_table, ratio_spread, start_ray, write_results

ROUND = 2048  # PPO's train batch: one round of sampling


def time_to_reward(layout: tuple[int, int] | None, seed: int, target: float) -> dict:
    """One ``flowrl train`` run in a fresh process; ``layout`` None is auto."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "flowrl", "train", "ppo", "--env", "CartPole-v1"]
        cmd += ["--seed", str(seed), "--stop-reward", str(target)]
        cmd += ["--no-progress", "--output", f"{tmp}/run"]
        if layout is None:
            cmd += ["--num-workers", "auto"]
        else:
            workers, envs = layout
            fragment = ROUND // (max(workers, 1) * envs)
            cmd += ["--num-workers", str(workers), "--num-envs-per-worker", str(envs)]
            cmd += ["--set", f"rollout_fragment_length={fragment}"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        summary = json.loads(Path(f"{tmp}/run/summary.json").read_text())
        chosen = next((ln for ln in proc.stdout.splitlines() if "layout auto:" in ln), "")
    return {
        "wall_s": wall,
        "reached": summary["stopped_by"] == "reward",
        "env_steps": summary["env_steps_sampled"],
        "chosen": chosen.removeprefix("flowrl: "),
    }


def cartpole(seeds: list[int], target: float) -> dict:
    layouts: list[tuple[int, int] | None] = [(w, n) for w in (0, 1, 2) for n in (4, 8, 16)]
    layouts.append(None)
    runs: dict[str, list[dict]] = {}
    for seed in seeds:  # every layout once per seed, so slow minutes are shared
        for layout in layouts:
            name = "auto" if layout is None else f"{layout[0]} x {layout[1]}"
            run = time_to_reward(layout, seed, target)
            print(f"  {name} seed {seed}: {run['wall_s']:.1f} s {run['chosen']}", flush=True)
            runs.setdefault(name, []).append(run)
    rows = []
    for name, group in runs.items():
        rows.append(
            {
                "layout": name,
                "mean_wall_s": float(np.mean([r["wall_s"] for r in group])),
                "max_wall_s": float(np.max([r["wall_s"] for r in group])),
                "reached": sum(r["reached"] for r in group),
                "mean_env_steps": float(np.mean([r["env_steps"] for r in group])),
            }
        )
    hand = [r for r in rows if r["layout"] != "auto"]
    best = min(hand, key=lambda r: r["mean_wall_s"])
    auto = next(r for r in rows if r["layout"] == "auto")
    for r in rows:
        r["x best hand-picked"] = r["mean_wall_s"] / best["mean_wall_s"]
    print_table(rows)
    print(f"auto / best hand-picked ({best['layout']}): {auto['x best hand-picked']:.3f}")
    return {
        "target": target,
        "seeds": seeds,
        "rows": rows,
        "best_hand_picked": best["layout"],
        "auto_vs_best": auto["x best hand-picked"],
        "auto_choices": [r["chosen"] for r in runs["auto"]],
    }


def sampling_only(workers, config):
    """A plan that only samples (what the Pong figure measures)."""
    from flowrl.ops import ParallelRollouts, StandardMetricsReporting

    return StandardMetricsReporting(ParallelRollouts(workers, mode="bulk_sync"), workers, config)


def pong(rounds: int, seconds: float) -> dict:
    from sampling import FlowrlRollouts

    from flowrl.diagnostics.autotune import choose_layout
    from flowrl.run.algorithm import Algorithm, build_config, get_algorithm

    env = "ALE/Pong-v5"
    spec = get_algorithm("ppo")
    config = build_config(spec, {"env": env, "num_workers": 2})  # the Atari preset's round
    start = time.perf_counter()
    layout, run, _ = choose_layout(spec, config, algorithm_cls=Algorithm, plan=sampling_only)
    measured_s = time.perf_counter() - start
    if run is not None:
        run.stop()
    print(f"  {layout.reason} (measured in {measured_s:.1f} s)", flush=True)
    round_steps = config.num_workers * config.num_envs_per_worker * config.rollout_fragment_length
    start_ray(8)  # both contenders' workers, taking turns
    contenders = {
        "hand-picked 2 x 4": FlowrlRollouts(env, 2, 4, "bulk_sync", 1, round_steps // 8),
        "auto": FlowrlRollouts(
            env,
            layout.num_workers,
            layout.num_envs_per_worker,
            "bulk_sync",
            1,
            layout.rollout_fragment_length,
        ),
    }
    try:
        rates, per_round = interleaved(
            {k: c.measure for k, c in contenders.items()}, rounds, seconds
        )
    finally:
        for c in contenders.values():
            c.close()
    spread = ratio_spread(per_round, "auto", "hand-picked 2 x 4")
    ratio = rates["auto"] / rates["hand-picked 2 x 4"]
    rows = [
        {"layout": "hand-picked 2 x 4", "env_steps_per_s": rates["hand-picked 2 x 4"]},
        {
            "layout": f"auto: {layout.num_workers} x {layout.num_envs_per_worker} x "
            f"{layout.rollout_fragment_length}",
            "env_steps_per_s": rates["auto"],
            "x hand-picked": ratio,
            "p10-p90": spread,
        },
    ]
    print_table(rows)
    return {
        "env": env,
        "chosen": layout.reason,
        "measure_s": measured_s,
        "rows": rows,
        "auto_vs_2x4": ratio,
        "predicted": layout.candidates,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["cartpole", "pong", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    out = {}
    if args.part in ("cartpole", "both"):
        out["cartpole"] = cartpole(args.seeds, args.target)
    if args.part in ("pong", "both"):
        out["pong"] = pong(args.rounds, args.seconds)
    name = "autotune" if args.part == "both" else f"autotune_{args.part}"
    write_results(name, out)


if __name__ == "__main__":
    main()
