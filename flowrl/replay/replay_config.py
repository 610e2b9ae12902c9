"""ReplayConfig: the settings every replay-based (off-policy) algorithm shares, and the
replay storage they describe.

Examples:
    >>> cfg = ReplayConfig(buffer_size=1000, train_batch_size=32, training_intensity=8.0)
    >>> cfg.replay_weight  # SGD steps per sampled round: 8 * 2 workers * 8 envs * 64 / 32
    256
    >>> buffer = make_replay(cfg.replace(num_workers=0))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

from flowrl.core.config import Config, ConfigError, param
from flowrl.replay.actor import create_replay_actors
from flowrl.replay.buffer import (
    PolicyBuffers,
    PrioritizedSampler,
    ReplayBuffer,
    UniformSampler,
)


@dataclass
class ReplayConfig(Config):
    """Replay buffer settings and the ratio of training to sampling.

    Examples:
        >>> ReplayConfig(buffer_size=1000).buffer_size
        1000
    """

    buffer_size: int = param(50_000, "replay buffer capacity in transitions", ge=1)
    replay_shards: int = param(0, "replay actors sharing the buffer; 0: in the learner", ge=0)
    learning_starts: int = param(1_000, "transitions stored before training starts", ge=0)
    train_batch_size: int = param(64, "transitions per SGD step", ge=1)
    n_step: int = param(1, "steps in the n-step return", ge=1)
    training_intensity: float = param(4.0, "env steps trained per env step sampled", gt=0)
    prioritized_replay: bool = param(False, "prioritized instead of uniform replay")
    prioritized_replay_alpha: float = param(0.6, "priority exponent", ge=0)
    prioritized_replay_beta: float = param(0.4, "initial importance-weight exponent", ge=0, le=1)
    beta_annealing_timesteps: int = param(100_000, "trained steps to anneal beta to 1", ge=0)
    store_buffer_in_checkpoints: bool = param(
        False, "checkpoints keep the replay buffer's rows (a local buffer only)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.store_buffer_in_checkpoints and self.replay_shards > 0:
            raise ConfigError("store_buffer_in_checkpoints needs replay_shards=0 (a local buffer)")

    @property
    def uses_ray(self) -> bool:
        return self.num_workers > 0 or self.replay_shards > 0

    @property
    def min_fragment_length(self) -> int:
        """An n-step return is cut short at a fragment's end, so a fragment holds at least
        n steps: 1-step fragments would train on 1-step returns (``benchmarks/seeds.py``)."""
        return self.n_step

    @classmethod
    def in_process(cls) -> dict[str, Any]:
        return {**super().in_process(), "replay_shards": 0}

    @property
    def sample_rows_per_round(self) -> int:
        """Env steps one bulk_sync round samples."""
        workers = max(self.num_workers, 1)
        return workers * self.num_envs_per_worker * self.rollout_fragment_length

    @property
    def replay_weight(self) -> int:
        """SGD steps per sampled round that give ``training_intensity``."""
        per_round = self.training_intensity * self.sample_rows_per_round
        return max(1, round(per_round / self.train_batch_size))


def make_buffer(config: ReplayConfig, shard_index: int = 0) -> ReplayBuffer:
    """The replay buffer, or one shard of it: uniform or prioritized."""
    shards = max(config.replay_shards, 1)
    capacity, seed = -(-config.buffer_size // shards), config.seed + shard_index
    if not config.prioritized_replay:
        return ReplayBuffer(capacity, sampler=UniformSampler(), seed=seed)
    sampler = PrioritizedSampler(
        capacity,
        alpha=config.prioritized_replay_alpha,
        beta=config.prioritized_replay_beta,
        beta_annealing_rows=config.beta_annealing_timesteps // shards,
    )
    return ReplayBuffer(capacity, sampler=sampler, seed=seed)


def policy_buffers(config: ReplayConfig, shard_index: int = 0) -> PolicyBuffers:
    """A buffer per policy id, or one shard's: policy ``i``'s seed is offset by ``i``
    times the shards, so no two buffers sample alike."""
    shards = max(config.replay_shards, 1)
    return PolicyBuffers(lambda i: make_buffer(config, shard_index + i * shards))


def make_replay(config: ReplayConfig) -> PolicyBuffers | list[Any]:
    """Local buffers (a buffer per policy id), or ``replay_shards`` replay actors that
    hold them."""
    if config.replay_shards == 0:
        return policy_buffers(config)
    # a plain ReplayConfig: unpickling an algorithm's own config in every shard actor would
    # import that algorithm (and torch) there, ~1 s of CPU each while the workers start
    plain = ReplayConfig.from_dict({f.name: getattr(config, f.name) for f in fields(ReplayConfig)})
    factory = functools.partial(policy_buffers, plain)
    return create_replay_actors(factory, num_shards=config.replay_shards)
