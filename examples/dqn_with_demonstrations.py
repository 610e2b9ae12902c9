"""DQN with demonstrations in its replay (after DQfD, Hester et al. 2018,
https://arxiv.org/abs/1704.03732): every replayed batch of the agent's own steps gets
``demo_batch_size`` steps of a recording beside it, for the whole run; on those, a
large-margin loss keeps the demonstrated action's Q above every other action's by
``margin`` (Q-learning alone never sees the other actions of the states an expert visits,
and would take them over). Run it with

    flowrl train ppo --env CartPole-v1 --stop-reward 475 --record-experiences recorded/
    flowrl train examples/dqn_with_demonstrations.py:plan --env CartPole-v1 --set input=recorded/

``--set demo_batch_size=0`` runs the same plan without them.
"""

from dataclasses import dataclass

import numpy as np

from flowrl.algorithms.dqn import DQNConfig, DQNLearner
from flowrl.algorithms.dqn import DQNPolicy as Policy
from flowrl.core.config import ConfigError, param
from flowrl.core.sample_batch import (
    ACTIONS,
    OBS,
    REWARDS,
    TERMINATEDS,
    MultiAgentBatch,
    SampleBatch,
)  # fmt: skip
from flowrl.learning.postprocessing import DISCOUNTS, NEXT_OBS
from flowrl.ops import (
    Concurrently,
    ParallelRollouts,
    Replay,
    StandardMetricsReporting,
    StoreToReplayBuffer,
    TrainOneStep,
    UpdateTargets,
)  # fmt: skip
from flowrl.replay import BATCH_INDEXES, WEIGHTS, make_replay
from flowrl.rollout.experiences import spaces_of
from flowrl.rollout.minari_datasets import read_source

__all__ = ["Config", "Learner", "Policy", "plan"]  # the classes flowrl train runs the plan with

DEMONSTRATION = "demonstration"  # 1.0 on a recorded step, 0.0 on the agent's own


@dataclass
class Config(DQNConfig):
    input: str = param("", "the recording of demonstrations (record_experiences)")
    demo_batch_size: int = param(32, "recorded steps beside each replayed batch", ge=0)
    margin: float = param(0.8, "how far the demonstrated action's Q stays above others", ge=0)
    margin_coeff: float = param(1.0, "weight of the large-margin loss", ge=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prioritized_replay:
            raise ConfigError("this example mixes demonstrations into uniform replay only")


class Learner(DQNLearner):
    """DQN's loss, plus the large-margin loss on the demonstrated steps."""

    def loss(self, batch):
        loss, stats = super().loss(batch)
        if DEMONSTRATION not in batch:  # demo_batch_size=0: DQN as it is
            return loss, stats
        q = self.policy.forward(batch[OBS]).dist_inputs
        taken = q.gather(1, batch[ACTIONS].long()[:, None])
        others = (q + self.config.margin).scatter(1, batch[ACTIONS].long()[:, None], taken)
        margin = ((others.max(1).values - taken.squeeze(1)) * batch[DEMONSTRATION]).mean()
        stats["margin_loss"] = margin.detach()
        return loss + self.config.margin_coeff * margin, stats


class MixInDemonstrations:
    """Adds ``n`` steps of the recording, drawn at random, to each replayed batch, as the
    one-step transitions DQN's replay holds; replayed rows are marked as the agent's."""

    def __init__(self, config: Config, spaces: dict) -> None:
        self.config, self.spaces, self.rows = config, spaces, None
        self.rng = np.random.default_rng(config.seed)

    def transitions(self, rows: SampleBatch) -> SampleBatch:
        kept = SampleBatch({k: rows[k] for k in (OBS, ACTIONS, REWARDS, NEXT_OBS, TERMINATEDS)})
        ones = np.ones(len(kept), np.float32)
        kept[DISCOUNTS], kept[DEMONSTRATION], kept[WEIGHTS] = self.config.gamma * ones, ones, ones
        kept[BATCH_INDEXES] = np.full(len(kept), -1, np.int64)
        return kept

    def __call__(self, batch: MultiAgentBatch) -> MultiAgentBatch:
        if self.rows is None:  # read when the plan first trains
            recorded = read_source(self.config.input, spaces=self.spaces)
            self.rows = {pid: self.transitions(rows) for pid, rows in recorded.items()}
        parts = {}
        for pid, replayed in batch.policy_batches.items():
            replayed[DEMONSTRATION] = np.zeros(len(replayed), np.float32)
            demos = self.rows[pid]
            picked = self.rng.integers(len(demos), size=self.config.demo_batch_size)
            picked = SampleBatch({k: v[picked] for k, v in demos.items()})
            parts[pid] = SampleBatch.concat([replayed, picked])
        return MultiAgentBatch(parts, env_steps=batch.env_steps)


def plan(workers, config):
    """Concurrently(round_robin): rollouts -> store, and replay -> mix in demonstrations ->
    train -> targets (DQN's replay plan with one step more)."""
    buffer = workers.keep("replay", lambda: make_replay(config))
    store_op = ParallelRollouts(workers, mode="bulk_sync").for_each(StoreToReplayBuffer(buffer))
    replay_op = Replay(
        buffer, batch_size=config.train_batch_size, learning_starts=config.learning_starts
    )
    if config.demo_batch_size:
        replay_op = replay_op.for_each(
            MixInDemonstrations(config, spaces_of(workers.local_worker.env))
        )
    period = config.target_network_update_freq
    replay_op = replay_op.for_each(TrainOneStep(workers)).for_each(
        UpdateTargets(workers.learner.update_targets, period=period)
    )
    train_op = Concurrently(
        [store_op, replay_op],
        mode="round_robin",
        output_indexes=[1],
        round_robin_weights=[1, config.replay_weight],
        warm_up_indexes=[0],  # the rollouts report while the buffer fills
    )
    return StandardMetricsReporting(train_op, workers, config)
