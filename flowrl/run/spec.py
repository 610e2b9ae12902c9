"""AlgorithmSpec: what an algorithm file hands the runner (config, policy, learner, plan).

Example:
    >>> from flowrl.algorithms.ppo import ALGORITHM
    >>> ALGORITHM.name, ALGORITHM.config_cls.__name__, ALGORITHM.learner_cls.__name__
    ('ppo', 'PPOConfig', 'PPOLearner')
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowrl.core.config import Config, ConfigError
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


def list_algorithms() -> list[AlgorithmSpec]:
    """The algorithms that ship with flowrl."""
    from flowrl.algorithms import NAMES

    return [get_algorithm(name) for name in NAMES]


def get_algorithm(ref: str) -> AlgorithmSpec:
    """An algorithm by name (``ppo``) or a user plan (``path/to/file.py:plan``)."""
    if ":" in ref and ref.split(":", 1)[0].endswith(".py"):
        return load_plan_file(ref)
    from flowrl.algorithms import NAMES

    if ref.lower() not in NAMES:
        raise ConfigError(f"unknown algorithm '{ref}'; available: {', '.join(NAMES)}")
    return importlib.import_module(f"flowrl.algorithms.{ref.lower()}").ALGORITHM


def load_plan_file(ref: str) -> AlgorithmSpec:
    """``file.py:plan``: the plan function of a user file, which also names the ``Config``,
    ``Policy`` and ``Learner`` classes the plan runs with (its own, or imported from an
    algorithm)."""
    path_str, func_name = ref.rsplit(":", 1)
    path = Path(path_str).resolve()
    if not path.is_file():
        raise ConfigError(f"plan file not found: {path_str}")
    module_name = f"flowrl_user_plan_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ConfigError(f"cannot load plan file {path_str}: {type(e).__name__}: {e}") from None
    plan = getattr(module, func_name, None)
    if not callable(plan):
        raise ConfigError(f"{path_str} has no function '{func_name}'")
    bases = {"Config": Config, "Policy": Policy, "Learner": Learner}
    classes = {name: getattr(module, name, None) for name in bases}
    for name, base in bases.items():
        cls = classes[name]
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigError(f"{path_str} must name a {name} class; {_plan_file_hint()}")
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # Ray workers cannot import it by name
    return AlgorithmSpec(
        name=f"{path}:{func_name}",
        summary=(plan.__doc__ or "user plan").strip().splitlines()[0],
        config_cls=classes["Config"],
        policy_cls=classes["Policy"],
        learner_cls=classes["Learner"],
        execution_plan=plan,
    )


def _plan_file_hint() -> str:
    """How a plan file names an algorithm's classes, with the first shipped algorithm."""
    from flowrl.algorithms import NAMES

    spec = get_algorithm(NAMES[0])
    imports = (
        f"{spec.config_cls.__name__} as Config, {spec.policy_cls.__name__} as Policy, "
        f"{spec.learner_cls.__name__} as Learner"
    )
    return f"to run with {spec.name}'s: from {spec.config_cls.__module__} import {imports}"
