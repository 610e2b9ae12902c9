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


def lanes_of(agents=2, num_envs=3, policy_of=lambda agent: agent):
    from flowrl.rollout.multi_agent import AgentLanes
    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    return AgentLanes(lambda: IndependentCartPoles(agents), num_envs=num_envs, policy_of=policy_of)


def test_each_policy_sees_its_agents_of_every_copy_as_lanes():
    independent = lanes_of()
    obs = independent.reset(seed=0)
    assert independent.policy_ids == ["cartpole_0", "cartpole_1"]
    assert {pid: o.shape for pid, o in obs.items()} == {"cartpole_0": (3, 4), "cartpole_1": (3, 4)}
    shared = lanes_of(policy_of=lambda agent: "shared")
    assert shared.reset(seed=0)["shared"].shape == (6, 4)
    assert shared.lanes["shared"][:2] == [(0, "cartpole_0"), (0, "cartpole_1")]


def test_an_agent_that_finishes_waits_for_its_copy_which_resets_in_one_step():
    lanes = lanes_of(num_envs=1, policy_of=lambda agent: "shared")
    lanes.reset(seed=0)
    rng = np.random.default_rng(0)
    history = []  # (valid, terminated or truncated, rewards) per step
    for _ in range(200):
        obs_before = lanes.obs["shared"].copy()
        out = lanes.step({"shared": rng.integers(0, 2, size=2)})
        obs, rewards, term, trunc, valid = (part["shared"] for part in out)
        history.append((valid, term | trunc, rewards, obs_before, obs))
    valid = np.array([h[0] for h in history])
    done = np.array([h[1] for h in history])
    rewards = np.array([h[2] for h in history])
    assert (rewards[~valid] == 0).all() and (rewards[valid] == 1).all()
    assert not done[~valid].any()  # flags only on real steps
    for lane in range(2):
        for t in np.flatnonzero(done[:, lane])[:3]:
            assert not valid[t + 1, lane]  # gone until its copy starts over
            np.testing.assert_array_equal(history[t + 1][3][lane], history[t][4][lane])  # final obs
    # the copy resets one step after its last agent left, then both lanes act again
    both_gone = np.flatnonzero(~valid.any(axis=1))
    assert len(both_gone) > 0
    t = both_gone[0]
    assert valid[t + 1].all() and not valid[t].any()


def test_a_policy_over_agents_with_different_spaces_is_refused():
    import gymnasium as gym

    from flowrl import ConfigError
    from flowrl.rollout.multi_agent import AgentLanes
    from flowrl.rollout.toy_multi_agent import IndependentCartPoles

    class Uneven(IndependentCartPoles):
        def observation_space(self, agent):
            if agent == "cartpole_1":
                return gym.spaces.Box(-1, 1, (2,))
            return super().observation_space(agent)

    with pytest.raises(ConfigError, match="policy 'shared' acts for agents with different obs"):
        AgentLanes(lambda: Uneven(2), num_envs=1, policy_of=lambda agent: "shared")
