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

import gymnasium as gym
import numpy as np
import torch

from common import interleaved, print_table, ratio_spread, steady, write_results
from learner import ACTION_SPACE, OBS_SPACE, ppo_batch

DEVICES = ("cpu", "cuda")
FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # Atari's stacked frames


def dqn_atari_learner(device: str):
    """One SGD step of DQN's Atari preset (Nature CNN, 32 rows, double Q, dueling)."""
    from flowrl.algorithms.dqn import DQNConfig, DQNLearner, DQNPolicy
    from flowrl.core.sample_batch import SampleBatch

    cfg = DQNConfig(device=device, train_batch_size=32, n_step=1, lr=1e-4)
    action_space = gym.spaces.Discrete(4)
    learner = DQNLearner(DQNPolicy(FRAMES, action_space, cfg, device=device), cfg)
    rng, n = np.random.default_rng(0), cfg.train_batch_size
    batch = SampleBatch({
        "obs": rng.integers(0, 256, (n, *FRAMES.shape), np.uint8),
        "next_obs": rng.integers(0, 256, (n, *FRAMES.shape), np.uint8),
        "actions": rng.integers(0, 4, n),
        "rewards": np.ones(n, np.float32),
        "terminateds": np.zeros(n, bool),
        "discounts": np.full(n, cfg.gamma, np.float32),
    })  # fmt: skip

    def step() -> int:
        learner.learn_on_batch(batch)
        return 1

    return step


def ppo_cartpole_learner(device: str):
    """One train batch of PPO's defaults on CartPole (its epochs of minibatches)."""
    from flowrl.algorithms.ppo import PPOConfig, PPOLearner, PPOPolicy
    from flowrl.core.sample_batch import SampleBatch

    cfg = PPOConfig(device=device)
    batch = SampleBatch(ppo_batch(cfg.train_batch_size, np.random.default_rng(0)))
    learner = PPOLearner(PPOPolicy(OBS_SPACE, ACTION_SPACE, cfg, device=device), cfg)
    per_call = cfg.num_sgd_iter * -(-cfg.train_batch_size // cfg.sgd_minibatch_size)

    def step() -> int:
        learner.learn_on_batch(
            batch, num_sgd_iter=cfg.num_sgd_iter, minibatch_size=cfg.sgd_minibatch_size
        )
        return per_call

    return step


def learner_rows(name: str, make, seconds: float, rounds: int) -> list[dict]:
    steps = {device: make(device) for device in DEVICES}
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
        lambda: learner_rows("DQN, Nature CNN, 32 Atari rows", dqn_atari_learner, s, r),
        lambda: learner_rows("PPO, CartPole MLP, 2048 rows", ppo_cartpole_learner, s, r),
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
