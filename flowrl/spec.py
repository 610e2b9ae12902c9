"""AlgorithmSpec: what an algorithm file hands the runner (config, policy, plan).

Example:
    >>> from flowrl.algorithms.ppo import ALGORITHM
    >>> ALGORITHM.name, ALGORITHM.config_cls.__name__
    ('ppo', 'PPOConfig')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flowrl.config import Config
from flowrl.iter import LocalIterator
from flowrl.policy import Policy
from flowrl.presets import Preset

Plan = Callable[[Any, Any], LocalIterator[dict[str, Any]]]


@dataclass(frozen=True)
class AlgorithmSpec:
    """An algorithm: its name, one-line summary, config class, policy class and plan."""

    name: str
    summary: str
    config_cls: type[Config]
    policy_cls: type[Policy]
    execution_plan: Plan
    #: settings for env families (Atari, MuJoCo) a run starts from (:mod:`flowrl.presets`)
    presets: tuple[Preset, ...] = ()
