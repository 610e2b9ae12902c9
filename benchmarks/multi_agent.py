"""Multi-agent training: the cost of lanes, and learning a cooperative PettingZoo env.

``overhead``: agent steps per second sampled by one in-process rollout worker with PPO's
network, taking turns in short windows (the machine is noisy):

- ``single``: 16 single-agent CartPole-v1 envs, each a gymnasium env stepped in Python
  (a ``SyncVectorEnv``), the baseline;
- ``two_agents``: 8 copies of ``IndependentCartPoles(agents=2)`` (each agent the same
  gymnasium CartPole) with one shared policy: the same agent steps per env step, through
  PettingZoo's Parallel API and flowrl's lanes;
- ``single_vectorised``: CartPole-v1's numpy vector env, for reference (no Python env per
  copy: a faster env, not a fairer baseline).

Agents that finish early leave their lane idle until their copy's episode ends; the
policy still acts for it (one batched pass), and such steps are not counted.

``spread``: shared-parameter PPO on MPE2's ``simple_spread_v3`` (3 agents cover 3
landmarks; the ``mpe2`` package, in the ``bench`` extra) for ``--seeds`` seeds: the mean
episode return (summed over the agents) of the last iterations against a uniformly random
policy's over the same number of episodes.

    python benchmarks/multi_agent.py                  # both
    python benchmarks/multi_agent.py --part spread --steps 600000

Writes benchmarks/results/multi_agent.json.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from common import interleaved, print_table, ratio_spread, write_results

POLES = "flowrl.rollout.toy_multi_agent:IndependentCartPoles"
SPREAD = "mpe2.simple_spread_v3:parallel_env"
# shared-parameter PPO on simple_spread (MAPPO's choices where PPO has them)
SPREAD_SETTINGS = {
    "num_workers": 0,
    "num_envs_per_worker": 16,
    "rollout_fragment_length": 128,
    "train_batch_size": 2048,
    "sgd_minibatch_size": 512,
    "num_sgd_iter": 10,
    "lr": 7e-4,
    "entropy_coeff": 0.01,
    "normalize_observations": True,
}


def worker_rate(env: str, num_envs: int):
    """A measure of agent steps per second (transitions learned from) of one worker."""
    import torch

    from flowrl.algorithms.ppo import PPOConfig, PPOPolicy
    from flowrl.rollout.worker import RolloutWorker

    torch.set_num_threads(1)
    config = PPOConfig(env=env, num_workers=0, num_envs_per_worker=num_envs)
    worker = RolloutWorker(policy_cls=PPOPolicy, config=config, worker_index=1)
    worker.sample()

    def measure(seconds: float) -> tuple[float, float]:
        start, steps = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            batch = worker.sample()  # rows of every policy: one per agent step
            steps += sum(len(rows) for rows in batch.policy_batches.values())
        return steps, time.perf_counter() - start

    return measure


def overhead(rounds: int, seconds: float) -> list[dict]:
    import gymnasium as gym

    from flowrl import register_env

    register_env("cartpole-per-env", lambda: gym.make("CartPole-v1"))
    measures = {
        "single": worker_rate("cartpole-per-env", 16),
        "two_agents": worker_rate(POLES, 8),
        "single_vectorised": worker_rate("CartPole-v1", 16),
    }
    rates, per_round = interleaved(measures, rounds, seconds)
    return [
        {
            "contender": name,
            "agent_steps_per_s": round(rate),
            "x_single": round(rate / rates["single"], 3),
            "spread": ratio_spread(per_round, name, "single"),
        }
        for name, rate in rates.items()
    ]


def random_returns(episodes: int, seed: int) -> list[float]:
    """Episode returns (summed over the agents) of uniformly random actions."""
    from mpe2 import simple_spread_v3

    env, returns = simple_spread_v3.parallel_env(), []
    for i in range(episodes):
        _, _ = env.reset(seed=seed + i)
        total = 0.0
        while env.agents:
            actions = {a: env.action_space(a).sample() for a in env.agents}
            _, rewards, _, _, _ = env.step(actions)
            total += sum(rewards.values())
        returns.append(total)
    return returns


def spread(steps: int, seeds: int) -> list[dict]:
    from flowrl import Algorithm

    rows = []
    for seed in range(seeds):
        algo = Algorithm("ppo", env=SPREAD, seed=seed, **SPREAD_SETTINGS)
        start, first = time.perf_counter(), None
        while (result := algo.train())["env_steps_sampled"] < steps:
            first = first if first is not None else result["episode_return_mean"]
        algo.stop()
        random = float(np.mean(random_returns(100, seed)))
        trained = result["episode_return_mean"]  # over the last 100 episodes
        rows.append({
            "seed": seed,
            "env_steps": result["env_steps_sampled"],
            "random_return": round(random, 1),
            "first_iteration_return": round(first, 1),
            "trained_return": round(trained, 1),
            "improvement": round(trained - random, 1),
            "seconds": round(time.perf_counter() - start),
        })  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("overhead", "spread", "all"), default="all")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=400_000)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    payload = {}
    if args.part in ("overhead", "all"):
        payload["overhead"] = overhead(args.rounds, args.seconds)
        print_table(payload["overhead"])
    if args.part in ("spread", "all"):
        payload["spread"] = spread(args.steps, args.seeds)
        payload["spread_settings"] = SPREAD_SETTINGS
        print_table(payload["spread"])
    print(f"wrote {write_results('multi_agent', payload)}")


if __name__ == "__main__":
    main()
