"""Combinators that run the branches of one plan side by side: Concurrently.

Example:
    >>> evens = LocalIterator.from_items([0, 2, 4])
    >>> odds = LocalIterator.from_items([1, 3, 5])
    >>> Concurrently([evens, odds], mode="round_robin", round_robin_weights=[1, 2]).take(6)
    [0, 1, 3, 2, 5, 4]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowrl.iter import LocalIterator


def Concurrently(
    ops: Sequence[LocalIterator[Any]],
    *,
    mode: str = "round_robin",
    output_indexes: Sequence[int] | None = None,
    round_robin_weights: Sequence[int | str] | None = None,
) -> LocalIterator[Any]:
    """Run several branches of one plan; only the branches in ``output_indexes`` reach the
    output (the others still run, for their side effects).

    ``round_robin``: deterministic turns, ``round_robin_weights[i]`` items from branch ``i``
    per turn (``"*"``: as many as are ready). ``async``: whichever branch has an item.

    Example:
        >>> Concurrently(
        ...     [store_op, train_op], output_indexes=[1], round_robin_weights=[1, 4]
        ... )  # doctest: +SKIP
    """
    if mode not in ("round_robin", "async"):
        raise ValueError(f"mode must be round_robin or async, got {mode!r}")
    if round_robin_weights is not None and mode != "round_robin":
        raise ValueError("round_robin_weights need mode='round_robin'")
    outputs = set(range(len(ops)) if output_indexes is None else output_indexes)
    if not outputs <= set(range(len(ops))):
        raise ValueError(f"output_indexes {sorted(outputs)} out of range for {len(ops)} ops")
    tagged = [op.for_each(_Tag(i)) for i, op in enumerate(ops)]
    merged = tagged[0].union(
        *tagged[1:],
        deterministic=mode == "round_robin",
        round_robin_weights=round_robin_weights,
    )
    out = merged.filter(lambda item: item[0] in outputs).for_each(_untag)
    out.name = f"Concurrently[{mode}, outputs={sorted(outputs)}]({', '.join(o.name for o in ops)})"
    return out


class _Tag:
    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, item: Any) -> tuple[int, Any]:
        return self.index, item

    def __repr__(self) -> str:
        return f"tag[{self.index}]"


def _untag(item: tuple[int, Any]) -> Any:
    return item[1]
