"""Experience replay: storage, sampling, and the Ray actors that shard it.

- ``flowrl.replay.buffer``: ``ReplayBuffer``, a ring buffer over numpy columns,
  and the samplers on it (``UniformSampler``, ``PrioritizedSampler``).
- ``flowrl.replay.frames``: ``FrameStore``, stacked image frames kept once each.
- ``flowrl.replay.segment_tree``: the sum and min trees prioritized sampling uses.
- ``flowrl.replay.actor``: ``ReplayActor``, one shard of a buffer in a Ray actor.
- ``flowrl.replay.replay_config``: ``ReplayConfig``, the settings off-policy algorithms
  share, and ``make_replay``, the storage they describe.

Examples:
    >>> buffer = make_replay(ReplayConfig(num_workers=0, buffer_size=100))
    >>> buffer
    ReplayBuffer(capacity=100, UniformSampler) per policy
"""

from flowrl.replay.actor import (
    ReplayActor,
    ReplayShards,
    SampleShard,
    create_replay_actors,
    shard_of,
)
from flowrl.replay.buffer import (
    BATCH_INDEXES,
    PRIORITIES,
    WEIGHTS,
    PolicyBuffers,
    PrioritizedSampler,
    ReplayBuffer,
    UniformSampler,
)
from flowrl.replay.replay_config import ReplayConfig, make_buffer, make_replay

__all__ = [
    "BATCH_INDEXES",
    "PRIORITIES",
    "WEIGHTS",
    "PolicyBuffers",
    "PrioritizedSampler",
    "ReplayActor",
    "ReplayBuffer",
    "ReplayConfig",
    "ReplayShards",
    "SampleShard",
    "UniformSampler",
    "create_replay_actors",
    "make_buffer",
    "make_replay",
    "shard_of",
]
