"""The acting module: the network a rollout worker acts with, and nothing else.

An acting module maps (normalised) observations to the inputs of the policy's action
distribution and, where the algorithm has one, a value estimate. Rollout workers,
evaluation, ``flowrl.load_policy`` and exports hold it; the loss, optimisers, target
networks and any network only the loss reads (SAC's critics) belong to a
``Learner``, which trains the same module in place.

``forward(obs, state)`` returns an ``ActingOutput``. The interface is shaped for what
the acting side grows next:

- recurrent models set ``recurrent = True``, return their first state (one tensor
  ``[B, ...]``) from ``ActingModule.initial_state`` and the next one in
  ``ActingOutput.state``; workers keep the state per env and reset it at episode starts,
  fragments record the state each step started from, and learners replay sequences from
  it with ``ActingModule.unroll``;
- composite observation spaces reach ``forward`` as the nested dict or tuple of tensors the
  space has, and composite action spaces take one flat ``dist_inputs`` that a composite
  distribution splits;
- an action mask is the observation's ``action_mask`` entry: the policy masks
  ``dist_inputs`` with it before building the distribution, so a module never sees it;
- several policies in one run are several modules, one per policy id, each with its own
  weights.

Examples:
    >>> import gymnasium as gym
    >>> from flowrl.learning.models import ActorCritic
    >>> module = ActorCritic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hiddens=(8,))
    >>> out = module(torch.zeros(3, 4))
    >>> out.dist_inputs.shape, out.value.shape, out.state
    (torch.Size([3, 2]), torch.Size([3]), None)
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn


class ActingOutput(NamedTuple):
    """What an acting module computes for a batch of observations."""

    #: the action distribution's inputs (logits, Q-values, or means and log stds)
    dist_inputs: torch.Tensor
    #: the state-value estimate ``[B]``, where the algorithm has one
    value: torch.Tensor | None = None
    #: the next recurrent state, for recurrent modules
    state: Any = None
    #: gSDE's noise features (``flowrl.learning.models.head_outputs``), where it explores so
    noise_features: torch.Tensor | None = None


class ActingModule(nn.Module):
    """Base of the networks workers act with: ``forward(obs, state=None)`` returns an
    ``ActingOutput``.

    Examples:
        >>> class Linear(ActingModule):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.pi = nn.Linear(4, 2)
        ...
        ...     def forward(self, obs, state=None):
        ...         return ActingOutput(self.pi(obs))
        >>> Linear()(torch.zeros(1, 4)).dist_inputs.shape
        torch.Size([1, 2])
    """

    #: whether ``forward`` takes and returns a recurrent state
    recurrent: ClassVar[bool] = False
    #: whether it explores with gSDE (``ActingOutput.noise_features``)
    gsde: bool = False

    def initial_state(self, batch_size: int) -> Any:
        """The state of ``batch_size`` fresh episodes (None: the module has none)."""
        return None

    def forward(self, obs: Any, state: Any = None) -> ActingOutput:
        raise NotImplementedError

    def unroll(self, obs: Any, states: Any, starts: torch.Tensor) -> ActingOutput:
        """A recurrent module over ``B`` sequences of ``L`` steps: ``obs`` holds their steps
        sequence by sequence (``[B * L, ...]``), ``states`` per step the state it starts
        from where ``starts[b, t]`` is True (``[B, L, ...]``: an episode's start, a
        sequence's first valid step); elsewhere, after its first step, a sequence goes on
        from the state its step before left. Returns the outputs of every step,
        ``[B * L, ...]``. By default, one ``forward`` per step."""
        batch, length = starts.shape
        steps = map_nest(lambda x: x.unflatten(0, (batch, length)), obs)
        state, outs = states[:, 0], []
        for t in range(length):
            state = restart(state, states[:, t], starts[:, t])
            out = self(map_nest(lambda x, t=t: x[:, t], steps), state)
            outs.append(out)
            state = out.state
        value = None if outs[0].value is None else torch.stack([o.value for o in outs], 1)
        inputs = torch.stack([o.dist_inputs for o in outs], 1).flatten(0, 1)
        return ActingOutput(inputs, None if value is None else value.flatten(), state)


def restart(state: torch.Tensor, recorded: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """``state`` with the rows of ``starts`` (a ``[B]`` mask) replaced by ``recorded``'s."""
    return torch.where(starts.view(-1, *[1] * (state.dim() - 1)), recorded.to(state), state)


def map_nest(fn: Any, nest: Any) -> Any:
    """``fn`` applied to every tensor of a nest of dicts and tuples."""
    if isinstance(nest, dict):
        return {k: map_nest(fn, v) for k, v in nest.items()}
    if isinstance(nest, tuple):
        return tuple(map_nest(fn, v) for v in nest)
    return fn(nest)
