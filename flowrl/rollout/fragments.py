"""Writing sampled steps into a fragment's columns and finishing it, for the single-agent
worker and the multi-agent sampler alike.

Examples:
    >>> pool, cols = ArrayPool(), {}
    >>> for t in range(3):
    ...     write_row(cols, pool, t, 3, [("rewards", np.ones(2, np.float32))])
    >>> cols["rewards"].shape
    (3, 2)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.config import ConfigError
from flowrl.core.sample_batch import (
    OBS,
    REWARDS,
    TERMINATEDS,
    TRUNCATEDS,
    ArrayPool,
    Fragment,
    NonFiniteError,
)
from flowrl.learning.acting import BasePolicy as Policy
from flowrl.learning.spaces import ACTION_MASK, field, float_columns, is_composite, leaf_spaces

logger = logging.getLogger(__name__)


def non_finite_sample(cols: dict[str, np.ndarray], last_obs: np.ndarray) -> str | None:
    """``"reward"`` or ``"observation"`` when the env returned a NaN or infinity in a
    fragment's columns (one vectorised check per fragment, not per step), else None."""
    if not np.isfinite(cols[REWARDS]).all():
        return "reward"
    floats = [*float_columns(cols[OBS]), *float_columns(last_obs)]
    if not all(np.isfinite(part).all() for part in floats):
        return "observation"
    return None


def outside_bounds(
    obs: np.ndarray, space: gym.Space, valid: np.ndarray | None = None
) -> str | None:
    """The first value of a fragment's raw observations (its rows where ``valid``, when
    given) that lies outside the bounds of its ``Box`` space (or of a ``Box`` leaf of a
    composite one), described; None when all lie inside. Leaves whose bounds are infinite
    or span their dtype are not looked at.

    Examples:
        >>> space = gym.spaces.Box(-1.0, 1.0, (2,))
        >>> outside_bounds(np.array([[0.5, 3.0]], np.float32), space)
        'observation[1] = 3 outside [-1, 1]'
    """
    if isinstance(space, gym.spaces.Box):
        leaves = [((), space)]
    else:
        leaves = leaf_spaces(space) if is_composite(space) else []
    for path, leaf in leaves:
        if not isinstance(leaf, gym.spaces.Box) or _unbounded(leaf):
            continue
        values = field(obs, path) if path else obs
        values = values.reshape(-1, *leaf.shape)
        out = (values < leaf.low) | (values > leaf.high)
        if valid is not None:  # a row nothing was observed in holds no env's value
            out[~valid.reshape(-1)] = False
        if out.any():
            n, *at = np.argwhere(out)[0]
            name = (".".join(path) or "observation") + (
                f"[{', '.join(map(str, at))}]" if at else ""
            )
            low, high = leaf.low[tuple(at)], leaf.high[tuple(at)]
            return f"{name} = {values[(n, *at)]:.4g} outside [{low:.4g}, {high:.4g}]"
    return None


def _unbounded(box: gym.spaces.Box) -> bool:
    """Whether ``box`` bounds nothing its dtype can hold (floats: infinite bounds)."""
    if box.dtype.kind == "f":
        return bool(np.isinf(box.low).all() and np.isinf(box.high).all())
    info = np.iinfo(box.dtype) if box.dtype.kind in "iu" else None
    return info is None or bool((box.low <= info.min).all() and (box.high >= info.max).all())


def check_action_masks(cols: dict[str, np.ndarray], valid: np.ndarray, where: str) -> None:
    """A fragment's action masks, once per fragment: each entry is 0 (not allowed) or 1
    (allowed), and every step whose action the env takes (``valid``) allows one. A mask
    with nothing allowed is fine only where the action is not taken: an episode's final
    observation, which a game's mask leaves empty. A ConfigError names the env otherwise
    (a policy would act unmasked, or read 0.5 as either).

    Examples:
        >>> obs = np.zeros((1, 2), dtype=[("action_mask", np.int8, (3,))])
        >>> obs["action_mask"][0, 0] = [0, 1, 1]  # the second env's mask is empty
        >>> check_action_masks({OBS: obs}, np.array([[True, False]]), "env X")  # not taken
        >>> check_action_masks({OBS: obs}, np.array([[True, True]]), "env X")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        flowrl.core.config.ConfigError: env X gave an action_mask that allows no action ...
    """
    obs = cols[OBS]
    if obs.dtype.names is None or ACTION_MASK not in obs.dtype.names:
        return
    masks = obs[ACTION_MASK].reshape(*obs.shape, -1)
    binary = (masks == 0) | (masks == 1)
    if not binary.all():
        raise ConfigError(
            f"{where} gave an action_mask holding {masks[~binary][0].item()!r}: a mask entry is "
            "0 (not allowed) or 1 (allowed)"
        )
    if (valid & ~masks.any(-1)).any():
        raise ConfigError(
            f"{where} gave an action_mask that allows no action at a step whose action it takes"
        )


_WARNED: set[str] = set()  # where an observation outside its space was said (once each)


def _warn_outside_bounds(
    obs: np.ndarray, valid: np.ndarray | None, policy: Policy, where: str
) -> None:
    """Say once per env and policy that an observation lay outside the space the env
    declares: flowrl learns from it as it is (bounds are often loose; the env's author
    decides), as gymnasium's own env checker only warns."""
    if where in _WARNED:
        return
    what = outside_bounds(obs, policy.observation_space, valid)
    if what is not None:
        _WARNED.add(where)
        logger.warning(
            "%s gave an observation outside its observation_space (%s); flowrl learns from "
            "it as it is (said once)",
            where,
            what,
        )


def write_row(
    cols: dict[str, np.ndarray],
    pool: ArrayPool,
    t: int,
    steps: int,
    row: Sequence[tuple[str, Any]],
    *,
    prefix: str = "",
) -> None:
    """Step ``t``'s values into ``cols`` (``[steps, ...]`` arrays from ``pool``, made on
    the first step under ``prefix/name``)."""
    if not cols:
        for k, v in row:
            cols[k] = pool.empty(f"{prefix}/{k}", (steps, *np.shape(v)), np.asarray(v).dtype)
    for k, v in row:
        cols[k][t] = v


def finish_fragment(
    policy: Policy,
    cols: dict[str, np.ndarray],
    valid: np.ndarray,
    last_obs: np.ndarray,
    *,
    raw_obs: np.ndarray | None,
    pool: ArrayPool,
    where: str,
    last_state: np.ndarray | None = None,
) -> Fragment:
    """A sampled fragment's columns as a ``Fragment``: non-finite env output is a
    ``NonFiniteError`` naming ``where``; ``raw_obs`` (the raw observations to learn
    the statistics from) join the policy's normaliser after ``last_obs`` is normalised
    with the statistics the fragment was sampled with, and rewards are clipped
    (``clip_rewards``) and scaled."""
    what = non_finite_sample(cols, last_obs)
    if what is not None:
        raise NonFiniteError(f"{where} returned a non-finite {what}")
    check_action_masks(cols, valid, where)
    seen = cols[OBS] if raw_obs is None else raw_obs  # raw: [steps, lanes] or valid rows
    _warn_outside_bounds(seen, valid if seen.ndim == cols[OBS].ndim else None, policy, where)
    norm = policy.normalizer
    last = norm.observations(last_obs)  # before the statistics change
    if raw_obs is not None:
        norm.observe_fragment(raw_obs)
    done = cols[TERMINATEDS] | cols[TRUNCATEDS]
    cols[REWARDS] = norm.scale_rewards(cols[REWARDS], done, valid).astype(np.float32, copy=False)
    return Fragment(cols, valid, last_obs=np.array(last), pool=pool, last_state=last_state)
