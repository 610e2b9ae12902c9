"""Two algorithms in one plan: agents mapped to "ppo" learn with PPO, agents mapped to
"dqn" with DQN, from one stream of multi-agent experience. Run it with

    flowrl train examples/ppo_and_dqn.py:plan \\
        --env flowrl.rollout.toy_multi_agent:IndependentCartPoles
"""

from dataclasses import dataclass

from flowrl.algorithms.ppo import PPOConfig
from flowrl.algorithms.ppo import PPOLearner as Learner
from flowrl.algorithms.ppo import PPOPolicy as Policy
from flowrl.core.config import param
from flowrl.ops import (
    ConcatBatches,
    Concurrently,
    ParallelRollouts,
    Replay,
    SelectExperiences,
    StandardizeFields,
    StandardMetricsReporting,
    StoreToReplayBuffer,
    TrainOneStep,
    UpdateTargets,
)  # fmt: skip
from flowrl.replay import make_replay

__all__ = ["Config", "Learner", "Policy", "plan"]  # the classes flowrl train runs the plan with


# DQN learns here in bursts: 128 updates after each PPO round of 2,048 env steps (DQN alone
# takes one update per 16). With a target copy every 62 updates (DQN's default), its
# Q-values grew past 1,000 and its return fell to 9 on 3 seeds of 5; one copy per round
# (8,192 rows trained) kept every seed of 6 learning, to 450 within 182k env steps.
TWO_POLICIES = {"ppo": {}, "dqn": {"algorithm": "dqn", "target_network_update_freq": 8192}}


@dataclass
class Config(PPOConfig):
    policies: dict = param(TWO_POLICIES, "the two policies")  # noqa: RUF009
    policy_mapping: dict = param({"cartpole_0": "ppo", "cartpole_1": "dqn"}, "agent -> policy")  # noqa: RUF009


def plan(workers, config):
    """Rounds of experience -> a PPO branch and a DQN replay branch, side by side."""
    dqn = workers.policy_config("dqn")
    rounds = ParallelRollouts(workers).combine(ConcatBatches(config.train_batch_size))
    to_ppo, to_dqn = rounds.duplicate(2)
    sgd = {"num_sgd_iter": config.num_sgd_iter, "sgd_minibatch_size": config.sgd_minibatch_size}
    ppo_op = (
        to_ppo.for_each(SelectExperiences(["ppo"]))
        .for_each(StandardizeFields(["advantages"]))
        .for_each(TrainOneStep(workers, **sgd))
    )
    buffer = make_replay(dqn)
    store_op = to_dqn.for_each(SelectExperiences(["dqn"])).for_each(StoreToReplayBuffer(buffer))
    period = dqn.target_network_update_freq
    dqn_op = (
        Replay(buffer, batch_size=dqn.train_batch_size, learning_starts=dqn.learning_starts)
        .for_each(TrainOneStep(workers))
        .for_each(UpdateTargets(workers.learner.update_targets, period=period, policy_id="dqn"))
    )
    steps = round(dqn.training_intensity * config.train_batch_size / dqn.train_batch_size)
    ops = [ppo_op, store_op, dqn_op]
    both = Concurrently(
        ops, mode="round_robin", output_indexes=[0], round_robin_weights=[1, 1, steps]
    )
    return StandardMetricsReporting(both, workers, config)
