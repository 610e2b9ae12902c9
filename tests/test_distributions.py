"""Action distributions: the fast samplers draw from the distribution they describe."""

from __future__ import annotations

import torch

from flowrl.learning.distributions import Categorical


def test_categorical_samples_follow_the_softmax_probabilities():
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, -1.0, 2.0], [3.0, 0.0, 0.0, 0.0]])
    dist = Categorical(logits.repeat(50_000, 1))
    samples = dist.sample().view(50_000, 2)
    probs = torch.softmax(logits, -1)
    for row in range(2):
        freq = torch.bincount(samples[:, row], minlength=4).double() / 50_000
        # 4 standard errors of a frequency estimated from 50k draws
        tolerance = 4 * (probs[row] * (1 - probs[row]) / 50_000).sqrt()
        assert ((freq - probs[row]).abs() <= tolerance).all(), (freq, probs[row])


def test_categorical_log_prob_and_mode():
    dist = Categorical(torch.tensor([[0.0, 2.0, 1.0]]))
    expected = torch.log_softmax(torch.tensor([0.0, 2.0, 1.0]), -1)
    assert dist.mode().tolist() == [1]
    assert torch.allclose(dist.log_prob(torch.tensor([2])), expected[2:3])
