"""Minari datasets, the Farama Foundation's format for offline RL, both ways: a local Minari
dataset read as a recording's rows (``ReadExperiences("minari:<dataset id>")``, ``--input
minari:<dataset id>``), and a flowrl recording written as a Minari dataset. Datasets are
local ones (``MINARI_DATASETS_PATH``, or Minari's default folder): nothing is downloaded.

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


def _flat(space: gym.Space, dataset_id: str) -> None:
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        raise ConfigError(f"Minari dataset {dataset_id}: Dict and Tuple spaces are not read yet")


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


def read_minari(dataset_id: str) -> tuple[dict[str, SampleBatch], dict[str, tuple[Any, Any]]]:
    """A local Minari dataset's steps as a recording's rows (one policy, ``SINGLE``; an
    episode's id is Minari's) and its spaces."""
    minari = _minari()
    try:
        dataset = minari.load_dataset(dataset_id)
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(f"no local Minari dataset {dataset_id}: {e}") from None
    for space in (dataset.observation_space, dataset.action_space):
        _flat(space, dataset_id)
    parts: dict[str, list[np.ndarray]] = {}
    for episode in dataset.iterate_episodes():
        n, obs = len(episode.actions), np.asarray(episode.observations)
        steps = {
            OBS: obs[:-1], NEXT_OBS: obs[1:], ACTIONS: np.asarray(episode.actions),
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
    return {SINGLE: rows}, {SINGLE: (dataset.observation_space, dataset.action_space)}


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
    _flat(obs_space, str(directory))
    order = np.argsort(rows[EPS_ID], kind="stable")  # an episode's steps, in order
    ids = rows[EPS_ID][order]
    buffers = []
    for steps in np.split(order, np.flatnonzero(np.diff(ids)) + 1):
        done = rows[TERMINATEDS][steps] | rows[TRUNCATEDS][steps]
        if not done[-1]:
            continue
        observations = np.concatenate([rows[OBS][steps], rows[NEXT_OBS][steps][-1:]])
        buffers.append(EpisodeBuffer(
            id=len(buffers), observations=observations, actions=rows[ACTIONS][steps],
            rewards=rows[REWARDS][steps].tolist(), terminations=rows[TERMINATEDS][steps].tolist(),
            truncations=rows[TRUNCATEDS][steps].tolist(),
        ))  # fmt: skip
    env = manifest.get("env")
    return minari.create_dataset_from_buffers(
        dataset_id, buffers, env=env if env in gym.registry else None,
        observation_space=obs_space, action_space=action_space,
        algorithm_name=f"flowrl {manifest.get('algorithm', '')}", data_format="arrow",
    )  # fmt: skip
