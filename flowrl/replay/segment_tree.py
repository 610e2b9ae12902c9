"""Sum and min segment trees in numpy, updated and queried many indices at a time.

The tree lives in one array of ``2 * capacity`` entries (capacity a power of two): leaf
``i`` is at ``capacity + i`` and node ``k`` covers nodes ``2k`` and ``2k + 1``.

Examples:
    >>> tree = SumTree(4)
    >>> tree.set(np.array([0, 1, 2, 3]), np.array([1.0, 2.0, 3.0, 4.0]))
    >>> tree.total(), tree.find_prefix(np.array([0.5, 1.5, 9.9])).tolist()
    (10.0, [0, 1, 3])
"""

from __future__ import annotations

import numpy as np


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


class _Tree:
    neutral: float

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = _next_pow2(capacity)
        self.nodes = np.full(2 * self.capacity, self.neutral, dtype=np.float64)

    def _combine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``indices`` to ``values`` (the last write wins on repeats)."""
        pos = np.asarray(indices, dtype=np.int64) + self.capacity
        self.nodes[pos] = values
        # recompute ancestors level by level; a parent listed twice gets the same value twice
        for _ in range(self.capacity.bit_length() - 1):
            pos //= 2
            self.nodes[pos] = self._combine(self.nodes[2 * pos], self.nodes[2 * pos + 1])

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.nodes[np.asarray(indices, dtype=np.int64) + self.capacity]


class SumTree(_Tree):
    """Prefix sums over priorities: proportional sampling in O(log n) per sample."""

    neutral = 0.0

    def _combine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return left + right

    def total(self) -> float:
        return float(self.nodes[1])

    def find_prefix(self, masses: np.ndarray) -> np.ndarray:
        """For each mass, the smallest leaf whose inclusive prefix sum exceeds it; never a
        leaf of zero (the round-off of a mass near the total could otherwise take it past
        the last leaf that has any)."""
        masses = np.array(masses, dtype=np.float64)
        idx = np.ones(len(masses), dtype=np.int64)
        while idx[0] < self.capacity:
            left = 2 * idx
            left_sum = self.nodes[left]
            go_right = (masses >= left_sum) & (self.nodes[left + 1] > 0)
            masses -= left_sum * go_right
            idx = left + go_right
        return idx - self.capacity


class MinTree(_Tree):
    """Minimum over priorities: the largest importance weight, for normalisation."""

    neutral = np.inf

    def _combine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return np.minimum(left, right)

    def min(self) -> float:
        return float(self.nodes[1])
