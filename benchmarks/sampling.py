"""Sampling throughput: env steps per second of flowrl's ParallelRollouts (bulk_sync and
async) with N workers x M envs and PPO's default network, against

- the limit: N plain processes, each stepping the same gymnasium vector env with the same
  torch network (one batched forward pass per step) and nothing else;
- RLlib's EnvRunners sampling the same env, when ``ray[rllib]`` is installed.

    python benchmarks/sampling.py                    # CartPole-v1, 1 and 2 workers x 8 envs
    python benchmarks/sampling.py --env ALE/Pong-v5 --envs 4

Writes benchmarks/results/sampling_<env>.json and a PNG of throughput against workers.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

from common import RESULTS, print_table, write_results


def policy_for(env, hiddens=(64, 64)):
    """PPO's default network for the env's spaces (the same for every contender)."""
    from flowrl.models import ActorCritic

    return ActorCritic(env.single_observation_space, env.single_action_space, hiddens=hiddens)


def plain_process(env_id: str, num_envs: int, seconds: float, seed: int, out: mp.Queue) -> None:
    """The limit: step a vector env with one batched forward pass per step, count steps."""
    import torch

    from flowrl.distributions import distribution_for
    from flowrl.envs import make_vector_env

    torch.set_num_threads(1)
    env = make_vector_env(env_id, num_envs=num_envs, seed=seed)
    model = policy_for(env)
    dist_cls, _ = distribution_for(env.single_action_space)
    obs, _ = env.reset(seed=seed)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        with torch.inference_mode():
            logits, _ = model(torch.from_numpy(obs))
            actions = dist_cls(logits).sample().numpy()
        obs, *_ = env.step(actions)
        steps += num_envs
    out.put(steps / (time.perf_counter() - start))


def plain(env_id: str, workers: int, envs: int, seconds: float) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=plain_process, args=(env_id, envs, seconds, i, out))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    rates = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def flowrl_rollouts(env_id: str, workers: int, envs: int, seconds: float, mode: str) -> float:
    from flowrl.algorithms.ppo import PPOConfig, PPOPolicy
    from flowrl.context import STEPS_SAMPLED
    from flowrl.ops import ParallelRollouts
    from flowrl.worker import WorkerSet

    config = PPOConfig(env=env_id, num_workers=workers, num_envs_per_worker=envs)
    worker_set = WorkerSet(policy_cls=PPOPolicy, config=config)
    try:
        rollouts = ParallelRollouts(worker_set, mode=mode)
        rollouts.take(2)  # warm up: actors started, first fragments done
        counters = rollouts.context.counters
        start_steps, start = counters[STEPS_SAMPLED], time.perf_counter()
        while time.perf_counter() - start < seconds:
            next(rollouts)
        return (counters[STEPS_SAMPLED] - start_steps) / (time.perf_counter() - start)
    finally:
        worker_set.stop()


def rllib_rollouts(env_id: str, workers: int, envs: int, seconds: float) -> float | None:
    """RLlib's EnvRunnerGroup sampling with PPO's default module, or None without RLlib."""
    try:
        from ray.rllib.algorithms.ppo import PPOConfig
    except ImportError:
        return None
    config = (
        PPOConfig()
        .environment(env_id)
        .env_runners(num_env_runners=workers, num_envs_per_env_runner=envs)
        .learners(num_learners=0)
    )
    algo = config.build_algo()
    try:
        group = algo.env_runner_group
        group.foreach_env_runner(lambda r: r.sample(), local_env_runner=False)  # warm up
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            episodes = group.foreach_env_runner(lambda r: r.sample(), local_env_runner=False)
            steps += sum(len(e) for runner in episodes for e in runner)
        return steps / (time.perf_counter() - start)
    finally:
        algo.stop()


def plot(rows: list[dict], path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for contender in dict.fromkeys(r["contender"] for r in rows):
        pts = [(r["workers"], r["env_steps_per_s"]) for r in rows if r["contender"] == contender]
        pts = [(w, s) for w, s in pts if s is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=contender)
    ax.set(xlabel="workers", ylabel="env steps / s", title=title)
    ax.set_xticks(sorted({r["workers"] for r in rows}))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--envs", type=int, default=8, help="envs per worker")
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=max(args.workers) + 1, include_dashboard=False, logging_level="ERROR")
    rows = []
    for w in args.workers:
        limit = plain(args.env, w, args.envs, args.seconds)
        contenders = {
            "plain processes (limit)": limit,
            "flowrl bulk_sync": flowrl_rollouts(args.env, w, args.envs, args.seconds, "bulk_sync"),
            "flowrl async": flowrl_rollouts(args.env, w, args.envs, args.seconds, "async"),
            "rllib": rllib_rollouts(args.env, w, args.envs, args.seconds),
        }
        rllib = contenders["rllib"]
        for name, rate in contenders.items():
            rows.append({
                "contender": name, "workers": w, "envs_per_worker": args.envs,
                "env_steps_per_s": rate,
                "x limit": None if rate is None else rate / limit,
                "x rllib": None if rate is None or not rllib else rate / rllib,
            })  # fmt: skip
    ray.shutdown()
    print(f"{args.env}: env steps/s, {args.envs} envs per worker, {args.seconds:.0f} s each")
    print_table(rows)
    name = "sampling_" + args.env.replace("/", "_").replace("-", "_").lower()
    write_results(name, {"env": args.env, "results": rows})
    plot(rows, RESULTS / f"{name}.png", f"{args.env} sampling ({args.envs} envs/worker)")


if __name__ == "__main__":
    main()
