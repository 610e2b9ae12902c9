"""Aligned text tables of rows with the same keys: ``flowrl tune``'s trials, a profile's
operators and the benchmarks' figures.

Examples:
    >>> print(format_table([{"name": "a", "steps/s": 1234.5}, {"name": "bb", "steps/s": 0.5}]))
    name  steps/s
    a     1,234
    bb    0.5
"""

from __future__ import annotations

from typing import Any


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as lines of left-aligned columns headed by the first row's keys."""
    if not rows:
        return ""
    keys = list(rows[0])
    cells = [[_cell(row.get(k)) for k in keys] for row in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True)).rstrip()]
    for c in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip())
    return "\n".join(lines)


def print_table(rows: list[dict[str, Any]]) -> None:
    """Print ``format_table`` (nothing for no rows)."""
    if rows:
        print(format_table(rows))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)
