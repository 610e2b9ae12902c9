"""An error in one line, as flowrl's messages quote what an env, a hook or a tracker
raised."""

from __future__ import annotations

import re

#: a frame of a traceback's text: ``File "path", line N, in name``
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')


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


def quoted_error(text: str) -> tuple[str, str | None] | None:
    """The error that ends the text of a traceback, as Ray quotes a remote one: its first
    line (``Type: message``) and the ``file:line`` of its last frame; None when the text
    ends in no traceback.

    Examples:
        >>> quoted_error('''Traceback (most recent call last):
        ...   File "my_env.py", line 5, in __init__
        ...     raise FileNotFoundError("maps/level1.txt")
        ... FileNotFoundError: maps/level1.txt''')
        ('FileNotFoundError: maps/level1.txt', 'my_env.py:5')
    """
    lines = text.strip().splitlines()
    frames = [(i, m) for i, line in enumerate(lines) if (m := _FRAME.match(line))]
    if not frames:
        return None
    last, frame = frames[-1]
    said = [line for line in lines[last + 1 :] if line and not line[0].isspace()]
    return (said[0], f"{frame[1]}:{frame[2]}") if said else None
