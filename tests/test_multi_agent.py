"""Multi-policy batches and the operators that route them, on plain lists (no Ray): the
first pieces of multi-agent training (issue 31)."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl import LocalIterator, MultiAgentBatch, SampleBatch
from flowrl.ops import ConcatBatches, SelectExperiences


def fragment(ppo_rows: int, dqn_rows: int, env_steps: int, start: float = 0.0) -> MultiAgentBatch:
    parts = {"ppo": SampleBatch(x=start + np.arange(ppo_rows, dtype=float))}
    if dqn_rows:
        parts["dqn"] = SampleBatch(x=-np.arange(dqn_rows, dtype=float))
    return MultiAgentBatch(parts, env_steps)


def test_a_multi_agent_batch_counts_env_steps_not_rows():
    batch = fragment(ppo_rows=8, dqn_rows=4, env_steps=4)  # two ppo agents, one dqn agent
    assert len(batch) == 4 and len(batch["ppo"]) == 8 and "dqn" in batch
    assert batch.select(["dqn", "nobody"]).policy_ids == ["dqn"]
    assert len(batch.select([])) == 4  # the same env steps, no rows


def test_concat_keeps_each_policy_s_rows_in_order_even_when_a_policy_sat_out():
    first, second = fragment(3, 2, 3), fragment(2, 0, 2, start=10.0)  # no dqn agent in it
    both = MultiAgentBatch.concat([first, second])
    assert len(both) == 5 and both.policy_ids == ["ppo", "dqn"]
    assert both["ppo"]["x"].tolist() == [0.0, 1.0, 2.0, 10.0, 11.0]
    assert len(both["dqn"]) == 2


def test_concat_batches_then_select_experiences_route_one_policy_s_rows():
    items = [fragment(4, 2, 2, start=i * 100.0) for i in range(6)]
    batches = (
        LocalIterator.from_items(items)
        .combine(ConcatBatches(min_batch_size=4))
        .for_each(SelectExperiences(["dqn"]))
        .take(3)
    )
    assert [len(b) for b in batches] == [4, 4, 4]  # env steps of two fragments each
    assert all(b.policy_ids == ["dqn"] and len(b["dqn"]) == 4 for b in batches)


def test_select_experiences_wants_a_list_of_ids():
    with pytest.raises(TypeError, match="list of policy ids"):
        SelectExperiences("ppo")
    assert repr(SelectExperiences(["ppo"])) == "SelectExperiences(['ppo'])"


def test_the_independent_cartpoles_follow_pettingzoo_s_parallel_api():
    from pettingzoo.test import parallel_api_test

    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    parallel_api_test(IndependentCartPoles(agents=3), num_cycles=300)
    env = IndependentCartPoles(agents=2)
    env.reset(seed=0)
    left = []
    while env.agents:  # an agent whose pole falls leaves; the others go on
        _, _, terms, truncs, _ = env.step({a: 0 for a in env.agents})
        left += [a for a in terms if terms[a] or truncs[a]]
    assert sorted(left) == ["cartpole_0", "cartpole_1"]
