"""Atari replay with each frame kept once (``FrameStore``) against rows kept whole (the
baseline): memory per row, time to add a row and to sample DQN's batch of 32, on
Breakout's own stacked frames (4 envs, random actions, as DQN's Atari preset stores them).

    python benchmarks/replay_frames.py [--rows 20000] [--batch 32]

Writes benchmarks/results/replay_frames.json.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import flowrl.replay.buffer as replay_buffer
from flowrl.core.sample_batch import SampleBatch
from flowrl.replay import ReplayBuffer
from flowrl.rollout.envs import make_vector_env

from common import print_table, time_per_call, write_results


def breakout_rows(rows: int, envs: int = 4) -> list[SampleBatch]:
    """``rows`` transitions of Breakout in batches of a step of ``envs`` envs (the reset
    steps of NEXT_STEP autoreset left out, as the rollout worker leaves them)."""
    env = make_vector_env("ALE/Breakout-v5", num_envs=envs, seed=0, num_threads=1)
    obs, _ = env.reset(seed=0)
    rng, ended, batches, count = np.random.default_rng(0), np.zeros(envs, bool), [], 0
    while count < rows:
        actions = rng.integers(0, env.single_action_space.n, envs)
        next_obs, rewards, terminated, truncated, _ = env.step(actions)
        keep = ~ended
        batches.append(SampleBatch(obs=obs[keep], next_obs=next_obs[keep],
                                   actions=actions[keep], rewards=rewards[keep]))  # fmt: skip
        count += int(keep.sum())
        ended, obs = terminated | truncated, next_obs
    env.close()
    return batches


def measure(batches: list[SampleBatch], frames: bool, batch: int, repeats: int) -> dict:
    """Bytes per row, microseconds to add a row and milliseconds to sample ``batch``."""
    keep = replay_buffer.stacked_frames
    replay_buffer.stacked_frames = keep if frames else (lambda column: False)
    try:
        rows = sum(len(b) for b in batches)
        buffer = ReplayBuffer(rows, seed=0)
        start = time.perf_counter()
        for b in batches:
            buffer.add(b)
        add = (time.perf_counter() - start) / rows
    finally:
        replay_buffer.stacked_frames = keep
    sample = time_per_call(lambda: buffer.sample(batch), repeats=repeats)
    state = buffer.get_state()
    stored = sum(v.nbytes for v in state["columns"].values())
    if state["frames"] is not None:
        stored += sum(state["frames"][k].nbytes for k in ("frames", "ids", "first"))
    return {"bytes_per_row": stored / rows, "add_us_per_row": add * 1e6, "sample_ms": sample * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args()
    batches = breakout_rows(args.rows)
    whole = measure(batches, frames=False, batch=args.batch, repeats=args.repeats)
    once = measure(batches, frames=True, batch=args.batch, repeats=args.repeats)
    rows = [{"storage": "rows kept whole (baseline)", **whole, "x memory": 1.0},
            {"storage": "frames kept once", **once,
             "x memory": once["bytes_per_row"] / whole["bytes_per_row"]}]  # fmt: skip
    print(f"{args.rows:,} rows of Breakout; sample: median of {args.repeats} batches of "
          f"{args.batch}")  # fmt: skip
    print_table(rows)
    write_results("replay_frames", {"rows": args.rows, "batch_size": args.batch, "results": rows})


if __name__ == "__main__":
    main()
