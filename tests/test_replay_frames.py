"""Stacked frames kept once each in the replay buffer: rows read back exactly as written
(envs interleaved, episodes starting, n-step rows, the ring wrapping and growing, a
checkpoint restored), at about a frame per row."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrl.core.sample_batch import SampleBatch
from flowrl.replay import ReplayBuffer
from flowrl.replay.frames import stacked_frames

STACK = 4


class Game:
    """One env's stacked observations: episodes of ``length`` steps, each starting with its
    first frame repeated (as gymnasium's and ale-py's frame stacks do)."""

    def __init__(self, rng: np.random.Generator, length: int) -> None:
        self.rng, self.length = rng, length
        self.reset()

    def reset(self) -> None:
        self.stack = np.repeat(self.frame()[None], STACK, axis=0)
        self.t = 0

    def frame(self) -> np.ndarray:
        return self.rng.integers(0, 256, (16, 16), dtype=np.uint8)

    def step(self) -> tuple[np.ndarray, np.ndarray, bool]:
        obs = self.stack
        self.stack = np.concatenate([obs[1:], self.frame()[None]])
        self.t += 1
        return obs, self.stack, self.t == self.length


def rows(lanes: int, steps: int, length: int, n_step: int, seed: int) -> SampleBatch:
    """``steps`` rows from each of ``lanes`` games, interleaved step by step; a row's next
    obs lies ``n_step`` frames on (fewer where the episode ends first)."""
    rng = np.random.default_rng(seed)
    games = [Game(rng, length) for _ in range(lanes)]
    pending: list[list] = [[] for _ in range(lanes)]
    obs, next_obs, ids = [], [], []
    for _ in range(steps):
        for lane, game in enumerate(games):
            o, nxt, done = game.step()
            pending[lane].append(o)
            if done or len(pending[lane]) == n_step:
                first = pending[lane].pop(0)
                obs.append(first)
                next_obs.append(nxt)
                ids.append(len(ids))
                if done:
                    for o in pending[lane]:
                        obs.append(o)
                        next_obs.append(nxt)
                        ids.append(len(ids))
                    pending[lane].clear()
                    game.reset()
    return SampleBatch(obs=np.array(obs), next_obs=np.array(next_obs), row=np.array(ids))


def check_rows(buffer: ReplayBuffer, written: SampleBatch) -> None:
    """Every live slot reads back the row last written to it."""
    batch = buffer.sample(4 * buffer.capacity)
    row = batch["row"]
    assert (batch["obs"] == written["obs"][row]).all()
    assert (batch["next_obs"] == written["next_obs"][row]).all()


@settings(max_examples=25)
@given(
    capacity=st.integers(20, 300),
    lanes=st.integers(1, 6),
    length=st.integers(1, 40),
    n_step=st.integers(1, 3),
    chunk=st.integers(1, 70),
)
def test_rows_read_back_as_written_however_they_come(capacity, lanes, length, n_step, chunk):
    written = rows(lanes, 120, length, n_step, seed=capacity)
    buffer = ReplayBuffer(capacity, seed=0)
    for start in range(0, len(written), chunk):
        buffer.add(written[start : start + chunk])
    assert buffer._frames is not None
    check_rows(buffer, written)


def test_a_row_costs_about_one_frame():
    written = rows(lanes=4, steps=500, length=125, n_step=1, seed=0)
    buffer = ReplayBuffer(10_000)
    for start in range(0, len(written), 4):
        buffer.add(written[start : start + 4])
    # 2,000 rows: a frame each, and each of the 16 episodes' first (its first stack
    # repeats it)
    assert buffer._frames.num_frames == 2_000 + 16
    assert len(buffer._frames.frames) <= 10_000 * 21 // 20 + 8192


def test_a_restored_buffer_reads_and_goes_on_writing_as_the_original():
    written = rows(lanes=3, steps=400, length=30, n_step=1, seed=1)
    first, rest = written[:700], written[700:]
    buffer = ReplayBuffer(500, seed=3)
    buffer.add(first)
    restored = ReplayBuffer(500, seed=3)
    restored.set_state(buffer.get_state())
    for b in (buffer, restored):
        for start in range(0, len(rest), 50):
            b.add(rest[start : start + 50])
    for b in (buffer, restored):
        check_rows(b, written)
    assert (buffer.sample(64)["row"] == restored.sample(64)["row"]).all()


def test_a_checkpoint_holds_a_frame_per_row_not_two_stacks():
    written = rows(lanes=2, steps=500, length=100, n_step=1, seed=2)
    buffer = ReplayBuffer(5_000)
    buffer.add(written)
    state = buffer.get_state()
    assert set(state["columns"]) == {"row"}
    assert len(state["frames"]["frames"]) == buffer._frames.num_frames < 1.1 * len(written)


@pytest.mark.parametrize(
    ("shape", "dtype", "stacked"),
    [
        ((4, 84, 84), np.uint8, True),  # Atari's stack
        ((84, 84, 4), np.uint8, False),  # channels last
        ((7, 7, 3), np.uint8, False),  # MiniGrid's image
        ((4, 84, 84), np.float32, False),
        ((4,), np.uint8, False),
    ],
)
def test_only_stacks_of_image_frames_are_kept_as_frames(shape, dtype, stacked):
    column = np.zeros((2, *shape), dtype)
    assert stacked_frames(column) == stacked
    buffer = ReplayBuffer(10)
    buffer.add(SampleBatch(obs=column, next_obs=column, rewards=np.zeros(2)))
    assert (buffer._frames is not None) == stacked
    assert buffer.sample(3)["obs"].shape == (3, *shape)
