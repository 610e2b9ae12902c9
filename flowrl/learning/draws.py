"""Random draws held across acting calls (gSDE's exploration matrices), in torch or
numpy alike: this module imports neither."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class HeldDraws:
    """A random draw per lane (``draw(lanes)``) held for ``steps`` calls, and drawn anew
    when the number of lanes changes: gSDE's exploration matrices, in torch or numpy.

    Examples:
        >>> import numpy as np
        >>> held = HeldDraws(steps=2)
        >>> first, second, third = (held(4, np.random.rand) for _ in range(3))
        >>> first is second, second is third
        (True, False)
    """

    def __init__(self, steps: int) -> None:
        self.steps, self.calls = steps, 0
        self.value: Any = None

    def __call__(self, lanes: int, draw: Callable[[int], Any]) -> Any:
        if self.value is None or self.calls % self.steps == 0 or len(self.value) != lanes:
            self.value, self.calls = draw(lanes), 0
        self.calls += 1
        return self.value
