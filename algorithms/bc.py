"""Behaviour cloning: a policy learns to take the actions of a recording (``record_experiences``)
by maximising their log-likelihood: MARWIL with ``beta = 0`` and no value loss. The env only
gives the spaces and the evaluation episodes that judge the clone; nothing is sampled.

Examples:
    >>> import tempfile
    >>> from flowrl import Algorithm
    >>> recording = tempfile.mkdtemp()
    >>> expert = Algorithm("ppo", env="CartPole-v1", num_workers=0, record_experiences=recording)
    >>> _ = expert.train(); expert.stop()
    >>> clone = Algorithm("bc", env="CartPole-v1", input=recording, updates_per_iteration=5)
    >>> "evaluation/episode_return_mean" in clone.train()
    True
    >>> clone.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flowrl.algorithms.marwil import MARWILConfig, MARWILLearner, execution_plan
from flowrl.learning.policy import Policy
from flowrl.run.spec import AlgorithmSpec


@dataclass
class BCConfig(MARWILConfig):
    """Behaviour cloning settings: MARWIL's, every action weighted alike.

    Examples:
        >>> BCConfig(input="recorded/").beta, BCConfig().evaluation_interval
        (0.0, 1)
    """

    algo_name: ClassVar[str] = "bc"

    beta: float = 0.0
    vf_coeff: float = 0.0


ALGORITHM = AlgorithmSpec(
    name="bc",
    summary="Behaviour cloning: the actions of a recording, by maximum likelihood",
    config_cls=BCConfig,
    policy_cls=Policy,
    learner_cls=MARWILLearner,
    execution_plan=execution_plan,
)
