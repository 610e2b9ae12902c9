"""V-trace against the paper's forward-sum definition, computed step by step."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from flowrl.core.sample_batch import OBS, Fragment
from flowrl.learning.postprocessing import VALID, to_sequences, vtrace


def reference(log_rhos, rewards, values, terminated, truncated, gamma, lam, clip_rho, clip_c):
    """vs_t = V(x_t) + sum_s gamma^(s-t) (c_t ... c_(s-1)) delta_s, the sum stopping after
    the step that ends an episode; one env and one step at a time."""
    steps, envs = rewards.shape
    vs, adv = np.zeros((steps, envs)), np.zeros((steps, envs))
    for b in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for s in range(t, steps):
                rho = min(clip_rho, math.exp(log_rhos[s, b]))
                bootstrap = 0.0 if terminated[s, b] else values[s + 1, b]
                delta = rho * (rewards[s, b] + gamma * bootstrap - values[s, b])
                total += weight * delta
                if terminated[s, b] or truncated[s, b]:
                    break
                weight *= gamma * lam * min(clip_c, math.exp(log_rhos[s, b]))
            vs[t, b] = values[t, b] + total
    for b in range(envs):
        for t in range(steps):
            rho = min(clip_rho, math.exp(log_rhos[t, b]))
            ended = terminated[t, b] or truncated[t, b]
            nxt = values[t + 1, b] if ended or t == steps - 1 else vs[t + 1, b]
            bootstrap = 0.0 if terminated[t, b] else nxt
            adv[t, b] = rho * (rewards[t, b] + gamma * bootstrap - values[t, b])
    return vs, adv


@given(
    st.integers(1, 7),
    st.integers(1, 3),
    st.integers(0, 10_000),
    st.sampled_from([0.9, 0.99, 1.0]),
    st.sampled_from([1.0, 0.95]),
    st.sampled_from([(1.0, 1.0), (2.0, 0.5)]),
)
def test_vtrace_matches_the_forward_sum_definition(steps, envs, seed, gamma, lam, clips):
    rng = np.random.default_rng(seed)
    log_rhos = rng.normal(0, 0.7, (steps, envs))
    rewards = rng.normal(0, 1, (steps, envs))
    values = rng.normal(0, 1, (steps + 1, envs))
    ends = rng.random((steps, envs))
    terminated, truncated = ends < 0.2, (ends >= 0.2) & (ends < 0.35)
    vs, adv = vtrace(
        *(torch.tensor(x) for x in (log_rhos, rewards, values, terminated, truncated)),
        gamma=gamma,
        lam=lam,
        clip_rho=clips[0],
        clip_c=clips[1],
    )
    ref_vs, ref_adv = reference(
        log_rhos, rewards, values, terminated, truncated, gamma, lam, *clips
    )
    np.testing.assert_allclose(vs.numpy(), ref_vs, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-9, atol=1e-9)


def test_on_policy_vtrace_without_clipping_is_the_n_step_return():
    rewards = torch.ones(3, 1, dtype=torch.float64)
    values = torch.zeros(4, 1, dtype=torch.float64)
    no = torch.zeros(3, 1, dtype=torch.bool)
    vs, _ = vtrace(torch.zeros(3, 1, dtype=torch.float64), rewards, values, no, no, gamma=1.0)
    assert vs[:, 0].tolist() == [3.0, 2.0, 1.0]


def test_sequences_are_env_major_with_a_bootstrap_step():
    obs = np.arange(3 * 2).reshape(3, 2, 1).astype(np.float32)  # obs[t, env] = 2t + env
    valid = np.array([[True, True], [False, True], [True, True]])
    fragment = Fragment({OBS: obs}, valid, last_obs=np.array([[6.0], [7.0]], np.float32))
    batch = to_sequences(fragment)
    assert batch[OBS][:, 0].tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert batch[VALID].tolist() == [True, False, True, False, True, True, True, False]
