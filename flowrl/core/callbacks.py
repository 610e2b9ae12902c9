"""Hooks into training: subclass ``Callbacks``, override what you need, and name the
class in the config (``callbacks="my_module:MyCallbacks"``, ``--callbacks
my_module:MyCallbacks``, or the class itself from Python).

Every rollout worker builds its own instance and calls the episode and fragment hooks as
it samples (with the env's ``info`` of each step); the driver's instance gets each
iteration's result and each checkpoint. Numbers an episode hook puts in
``episode.custom_metrics`` come back in the results as ``custom/<name>_mean``, ``_min``
and ``_max`` over the episodes ``episode_return_mean`` is taken over, and so reach
``result.jsonl``, TensorBoard, MLflow and wandb.

Examples:
    >>> class CountCoins(Callbacks):
    ...     def on_episode_end(self, *, episode, info):
    ...         episode.custom_metrics["coins"] = info.get("coins", 0)
    >>> episode = EpisodeInfo(env_index=0, worker_index=1)
    >>> CountCoins().on_episode_end(episode=episode, info={"coins": 3})
    >>> episode.custom_metrics
    {'coins': 3}
"""

from __future__ import annotations

import dataclasses
import importlib
import numbers
from pathlib import Path
from typing import Any

from flowrl.core.errors import one_line


@dataclasses.dataclass
class EpisodeInfo:
    """One env's episode under way on a worker, as the episode hooks see it."""

    env_index: int
    worker_index: int
    length: int = 0
    total_reward: float = 0.0
    #: numbers to report: results get their mean, min and max over episodes
    custom_metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    #: anything the hooks keep between steps of this episode
    user_data: dict[str, Any] = dataclasses.field(default_factory=dict)


class Callbacks:
    """Hooks into training; every one does nothing until a subclass overrides it."""

    def on_episode_start(self, *, episode: EpisodeInfo) -> None:
        """An env of a rollout worker began an episode."""

    def on_episode_step(self, *, episode: EpisodeInfo, info: dict[str, Any]) -> None:
        """An env took a step of ``episode`` (its reward already counted); ``info`` is the
        env's info of that step."""

    def on_episode_end(self, *, episode: EpisodeInfo, info: dict[str, Any]) -> None:
        """``episode`` ended (terminated or truncated); ``info`` is its last step's."""

    def on_fragment_postprocessed(self, *, batch: Any, worker_index: int) -> None:
        """A worker postprocessed a fragment (advantages, n-step returns) into ``batch``,
        which goes to the plan next: a ``MultiAgentBatch`` of each policy's part
        (``batch["default"]`` in a single-agent env)."""

    def on_train_result(self, *, algorithm: Any, result: dict[str, Any]) -> None:
        """The driver has an iteration's ``result``; keys added to it are reported too."""

    def on_checkpoint(self, *, algorithm: Any, path: Path) -> None:
        """The driver wrote a checkpoint to ``path``."""


class CallbackError(RuntimeError):
    """A hook of the run's ``Callbacks`` raised, or reported what cannot be reported."""


def checked_metrics(callbacks: Callbacks, metrics: dict[str, Any]) -> dict[str, float]:
    """An episode's custom metrics as floats; a CallbackError names the metric and the
    hook that reported what is not a number. A NaN is no value: the results' mean, min
    and max leave it out.

    Examples:
        >>> checked_metrics(Callbacks(), {"coins": 3})
        {'coins': 3.0}
        >>> checked_metrics(Callbacks(), {"coins": "3"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        flowrl.core.callbacks.CallbackError: Callbacks.on_episode_end reported custom metric ...
    """
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise CallbackError(
                f"{type(callbacks).__name__}.on_episode_end reported custom metric {name!r} "
                f"= {value!r:.40} ({type(value).__name__}): a custom metric is a number"
            )
    return {name: float(value) for name, value in metrics.items()}


def run_hook(callbacks: Callbacks, hook: str, **kwargs: Any) -> None:
    """``callbacks.<hook>(**kwargs)``; what it raises comes back as a CallbackError that
    names the class and the hook (its cause the hook's own exception), with the hook's
    traceback: its last frame is the line of yours that raised."""
    try:
        getattr(callbacks, hook)(**kwargs)
    except Exception as e:
        error = CallbackError(f"{type(callbacks).__name__}.{hook} raised {one_line(e)}")
        raise error.with_traceback(e.__traceback__) from e


def load_callbacks(spec: Any) -> Callbacks | None:
    """An instance of the configured class (``module:Class``, or a class), or None for
    ``""``; a ValueError names what is wrong."""
    if spec in ("", None):
        return None
    cls = spec
    if isinstance(spec, str):
        module, _, name = spec.partition(":")
        if not module or not name:
            raise ValueError(f"callbacks expects module:Class, got '{spec}'")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load callbacks {spec}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, Callbacks)):
        raise ValueError(f"callbacks must be a flowrl.Callbacks subclass, got {spec!r}")
    return cls()


def env_info(infos: dict[str, Any], index: int) -> dict[str, Any]:
    """Env ``index``'s info out of a vector env's (arrays, with ``_key`` masks saying
    which envs have ``key``).

    Examples:
        >>> env_info({"coins": [1, 2], "_coins": [False, True]}, 1)
        {'coins': 2}
    """
    out = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not mask[index]:
            continue
        out[key] = env_info(value, index) if isinstance(value, dict) else value[index]
    return out
