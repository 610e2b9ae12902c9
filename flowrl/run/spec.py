"""AlgorithmSpec: what an algorithm file hands the runner (config, policy, learner, plan).

Example:
    >>> from flowrl.algorithms.ppo import ALGORITHM
    >>> ALGORITHM.name, ALGORITHM.config_cls.__name__, ALGORITHM.learner_cls.__name__
    ('ppo', 'PPOConfig', 'PPOLearner')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flowrl.core.config import Config
from flowrl.core.iter import LocalIterator
from flowrl.learning.learner import Learner
from flowrl.learning.policy import Policy
from flowrl.run.presets import Preset

Plan = Callable[[Any, Any], LocalIterator[dict[str, Any]]]
Variant = Callable[[Config], tuple[type[Policy], type[Learner]]]


@dataclass(frozen=True)
class AlgorithmSpec:
    """An algorithm: its name, one-line summary, config class, the policy class its
    workers act with, the learner class that trains it, and its plan."""

    name: str
    summary: str
    config_cls: type[Config]
    policy_cls: type[Policy]
    learner_cls: type[Learner]
    execution_plan: Plan
    #: settings for env families (Atari, MuJoCo) a run starts from (:mod:`flowrl.run.presets`)
    presets: tuple[Preset, ...] = ()
    #: picks another (policy, learner) pair by the config (SAC's discrete variant)
    variant: Variant | None = None

    def classes(self, config: Config) -> tuple[type[Policy], type[Learner]]:
        """The policy and learner classes a run of ``config`` uses."""
        if self.variant is not None:
            return self.variant(config)
        return self.policy_cls, self.learner_cls
