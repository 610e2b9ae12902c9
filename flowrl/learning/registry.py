"""Your own torch model: register it, or name it ``module:Class``, and set ``model``.

Two contracts, told apart by the class:

- an **encoder** (any ``nn.Module`` class): ``cls(observation_space, **model_config)``
  maps a batch of (normalised) observations to features ``[B, out_features]`` and has an
  ``out_features`` attribute (a Dict or Tuple observation arrives as its nest of tensors,
  without the ``action_mask`` entry, which flowrl applies itself); flowrl puts the
  algorithm's heads on it (policy and value heads, dueling Q heads, SAC's actor head);
- a **whole acting module** (a subclass of ``ActingModule``):
  ``cls(observation_space, action_space, **model_config)`` returns the distribution's
  inputs (and a value, for the actor-critic algorithms) itself.

The config records the model by name, so checkpoints, evaluation and exports find it again:
a name given to ``register_model`` (in this process; Ray workers get the class with
them), or ``module:Class``, which any process that can import the module finds.

Examples:
    >>> class Tiny(nn.Module):
    ...     def __init__(self, observation_space, width=16):
    ...         super().__init__()
    ...         self.out_features = width
    ...         self.net = nn.Linear(observation_space.shape[0], width)
    ...
    ...     def forward(self, obs):
    ...         return torch.relu(self.net(obs.float()))
    >>> register_model("tiny", Tiny)
    'tiny'
    >>> resolve_model("tiny") is Tiny
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from flowrl.core.config import ConfigError
from flowrl.learning.distributions import distribution_for
from flowrl.learning.module import ActingModule
from flowrl.learning.spaces import RecordLayout, is_composite, records_tensor

_MODELS: dict[str, type[nn.Module]] = {}


def register_model(name: str, cls: type[nn.Module]) -> str:
    """Make ``cls`` the model of configs that say ``model=name``, in this process and on
    its Ray workers (they get the class itself, pickled by value when it lives in a
    notebook). Returns ``name``."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigError(f"register_model needs a name without ':', got {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"register_model({name!r}) needs a torch.nn.Module class, got {cls!r}")
    _MODELS[name] = cls
    return name


def registered_model(name: str) -> type[nn.Module] | None:
    """The class ``register_model`` stored under ``name``, if any."""
    return _MODELS.get(name)


def resolve_model(name: str) -> type[nn.Module]:
    """The class a config's ``model`` names: a registered name or ``module:Class``."""
    if name in _MODELS:
        return _MODELS[name]
    module_name, sep, attr = name.partition(":")
    if not sep:
        known = ", ".join(sorted(_MODELS)) or "none"
        raise ConfigError(  # ('lstm', SB3's 'MlpPolicy': flowrl's own networks need none)
            f"unknown model {name!r}: register it with flowrl.register_model, or name it "
            f"module:Class (registered: {known}); flowrl's own networks need no model, "
            "their settings are config keys: model_hiddens, use_lstm, lstm_cell_size"
        )
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"cannot import model {name}: {type(e).__name__}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"model {name} is not a torch.nn.Module class")
    return cls


def build_module(
    config: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    default: Callable[[nn.Module | None], ActingModule],
) -> ActingModule:
    """The acting module of ``config``: ``default(None)`` without a ``model``, the model
    itself when it is a whole acting module, else ``default(encoder)``."""
    if not config.model:
        return default(None)
    cls = resolve_model(config.model)
    try:
        if issubclass(cls, ActingModule):
            module = cls(observation_space, action_space, **config.model_config)
            _check_dist_inputs(config.model, module, observation_space, action_space)
            return module
        encoder = cls(observation_space, **config.model_config)
    except TypeError as e:
        raise ConfigError(f"model {config.model}: {e}") from None
    if not isinstance(getattr(encoder, "out_features", None), int):
        raise ConfigError(
            f"model {config.model} needs an int out_features (the size of its features)"
        )
    _check_features(config.model, encoder, observation_space)
    return default(encoder)


def _sample_obs(observation_space: gym.Space) -> Any:
    """One sample observation as the module gets it: a batch of one (a nest of tensors
    for a composite space)."""
    if is_composite(observation_space):
        layout = RecordLayout(observation_space)
        return layout.unpack_tensor(records_tensor(layout.pack_one(observation_space.sample())))
    return torch.as_tensor(observation_space.sample()[None])


def _check_dist_inputs(
    name: str, module: ActingModule, observation_space: gym.Space, action_space: gym.Space
) -> None:
    """One forward pass of a whole acting module on a sample observation: it must give as
    many distribution inputs as the action space's distribution takes (else the env gets
    actions it cannot take, and the error names the env, not the model)."""
    wanted = distribution_for(action_space)[1]
    state = module.initial_state(1) if module.recurrent else None
    with torch.no_grad():
        out = module(_sample_obs(observation_space), state)
    width = tuple(out.dist_inputs.shape)[-1:]
    if width != (wanted,):
        raise ConfigError(
            f"model {name} gives {width[0] if width else 'no'} distribution inputs per "
            f"observation; {action_space} actions take {wanted}"
        )


def _check_features(name: str, encoder: nn.Module, observation_space: gym.Space) -> None:
    """One forward pass on a sample observation: its features must be [1, out_features]."""
    obs = _sample_obs(observation_space)
    with torch.no_grad():
        shape = tuple(encoder(obs).shape)
    if shape != (1, encoder.out_features):
        raise ConfigError(
            f"model {name} returned features of shape {shape}, not (1, {encoder.out_features})"
        )
