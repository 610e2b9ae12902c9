"""RLlib 1.x's ``two_trainer_workflow`` example, ported: PPO and DQN train different agents of
one multi-agent CartPole from one stream of experience, each in its own branch of the plan.
docs/migrating-from-rllib.md maps RLlib's operators to these. Run it with

    flowrl train examples/two_trainer_workflow.py:plan --num-workers 2
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

# RLlib's settings: a 50k buffer learning from 1,000 rows in batches of 64, a target copy
# every 500 steps; PPO in rounds of 200 steps, 10 epochs of minibatches of 128
POLICIES = {
    "ppo_policy": {},
    "dqn_policy": {"algorithm": "dqn", "buffer_size": 50_000, "learning_starts": 1000},
}
# four CartPoles: the even ones learn with PPO, the odd ones with DQN
MAPPING = {f"cartpole_{i}": ("ppo_policy", "dqn_policy")[i % 2] for i in range(4)}


@dataclass
class Config(PPOConfig):
    policies: dict = param(POLICIES, "the two policies")  # noqa: RUF009
    policy_mapping: dict = param(MAPPING, "agent -> policy")  # noqa: RUF009
    env: str = "flowrl.rollout.toy_multi_agent:IndependentCartPoles"
    env_config: dict = param({"agents": 4}, "four CartPoles")  # noqa: RUF009


def plan(workers, config):
    """Shared rollouts -> a DQN branch (store | replay, train, target copies) and a PPO branch
    (rounds, standardised advantages, minibatch SGD), run as their items come."""
    dqn = workers.policy_config("dqn_policy")
    rollouts = ParallelRollouts(workers, mode="bulk_sync")
    to_dqn, to_ppo = rollouts.duplicate(2)

    buffer = make_replay(dqn)
    store_op = to_dqn.for_each(SelectExperiences(["dqn_policy"])).for_each(
        StoreToReplayBuffer(buffer)
    )
    replay_op = (
        Replay(buffer, batch_size=64, learning_starts=dqn.learning_starts)
        .for_each(TrainOneStep(workers))
        .for_each(UpdateTargets(workers.learner.update_targets, period=500, policy_id="dqn_policy"))
    )
    dqn_op = Concurrently([store_op, replay_op], mode="round_robin", output_indexes=[1])

    ppo_op = (
        to_ppo.for_each(SelectExperiences(["ppo_policy"]))
        .combine(ConcatBatches(min_batch_size=200))
        .for_each(StandardizeFields(["advantages"]))
        .for_each(TrainOneStep(workers, num_sgd_iter=10, sgd_minibatch_size=128))
    )
    both = Concurrently([ppo_op, dqn_op], mode="async", output_indexes=[1])
    return StandardMetricsReporting(both, workers, config)
