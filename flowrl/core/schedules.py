"""Settings that change as training goes on. A schedulable config value (``lr``,
``entropy_coeff``, DQN's ``exploration_eps``) is a number, a constant, or a
piecewise-linear schedule ``[[env_steps, value], ...]``: interpolated between its points,
held before the first and after the last (``--set 'lr=[[0, 3e-4], [1e6, 0]]'``).

Schedules are stepped by the env steps sampled, which checkpoints keep, so a resumed run
goes on where its schedule was. The learner takes each iteration's values as the iteration
begins (``flowrl.learning.learner.Learner.set_env_steps``); results show them as
``schedule/<name>``.

Examples:
    >>> lr = ((0.0, 3e-4), (1_000_000.0, 0.0))
    >>> scheduled(lr, 250_000), scheduled(lr, 2_000_000), scheduled(3e-4, 250_000)
    (0.000225, 0.0, 0.0003)
"""

from __future__ import annotations

#: a schedulable config value: a constant, or ``((env_steps, value), ...)``
Schedule = float | tuple[tuple[float, float], ...]


def scheduled(value: Schedule, env_steps: float) -> float:
    """The value of a constant or a schedule at ``env_steps``."""
    if isinstance(value, int | float):
        return float(value)
    (s0, v0), rest = value[0], value[1:]
    if env_steps <= s0:
        return v0
    for s1, v1 in rest:
        if env_steps <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (env_steps - s0) / (s1 - s0)
        s0, v0 = s1, v1
    return v0


def is_schedule(value: Schedule) -> bool:
    """Whether ``value`` changes with env steps (a schedule, not a constant)."""
    return not isinstance(value, int | float)
