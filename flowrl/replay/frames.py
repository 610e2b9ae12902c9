"""Stacked frames stored once: replay of Atari-style observations at a frame per row.

An observation that stacks the last ``S`` frames of a game (uint8, shape ``(S, H, W)``)
shares ``S - 1`` frames with the one before it, and a row's ``next_obs`` shares ``S - 1``
with its ``obs``. Stored as they come, a row of Atari's ``(4, 84, 84)`` obs and next obs
takes 56 KB and a 1M-row buffer 56 GB; ``FrameStore`` keeps each distinct frame once in
a ring and a row as the ids of its frames, about 7 KB a row. What a row reads back is
exactly what was stored.

A frame is recognised by its content among the last ``window`` frames written, so rows
may come in any order and from any number of envs (their frames interleave), episodes may
start with repeated or blank frames, and n-step rows whose next obs lies several frames
ahead share their frames too. A frame seen again only after the window is stored again,
which costs memory, never correctness.

Examples:
    >>> store = FrameStore(capacity=100, stack=4, frame=(4, 4), dtype=np.uint8, keys=("obs",))
    >>> frames = np.arange(10, dtype=np.uint8).reshape(10, 1, 1).repeat(4, 1).repeat(4, 2)
    >>> obs = np.stack([frames[t : t + 4] for t in range(6)])  # 6 rows sliding over 10 frames
    >>> store.write(np.arange(6), {"obs": obs})
    >>> store.num_frames  # 9 frames, each once, instead of 24
    9
    >>> bool((store.read(np.array([5]))["obs"] == obs[5]).all())
    True
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: frames remembered for recognising a frame seen again (the envs' rows interleave, and
#: the next fragment of an env can come thousands of frames after its last)
WINDOW = 8192


def stacked_frames(column: np.ndarray) -> bool:
    """Whether a column of rows holds stacks of image frames: uint8 of shape
    ``(rows, S, H, W)`` with a short stack (``S`` at most 16) of frames at least 16 x 16
    (a channels-last image, ``(H, W, C)``, is not one)."""
    if column.dtype != np.uint8 or column.ndim != 4:
        return False
    _, stack, height, width = column.shape
    return stack <= 16 and height >= 16 and width >= 16


class FrameStore:
    """The ``keys`` columns of ``capacity`` rows, each a stack of ``stack`` frames, kept
    as frames stored once (module docstring)."""

    def __init__(
        self, capacity: int, *, stack: int, frame: tuple[int, ...], dtype, keys: tuple[str, ...]
    ) -> None:
        self.keys = keys
        self.window = min(WINDOW, capacity * stack)
        # a row holds frames written at most `window` frames before it: the frames of the
        # live rows fit in about a frame per row plus the window (the ring grows otherwise)
        self.frames = np.empty((capacity + capacity // 20 + self.window, *frame), dtype)
        self.ids = np.zeros((capacity, len(keys), stack), np.int64)  # frame ids, absolute
        self.first = np.zeros(capacity, np.int64)  # frames written before the row's own
        self.num_frames = 0
        self._recent: dict[int, list[int]] = {}  # content hash -> ids within the window
        self._order: deque[tuple[int, int]] = deque()  # (hash, id), oldest first

    def __repr__(self) -> str:
        return f"FrameStore({self.keys}, {self.num_frames} frames in a ring of {len(self.frames)})"

    def write(self, slots: np.ndarray, columns: dict[str, np.ndarray], oldest: int = 0) -> None:
        """Store ``columns`` (``keys`` -> ``(len(slots), stack, *frame)``) at row ``slots``;
        ``oldest`` is the slot of the oldest row live after this write."""
        self.first[slots] = self.num_frames
        stacks = np.stack([columns[k] for k in self.keys], axis=1)  # (rows, keys, stack, *frame)
        ids = np.empty(stacks.shape[:3], np.int64)
        new: list[np.ndarray] = []
        for index in np.ndindex(*ids.shape):
            ids[index] = self._find_or_add(stacks[index], new)
        self._make_room(len(new), oldest)
        for i, frame in enumerate(new):
            self.frames[(self.num_frames + i) % len(self.frames)] = frame
        self.num_frames += len(new)
        self.ids[slots] = ids

    def _find_or_add(self, frame: np.ndarray, new: list[np.ndarray]) -> int:
        """The id of a frame equal to ``frame`` within the window (or among this write's
        new frames), or the id it gets as one more new frame."""
        key = hash(frame.tobytes())
        for i in self._recent.get(key, ()):
            stored = new[i - self.num_frames] if i >= self.num_frames else self._frame(i)
            if np.array_equal(stored, frame):
                return i
        i = self.num_frames + len(new)
        new.append(frame)
        self._recent.setdefault(key, []).append(i)
        self._order.append((key, i))
        while self._order[0][1] <= i - self.window:  # forget what left the window
            old_key, old = self._order.popleft()
            same = self._recent[old_key]
            same.remove(old)
            if not same:
                del self._recent[old_key]
        return i

    def _frame(self, i: int) -> np.ndarray:
        return self.frames[i % len(self.frames)]

    def _make_room(self, count: int, oldest: int) -> None:
        """Grow the ring when writing ``count`` frames would overwrite a frame the oldest
        live row (``oldest``) may still hold: one written within the window before it."""
        needed = self.num_frames + count - (self.first[oldest] - self.window)
        if needed <= len(self.frames):
            return
        self.frames = self._ring(self.frames, max(needed, len(self.frames) * 5 // 4))

    def _ring(self, frames: np.ndarray, size: int) -> np.ndarray:
        """A ring of ``size`` frames holding the newest of ``frames`` (a ring holding
        frame ids below ``num_frames``) at their ids' places."""
        live = np.arange(max(0, self.num_frames - len(frames)), self.num_frames)
        ring = np.empty((size, *frames.shape[1:]), frames.dtype)
        ring[live % size] = frames[live % len(frames)]
        return ring

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The ``keys`` columns of rows ``indices``, as they were written."""
        ids = self.ids[indices] % len(self.frames)
        return {k: self.frames[ids[:, j]] for j, k in enumerate(self.keys)}  # each contiguous

    def get_state(self, size: int) -> dict:
        """The first ``size`` rows' frame ids and the ring (not the window: after a
        restore the first rows store their frames again)."""
        return {
            "keys": self.keys,
            "frames": self.frames[: self.num_frames],  # the whole ring once it is full
            "ids": self.ids[:size],
            "first": self.first[:size],
            "num_frames": self.num_frames,
        }

    @classmethod
    def from_state(cls, capacity: int, state: dict) -> FrameStore:
        """The store ``get_state`` described, for ``capacity`` rows."""
        frames, ids = state["frames"], state["ids"]
        store = cls(capacity, stack=ids.shape[2], frame=frames.shape[1:], dtype=frames.dtype,
                    keys=tuple(state["keys"]))  # fmt: skip
        store.num_frames = state["num_frames"]
        store.frames = store._ring(frames, max(len(store.frames), len(frames)))
        store.ids[: len(ids)], store.first[: len(ids)] = ids, state["first"]
        return store
