"""An error in one line, as flowrl's messages quote what an env, a hook or a tracker
raised."""

from __future__ import annotations


def one_line(error: BaseException) -> str:
    """``Type: the first line of its message``; the type alone when it has none.

    Examples:
        >>> one_line(KeyError("left"))
        "KeyError: 'left'"
        >>> one_line(ValueError("too big\\n(details)")), one_line(StopIteration())
        ('ValueError: too big', 'StopIteration')
    """
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
