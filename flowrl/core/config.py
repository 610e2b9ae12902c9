"""Typed, validated algorithm configs.

Each algorithm subclasses ``Config`` (a dataclass). Every field is declared with
``param``: a default, a one-line doc and its allowed range. Construction validates and
coerces every field and raises ``ConfigError`` with a message that names the field.

Examples:
    >>> Config(lr=1e-3).lr
    0.001
    >>> Config.from_dict({"num_workers": "3"}).num_workers
    3
    >>> Config(gamma=2.0)
    Traceback (most recent call last):
    ...
    flowrl.core.config.ConfigError: gamma must be <= 1, got 2.0
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import inspect
import itertools
import json
import math
import re
import secrets
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from flowrl.core.schedules import Schedule

C = TypeVar("C", bound="Config")


class ConfigError(ValueError):
    """A config that cannot be used: unknown key, wrong type or value out of range."""


_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def check_local_path(what: str, path: Any) -> None:
    """A ConfigError for a URI (``s3://``, ``gs://``) given where flowrl takes a path on
    this machine's disk (a run directory, a checkpoint, a recording): taken as a path, it
    had written a local directory named ``s3:``.

    Examples:
        >>> check_local_path("--output", "runs/ppo")
        >>> check_local_path("--output", "s3://bucket/run")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: --output takes a path on this machine, not s3://...
    """
    why = not_local(path)
    if why:
        raise ConfigError(f"{what} {why}")


def not_local(path: Any) -> str | None:
    """Why ``path`` is no path on this machine (it is a URI), or None."""
    scheme = _URI.match(str(path))
    if scheme is None:
        return None
    return (
        f"takes a path on this machine, not {path}: flowrl reads and writes runs, checkpoints "
        f"and recordings on local disk; copy them to and from {scheme.group(0)} with its own tools"
    )


class ArgumentTypeError(ConfigError, TypeError):
    """An argument of the wrong type (an operator given the workers where it takes a
    function): a ConfigError, so the CLI says it in one line with exit 2, and a TypeError,
    so code that catches one still does."""


#: config values as other libraries name them (Stable-Baselines3, CleanRL), and flowrl's
#: names for them, the first that a config has: an unknown key's hint
OTHER_NAMES = {
    "learning_rate": ("lr",),
    "n_steps": ("n_step", "rollout_fragment_length"),  # an n-step return's, or a rollout's
    "num_steps": ("rollout_fragment_length",),
    "batch_size": ("sgd_minibatch_size", "train_batch_size"),
    "n_epochs": ("num_sgd_iter",),
    "update_epochs": ("num_sgd_iter",),
    "ent_coef": ("entropy_coeff", "initial_alpha"),
    "vf_coef": ("vf_loss_coeff",),
    "clip_range": ("clip_param",),
    "clip_coef": ("clip_param",),
    "max_grad_norm": ("grad_clip",),
    "n_envs": ("num_envs_per_worker",),
    "num_envs": ("num_envs_per_worker",),
    "target_kl": ("kl_target",),
    "target_update_interval": ("target_network_update_freq",),
    "exploration_fraction": ("exploration_timesteps",),
    "net_arch": ("model_hiddens",),
    # RLlib's (its new API stack's, and the model dict's)
    "num_epochs": ("num_sgd_iter",),
    "minibatch_size": ("sgd_minibatch_size",),
    "num_env_runners": ("num_workers",),
    "num_rollout_workers": ("num_workers",),
    "num_envs_per_env_runner": ("num_envs_per_worker",),
    "train_batch_size_per_learner": ("train_batch_size",),
    "fcnet_hiddens": ("model_hiddens",),
}


def _check_not_rllib_model(model: Any) -> None:
    """A ConfigError for RLlib's ``model`` dict, whose settings are config keys here."""
    if isinstance(model, Mapping):
        raise ConfigError(
            "model names your own model class ('module:Class'); RLlib's model settings "
            "are config keys here: model_hiddens (fcnet_hiddens), use_lstm, lstm_cell_size"
        )


def unknown_key(cls: type[Config], key: str) -> ConfigError:
    """The error for a ``key`` that config class ``cls`` lacks, with what it most likely
    meant: flowrl's name for another library's, or the nearest of its keys.

    Examples:
        >>> print(unknown_key(Config, "learning_rate"))
        unknown config key 'learning_rate' for custom (flowrl's name for it: 'lr')
        >>> print(unknown_key(Config, "gama"))
        unknown config key 'gama' for custom (did you mean 'gamma'?)
    """
    hint = _hint(key.split(".")[0], list(cls.__dataclass_fields__))  # (a dotted key's entry)
    return ConfigError(f"unknown config key '{key}' for {cls.algo_name}{hint}")


def _hint(key: str, known: list[str]) -> str:
    """What an unknown config ``key`` most likely meant (see ``unknown_key``)."""
    if key == "total_timesteps":
        return " (a run's length is its stop: --stop-timesteps N, or stop={'timesteps': N})"
    if key == "framework":
        return " (flowrl runs on torch: leave it out)"
    return name_hint(key, known, OTHER_NAMES)


def name_hint(key: str, known: Sequence[str], others: Mapping[str, Sequence[str]]) -> str:
    """What ``key``, which is not one of ``known``, most likely meant: flowrl's name for
    another library's (``others``: their name -> flowrl's candidates), or the nearest.

    Examples:
        >>> name_hint("ent_coef", ["entropy_coeff", "lr"], OTHER_NAMES)
        " (flowrl's name for it: 'entropy_coeff')"
    """
    if ours := flowrl_name(key, known, others):
        return f" (flowrl's name for it: '{ours}')"
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def flowrl_name(key: str, known: Collection[str], others: Mapping[str, Sequence[str]]) -> str:
    """flowrl's name, among ``known``, for another library's ``key`` (``others``); "" where
    it has none."""
    return next((name for name in others.get(key, ()) if name in known), "")


def no_attribute(obj: object, name: str, others: Mapping[str, str]) -> AttributeError:
    """The AttributeError for ``obj``'s missing ``name``, with what it most likely meant:
    flowrl's way to do what another library's method of that name does (``others``: their
    name -> flowrl's expression), or the nearest public attribute.

    Examples:
        >>> class Thing:
        ...     def train(self): ...
        >>> print(no_attribute(Thing(), "learn", {"learn": "thing.train()"}))
        'Thing' object has no attribute 'learn' (flowrl's way: thing.train())
        >>> print(no_attribute(Thing(), "trian", {}))
        'Thing' object has no attribute 'trian' (did you mean 'train'?)
    """
    descriptor = inspect.getattr_static(type(obj), name, None)
    if hasattr(descriptor, "__get__"):  # a property that raised AttributeError: raise it again
        descriptor.__get__(obj, type(obj))
    message = f"{type(obj).__name__!r} object has no attribute {name!r}"
    if name in others:
        return AttributeError(f"{message} (flowrl's way: {others[name]})")
    if name.startswith("_"):  # (Python's and IPython's own probes: no hint to look for)
        return AttributeError(message)
    public = [n for n in dir(obj) if not n.startswith("_")]
    return AttributeError(message + name_hint(name, public, {}))


#: the builder methods of RLlib's AlgorithmConfig, whose settings are config keys here
RLLIB_BUILDER = (
    "environment", "training", "env_runners", "rollouts", "framework", "resources", "evaluation",
    "debugging", "reporting", "multi_agent", "learners", "api_stack", "fault_tolerance",
    "checkpointing", "offline_data", "update_from_dict",
)  # fmt: skip


def other_ways(config: Config) -> dict[str, str]:
    """flowrl's way to do what another library's attribute of a config does: RLlib's
    ``AlgorithmConfig`` builder methods (a key is set when the config is made, or in a
    copy: ``replace``; ``Algorithm`` builds it), and another library's name of a key.

    Examples:
        >>> ways = other_ways(Config())
        >>> ways["training"], ways["learning_rate"]
        ('Config(env=..., lr=...), or config.replace(lr=...)', 'config.lr')
    """
    setting = f"{type(config).__name__}(env=..., lr=...), or config.replace(lr=...)"
    build = f"Algorithm({config.algo_name!r}, config)"
    fields = config.__dataclass_fields__
    keys = {
        theirs: f"config.{ours}"
        for theirs in OTHER_NAMES
        if (ours := flowrl_name(theirs, fields, OTHER_NAMES))
    }
    return {**keys, **dict.fromkeys(RLLIB_BUILDER, setting), "build": build, "build_algo": build}


def param(
    default: Any,
    doc: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    choices: tuple[str, ...] | None = None,
    min_len: int | None = None,
    schedule: bool = False,
    path: bool = False,
) -> Any:
    """Declare a config field with its doc and allowed range (``min_len``: the fewest
    items a list field takes; ``schedule``: a number or a schedule of numbers, see
    ``flowrl.core.schedules``; ``path``: a path on this machine, ``check_local_path``)."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "choices": choices, "min_len": min_len}
    if schedule:
        meta["schedule"] = True
    if path:
        meta["path"] = True
    if isinstance(default, dict):  # each config gets its own copy
        return dataclasses.field(default_factory=lambda: dict(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _to_bool(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    return _INVALID


def _to_int(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = int(value.replace("_", ""))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else _INVALID


def _to_float(value: Any) -> Any:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return _INVALID


def _to_str(value: Any) -> Any:
    return value if isinstance(value, str) else _INVALID


_INVALID = object()
_MissingType = type(dataclasses.MISSING)
_SCALARS = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}


def _coerce(name: str, value: Any, tp: Any) -> Any:
    """Convert ``value`` to the field type ``tp`` or raise a ConfigError naming the field."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        for tp in inner[:-1]:  # the first type that takes the value
            with contextlib.suppress(ConfigError):
                return _coerce(name, value, tp)
        return _coerce(name, value, inner[-1])
    if tp is dict or origin is dict:
        return _to_dict(name, value)
    if origin is tuple:
        if isinstance(value, str):
            value = _split_list(name, value)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} expects a list, got {value!r}")
        return tuple(_coerce(name, v, typing.get_args(tp)[0]) for v in value)
    convert = _SCALARS.get(tp)
    if convert is None:
        return value
    out = convert(value)
    if out is _INVALID:
        raise ConfigError(f"{name} expects {_type_name(tp)}, got {value!r}")
    return out


def _to_dict(name: str, value: Any) -> dict[str, Any]:
    """A mapping with string keys, or its JSON text (``'{"size": 8}'``)."""
    if isinstance(value, str):
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f'{name} expects a mapping such as {{"size": 8}}, got {value!r}')
    return dict(value)


def _split_list(name: str, text: str) -> list[str]:
    """``"32,32"`` or ``"[32, 32]"`` as items; a half-written list is an error, not a guess."""
    inner = text.strip()
    if inner.startswith("[") != inner.endswith("]"):
        raise ConfigError(f"{name} expects a list such as [64, 64], got {text!r}")
    inner = inner.strip("[]").strip()
    items = [v.strip() for v in inner.split(",")] if inner else []
    if any(not v for v in items):
        raise ConfigError(f"{name} expects a list such as [64, 64], got {text!r}")
    return items


def _to_schedule(name: str, value: Any, meta: Mapping[str, Any]) -> Schedule:
    """A schedulable field's value: a number, or ``[[env_steps, value], ...]`` (JSON text
    too) with finite env steps from 0 that never go back; each point's value in the
    field's range (a schedule starts where the constant may, and may decay to a ``gt``
    bound: ``lr`` to 0)."""
    if isinstance(value, str):
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
    number = _to_float(value)
    if number is not _INVALID:
        _check_range(name, number, meta)
        return number
    expected = f"{name} expects a number or a schedule [[env_steps, value], ...], got {value!r}"
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(expected)
    points = []
    for point in value:
        pair = [_to_float(x) for x in point] if isinstance(point, list | tuple) else []
        if len(pair) != 2 or _INVALID in pair:
            raise ConfigError(expected)
        points.append((pair[0], pair[1]))
    steps = [s for s, _ in points]
    if steps[0] != 0 or not all(map(math.isfinite, steps)):
        raise ConfigError(f"{name}'s schedule starts at env step 0, its steps finite: {steps}")
    if any(b < a for a, b in itertools.pairwise(steps)):
        raise ConfigError(f"{name}'s schedule needs env steps that never go back: {steps}")
    _check_range(name, points[0][1], meta)  # it starts where a constant may be
    bounds = {**meta, "ge": meta.get("ge") if meta.get("gt") is None else meta["gt"], "gt": None}
    for _, v in points[1:]:
        _check_range(name, v, bounds)
    return tuple(points)


def _plain(value: Any) -> Any:
    """A config value as JSON holds it: tuples as lists, a class as ``module:Class``."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, type):
        return f"{value.__module__}:{value.__qualname__}"
    return value


def _check_range(name: str, value: Any, meta: Mapping[str, Any]) -> None:
    values = value if isinstance(value, tuple) else (value,)
    if meta.get("min_len") is not None and len(values) < meta["min_len"]:
        raise ConfigError(f"{name} needs at least {meta['min_len']} item(s), got {list(values)}")
    for v in values:
        if v is None:
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{name} must be a finite number, got {v!r}")
        if meta.get("ge") is not None and v < meta["ge"]:
            raise ConfigError(f"{name} must be >= {meta['ge']}, got {value!r}")
        if meta.get("gt") is not None and v <= meta["gt"]:
            raise ConfigError(f"{name} must be > {meta['gt']}, got {value!r}")
        if meta.get("le") is not None and v > meta["le"]:
            raise ConfigError(f"{name} must be <= {meta['le']}, got {value!r}")
        if meta.get("choices") is not None and v not in meta["choices"]:
            raise ConfigError(f"{name} must be one of {', '.join(meta['choices'])}, got {v!r}")
        if meta.get("path"):
            check_local_path(name, v)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


@dataclasses.dataclass
class Config:
    """Settings every algorithm shares. Subclasses add their own fields with
    ``param``; one that only changes an inherited default says the new value alone
    (``lr: float = 1e-3``) and keeps the field's doc and range.

    Examples:
        >>> @dataclasses.dataclass
        ... class MyConfig(Config):
        ...     lr: float = 1e-3
        ...     horizon: int = param(10, "steps looked ahead", ge=1)
        >>> MyConfig().lr, MyConfig.doc("lr")
        (0.001, 'learning rate (Adam); or a schedule')
        >>> MyConfig(lr=-1.0)
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: lr must be > 0, got -1.0
    """

    algo_name: ClassVar[str] = "custom"
    default_stop_timesteps: ClassVar[int] = 1_000_000
    #: the iterations a run stops after by default (an offline algorithm's budget)
    default_stop_iters: ClassVar[int | None] = None
    #: the fewest rollout workers ``num_workers="auto"`` may choose
    auto_min_workers: ClassVar[int] = 0
    #: whether ``flowrl train`` measures layouts when nothing sets the workers
    auto_layout: ClassVar[bool] = True

    env: str = param(
        "CartPole-v1", "gymnasium id (ALE/... for Atari), module:ClassOrFactory or registered name"
    )
    # param gives each config its own copy of a dict default
    env_config: dict[str, Any] = param({}, "keyword arguments for the env's creator")  # noqa: RUF009
    model: str = param(
        "", "your torch model: a flowrl.register_model name or module:Class; '': flowrl's"
    )
    model_config: dict[str, Any] = param({}, "keyword arguments for your model's class")  # noqa: RUF009
    callbacks: Any = param(  # noqa: RUF009
        "", "your flowrl.Callbacks subclass: module:Class (or the class itself); '': none"
    )
    num_workers: int = param(2, "remote rollout workers (Ray actors); 0 samples in-process", ge=0)
    num_envs_per_worker: int = param(8, "envs each worker steps as one vector env", ge=1)
    rollout_fragment_length: int = param(64, "steps per env in one sampled fragment", ge=1)
    fragments_per_call: int = param(
        0, "fragments a remote worker returns per request; 0: one per 32 workers, at least 1", ge=0
    )
    num_cpus_per_worker: float = param(1.0, "CPUs Ray reserves for each worker", ge=0)
    request_channels: bool = param(
        True,
        "send the sample requests to each remote worker over a socket of its own, not as a "
        "Ray task each (a fraction of a task's cost per request); replies over 1 MB "
        "(Atari frames) or of more than 2 fragments keep Ray tasks",
    )
    sample_timeout_s: float = param(
        120.0, "seconds a remote worker may take for one request before it is restarted", gt=0
    )
    seed: int = param(0, "seed of envs, torch and sampling; None: a random one", ge=0, le=2**31 - 1)
    gamma: float = param(0.99, "discount factor", ge=0, le=1)
    lr: Schedule = param(5e-4, "learning rate (Adam); or a schedule", gt=0, schedule=True)  # noqa: RUF009
    adam_eps: float = param(1e-5, "Adam's epsilon in the optimiser that lr sets", gt=0)
    grad_clip: float = param(0.5, "max global gradient norm; 0 turns clipping off", ge=0)
    model_hiddens: tuple[int, ...] = param(
        (64, 64), "hidden layer sizes of the MLPs", ge=1, min_len=1
    )
    device: str = param(
        "auto",
        "learner device; auto: the GPU for image observations where torch sees one, else the CPU",
        choices=("auto", "cpu", "cuda"),
    )
    numpy_acting: bool = param(
        True,
        "act with a numpy copy of an MLP actor-critic on the CPU (a third of torch's cost); "
        "remote workers then run without torch (an MLP Q-network's too)",
    )
    learner_threads: int = param(
        0,
        "torch threads of this (the learner's) process while the run lasts; 0: one for a "
        "network whose weights are all small (an MLP up to 128 wide, an LSTM up to 128 cells), "
        "else torch's",
        ge=0,
    )
    preset: bool = param(
        True, "start from the algorithm's settings for the env (flowrl list ALGO --env ID)"
    )
    normalize_observations: bool = param(
        False, "feed the policy observations scaled by their running mean and std"
    )
    normalize_rewards: bool = param(
        False, "divide rewards by the running std of the discounted return"
    )
    normalize_clip: float = param(10.0, "clip normalised observations and rewards to +-this", gt=0)
    clip_rewards: bool = param(
        False, "learn from rewards clipped to their sign (Atari's -1, 0, 1); returns stay the env's"
    )
    evaluation_interval: int = param(
        0, "iterations between greedy evaluations (own worker with Ray); 0: none", ge=0
    )
    evaluation_episodes: int = param(10, "episodes per evaluation", ge=1)
    evaluation_video_dir: str = param(
        "", "write each evaluation's episodes as MP4s under DIR/iteration_N; '': none", path=True
    )
    record_experiences: str = param(
        "", "write the sampled experiences as Parquet files under DIR; '': none", path=True
    )
    metrics_smoothing_episodes: int = param(100, "episodes averaged into returns", ge=1)
    min_time_s_per_iteration: float = param(0.0, "least wall-clock per train() result", ge=0)
    min_env_steps_per_iteration: int = param(0, "least env steps per train() result", ge=0)
    profile: bool = param(
        False, "record each operator's time, items and queue depths (timers/* in results)"
    )
    # param gives each config its own copy of a dict default
    policies: dict[str, Any] = param(  # noqa: RUF009
        {},
        "multi-agent envs: settings by policy id ({id: {algorithm, trainable, ...}}), "
        "over this config's",
    )
    policy_mapping: dict[str, str] | str = param(  # noqa: RUF009
        "shared",
        "multi-agent envs: agent -> policy id: shared (one policy), independent (one per "
        "agent), self_play (main vs main, and vs a frozen opponent), {agent: id} or "
        "module:function",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A plain new default for an inherited field keeps that field's doc and range."""
        super().__init_subclass__(**kwargs)
        inherited: dict[str, dataclasses.Field] = {}
        for base in reversed(cls.__mro__[1:]):  # every base's fields, the nearest winning
            inherited.update(getattr(base, "__dataclass_fields__", {}))
        for name in inspect.get_annotations(cls):
            value = cls.__dict__.get(name, dataclasses.MISSING)
            if name in inherited and not isinstance(value, dataclasses.Field | _MissingType):
                meta = inherited[name].metadata
                setattr(cls, name, dataclasses.field(default=value, metadata=meta))

    def portable(self) -> Config:
        """This config as an instance of its nearest class in ``flowrl.core.config``, every
        field kept (an algorithm's own among them): what a process that never imports the
        algorithm's module (a rollout worker without torch) can unpickle.

        Examples:
            >>> from flowrl.algorithms.ppo import PPOConfig
            >>> copy = PPOConfig(clip_param=0.1).portable()
            >>> type(copy).__name__, copy.clip_param
            ('ActorCriticConfig', 0.1)
        """
        base = next(c for c in type(self).__mro__ if c.__module__ == __name__)
        copy = object.__new__(base)
        copy.__dict__.update(vars(self))
        return copy

    @property
    def uses_ray(self) -> bool:
        """Whether the plan needs Ray (remote workers or other actors)."""
        return self.num_workers > 0

    @classmethod
    def in_process(cls) -> dict[str, Any]:
        """The overrides that keep a plan of this config out of Ray (see ``uses_ray``)."""
        return {"num_workers": 0}

    @property
    def min_fragment_length(self) -> int:
        """The fewest steps per fragment an automatic layout may give this config."""
        return 1

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        if self.seed is None:  # as other libraries read it; the drawn seed is kept, and saved
            object.__setattr__(self, "seed", secrets.randbelow(2**31))
        _check_not_rllib_model(self.model)
        for f in dataclasses.fields(self):
            if f.metadata.get("schedule"):
                value = _to_schedule(f.name, getattr(self, f.name), f.metadata)
            else:
                value = _coerce(f.name, getattr(self, f.name), hints[f.name])
                _check_range(f.name, value, f.metadata)
            object.__setattr__(self, f.name, value)
        check_policies(self.policies, self.policy_mapping)
        if self.evaluation_video_dir and not self.evaluation_interval:
            raise ConfigError(
                "evaluation_video_dir (flowrl train --video) records the evaluation episodes, "
                "and there are none: set evaluation_interval too (--set evaluation_interval=N "
                "evaluates every N iterations)"
            )

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any]) -> C:
        """Build from a mapping, rejecting keys the config does not have."""
        for key in data:
            if key not in cls.__dataclass_fields__:
                raise unknown_key(cls, key)
        return cls(**data)

    def replace(self: C, **changes: Any) -> C:
        """A validated copy with ``changes`` applied."""
        return type(self).from_dict({**self.to_dict(), **changes})

    def __getattr__(self, name: str) -> Any:
        raise no_attribute(self, name, other_ways(self))

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_fixed"):  # (see ``fixed``)
            raise ConfigError(_fixed_message(self, name))
        super().__setattr__(name, value)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        out = dataclasses.asdict(self)
        return {k: _plain(v) for k, v in out.items()}

    @classmethod
    def docs(cls) -> list[tuple[str, Any, str]]:
        """``(name, default, doc)`` for every field."""
        return [(f.name, _default(f), f.metadata.get("doc", "")) for f in dataclasses.fields(cls)]

    @classmethod
    def doc(cls, name: str) -> str:
        """The one-line doc of field ``name``."""
        return cls.__dataclass_fields__[name].metadata.get("doc", "")


def fixed(config: C) -> C:
    """A copy of ``config`` whose fields cannot be set: what an ``Algorithm`` holds, since
    its networks, optimisers and workers were built from it and would not see a change.

    Examples:
        >>> fixed(Config()).lr = 0.1
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: an algorithm's config is fixed once built: lr ...
    """
    copy_ = copy.copy(config)
    object.__setattr__(copy_, "_fixed", True)
    return copy_


def _fixed_message(config: Config, name: str) -> str:
    field = config.__dataclass_fields__.get(name)
    timed = field is not None and field.metadata.get("schedule")
    instead = f", or one whose {name} is a schedule" if timed else ""
    return (
        f"an algorithm's config is fixed once built: {name} cannot change now; build another "
        f"with {name}=...{instead}"
    )


@dataclasses.dataclass
class GaussianConfig(Config):
    """Settings of a Gaussian policy over Box actions: where its log std starts, and gSDE
    exploration (``flowrl.learning.models.head_outputs``)."""

    log_std_init: float = param(
        0.0, "first log std of the Gaussian over Box actions (gSDE's only, where a net outputs it)"
    )
    gsde: bool = param(
        False, "Box actions explore with noise that varies smoothly with the state (gSDE)"
    )
    gsde_steps: int = param(4, "steps each gSDE noise draw is held for (gsde)", ge=1)


@dataclasses.dataclass
class ActorCriticConfig(GaussianConfig):
    """Settings of policies trained on advantages with a value baseline (see
    ``flowrl.learning.policy.ActorCriticPolicy``).

    Examples:
        >>> ActorCriticConfig(gamma=0.95).gamma
        0.95
    """

    gae_lambda: float = param(0.95, "lambda of GAE or V-trace (1.0: plain n-step)", ge=0, le=1)
    vf_loss_coeff: float = param(0.5, "value loss weight", ge=0)
    entropy_coeff: Schedule = param(  # noqa: RUF009
        0.0, "entropy bonus weight; or a schedule", ge=0, schedule=True
    )
    use_lstm: bool = param(False, "an LSTM between the observation features and the heads")
    lstm_cell_size: int = param(128, "LSTM cells (use_lstm)", ge=1)
    max_seq_len: int = param(
        20, "steps of one env trained as one sequence from its recorded state (use_lstm)", ge=1
    )


@dataclasses.dataclass
class ClippedSurrogateConfig(Config):
    """Settings of a clipped surrogate objective with an optional adaptive KL penalty (see
    ``flowrl.learning.policy.ClippedSurrogate``)."""

    clip_param: float = param(0.2, "surrogate clip range around the old policy", gt=0)
    kl_coeff: float = param(0.0, "initial KL penalty weight (0: no KL term)", ge=0)
    kl_target: float = param(0.01, "KL the adaptive penalty steers towards", gt=0)


@dataclasses.dataclass
class OfflineConfig(Config):
    """Settings of learning from a recording (``flowrl.ops.plans.offline_plan``): what to
    read, how many SGD steps make an iteration, and the evaluation episodes that judge
    the policy (the env gives nothing else; nothing is sampled).

    Examples:
        >>> OfflineConfig(input="recorded/").updates_per_iteration
        100
    """

    default_stop_timesteps: ClassVar[int] = 0  # nothing is sampled: stop on iterations
    default_stop_iters: ClassVar[int | None] = 100
    auto_layout: ClassVar[bool] = False  # nothing is sampled: no layout to measure

    input: str = param(
        "", "directory of the recording to learn from (record_experiences)", path=True
    )
    input_stream: bool = param(
        False, "stream the recording through Ray Data (larger than memory), not read it whole"
    )
    input_readers: int = param(
        0,
        "Ray actors that read the recording, each a share of its episodes (0: this process)",
        ge=0,
    )
    train_batch_size: int = param(512, "recorded steps per SGD step", ge=1)
    updates_per_iteration: int = param(100, "SGD steps per train() result", ge=1)
    evaluation_interval: int = 1
    evaluation_episodes: int = 10
    num_workers: int = 0  # rollout workers sample nothing; evaluation has its own

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.normalize_observations:
            raise ConfigError(
                "offline learning takes raw observations: normalize_observations=false"
            )
        if self.input_stream and self.input_readers:
            raise ConfigError("a streamed recording is read by Ray Data's tasks: input_readers=0")

    @property
    def uses_ray(self) -> bool:
        return self.num_workers > 0 or self.input_readers > 0 or self.input_stream


#: what a ``policies`` entry sets besides config fields
POLICY_KEYS = ("algorithm", "trainable")


def check_policies(policies: Mapping[str, Any], mapping: Mapping[str, str] | str) -> None:
    """A ConfigError naming the entry unless ``policies`` maps ids to settings and
    ``mapping`` is a rule, a module function or agent -> id strings."""
    for pid, settings in policies.items():
        if not pid or "/" in pid:
            raise ConfigError(f"policies: a policy id is a non-empty name without '/', got {pid!r}")
        if not isinstance(settings, Mapping):
            raise ConfigError(f"policies[{pid!r}] expects a mapping of settings, got {settings!r}")
        algo = settings.get("algorithm", "")
        if not isinstance(algo, str):
            raise ConfigError(
                f"policies[{pid!r}].algorithm expects an algorithm name, got {algo!r}"
            )
        if not isinstance(settings.get("trainable", True), bool):
            raise ConfigError(f"policies[{pid!r}].trainable expects true or false")
    if isinstance(mapping, str):
        if mapping not in ("shared", "independent", "self_play") and ":" not in mapping:
            raise ConfigError(
                "policy_mapping must be shared, independent, self_play, {agent: policy id} "
                f"or module:function, got {mapping!r}"
            )
    elif not all(isinstance(v, str) and v for v in mapping.values()):
        raise ConfigError(f"policy_mapping maps agents to policy ids (strings), got {mapping!r}")


def parse_set_value(text: str) -> Any:
    """A ``--set key=value`` value: JSON when it parses (numbers, true, lists), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def set_dotted(values: dict[str, Any], key: str, value: Any) -> None:
    """``values[key] = value``, where a dotted key (``env_config.size``) sets one entry of
    a mapping in ``values``: made where missing, copied where there (the mapping given is
    left as it was). A ConfigError names a part that is not a mapping.

    Examples:
        >>> values = {"env_config": {"size": 4, "walls": True}}
        >>> set_dotted(values, "env_config.size", 8)
        >>> values
        {'env_config': {'size': 8, 'walls': True}}
    """
    *path, last = key.split(".")
    for i, name in enumerate(path):
        inner = values.get(name, {})
        if not isinstance(inner, Mapping):
            where = ".".join(path[: i + 1])
            raise ConfigError(f"cannot set {key}: {where} is {inner!r}, not a mapping")
        values[name] = values = dict(inner)
    values[last] = value


def with_dotted(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each dotted key set as ``set_dotted`` sets it, after the others."""
    out = {key: value for key, value in values.items() if "." not in key}
    for key, value in values.items():
        if "." in key:
            set_dotted(out, key, value)
    return out
