"""GAE against a plain reference loop, with terminations and truncations."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from flowrl.postprocessing import compute_gae


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
