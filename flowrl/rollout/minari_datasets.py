"""Minari datasets, the Farama Foundation's format for offline RL, both ways: a local Minari
dataset read as a recording's rows (``ReadExperiences("minari:<dataset id>")``, ``--input
minari:<dataset id>``), and a flowrl recording written as a Minari dataset. Datasets are
local ones (``MINARI_DATASETS_PATH``, or Minari's default folder): nothing is downloaded.
Dict and Tuple observations and actions are a recording's record columns and Minari's
dicts and tuples of arrays.

Examples:
    >>> rows, spaces = read_minari("cartpole/expert-v0")  # doctest: +SKIP
    >>> write_minari("recorded/", "cartpole/flowrl-ppo-v0")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.core.config import ConfigError
from flowrl.core.sample_batch import (
    ACTIONS,
    OBS,
    REWARDS,
    SINGLE,
    TERMINATEDS,
    TRUNCATEDS,
    SampleBatch,
)
from flowrl.learning.acting import shift_actions
from flowrl.learning.spaces import RecordLayout, field, is_composite
from flowrl.rollout.experiences import (
    AGENT_ID,
    EPS_ID,
    NEXT_OBS,
    check_spaces,
    read_experiences,
    read_manifest,
)

#: how ``ReadExperiences`` and ``--input`` name a Minari dataset
PREFIX = "minari:"


def _minari() -> Any:
    try:
        import minari
    except ImportError:
        raise ConfigError("Minari datasets need minari: pip install 'flowrl-ray[minari]'") from None
    return minari


def _column(values: Any, space: gym.Space) -> np.ndarray:
    """Minari's steps of ``space`` (a Dict's dict of arrays, a Tuple's tuple of them) as a
    recording's column: one record per step for a composite space."""
    return RecordLayout(space).pack(values) if is_composite(space) else np.asarray(values)


def _nest(column: np.ndarray, space: gym.Space) -> Any:
    """A recording's column as Minari holds ``space``'s steps: ``_column`` undone."""
    if not is_composite(space):
        return column
    layout = RecordLayout(space)
    return layout.build([np.ascontiguousarray(field(column, leaf.path)) for leaf in layout.leaves])


def read_source(
    source: str | os.PathLike[str], spaces: dict[str, tuple[Any, Any]] | None = None
) -> dict[str, SampleBatch]:
    """A recording's rows (``read_experiences``), or a local Minari dataset's
    (``minari:<dataset id>``), checked against ``spaces`` by policy id."""
    if not str(source).startswith(PREFIX):
        return read_experiences(source, spaces=spaces)
    rows, recorded = read_minari(str(source).removeprefix(PREFIX))
    check_spaces(source, recorded, spaces)
    return rows


def recorded_env(source: str | os.PathLike[str]) -> str:
    """The env a recording was made in (its manifest's) or a Minari dataset's (its env
    spec's id): what learning from it acts in unless an env is named."""
    if not str(source).startswith(PREFIX):
        return read_manifest(source)[0]["env"]
    dataset_id = str(source).removeprefix(PREFIX)
    spec = _load(dataset_id).env_spec
    if spec is None:
        raise ConfigError(f"Minari dataset {dataset_id} names no env: name it (--env ID)")
    return spec.id


def _load(dataset_id: str) -> Any:
    """The local Minari dataset ``dataset_id``; a ConfigError that says how to download
    one that is not here (flowrl downloads nothing itself)."""
    try:
        return _minari().load_dataset(dataset_id)
    except FileNotFoundError:
        raise ConfigError(
            f"no local Minari dataset {dataset_id}: download it once with `minari download "
            f"{dataset_id}`"
        ) from None
    except ValueError as e:
        raise ConfigError(f"no local Minari dataset {dataset_id}: {e}") from None


def read_minari(dataset_id: str) -> tuple[dict[str, SampleBatch], dict[str, tuple[Any, Any]]]:
    """A local Minari dataset's steps as a recording's rows (one policy, ``SINGLE``; an
    episode's id is Minari's) and its spaces."""
    dataset = _load(dataset_id)
    obs_space, action_space = dataset.observation_space, dataset.action_space
    parts: dict[str, list[np.ndarray]] = {}
    for episode in dataset.iterate_episodes():
        obs = _column(episode.observations, obs_space)
        actions = shift_actions(action_space, _column(episode.actions, action_space), -1)
        n = len(actions)
        steps = {
            OBS: obs[:-1], NEXT_OBS: obs[1:], ACTIONS: actions,
            REWARDS: np.asarray(episode.rewards, np.float32),
            TERMINATEDS: np.asarray(episode.terminations, bool),
            TRUNCATEDS: np.asarray(episode.truncations, bool),
            EPS_ID: np.full(n, episode.id, np.int64), AGENT_ID: np.full(n, "", object),
        }  # fmt: skip
        for k, v in steps.items():
            parts.setdefault(k, []).append(v)
    if not parts:
        raise ConfigError(f"Minari dataset {dataset_id} holds no episodes")
    rows = SampleBatch({k: np.concatenate(v) for k, v in parts.items()})
    return {SINGLE: rows}, {SINGLE: (obs_space, action_space)}


def write_minari(
    directory: str | os.PathLike[str], dataset_id: str, *, policy_id: str = SINGLE
) -> Any:
    """A flowrl recording's whole episodes of ``policy_id`` as a local Minari dataset
    (Arrow storage); returns it. The episodes the recording cut short are left out."""
    from minari.data_collector import EpisodeBuffer

    minari = _minari()
    manifest, spaces = read_manifest(directory)
    rows = read_experiences(directory)[policy_id]
    obs_space, action_space = spaces[policy_id]
    order = np.argsort(rows[EPS_ID], kind="stable")  # an episode's steps, in order
    ids = rows[EPS_ID][order]
    buffers = []
    for steps in np.split(order, np.flatnonzero(np.diff(ids)) + 1):
        done = rows[TERMINATEDS][steps] | rows[TRUNCATEDS][steps]
        if not done[-1]:
            continue
        observations = np.concatenate([rows[OBS][steps], rows[NEXT_OBS][steps][-1:]])
        buffers.append(EpisodeBuffer(
            id=len(buffers), observations=_nest(observations, obs_space),
            actions=_nest(shift_actions(action_space, rows[ACTIONS][steps], 1), action_space),
            rewards=rows[REWARDS][steps].tolist(), terminations=rows[TERMINATEDS][steps].tolist(),
            truncations=rows[TRUNCATEDS][steps].tolist(),
        ))  # fmt: skip
    env = manifest.get("env")
    return minari.create_dataset_from_buffers(
        dataset_id, buffers, env=env if env in gym.registry else None,
        observation_space=obs_space, action_space=action_space,
        algorithm_name=f"flowrl {manifest.get('algorithm', '')}", data_format="arrow",
    )  # fmt: skip
