"""The acting module: the network a rollout worker acts with, and nothing else.

An acting module maps (normalised) observations to the inputs of the policy's action
distribution and, where the algorithm has one, a value estimate. Rollout workers,
evaluation, :func:`flowrl.load_policy` and exports hold it; the loss, optimisers, target
networks and any network only the loss reads (SAC's critics) belong to a
:class:`~flowrl.learning.learner.Learner`, which trains the same module in place.

``forward(obs, state)`` returns an :class:`ActingOutput`. The interface is shaped for what
the acting side grows next:

- recurrent models set ``recurrent = True``, return their first state from
  :meth:`ActingModule.initial_state` and the next one in ``ActingOutput.state``; workers
  keep the state per env and reset it at episode starts;
- composite observation spaces reach ``forward`` as the nested dict or tuple of tensors the
  space has, and composite action spaces take one flat ``dist_inputs`` that a composite
  distribution splits;
- an action mask is the observation's ``action_mask`` entry: the policy masks
  ``dist_inputs`` with it before building the distribution, so a module never sees it;
- several policies in one run are several modules, one per policy id, each with its own
  weights.

Example:
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


class ActingModule(nn.Module):
    """Base of the networks workers act with: ``forward(obs, state=None)`` returns an
    :class:`ActingOutput`.

    Example:
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

    def initial_state(self, batch_size: int) -> Any:
        """The state of ``batch_size`` fresh episodes (None: the module has none)."""
        return None

    def forward(self, obs: Any, state: Any = None) -> ActingOutput:
        raise NotImplementedError
