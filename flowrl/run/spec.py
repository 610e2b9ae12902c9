"""AlgorithmSpec: what an algorithm file hands the runner (config, policy, learner, plan).

Examples:
    >>> from flowrl.algorithms.ppo import ALGORITHM
    >>> ALGORITHM.name, ALGORITHM.config_cls.__name__, ALGORITHM.learner_cls.__name__
    ('ppo', 'PPOConfig', 'PPOLearner')
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flowrl.core.config import POLICY_KEYS, Config, ConfigError, OfflineConfig, unknown_key
from flowrl.core.iter import LocalIterator
from flowrl.learning.learner import Learner
from flowrl.learning.multi import PolicySpec
from flowrl.learning.policy import Policy
from flowrl.run.presets import Preset, preset_for

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
    #: settings for env families (Atari, MuJoCo) a run starts from (``flowrl.run.presets``)
    presets: tuple[Preset, ...] = ()
    #: picks another (policy, learner) pair by the config (SAC's discrete variant)
    variant: Variant | None = None
    #: the plan asks rollout workers for gradients (A3C): they hold torch and a learner
    workers_learn: bool = False

    @property
    def offline(self) -> bool:
        """Whether it learns from a recording (``input``) alone: it samples no episodes,
        and the evaluation's return is the one it reaches."""
        return issubclass(self.config_cls, OfflineConfig)

    def classes(self, config: Config) -> tuple[type[Policy], type[Learner]]:
        """The policy and learner classes a run of ``config`` uses."""
        if self.variant is not None:
            return self.variant(config)
        return self.policy_cls, self.learner_cls


#: settings a policy of another algorithm does not take from the run's config: its own
#: algorithm's defaults hold unless its ``policies`` entry sets them
LEARNING_FIELDS = frozenset(
    {
        "lr",
        "gamma",
        "grad_clip",
        "model",
        "model_config",
        "model_hiddens",
        "normalize_observations",
        "normalize_rewards",
        "normalize_clip",
        "policies",
    }
)


def policy_specs(spec: AlgorithmSpec, config: Config) -> dict[str, PolicySpec]:
    """The classes and config of each policy ``config.policies`` names.

    An entry's ``algorithm`` (the run's by default) gives the classes; its other keys set
    that policy's config: over the run's config for the run's algorithm, or over the other
    algorithm's defaults and the run's sampling settings (env, workers, seed, ...).
    ``trainable: false`` declares a policy no learner trains.

    Examples:
        >>> from flowrl.algorithms.ppo import ALGORITHM, PPOConfig
        >>> config = PPOConfig(policies={"ppo": {}, "dqn": {"algorithm": "dqn", "lr": 1e-4}})
        >>> specs = policy_specs(ALGORITHM, config)
        >>> specs["dqn"].learner_cls.__name__, specs["dqn"].config.lr, specs["ppo"].trainable
        ('DQNLearner', 0.0001, True)
    """
    specs = {}
    for pid, entry in config.policies.items():
        settings = {k: v for k, v in entry.items() if k not in POLICY_KEYS}
        name = entry.get("algorithm") or spec.name
        try:
            if name == spec.name:
                algo, own = spec, config.replace(**settings)
            else:
                algo = get_algorithm(name)
                shared = {
                    f.name: getattr(config, f.name)
                    for f in dataclasses.fields(Config)
                    if f.name not in LEARNING_FIELDS
                }
                own = algo.config_cls.from_dict({**shared, **settings})
        except ConfigError as e:
            raise ConfigError(f"policies[{pid!r}]: {e}") from None
        policy_cls, learner_cls = algo.classes(own)
        specs[pid] = PolicySpec(policy_cls, learner_cls, own, entry.get("trainable", True))
    return specs


def check_plan_trains_its_policies(spec: AlgorithmSpec, config: Config) -> None:
    """A ConfigError when a shipped algorithm's own plan is to train a policy of another
    algorithm: it trains every policy as its own (PPO's plan has no replay and no target
    copies for a DQN policy). A plan of your own trains them side by side.

    Examples:
        >>> from flowrl.algorithms.ppo import ALGORITHM, PPOConfig
        >>> two = PPOConfig(policies={"p": {}, "q": {"algorithm": "dqn"}})
        >>> check_plan_trains_its_policies(ALGORITHM, two)
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: policies['q'] learns with dqn, but ppo's plan trains ...
    """
    from flowrl.algorithms import NAMES

    if spec.name not in NAMES or get_algorithm(spec.name).execution_plan is not spec.execution_plan:
        return
    for pid, entry in config.policies.items():
        other = entry.get("algorithm") or spec.name
        if other != spec.name and entry.get("trainable", True):
            raise ConfigError(
                f"policies[{pid!r}] learns with {other}, but {spec.name}'s plan trains every "
                f"policy as {spec.name} does: train them side by side in a plan of your own "
                "(examples/ppo_and_dqn.py), or set its trainable: false"
            )


def list_algorithms() -> list[AlgorithmSpec]:
    """The algorithms that ship with flowrl."""
    from flowrl.algorithms import NAMES

    return [get_algorithm(name) for name in NAMES]


def check_keys(spec: AlgorithmSpec, keys: Iterable[str]) -> None:
    """A ConfigError for a key ``spec``'s config lacks (a dotted key: its first part): one
    that other algorithms' have is named as theirs (a recurrent policy's ``use_lstm`` for
    DQN), another gets ``unknown_key``'s hint.

    Examples:
        >>> check_keys(get_algorithm("dqn"), ["lr", "use_lstm"])
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: dqn has no config key 'use_lstm' (ppo, a3c, impala ...
    """
    fields = spec.config_cls.__dataclass_fields__
    for key in keys:
        name = key.split(".")[0]  # (a dotted key sets an entry of a mapping)
        if name in fields:
            continue
        owners = [s.name for s in list_algorithms() if name in s.config_cls.__dataclass_fields__]
        if not owners:
            raise unknown_key(spec.config_cls, key)
        said = f"{', '.join(owners[:-1])} and {owners[-1]} have" if owners[1:] else ""
        raise ConfigError(
            f"{spec.name} has no config key '{name}' ({said or owners[0] + ' has'} it)"
        )


def get_algorithm(ref: str) -> AlgorithmSpec:
    """An algorithm by name (``ppo``) or a user plan (``path/to/file.py:plan``)."""
    if ":" in ref and ref.split(":", 1)[0].endswith(".py"):
        return load_plan_file(ref)
    from flowrl.algorithms import NAMES

    if ref.lower() not in NAMES:
        raise ConfigError(f"unknown algorithm '{ref}'; available: {', '.join(NAMES)}")
    return importlib.import_module(f"flowrl.algorithms.{ref.lower()}").ALGORITHM


def config_preset(config: Config) -> Preset | None:
    """The preset a run of ``config`` started from: its algorithm's for its env (by the
    config's ``algo_name``), where the config holds the preset's values (``carries``);
    None when ``preset`` is off or the config class is your own.

    Examples:
        >>> from flowrl.algorithms.ppo import ALGORITHM, PPOConfig
        >>> from flowrl.run.algorithm import build_config
        >>> config_preset(build_config(ALGORITHM, {"env": "Pendulum-v1"})).budget
        200000
        >>> config_preset(PPOConfig(env="Pendulum-v1")) is None  # a Config made by hand
        True
    """
    from flowrl.algorithms import NAMES

    if not config.preset or config.algo_name not in NAMES or not isinstance(config.env, str):
        return None
    preset = preset_for(get_algorithm(config.algo_name), config.env)
    return preset if preset is not None and carries(config, preset) else None


def carries(config: Config, preset: Preset) -> bool:
    """Whether ``config`` was built over ``preset``: it holds one of the values where the
    preset departs from the defaults. A Config made by hand (``build_config`` takes it as
    it is) or a plan file's (whose spec has no presets) holds none, so its run keeps the
    algorithm's default budget as it keeps the algorithm's defaults."""
    values, defaults = config.to_dict(), type(config)().to_dict()
    as_saved = json.loads(json.dumps(preset.values))  # tuples as lists, as to_dict has them
    return any(values.get(k) == v != defaults.get(k) for k, v in as_saved.items())


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
    """How a plan file names an algorithm's classes, with the first shipped algorithm
    (by the names its module gives them: ``PPOPolicy``, not the class it aliases)."""
    from flowrl.algorithms import NAMES

    spec = get_algorithm(NAMES[0])
    module = sys.modules[spec.config_cls.__module__]
    prefix = spec.config_cls.__name__.removesuffix("Config")

    def name(cls: type) -> str:
        names = [n for n, v in vars(module).items() if v is cls and n.startswith(prefix)]
        return names[0] if names else cls.__name__

    imports = (
        f"{name(spec.config_cls)} as Config, {name(spec.policy_cls)} as Policy, "
        f"{name(spec.learner_cls)} as Learner"
    )
    return f"to run with {spec.name}'s: from {module.__name__} import {imports}"
