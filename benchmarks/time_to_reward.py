"""Time to reward: wall-clock from process start to an episode return of 450 on CartPole-v1 for
flowrl PPO (its defaults: 2 Ray workers; and with ``--num-workers 0``, which suits CartPole
on a 2-core machine), IMPALA and APPO (their defaults, 2 Ray workers; and each as
``flowrl train`` alone runs it, its layout measured), beside RLlib's PPO, IMPALA and APPO
on their tuned CartPole examples (when ``ray[rllib]`` is installed), each in a fresh
process, in one run. RLlib runs stop at ``--rllib-cap-s`` seconds; one that has not
reached the reward by then reports its return and env steps. ``--algos dqn apex`` compares
flowrl's DQN with RLlib's tuned one, and Ape-X with flowrl's DQN (RLlib 2.x has no Ape-X):
wall-clock and env steps sampled per second of training. ``--algos sac`` runs flowrl's SAC
and RLlib's tuned one on Pendulum-v1 to a return of -250. ``--algos bc marwil iql`` learn
offline from 50k steps of a PPO policy trained to 475 (recorded once, kept in
benchmarks/runs/), to a greedy evaluation of ``--reward``, beside RLlib's BC and MARWIL on
the same files (RLlib's IQL takes Box actions only). ``RLLIB_PYTHON`` names an interpreter
with ``ray[rllib]`` when this one has none (RLlib pins gymnasium).

    python benchmarks/time_to_reward.py [--seeds 0 1 2] [--reward 450] [--algos ppo impala appo]

Writes benchmarks/results/time_to_reward.json (time_to_reward_<algos>.json for other --algos).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import print_table, write_results

# RLlib's tuned CartPole-v1 examples (tuned_examples/{ppo,impala,appo,dqn}/cartpole_*.py),
# with 2 env runners of 8 envs each, the workers and envs flowrl's defaults use; DQN's as
# its example has it, one env sampled beside the learner (flowrl's DQN default too)
RLLIB_CONFIGS = {
    "ppo": """from ray.rllib.algorithms.ppo import PPOConfig as Config
training, model = dict(lr=0.0003, num_epochs=6, vf_loss_coeff=0.01), {}""",
    "impala": """from ray.rllib.algorithms.impala import IMPALAConfig as Config
training = dict(train_batch_size_per_learner=500, grad_clip=40.0, grad_clip_by="global_norm",
                lr=0.0005, vf_loss_coeff=0.05, entropy_coeff=0.0)
model = dict(vf_share_layers=True)""",
    "appo": """from ray.rllib.algorithms.appo import APPOConfig as Config
training, model = dict(vf_loss_coeff=0.05, entropy_coeff=0.0), dict(vf_share_layers=True)""",
    "dqn": """from ray.rllib.algorithms.dqn import DQNConfig as Config
training = dict(lr=0.0005, train_batch_size_per_learner=32, n_step=(2, 5), double_q=True,
                dueling=True, epsilon=[(0, 1.0), (10000, 0.02)],
                replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer",
                                      "capacity": 50000, "alpha": 0.6, "beta": 0.4})
model = dict(fcnet_hiddens=[256], fcnet_activation="tanh", fcnet_bias_initializer="zeros_",
             head_fcnet_hiddens=[256], head_fcnet_bias_initializer="zeros_")
runners = dict(num_env_runners=0, num_envs_per_env_runner=1)""",
    # tuned_examples/sac/pendulum_sac.py, its returns averaged over flowrl SAC's 10 episodes
    "sac": """from torch import nn
from ray.rllib.algorithms.sac import SACConfig as Config
training = dict(initial_alpha=1.001, actor_lr=2e-4, critic_lr=8e-4, alpha_lr=9e-4, lr=None,
                target_entropy="auto", n_step=(2, 5), tau=0.005, train_batch_size_per_learner=256,
                target_network_update_freq=1, num_steps_sampled_before_learning_starts=256,
                replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer",
                                      "capacity": 100000, "alpha": 1.0, "beta": 0.0})
model = dict(fcnet_hiddens=[256, 256], fcnet_activation="relu",
             fcnet_kernel_initializer=nn.init.xavier_uniform_, head_fcnet_hiddens=[],
             head_fcnet_activation=None, head_fcnet_kernel_initializer="orthogonal_",
             head_fcnet_kernel_initializer_kwargs={"gain": 0.01})
runners, smoothing = dict(num_env_runners=0, num_envs_per_env_runner=1), 10""",
}
#: the algorithms also run as ``flowrl train`` runs them alone (layout auto), where on this
#: machine the automatic layout may differ from the configured default
AUTO_TOO = ("ppo", "impala", "appo")
#: the env and return of an algorithm that is not measured on CartPole-v1 to ``--reward``
TARGETS = {"sac": ("Pendulum-v1", -250.0)}
# RLlib's offline algorithms on flowrl's recording: its Parquet columns are RLlib's but for
# the next observation's name; greedy evaluation of 10 episodes every 3 iterations in
# parallel to training, batch 1024 and lr 8e-4, as RLlib's BC example
# (examples/offline_rl/train_w_bc_finetune_w_ppo.py); MARWIL with its defaults otherwise
RLLIB_OFFLINE = {
    "bc": "from ray.rllib.algorithms.bc import BCConfig as Config",
    "marwil": "from ray.rllib.algorithms.marwil import MARWILConfig as Config",
}
RLLIB_OFFLINE_RUN = """
import sys, time
start = time.time()
import ray
ray.init(num_cpus=8, include_dashboard=False)
from ray.rllib.core.columns import Columns
{config}
path, reward, seed, cap = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
config = (
    Config().environment("CartPole-v1").debugging(seed=seed)
    .offline_data(input_=[path], input_read_schema={{Columns.NEXT_OBS: "next_obs"}},
                  dataset_num_iters_per_learner=1)
    .training(train_batch_size_per_learner=1024, lr=0.0008)
    .evaluation(evaluation_interval=3, evaluation_num_env_runners=1, evaluation_duration=10,
                evaluation_parallel_to_training=True,
                evaluation_config=Config.overrides(explore=False))
)
algo = config.build_algo()
train_start = time.time()
ret, iterations = float("-inf"), 0
while ret < reward and time.time() - start < cap:
    result = algo.train()
    iterations += 1
    evaluation = result.get("evaluation", {{}}).get("env_runners", {{}})
    ret = max(ret, evaluation.get("episode_return_mean", float("-inf")))
print("RESULT", ret >= reward, iterations, time.time() - train_start, ret)
"""
#: algorithms that learn from a recording (expert_recording) instead of the env
OFFLINE = ("bc", "marwil", "iql")
# a distributed algorithm and flowrl's single-learner one it scales up
SINGLE_LEARNER = {"apex": "dqn"}
RLLIB_RUN = """
import sys, time
start = time.time()
import ray
# logical CPUs: RLlib's new stack asks for more than this 2-core machine's count (learner,
# aggregator actors, env runners) and otherwise waits for them forever
ray.init(num_cpus=8, include_dashboard=False)
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
runners, smoothing = dict(num_env_runners=2, num_envs_per_env_runner=8), 100
{config}
reward, budget, seed, cap = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(
    sys.argv[4])
config = (
    Config().environment(sys.argv[5]).debugging(seed=seed)
    .env_runners(**runners).training(**training)
    .rl_module(model_config=DefaultModelConfig(**model))
    .reporting(metrics_num_episodes_for_smoothing=smoothing)
)
algo = config.build_algo()
train_start = time.time()
steps, ret = 0, float("-inf")
while ret < reward and steps < budget and time.time() - start < cap:
    result = algo.train()
    runners = result["env_runners"]
    steps = result.get("num_env_steps_sampled_lifetime",
                       runners.get("num_env_steps_sampled_lifetime", 0))
    ret = runners.get("episode_return_mean", float("nan"))
    ret = float("-inf") if ret != ret else ret  # (NaN: no episode has ended yet)
print("RESULT", ret >= reward, steps, time.time() - train_start, ret)
"""


def defaults(algo: str) -> Any:
    """``algo``'s config with its defaults."""
    from flowrl.run.algorithm import get_algorithm

    return get_algorithm(algo).config_cls()


def default_layout(algo: str) -> str:
    """``2 workers``, ``2 workers, 2 replay shards`` or ``num_workers=0``: the defaults."""
    config = defaults(algo)
    layout = f"{config.num_workers} workers" if config.num_workers else "num_workers=0"
    shards = getattr(config, "replay_shards", 0)
    return layout + (f", {shards} replay shards" if shards else "")


def flowrl_run(
    algo: str,
    reward: float,
    budget: int,
    seed: int,
    num_workers: int | str | None = None,
    env: str = "CartPole-v1",
) -> dict:
    """``flowrl train ALGO`` as a user runs it; the clock includes imports and Ray start.
    ``num_workers`` None keeps the algorithm's configured default; ``"auto"`` is what
    ``flowrl train`` alone does (measure, then pick a layout)."""
    flowrl = str(Path(sys.executable).parent / "flowrl")
    if num_workers is None:
        num_workers = defaults(algo).num_workers
    workers = ["--num-workers", str(num_workers)]
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run(
            [flowrl, "train", algo, "--env", env, "--seed", str(seed),
             "--stop-reward", str(reward), "--stop-timesteps", str(budget), "--no-progress",
             "--output", out, *workers],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - start
        summary = json.loads((Path(out) / "summary.json").read_text())
    steps = summary["env_steps_sampled"]
    return {"reached": summary["stopped_by"] == "reward", "return": summary["episode_return_mean"],
            "env_steps": steps, "wall_s": wall,
            "env_steps_per_s": steps / summary["time_total_s"]}  # fmt: skip


def expert_recording(steps: int = 50_000) -> Path:
    """``steps`` env steps of a flowrl PPO CartPole policy trained to a return of 475 (the
    offline rows' data, as in tests/test_experiences.py), recorded once and kept in
    benchmarks/runs/ (ignored by git)."""
    from flowrl import Algorithm

    out = Path(__file__).parent / "runs" / f"cartpole_expert_{steps}"
    if (out / "manifest.json").exists():
        return out
    with Algorithm("ppo", env="CartPole-v1", num_workers=0, seed=0) as expert:
        while not expert.train()["episode_return_mean"] >= 475:  # (NaN: no episode yet)
            pass
        with tempfile.TemporaryDirectory() as tmp:
            path = expert.save(Path(tmp) / "expert")
            with Algorithm.from_checkpoint(path, record_experiences=str(out)) as recorder:
                first = recorder.plan.context.counters["env_steps_sampled"]
                while recorder.train()["env_steps_sampled"] - first < steps:
                    pass
    return out


def flowrl_offline_run(algo: str, recording: Path, reward: float, seed: int) -> dict:
    """``flowrl train ALGO --input`` to a greedy evaluation of ``reward``, within the
    offline runs' default 100 iterations; the clock includes imports."""
    flowrl = str(Path(sys.executable).parent / "flowrl")
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run(
            [flowrl, "train", algo, "--env", "CartPole-v1", "--seed", str(seed),
             "--input", str(recording), "--stop-reward", str(reward), "--no-progress",
             "--output", out],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - start
        summary = json.loads((Path(out) / "summary.json").read_text())
    return {"reached": summary["stopped_by"] == "reward", "iterations": summary["iterations"],
            "return": summary["best_evaluation_episode_return_mean"], "env_steps": 0,
            "wall_s": wall, "env_steps_per_s": float("nan")}  # fmt: skip


def rllib_offline_run(
    algo: str, recording: Path, reward: float, seed: int, cap_s: float
) -> dict | None:
    python = rllib_python()
    if python is None:
        return None
    script = RLLIB_OFFLINE_RUN.format(config=RLLIB_OFFLINE[algo])
    start = time.perf_counter()
    try:
        out = subprocess.run(
            [python, "-c", script, str(recording / "default"), str(reward), str(seed), str(cap_s)],
            check=True, capture_output=True, text=True, timeout=cap_s + 120,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        subprocess.run(["ray", "stop", "--force"], capture_output=True)
        return {"reached": False, "iterations": 0, "return": float("nan"), "env_steps": 0,
                "wall_s": cap_s, "env_steps_per_s": float("nan")}  # fmt: skip
    wall = time.perf_counter() - start
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT"))
    _, reached, iterations, _, ret = line.split()
    return {"reached": reached == "True", "iterations": int(iterations), "return": float(ret),
            "env_steps": 0, "wall_s": wall, "env_steps_per_s": float("nan")}  # fmt: skip


def rllib_python() -> str | None:
    """The interpreter that runs RLlib: ``$RLLIB_PYTHON`` (RLlib pins gymnasium, so it
    may live in a venv of its own), or this one where ``ray[rllib]`` is installed."""
    if os.environ.get("RLLIB_PYTHON"):
        return os.environ["RLLIB_PYTHON"]
    try:
        import ray.rllib  # noqa: F401
    except ImportError:
        return None
    return sys.executable


def rllib_run(
    algo: str, reward: float, budget: int, seed: int, cap_s: float, env: str = "CartPole-v1"
) -> dict | None:
    python = rllib_python()
    if python is None:
        return None
    script = RLLIB_RUN.format(config=RLLIB_CONFIGS[algo])
    start = time.perf_counter()
    try:  # the cap is checked between train() calls; a train() that hangs is cut here
        out = subprocess.run(
            [python, "-c", script, str(reward), str(budget), str(seed), str(cap_s), env],
            check=True, capture_output=True, text=True, timeout=cap_s + 120,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        subprocess.run(["ray", "stop", "--force"], capture_output=True)  # its env runners
        return {"reached": False, "return": float("nan"), "env_steps": 0, "wall_s": cap_s,
                "env_steps_per_s": float("nan")}  # fmt: skip
    wall = time.perf_counter() - start
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT"))
    _, reached, steps, train_s, ret = line.split()
    return {"reached": reached == "True", "return": float(ret), "env_steps": int(float(steps)),
            "wall_s": wall, "env_steps_per_s": float(steps) / float(train_s)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--reward", type=float, default=450.0)
    parser.add_argument("--budget", type=int, default=500_000, help="env steps before giving up")
    parser.add_argument("--algos", nargs="+", default=["ppo", "impala", "appo"])
    parser.add_argument("--rllib-cap-s", type=float, default=600.0, help="RLlib's time cap")
    args = parser.parse_args()
    rows = []
    offline = [a for a in args.algos if a in OFFLINE]
    recording = expert_recording() if offline else None
    for seed in args.seeds:
        contenders = {}
        for algo in offline:  # from the recording, to a greedy evaluation of the reward
            contenders[f"flowrl {algo} (offline)"] = lambda r, b, s, a=algo: flowrl_offline_run(
                a, recording, r, s
            )
            if algo in RLLIB_OFFLINE:
                contenders[f"rllib {algo}"] = lambda r, b, s, a=algo: rllib_offline_run(
                    a, recording, r, s, args.rllib_cap_s
                )
        for algo in [a for a in args.algos if a not in OFFLINE]:
            env, target = TARGETS.get(algo, ("CartPole-v1", args.reward))
            contenders[f"flowrl {algo} ({default_layout(algo)})"] = (
                lambda r, b, s, a=algo, e=env, t=target: flowrl_run(a, t, b, s, env=e)
            )
            if algo == "ppo":  # CartPole on 2 cores: sampling in the learner's process, no Ray
                contenders["flowrl ppo (num_workers=0)"] = lambda r, b, s: flowrl_run(
                    "ppo", r, b, s, num_workers=0
                )
            if algo in AUTO_TOO:  # what flowrl train alone does: measure, then pick
                contenders[f"flowrl {algo} (flowrl train as it comes: auto)"] = (
                    lambda r, b, s, a=algo: flowrl_run(a, r, b, s, num_workers="auto")
                )
            if algo in RLLIB_CONFIGS:  # RLlib 2.x has no Ape-X
                # RLlib's tuned examples allow 2M env steps; its time cap bounds them here
                contenders[f"rllib {algo}"] = lambda r, b, s, a=algo, e=env, t=target: rllib_run(
                    a, t, max(b, 2_000_000), s, args.rllib_cap_s, env=e
                )
        for name, fn in contenders.items():
            result = fn(args.reward, args.budget, seed)
            if result is not None:
                rows.append({"contender": name, "seed": seed, **result})
    summary = []
    for name in dict.fromkeys(r["contender"] for r in rows):
        mine = [r for r in rows if r["contender"] == name]
        summary.append({"contender": name,
                        "median_wall_s": sorted(r["wall_s"] for r in mine)[len(mine) // 2],
                        "median_env_steps_per_s": sorted(
                            r["env_steps_per_s"] for r in mine)[len(mine) // 2],
                        "reached": f"{sum(r['reached'] for r in mine)}/{len(mine)}"})  # fmt: skip
    walls = {s["contender"]: s["median_wall_s"] for s in summary}
    by_algo = {s["contender"].split()[1]: s for s in summary if s["contender"].startswith("flowrl")}
    for s in summary:  # against RLlib's same algorithm (its time cap, when it never got there)
        algo = s["contender"].split()[1]
        rllib = walls.get(f"rllib {algo}")
        s["x rllib"] = None if rllib is None else s["median_wall_s"] / rllib
        single = by_algo.get(SINGLE_LEARNER.get(algo, ""))  # Ape-X against flowrl's DQN
        mine = single is not None and s["contender"].startswith("flowrl")
        s["wall x single learner"] = s["median_wall_s"] / single["median_wall_s"] if mine else None
        s["steps/s x single learner"] = (
            s["median_env_steps_per_s"] / single["median_env_steps_per_s"] if mine else None
        )
    targets = {a: TARGETS.get(a, ("CartPole-v1", args.reward)) for a in args.algos}
    print("wall-clock from process start to the return:", ", ".join(
        f"{a} on {env} to {reward:g}" for a, (env, reward) in targets.items()))  # fmt: skip
    print_table(rows)
    print_table(summary)
    default = args.algos == parser.get_default("algos")
    name = "time_to_reward" if default else "time_to_reward_" + "_".join(args.algos)
    write_results(name, {"reward": args.reward, "targets": targets, "runs": rows,
                         "summary": summary})  # fmt: skip


if __name__ == "__main__":
    main()
