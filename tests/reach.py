"""The learning tests' one helper: train until a reward or a step budget, then stop.
Importable as ``reach`` (the tests directory is on the path)."""

from __future__ import annotations

from flowrl import Algorithm
from flowrl.run.runner import StopCriteria


def reach(algo: Algorithm, reward: float, budget: int) -> dict:
    """Train ``algo`` until its mean return reaches ``reward`` or it has sampled
    ``budget`` env steps, stop it, and return the run's summary (``stopped_by`` says
    which came first)."""
    try:
        return algo.run(stop=StopCriteria(reward=reward, timesteps=budget))
    finally:
        algo.stop()
