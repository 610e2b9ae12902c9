"""flowrl on the third-party benchmarks users know, at published budgets, beside the published
results: PPO and SAC on MuJoCo, PPO on MiniGrid DoorKey, PPO with and without memory on POPGym,
PPO on gymnasium's lunar lander and walker, DQN and PPO on its pendulum and mountain car, DQN
and PPO on Atari.

Each run is ``flowrl train`` as a user runs it (presets and layout auto), to a budget of env
steps. A row holds its final training return (the mean of the episodes the run's metrics
window holds), its curve, wall time and env steps/s. ``--aggregate`` adds the interquartile
mean of the returns normalised by the published ones, with a 95% stratified bootstrap
interval: rliable's method, computed here (rliable 1.2 needs arch<8, which fails to import
beside pandas 3).

    python benchmarks/suite.py --part ppo-mujoco [--seeds 1 2 3]
    python benchmarks/suite.py --aggregate [PART ...]

Needs the ``bench`` extra (mujoco, minigrid, popgym, box2d). Writes
``benchmarks/results/suite_<part>.json`` after every run; a rerun skips the runs a results
file already holds, so a long part can be stopped and taken up again; a SAC run stopped
part way (SAC, PPO) goes on from its last checkpoint (``benchmarks/runs/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np

from common import RESULTS, print_table, train_cli, write_results


class Run(NamedTuple):
    """One row of a part: what to train, how long, and the published figure beside it."""

    algo: str
    env: str
    budget: int
    args: tuple[str, ...] = ()
    variant: str = ""
    published: float | None = None  # the mean return at ``budget`` the row compares with
    published_std: float | None = None
    source: str = ""
    #: evaluate the final checkpoint as the published runs do: 10 episodes at this epsilon
    #: (0: greedy)
    eval_eps: float | None = None


CLEANRL_PPO = "CleanRL ppo_continuous_action, v4 envs, 1M steps, 3 seeds, about 25 min a run"
CLEANRL_SAC = "CleanRL sac_continuous_action, v4 envs, 1M steps, about 175 min a run"
RL_ZOO = "RL Zoo (rl-baselines3-zoo benchmark table)"
#: PPO on the lander, greedy at the end, beside RL Zoo's own PPO agent (ppo.yml's settings,
#: 1M steps) as its model card (sb3/ppo-LunarLander-v2 on Hugging Face) gives its
#: deterministic evaluation
PPO_LANDER = Run("ppo", "LunarLander-v3", 1_000_000, published=233.56, published_std=53.89,
                 source="RL Zoo's sb3/ppo-LunarLander-v2 agent (ppo.yml, 1M steps), its "
                 "model card's deterministic evaluation", eval_eps=0.0)  # fmt: skip


def rl_zoo(algo: str, env: str, budget: int, mean: float, std: float, note: str = "") -> Run:
    """A run beside RL Zoo's benchmark table (one run of each, evaluated deterministically):
    its final checkpoint played greedy."""
    return Run(algo, env, budget, published=mean, published_std=std, source=RL_ZOO + note,
               eval_eps=0.0)  # fmt: skip


#: CleanRL's dqn_atari run for 1M steps (its schedule scaled to that budget: epsilon to
#: 0.01 over 100k, learning from 80k, 1M buffer), two seeds: each its final evaluation's
#: mean over episodes at epsilon 0.05 (67.1 and 102.0; the mean and spread of the two)
CLEANRL_DQN_ATARI = (84.55, 17.45, "CleanRL dqn_atari, BreakoutNoFrameskip-v4, 1M steps, "
                     "seeds 1-2 evaluated at epsilon 0.05: 67.1 and 102.0")  # fmt: skip
#: DQN's Atari preset explores over 1M env steps (RL Zoo's schedule for 10M); CleanRL's 1M
#: runs explore over the first 100k and learn from 80k
CLEANRL_DQN_SCHEDULE = ("--set", "exploration_timesteps=100000", "--set", "learning_starts=80000")
#: and CleanRL's terminals and rewards: each lost life ends an episode for learning
#: (EpisodicLifeEnv), rewards clipped to their sign
CLEANRL_DQN_SETUP = (*CLEANRL_DQN_SCHEDULE, "--set", "clip_rewards=true",
                     "--set", 'env_config={"life_loss_info": true}')  # fmt: skip
#: and CleanRL's buffer of 1M rows (about 8 GB with frames kept once each)
CLEANRL_DQN_BUFFER = (*CLEANRL_DQN_SETUP, "--set", "buffer_size=1000000")
#: and CleanRL's DQN itself: one Q head, targets from the target net alone, a squared TD
#: error unclipped, Adam's epsilon 1e-8, one env stepped 4 times between updates
CLEANRL_DQN_EXACT = (*CLEANRL_DQN_BUFFER, "--set", "dueling=false", "--set", "double_q=false",
                     "--set", "td_loss=mse", "--set", "grad_clip=0", "--set", "adam_eps=1e-8",
                     "--num-workers", "0", "--num-envs-per-worker", "1",
                     "--set", "rollout_fragment_length=4")  # fmt: skip
MEMORY = ("--set", "use_lstm=true")
LONG_MEMORY = (*MEMORY, "--set", "max_seq_len=64")
#: PPO's MuJoCo preset before it took CleanRL's two other settings: observations as they
#: are, lr constant
CONSTANT_LR = ("--set", "normalize_observations=false", "--set", "lr=0.0003")

#: where runs train (``runs/`` is ignored by git): one that was stopped part way is taken up
#: from its last checkpoint by the next call (flowrl train --resume)
RUNS = Path(__file__).parent / "runs"
#: iterations per checkpoint, for runs of over ``LONG`` env steps: SAC's iterations are 1k
#: env steps (a few MB of replay each), PPO's a few thousand (its weights alone); DQN's
#: Atari iterations are 10k env steps and its replay 0.7 GB (a frame a row), written every
#: 100k env steps (a run of 1M takes 1.3-3.6 h here, by the host), the newest only kept
CHECKPOINT_EVERY = {"sac": 20, "ppo": 20, "dqn": 10}
LONG = 100_000

#: parts that rerun another's tasks with other settings (kept out of the default aggregate)
VARIANTS = ("ppo-mujoco-constant-lr", "lunar-lander-fragments", "atari-dqn-short-schedule",
            "atari-dqn-cleanrl-setup", "atari-dqn-cleanrl-buffer",
            "atari-dqn-cleanrl-exact")  # fmt: skip

#: CleanRL's ppo_continuous_action at 1M: env, mean, std over its seeds
CLEANRL_MUJOCO = [
    ("Hopper-v5", 2382.9, 271.7),
    ("HalfCheetah-v5", 1442.6, 46.0),
    ("Walker2d-v5", 2288.0, 571.8),
]


def ppo_mujoco(args: tuple[str, ...] = ()) -> list[Run]:
    """PPO on CleanRL's three MuJoCo envs at 1M, beside its results."""
    return [
        Run("ppo", env, 1_000_000, args, published=mean, published_std=std, source=CLEANRL_PPO)
        for env, mean, std in CLEANRL_MUJOCO
    ]


def dqn_breakout(args: tuple[str, ...] = (), variant: str = "") -> Run:
    """DQN on Breakout at 1M env steps, beside CleanRL's ``dqn_atari`` runs of that budget."""
    published, std, source = CLEANRL_DQN_ATARI
    return Run("dqn", "ALE/Breakout-v5", 1_000_000, args, variant, published=published,
               published_std=std, source=source, eval_eps=0.05)  # fmt: skip


def lander_in(envs: int, steps: int) -> Run:
    """The lander's run in fragments of ``steps`` (the preset's are 1024): 64 is what the
    automatic layout chose for PPO's 2048-step rounds in 32 envs."""
    layout = ("--set", f"num_envs_per_worker={envs}", "--set", f"rollout_fragment_length={steps}")
    return PPO_LANDER._replace(args=layout, variant=f"{envs} envs x {steps} steps")


PARTS: dict[str, list[Run]] = {
    "ppo-mujoco": ppo_mujoco(),
    "ppo-mujoco-constant-lr": ppo_mujoco(CONSTANT_LR),
    "sac-mujoco": [
        Run("sac", "Hopper-v5", 200_000, source=CLEANRL_SAC + " (2310 at 1M)"),
        Run("sac", "HalfCheetah-v5", 200_000, source=CLEANRL_SAC + " (9635 at 1M)"),
    ],
    "doorkey": [
        Run(
            "ppo",
            "suite_envs:doorkey_5x5",
            150_000,
            published=0.964,
            source=RL_ZOO + ": DoorKey-5x5 at 100k",
        ),
        Run("ppo", "suite_envs:doorkey_8x8", 500_000),
    ],
    "popgym": [
        Run("ppo", f"suite_envs:{name}", budget, args, variant)
        for name, budget in [
            ("repeat_previous_easy", 300_000),
            ("position_only_cartpole_easy", 300_000),
            ("repeat_previous_medium", 500_000),
            ("position_only_cartpole_medium", 500_000),
        ]
        for args, variant in [((), "no memory"), (MEMORY, "lstm")]
    ]
    # the card 32 steps back: sequences long enough for the gradient to reach it
    + [Run("ppo", "suite_envs:repeat_previous_medium", 500_000, LONG_MEMORY, "lstm, 64 steps")],
    "lunar-lander": [PPO_LANDER],
    "lunar-lander-fragments": [lander_in(32, 64), lander_in(16, 128)],
    "classic": [
        rl_zoo("ppo", "Pendulum-v1", 200_000, -169.887, 104.904, ": Pendulum-v0, 2M, gSDE"),
        rl_zoo("ppo", "MountainCar-v0", 1_000_000, -110.423, 19.473),
        rl_zoo("dqn", "MountainCar-v0", 120_000, -100.849, 9.925),
    ],
    # the walker at its preset's 3M env steps; RL Zoo's run took 5M
    "bipedal-walker": [rl_zoo("ppo", "BipedalWalker-v3", 3_000_000, 213.299, 129.49, ": 5M")],
    "atari": [Run("ppo", "ALE/Breakout-v5", 1_000_000), dqn_breakout()],
    "atari-dqn-short-schedule": [dqn_breakout(CLEANRL_DQN_SCHEDULE, "CleanRL's schedule")],
    "atari-dqn-cleanrl-setup": [
        dqn_breakout(CLEANRL_DQN_SETUP, "CleanRL's schedule, lives and clipping")
    ],
    "atari-dqn-cleanrl-buffer": [
        dqn_breakout(CLEANRL_DQN_BUFFER, "CleanRL's schedule, lives, clipping and 1M buffer")
    ],
    "atari-dqn-cleanrl-exact": [dqn_breakout(CLEANRL_DQN_EXACT, "CleanRL's DQN and setup")],
}


def run_part(part: str, seeds: list[int], more: list[str]) -> list[dict]:
    """Every run of ``part`` on every seed, seed by seed (so each env has a first seed
    early), skipping those ``suite_<part>.json`` holds whole (a row of a run stopped short,
    ``stopped_by: interrupted``, is run again); the rows, written after each run."""
    path = RESULTS / f"suite_{part}.json"
    rows = json.loads(path.read_text())["rows"] if path.exists() else []
    rows = [r for r in rows if "error" not in r and r.get("stopped_by") != "interrupted"]
    done = {(r["algo"], r["env"], r.get("variant", ""), r["seed"]) for r in rows}
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    )
    for seed in seeds:
        for run in PARTS[part]:
            if (run.algo, run.env, run.variant, seed) in done:
                continue
            name = f"{run.algo}_{run.env}_{run.variant}_s{seed}".replace("/", "-").replace(":", "-")
            out = RUNS / part / name.replace(" ", "-").replace(",", "")
            every = CHECKPOINT_EVERY.get(run.algo, 0) if run.budget > LONG else 0
            args = [*run.args, *more]
            if every and run.algo == "dqn":  # a run taken up again needs its replay back
                args += ["--set", "store_buffer_in_checkpoints=true"]
            row = train_cli(run.algo, run.env, seed, run.budget, out, args, checkpoint_every=every)
            if row.get("stopped_by") == "interrupted":  # Ctrl-C: the next call goes on
                raise SystemExit(f"stopped; {out} goes on from its last checkpoint next time")
            row.update(variant=run.variant, budget=run.budget, published=run.published,
                       published_std=run.published_std, source=run.source)  # fmt: skip
            if run.eval_eps is not None and "error" not in row:
                try:  # the row is kept whatever happens here: its run took hours
                    row.update(evaluate(out, run.eval_eps))
                except Exception as err:
                    row["eval_error"] = f"{type(err).__name__}: {err}"
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
            write_results(f"suite_{part}", {"part": part, "train_args": more, "rows": rows})
            shutil.rmtree(out, ignore_errors=True)  # its row holds what the suite keeps
    return rows


def evaluate(out: Path, eps: float, episodes: int = 10) -> dict:
    """The run's final checkpoint played for ``episodes`` whole games at epsilon ``eps``
    (CleanRL's and the Atari papers' evaluation; 0: greedy, any algorithm's): their mean,
    min and max return."""
    from flowrl.run.algorithm import Algorithm

    epsilon = {"exploration_eps": eps} if eps else {}
    algo = Algorithm.from_checkpoint(out, in_process=True, **epsilon)
    try:
        res = algo.evaluate(episodes, explore=bool(eps))
    finally:
        algo.stop()
    low, high = res["episode_return_min"], res["episode_return_max"]
    return {"eval_eps": eps, "eval_return": res["episode_return_mean"], "eval_min": low,
            "eval_max": high}  # fmt: skip


def table(rows: list[dict]) -> list[dict]:
    """One line per env and variant: the mean and spread of the final returns over seeds
    (and of the final checkpoints' evaluations, where the rows have them), beside the
    published mean and spread, and the median wall time and env steps/s."""
    lines = []
    for key in dict.fromkeys((r["algo"], r["env"], r.get("variant", "")) for r in rows):
        mine = [r for r in rows if (r["algo"], r["env"], r.get("variant", "")) == key]
        ok = [r for r in mine if "error" not in r]
        returns = [r["return"] for r in ok if r["return"] is not None] or [float("nan")]
        first = mine[0]
        lines.append({"algo": key[0], "env": key[1].removeprefix("suite_envs:"),
                      "variant": key[2], "seeds": len(ok), "steps": first.get("budget"),
                      "return": f"{np.mean(returns):.3g} +/- {np.std(returns):.3g}",
                      "evaluated": _evaluated(ok),
                      "published": _published(first),
                      "wall s": np.median([r["seconds"] for r in ok] or [np.nan]),
                      "steps/s": np.median([r["steps_per_s"] for r in ok] or [np.nan]),
                      "errors": len(mine) - len(ok)})  # fmt: skip
    return lines


def _evaluated(rows: list[dict]) -> str:
    scored = [r for r in rows if r.get("eval_return") is not None]  # not an eval_error's
    if not scored:
        return "-"
    scores = [r["eval_return"] for r in scored]
    eps = scored[0]["eval_eps"]
    how = f"epsilon {eps}" if eps else "greedy"
    return f"{np.mean(scores):.3g} +/- {np.std(scores):.3g} ({how})"


def _published(row: dict) -> str:
    if row.get("published") is None:
        return "-"
    spread = f" +/- {row['published_std']:.3g}" if row.get("published_std") else ""
    return f"{row['published']:.4g}{spread}"


def aggregate(parts: list[str]) -> dict | None:
    """IQM of return / published return over the rows of ``parts`` that have a published
    figure, with a stratified bootstrap interval; tasks keep the seeds all of them have,
    and a task of one run is left out (a bootstrap resamples several; ``left_out``). A row
    whose final checkpoint was evaluated as the published runs were counts that return. A
    task whose published return is not above 0 is left out: a ratio to it reads backwards
    (-200 / -110 is 1.8)."""
    paths = [RESULTS / f"suite_{part}.json" for part in parts]
    rows = [r for path in paths if path.exists() for r in json.loads(path.read_text())["rows"]]
    rows = [r for r in rows if "error" not in r and r["return"] is not None
            and (r.get("published") or 0) > 0]  # fmt: skip
    per_task: dict[tuple[str, str], list[float]] = {}
    for r in sorted(rows, key=lambda r: (r["algo"], r["env"])):
        score = r["eval_return"] if r.get("eval_return") is not None else r["return"]
        per_task.setdefault((r["algo"], r["env"]), []).append(score / r["published"])
    tasks = [t for t, s in per_task.items() if len(s) > 1]
    if not tasks:
        return None
    runs = min(len(per_task[t]) for t in tasks)
    scores = np.array([per_task[t][:runs] for t in tasks]).T
    lo, hi = stratified_bootstrap(scores)
    left_out = [" ".join(t) for t, s in per_task.items() if len(s) == 1]
    return {"parts": parts, "tasks": [" ".join(t) for t in tasks], "runs_per_task": runs,
            "iqm_normalised": iqm(scores), "ci95": [lo, hi], "left_out": left_out}  # fmt: skip


def iqm(scores: np.ndarray) -> float:
    """The interquartile mean of all ``scores``: the mean of what is left after cutting
    ``int(n / 4)`` from each end, as rliable's ``aggregate_iqm`` (scipy's ``trim_mean``)."""
    flat = np.sort(np.asarray(scores, dtype=float).ravel())
    cut = int(0.25 * len(flat))
    return float(flat[cut : len(flat) - cut].mean())


def stratified_bootstrap(
    scores: np.ndarray, reps: int = 2000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float]:
    """The ``1 - alpha`` percentile interval of ``iqm`` over ``reps`` resamples of the runs
    of each task on its own (``scores``: runs x tasks), rliable's stratified bootstrap."""
    rng = np.random.default_rng(seed)
    runs, tasks = scores.shape
    estimates = [iqm(np.take_along_axis(scores, rng.integers(0, runs, (runs, tasks)), axis=0))
                 for _ in range(reps)]  # fmt: skip
    lo, hi = np.percentile(estimates, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=list(PARTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--train-args", default="", help='more train arguments: "--num-workers 0"')
    parser.add_argument("--aggregate", nargs="*", metavar="PART", choices=list(PARTS),
                        help="the IQM over these parts (default: all but variants)")  # fmt: skip
    args = parser.parse_args()
    if args.part:
        print_table(table(run_part(args.part, args.seeds, args.train_args.split())))
    if args.aggregate is not None:
        result = aggregate(args.aggregate or [p for p in PARTS if p not in VARIANTS])
        print(json.dumps(result, indent=2))
        if result is not None:
            write_results("suite_aggregate", result)


if __name__ == "__main__":
    main()
