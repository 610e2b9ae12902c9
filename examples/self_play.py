"""Self-play on tic-tac-toe: one PPO policy ("main") plays both seats against itself, and
against "opponent", a frozen snapshot drawn from a pool of its past selves every few
iterations; results report its win rates against a random player and its last snapshot.

    flowrl train examples/self_play.py:plan --env pettingzoo.classic.tictactoe_v3:env
"""

from dataclasses import dataclass

from flowrl.algorithms import ppo
from flowrl.algorithms.ppo import PPOConfig
from flowrl.algorithms.ppo import PPOLearner as Learner
from flowrl.algorithms.ppo import PPOPolicy as Policy
from flowrl.core.config import param
from flowrl.ops import SelfPlay

__all__ = ["Config", "Learner", "Policy", "plan"]  # the classes flowrl train runs the plan with


@dataclass
class Config(PPOConfig):
    env: str = "pettingzoo.classic.tictactoe_v3:env"
    policy_mapping: dict[str, str] | str = "self_play"
    policies: dict = param({"main": {}, "opponent": {"trainable": False}}, "the two seats")  # noqa: RUF009


def plan(workers, config):
    """PPO's plan, then a snapshot into the pool (and the opponent drawn from it) and a
    match against a random player and the last snapshot every 5 iterations."""
    return ppo.execution_plan(workers, config).for_each(SelfPlay(workers, config, every=5))
