"""GAE against a plain reference loop, with terminations and truncations."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from flowrl.learning.postprocessing import compute_gae


def reference_gae(rewards, values, terminated, truncated, last_value, gamma, lam):
    """One env, step by step, the textbook way.

    values[t] is V(obs_t); after a step that ends an episode the next row is the
    NEXT_STEP reset row, whose obs is the final observation of the episode.
    """
    steps = len(rewards)
    adv = np.zeros(steps)
    for t in range(steps):
        total, discount = 0.0, 1.0
        for k in range(t, steps):
            next_v = values[k + 1] if k + 1 < steps else last_value
            bootstrap = 0.0 if terminated[k] else next_v
            delta = rewards[k] + gamma * bootstrap - values[k]
            total += discount * delta
            if terminated[k] or truncated[k]:
                break
            discount *= gamma * lam
        adv[t] = total
    return adv


@given(
    st.integers(1, 25),
    st.integers(1, 3),
    st.floats(0.5, 1.0),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
)
def test_gae_matches_reference_loop(steps, envs, gamma, lam, seed):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    ends = rng.random((steps, envs))
    terminated, truncated = ends < 0.15, (ends >= 0.15) & (ends < 0.3)
    last = rng.normal(size=envs).astype(np.float32)
    adv, targets = compute_gae(rewards, values, terminated, truncated, last, gamma=gamma, lam=lam)
    for i in range(envs):
        ref = reference_gae(
            rewards[:, i], values[:, i], terminated[:, i], truncated[:, i], last[i], gamma, lam
        )
        np.testing.assert_allclose(adv[:, i], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(targets, adv + values, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_from_the_final_observation_and_termination_does_not():
    rewards = np.array([[1.0], [0.0]], np.float32)  # row 1 is the reset row
    values = np.array([[0.0], [10.0]], np.float32)  # V(final obs) = 10
    no = np.zeros((2, 1), bool)
    trunc = np.array([[True], [False]])
    adv, _ = compute_gae(rewards, values, no, trunc, np.zeros(1), gamma=0.9, lam=1.0)
    assert adv[0, 0] == np.float32(1.0 + 0.9 * 10.0)
    adv, _ = compute_gae(rewards, values, trunc, no, np.zeros(1), gamma=0.9, lam=1.0)
    assert adv[0, 0] == np.float32(1.0)


def reference_n_step(obs, rewards, terminated, truncated, last_obs, n, gamma):
    """One env, one row at a time."""
    steps = len(rewards)
    out = []
    for t in range(steps):
        total, m, done = 0.0, 0, False
        for k in range(t, min(t + n, steps)):
            total += gamma ** (k - t) * rewards[k]
            m += 1
            if terminated[k]:
                done = True
            if terminated[k] or truncated[k]:
                break
        nxt = obs[t + m] if t + m < steps else last_obs
        out.append((total, nxt, done, gamma**m))
    return out


@given(st.integers(1, 20), st.integers(1, 3), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_n_step_matches_reference_loop(steps, envs, n, seed):
    from flowrl.core.sample_batch import Fragment
    from flowrl.learning.postprocessing import n_step_transitions

    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(steps, envs, 2)).astype(np.float32)
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    ends = rng.random((steps, envs))
    terminated, truncated = ends < 0.15, (ends >= 0.15) & (ends < 0.3)
    last_obs = rng.normal(size=(envs, 2)).astype(np.float32)
    columns = {
        "obs": obs, "actions": np.zeros((steps, envs), np.int64), "rewards": rewards,
        "terminateds": terminated, "truncateds": truncated,
    }  # fmt: skip
    valid = np.ones((steps, envs), bool)
    value = lambda o: o.sum(-1)  # noqa: E731  (a value of each observation)
    bootstrap = value(obs), value(last_obs)
    fragment = Fragment(columns, valid, last_obs)
    batch = n_step_transitions(fragment, n=n, gamma=0.9, next_values=bootstrap)
    # the value of each row's next observation, taken from the values per step
    np.testing.assert_array_equal(batch["next_values"], value(batch["next_obs"]))
    # rows are flattened time-major: row t * envs + i
    for i in range(envs):
        ref = reference_n_step(
            obs[:, i], rewards[:, i], terminated[:, i], truncated[:, i], last_obs[i], n, 0.9
        )
        for t, (ret, nxt, done, disc) in enumerate(ref):
            row = t * envs + i
            assert np.isclose(batch["rewards"][row], ret, atol=1e-5)
            assert np.array_equal(batch["next_obs"][row], nxt)
            assert batch["terminateds"][row] == done
            assert np.isclose(batch["discounts"][row], disc)
