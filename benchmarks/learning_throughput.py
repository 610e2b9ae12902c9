"""Learning throughput: env steps sampled and trained per second while IMPALA learns, flowrl
against RLlib's IMPALA with the same workers and envs (2 workers by default).

On CartPole-v1 each runs its own tuned CartPole settings (flowrl's defaults; RLlib's
tuned_examples/impala/cartpole_impala.py, as in time_to_reward.py), 8 envs per worker. On
Atari both get 4 envs per worker, the Nature CNN, fragments of 50 steps and train batches
of 500 (RLlib's defaults), so their learners do the same work per batch.

Each contender runs in a fresh process: it trains for ``--warmup`` seconds (actors start,
first batches go through), then the window of ``--seconds`` counts the env steps sampled
and trained in it. Contenders take turns, ``--rounds`` times in a rotating order, so a slow
minute of this shared machine costs them alike; a figure is steps over time, summed over
its windows.

    python benchmarks/learning_throughput.py                   # CartPole-v1 and ALE/Pong-v5
    python benchmarks/learning_throughput.py --envs CartPole-v1 --rounds 3

Writes benchmarks/results/learning_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from common import print_table, rllib_available, rllib_environment, start_ray, write_results

ATARI_SETTINGS = {"envs_per_worker": 4, "fragment": 50, "train_batch": 500}


def flowrl_window(env_id: str, workers: int, warmup: float, seconds: float) -> dict:
    from flowrl import Algorithm
    from flowrl.rollout.envs import is_atari

    settings = {"num_workers": workers}
    if is_atari(env_id):
        a = ATARI_SETTINGS
        settings |= {"num_envs_per_worker": a["envs_per_worker"],
                     "rollout_fragment_length": a["fragment"],
                     "train_batch_size": a["train_batch"]}  # fmt: skip
    algo = Algorithm("impala", env=env_id, seed=0, **settings)
    try:
        return _window(algo.train, warmup, seconds, lambda r: (r["env_steps_sampled"],
                       r["env_steps_trained"], r["episode_return_mean"]))  # fmt: skip
    finally:
        algo.stop()


def rllib_window(env_id: str, workers: int, warmup: float, seconds: float) -> dict:
    # RLlib's IMPALA asks for learner and aggregator actors beside the env runners
    start_ray(8)
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from flowrl.rollout.envs import is_atari

    config = IMPALAConfig().debugging(seed=0)
    if is_atari(env_id):
        a = ATARI_SETTINGS
        config = rllib_environment(config, env_id).env_runners(
            num_env_runners=workers, num_envs_per_env_runner=a["envs_per_worker"],
            rollout_fragment_length=a["fragment"],
        ).training(train_batch_size_per_learner=a["train_batch"])  # fmt: skip
    else:  # tuned_examples/impala/cartpole_impala.py
        config = (
            config.environment(env_id)
            .env_runners(num_env_runners=workers, num_envs_per_env_runner=8)
            .training(train_batch_size_per_learner=500, grad_clip=40.0, grad_clip_by="global_norm",
                      lr=0.0005, vf_loss_coeff=0.05, entropy_coeff=0.0)
            .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
        )  # fmt: skip
    algo = config.build_algo()

    def counts(r: dict) -> tuple[float, float, float]:
        learners = r.get("learners", {}).get("__all_modules__", {})  # none before a batch
        trained = learners.get("num_env_steps_trained_lifetime", 0)
        ret = r["env_runners"].get("episode_return_mean", float("nan"))
        return r["num_env_steps_sampled_lifetime"], trained, ret

    try:
        return _window(algo.train, warmup, seconds, counts)
    finally:
        algo.stop()


def _window(train, warmup: float, seconds: float, counts) -> dict:
    """Train for ``warmup`` seconds, then count what one window of ``seconds`` adds."""
    start = time.perf_counter()
    while time.perf_counter() - start < warmup:
        result = train()
    sampled0, trained0, _ = counts(result)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        result = train()
    elapsed = time.perf_counter() - start
    sampled, trained, ret = counts(result)
    return {"sampled": sampled - sampled0, "trained": trained - trained0, "seconds": elapsed,
            "return_at_end": ret}  # fmt: skip


WINDOWS = {"flowrl": flowrl_window, "rllib": rllib_window}


def run_child(contender: str, env_id: str, args: argparse.Namespace) -> dict:
    """One window of ``contender`` in a fresh process (its own Ray)."""
    cmd = [sys.executable, __file__, "--child", contender, "--envs", env_id,
           "--workers", str(args.workers), "--warmup", str(args.warmup),
           "--seconds", str(args.seconds)]  # fmt: skip
    timeout = args.warmup + args.seconds + 300  # a hung run (RLlib's, seen once) is cut
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        subprocess.run(["ray", "stop", "--force"], capture_output=True)
        return {"sampled": 0, "trained": 0, "seconds": args.seconds, "return_at_end": None}
    except subprocess.CalledProcessError as e:
        sys.exit(f"{contender} on {env_id} failed:\n{e.stderr[-3000:]}")
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "ALE/Pong-v5"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before a window")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of one window")
    parser.add_argument("--rounds", type=int, default=2, help="windows per contender")
    parser.add_argument("--child", choices=list(WINDOWS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = WINDOWS[args.child](args.envs[0], args.workers, args.warmup, args.seconds)
        print("RESULT " + json.dumps(result))
        return

    contenders = ["flowrl", "rllib"] if rllib_available() else ["flowrl"]
    rows, windows = [], []
    for env_id in args.envs:
        totals = {c: {"sampled": 0.0, "trained": 0.0, "seconds": 0.0} for c in contenders}
        for r in range(args.rounds):
            for c in contenders[r % 2 :] + contenders[: r % 2]:
                w = run_child(c, env_id, args)
                windows.append({"env": env_id, "contender": c, "round": r + 1, **w})
                print(f"  {env_id} round {r + 1}: {c} sampled {w['sampled'] / w['seconds']:,.0f}"
                      f"/s, trained {w['trained'] / w['seconds']:,.0f}/s, return "
                      f"{w['return_at_end']}", flush=True)  # fmt: skip
                for k in totals[c]:
                    totals[c][k] += w[k]
        rates = {c: (t["sampled"] / t["seconds"], t["trained"] / t["seconds"])
                 for c, t in totals.items()}  # fmt: skip
        rllib = rates.get("rllib")
        for c, (sampled, trained) in rates.items():
            rows.append({"env": env_id, "contender": f"{c} impala", "workers": args.workers,
                         "sampled_per_s": sampled, "trained_per_s": trained,
                         "sampled x rllib": sampled / rllib[0] if rllib else None,
                         "trained x rllib": trained / rllib[1] if rllib else None})  # fmt: skip
    print(f"IMPALA learning: env steps/s over {args.rounds} x {args.seconds:g} s windows "
          f"(after {args.warmup:g} s of warm-up), {args.workers} workers")  # fmt: skip
    print_table(rows)
    write_results("learning_throughput", {"workers": args.workers, "warmup_s": args.warmup,
                  "window_s": args.seconds, "rounds": args.rounds, "results": rows,
                  "windows": windows})  # fmt: skip


if __name__ == "__main__":
    main()
