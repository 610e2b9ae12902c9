"""Loss terms that several algorithms share: the clipped surrogate objective with its
adaptive KL coefficient (PPO, APPO), and explained variance.

Examples:
    >>> kl = AdaptiveKL(coeff=0.2, target=0.01)
    >>> kl.update(0.05), kl.update(0.001)  # overshoot: x1.5; far under: x0.5
    (0.30000000000000004, 0.15000000000000002)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from flowrl.learning.postprocessing import VALID


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over the steps ``mask`` keeps (1.0 or True).

    Examples:
        >>> float(masked_mean(torch.tensor([1.0, 2.0, 9.0]), torch.tensor([1.0, 1.0, 0.0])))
        1.5
    """
    return (x * mask).sum() / mask.sum().clamp(min=1)


def valid_mean(batch: dict[str, torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The mean over a batch's rows to learn from: all of them, or those its ``valid``
    column marks (a recurrent learner's sequences hold reset steps and padding)."""
    if VALID not in batch:
        return torch.mean
    mask = batch[VALID].float()
    return lambda x: masked_mean(x, mask)


def clipped_surrogate(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip: float,
    kl_coeff: float = 0.0,
    mean: Callable[[torch.Tensor], torch.Tensor] = torch.mean,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped surrogate loss of ``log_ratio = log pi_new - log pi_old`` (Schulman et
    al. 2017), plus ``kl_coeff`` times the KL estimate while that weight is not 0, and
    its statistics; ``mean`` averages over the steps (a masked mean, say).

    Examples:
        >>> loss, stats = clipped_surrogate(torch.zeros(4), torch.ones(4), clip=0.2)
        >>> float(loss), float(stats["kl"])
        (-1.0, 0.0)
    """
    ratio = log_ratio.exp()
    clipped = ratio.clamp(1 - clip, 1 + clip)
    policy_loss = -mean(torch.min(ratio * advantages, clipped * advantages))
    kl = mean((ratio - 1) - log_ratio)  # unbiased estimate of KL(old || new)
    stats = {
        "policy_loss": policy_loss,
        "kl": kl,
        "clip_fraction": mean(((ratio - 1).abs() > clip).float()),
    }
    # a term with a zero weight stays out of the loss: backward then skips it
    return (policy_loss + kl_coeff * kl if kl_coeff > 0 else policy_loss), stats


class AdaptiveKL:
    """The KL penalty's weight, adapted after each trained batch as in the PPO paper: x1.5
    when the KL overshoots twice its target, x0.5 when it stays under half of it; a weight
    of 0 stays 0 (no KL term). The loss that uses it owns it: a learner keeps it among its
    ``adapted`` parts, which adapt after every batch and are checkpointed with it."""

    def __init__(self, *, coeff: float, target: float) -> None:
        self.coeff, self.target = coeff, target

    def after_batch(self, stats: dict[str, Any]) -> dict[str, float]:
        """Adapt to a trained batch's mean ``kl`` statistic; the new weight, to report."""
        return {"kl_coeff": self.update(float(stats["kl"]))}

    def get_state(self) -> dict[str, float]:
        return {"coeff": self.coeff}

    def set_state(self, state: dict[str, float]) -> None:
        self.coeff = state["coeff"]

    def update(self, kl: float) -> float:
        """Adapt to a batch's mean ``kl``; returns the new weight."""
        if kl > 2.0 * self.target:
            self.coeff *= 1.5
        elif kl < 0.5 * self.target:
            self.coeff *= 0.5
        return self.coeff

    def __repr__(self) -> str:
        return f"AdaptiveKL(coeff={self.coeff:g}, target={self.target:g})"


def explained_variance(predictions: np.ndarray, targets: np.ndarray) -> float:
    """``1 - Var(targets - predictions) / Var(targets)``: 1 for perfect value predictions,
    0 for predicting the mean, negative for worse (NaN when the targets are constant).

    Examples:
        >>> explained_variance(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))
        1.0
        >>> explained_variance(np.full(3, 2.0), np.array([1.0, 2.0, 3.0]))
        0.0
    """
    variance = float(np.var(targets))
    return 1.0 - float(np.var(targets - predictions)) / variance if variance > 0 else math.nan
