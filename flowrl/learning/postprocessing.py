"""Return estimators on time-major rollout fragments (arrays shaped ``[T, num_envs]``).

Rows come from gymnasium vector envs in NEXT_STEP autoreset mode: after a step that ends
an episode, the env's next step only resets it. That step's observation is the episode's
final observation, so its value estimate is exactly what a truncated episode bootstraps
from; the step itself is masked out (``valid == False``) and never learned from.

Examples:
    >>> r = np.ones((3, 1)); v = np.zeros((3, 1)); f = np.zeros((3, 1), bool)
    >>> adv, targets = compute_gae(r, v, f, f, np.zeros(1), gamma=1.0, lam=1.0)
    >>> adv[:, 0].tolist()
    [3.0, 2.0, 1.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flowrl.core.sample_batch import (
    ADVANTAGES,
    OBS,
    REWARDS,
    STATE_IN,
    TERMINATEDS,
    TRUNCATEDS,
    VALUE_TARGETS,
    VF_PREDS,
    Fragment,
    SampleBatch,
)

if TYPE_CHECKING:
    import torch  # vtrace's tensors; the rest is numpy, for rollout workers without torch


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminateds: np.ndarray,
    truncateds: np.ndarray,
    last_values: np.ndarray,
    *,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimates and value targets over a ``[T, N]`` fragment.

    ``values[t]`` is V(obs_t); the value after step ``t`` is ``values[t + 1]`` (for the last
    step, ``last_values``). A terminated step bootstraps with 0, a truncated one with the
    value of its final observation; neither lets advantages flow across the boundary.
    """
    num_steps = len(rewards)
    next_values = np.concatenate([values[1:], last_values[None]], axis=0)
    not_terminated = 1.0 - terminateds.astype(np.float32)
    continues = 1.0 - (terminateds | truncateds).astype(np.float32)
    deltas = rewards + gamma * next_values * not_terminated - values
    decay = (gamma * lam) * continues
    advantages = deltas.astype(np.float32)  # A[t] = delta[t] + decay[t] * A[t + 1]
    for t in reversed(range(num_steps - 1)):
        advantages[t] += decay[t] * advantages[t + 1]
    return advantages, (advantages + values).astype(np.float32)


def add_advantages(
    fragment: Fragment, last_values: np.ndarray, *, gamma: float, lam: float
) -> Fragment:
    """GAE advantages and value targets added to a fragment's columns (returned, to
    become training rows: ``Fragment.to_batch`` or ``chunk_sequences``).

    ``last_values`` are the value estimates of ``fragment.last_obs``.
    """
    cols = fragment.columns
    cols[ADVANTAGES], cols[VALUE_TARGETS] = compute_gae(
        cols[REWARDS],
        cols[VF_PREDS],
        cols[TERMINATEDS],
        cols[TRUNCATEDS],
        last_values,
        gamma=gamma,
        lam=lam,
    )
    return fragment


def episode_returns(episodes: np.ndarray, rewards: np.ndarray, gamma: float) -> np.ndarray:
    """Each step's discounted return to the end of its episode (as far as the rows go), the
    rows of an episode being those of its id in ``episodes``, in the order they come.

    Examples:
        >>> episode_returns(np.array([7, 7, 3, 7]), np.array([1.0, 1.0, 5.0, 1.0]), 0.5)
        array([1.75, 1.5 , 5.  , 1.  ])
    """
    order = np.argsort(episodes, kind="stable")
    ids, step_rewards = episodes[order], rewards[order].astype(np.float64)
    returns, running = np.empty_like(step_rewards), 0.0
    for i in range(len(order) - 1, -1, -1):
        if i == len(order) - 1 or ids[i] != ids[i + 1]:
            running = 0.0
        running = step_rewards[i] + gamma * running
        returns[i] = running
    out = np.empty_like(returns)
    out[order] = returns
    return out


NEXT_OBS = "next_obs"
DISCOUNTS = "discounts"
#: the value of each n-step row's ``next_obs`` (``n_step_transitions``'s ``next_values``)
NEXT_VALUES = "next_values"


def n_step_transitions(
    fragment: Fragment,
    *,
    n: int,
    gamma: float,
    next_values: tuple[np.ndarray, np.ndarray] | None = None,
) -> SampleBatch:
    """Off-policy training rows with ``n``-step returns from a time-major fragment.

    Row ``t`` sums the rewards of steps ``t .. t+m-1`` discounted by gamma, where ``m <= n``
    stops early at an episode end or at the end of the fragment. ``next_obs`` is the
    observation after step ``t+m-1`` (the final observation when the episode ended),
    ``terminateds`` says whether the episode terminated within those steps (no bootstrap),
    and ``discounts`` is ``gamma ** m``, the factor on the bootstrap value. With
    ``next_values`` (a value per step ``[T, num_envs]`` and one of ``last_obs``
    ``[num_envs]``), ``NEXT_VALUES`` holds each row's value of its ``next_obs``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    cols = fragment.columns
    rewards, terminated = cols[REWARDS], cols[TERMINATEDS]
    ended = terminated | cols[TRUNCATEDS]
    obs_after = np.concatenate([cols[OBS][1:], fragment.last_obs[None]], axis=0)
    steps, num_envs = rewards.shape
    returns = np.zeros((steps, num_envs), np.float32)
    done = np.zeros((steps, num_envs), bool)
    length = np.zeros((steps, num_envs), np.int64)
    running = np.ones((steps, num_envs), bool)  # still accumulating
    for k in range(min(n, steps)):  # every row at once, step k after it: rows < steps - k
        rows = running[: steps - k]  # (a view: the rows that have a step k after them)
        returns[: steps - k] += rows * gamma**k * rewards[k:]
        length[: steps - k] += rows
        done[: steps - k] |= rows & terminated[k:]
        rows &= ~ended[k:]
    last = np.arange(steps)[:, None] + length - 1
    env = np.arange(num_envs)[None, :].repeat(steps, 0)
    extra = {
        REWARDS: returns,
        NEXT_OBS: obs_after[last, env],
        TERMINATEDS: done,
        DISCOUNTS: (gamma**length).astype(np.float32),
    }
    if next_values is not None:
        per_step, of_last_obs = next_values
        extra[NEXT_VALUES] = np.concatenate([per_step[1:], of_last_obs[None]])[last, env]
    keep = {k: v for k, v in cols.items() if k not in (REWARDS, TERMINATEDS, TRUNCATEDS)}
    return Fragment({**keep, **extra}, fragment.valid, fragment.last_obs, fragment.pool).to_batch()


VALID = "valid"


def to_sequences(fragment: Fragment, steps: int | None = None) -> SampleBatch:
    """A fragment as ``num_envs`` whole sequences for a learner that reads time-major
    ``[T + 1, B]`` data (V-trace), rows env-major: row ``i * (T + 1) + t`` is step ``t`` of
    env ``i``. Step ``T`` is a bootstrap step: its observation is ``last_obs``, the rest of
    it zeros. ``valid`` marks the steps to learn from (not the reset steps of NEXT_STEP
    autoreset, not the bootstrap step). Sequences of several fragments concatenate. A
    recurrent policy's ``state_in`` keeps each env's state at its first valid step, laid
    over its rows (``first_states``, ``spread``). A fragment of fewer than ``steps`` steps
    (a turn-based game's: its lanes' turns, right-aligned) starts with steps not to learn
    from, so every sequence has ``steps + 1`` rows, as the learner cuts them.

    Examples:
        >>> cols = {"obs": np.zeros((3, 2, 4)), "rewards": np.ones((3, 2))}
        >>> fragment = Fragment(cols, np.ones((3, 2), bool), last_obs=np.ones((2, 4)))
        >>> batch = to_sequences(fragment)
        >>> len(batch), batch["valid"].reshape(2, 4)[0].tolist()
        (8, [True, True, True, False])
        >>> to_sequences(fragment, steps=4)["valid"].reshape(2, 5)[0].tolist()
        [False, True, True, True, False]
    """
    length, num_envs = fragment.valid.shape
    steps = length if steps is None else steps
    if length > steps:
        raise ValueError(f"a fragment of {length} steps, where sequences hold {steps}")
    pad = steps - length
    columns = {k: _after_zeros(c, pad) for k, c in fragment.columns.items()}
    valid, state, out = _after_zeros(fragment.valid, pad), columns.pop(STATE_IN, None), {}
    for key, column in {**columns, VALID: valid}.items():
        last = fragment.last_obs if key == OBS else np.zeros_like(column[:1][0])
        seq = np.concatenate([column, last[None]], axis=0)  # [T + 1, N, ...]
        out[key] = seq.swapaxes(0, 1).reshape(num_envs * (steps + 1), *column.shape[2:])
    if state is not None:
        out[STATE_IN] = spread(first_states(state, valid, steps), steps + 1)
    return SampleBatch(out)


def _after_zeros(column: np.ndarray, n: int) -> np.ndarray:
    """A time-major ``column`` after ``n`` steps of zeros."""
    return np.concatenate([np.zeros((n, *column.shape[1:]), column.dtype), column]) if n else column


def chunk_sequences(fragment: Fragment, length: int) -> SampleBatch:
    """A fragment as sequences of ``length`` steps of one env each, rows env-major (a
    recurrent policy's training rows): each env's ``T`` steps are cut into
    ``ceil(T / length)`` sequences, the last one padded with zeros. ``valid`` marks the
    steps to learn from (not the reset steps of NEXT_STEP autoreset, not the padding);
    the ``state_in`` column holds the state each step started from, which a learner reads
    at each sequence's first step.

    Examples:
        >>> cols = {"obs": np.zeros((5, 2, 3)), "rewards": np.ones((5, 2))}
        >>> batch = chunk_sequences(Fragment(cols, np.ones((5, 2), bool), np.zeros((2, 3))), 3)
        >>> len(batch), batch["valid"].reshape(4, 3).tolist()[1]
        (12, [True, True, False])
    """
    steps, num_envs = fragment.valid.shape
    padded = -(-steps // length) * length
    columns, out = dict(fragment.columns), {}
    state = columns.pop(STATE_IN, None)
    for key, column in {**columns, VALID: fragment.valid}.items():
        seq = np.zeros((padded, *column.shape[1:]), column.dtype)
        seq[:steps] = column
        out[key] = seq.swapaxes(0, 1).reshape(num_envs * padded, *column.shape[2:])
    if state is not None:
        out[STATE_IN] = spread(first_states(state, fragment.valid, length), length)
    return SampleBatch(out)


def first_states(state: np.ndarray, valid: np.ndarray, length: int) -> np.ndarray:
    """The state each sequence of ``length`` steps starts from: time-major ``[T, N, ...]``
    states cut env by env into ``ceil(T / length)`` sequences, each one's state at its
    first valid step (at its first step where none is), env-major ``[N * ceil(T / length),
    ...]``. Steps before a sequence's first valid one pad it (a lane that did not act yet),
    so the state there is the one its unroll needs; after it, the unroll carries its own.

    Examples:
        >>> state = np.arange(6.0).reshape(3, 2)  # 3 steps of 2 envs, a number each
        >>> valid = np.array([[True, False], [True, True], [True, True]])
        >>> first_states(state, valid, 2).tolist()  # env 0: steps 0 and 2; env 1: 1 and 2
        [0.0, 4.0, 3.0, 5.0]
    """
    steps, num_envs = valid.shape
    chunks = -(-steps // length)
    padded = np.zeros((chunks * length, num_envs), bool)
    padded[:steps] = valid
    first = padded.reshape(chunks, length, num_envs).argmax(axis=1)  # 0 where none is valid
    at = np.arange(chunks)[:, None] * length + first  # [chunks, N]
    picked = state[at, np.arange(num_envs)]
    return picked.swapaxes(0, 1).reshape(num_envs * chunks, *state.shape[2:])


def spread(per_sequence: np.ndarray, length: int) -> np.ndarray:
    """Values of ``S`` sequences (``[S, ...]``) laid over their rows, a sequence's
    ``length`` rows holding its values in order, zero-padded (``[S * length,
    ceil(size / length)]``): a per-sequence column that concatenates, slices and
    shuffles by whole sequences as the rows do. ``sequence_states`` reads it back.

    Examples:
        >>> spread(np.arange(6.0).reshape(2, 3), 2).tolist()
        [[0.0, 1.0], [2.0, 0.0], [3.0, 4.0], [5.0, 0.0]]
    """
    flat = per_sequence.reshape(len(per_sequence), -1)
    width = -(-flat.shape[1] // length)
    out = np.zeros((len(flat), width * length), flat.dtype)
    out[:, : flat.shape[1]] = flat
    return out.reshape(len(flat) * length, width)


def sequence_states(column: Any, length: int, shape: tuple[int, ...]) -> Any:
    """The per-sequence values ``spread`` laid over rows of ``length``, back as
    ``[S, *shape]`` (numpy or torch).

    Examples:
        >>> column = spread(np.arange(6.0).reshape(2, 3), 2)
        >>> sequence_states(column, 2, (3,)).tolist()
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    flat = column.reshape(-1, length * column.shape[1])
    return flat[:, : int(np.prod(shape))].reshape(-1, *shape)


def vtrace(
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    *,
    gamma: float,
    lam: float = 1.0,
    clip_rho: float = 1.0,
    clip_c: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018,
    https://arxiv.org/abs/1802.01561) over time-major ``[T, B]`` steps.

    ``log_rhos`` are log(target / behaviour) probabilities of the actions taken;
    ``values`` is ``[T + 1, B]``: V(x_t) for every step and the value after the last one.
    A terminated step bootstraps with 0, a truncated one with the value of its final
    observation (the next row, in NEXT_STEP autoreset); neither lets a trace run across
    the boundary. Returns ``vs`` (value targets, ``[T, B]``) and the advantages
    ``rho_t (r_t + gamma vs_{t+1} - V(x_t))`` with ``vs_{t+1}`` replaced by ``V(x_{t+1})``
    at an episode's end.
    """
    rhos = log_rhos.exp()
    clipped_rhos = rhos.clamp(max=clip_rho)
    cs = lam * rhos.clamp(max=clip_c)
    alive = 1.0 - terminateds.to(values.dtype)
    continues = 1.0 - (terminateds | truncateds).to(values.dtype)
    next_values = values[1:]
    deltas = clipped_rhos * (rewards + gamma * alive * next_values - values[:-1])
    corrections = values.new_zeros(values.shape)  # vs_t - V(x_t); the last row stays 0
    for t in reversed(range(len(rewards))):
        corrections[t] = deltas[t] + gamma * continues[t] * cs[t] * corrections[t + 1]
    vs = values[:-1] + corrections[:-1]
    vs_next = next_values + continues * corrections[1:]
    advantages = clipped_rhos * (rewards + gamma * alive * vs_next - values[:-1])
    return vs, advantages
