"""Adam on torch's fused kernel, without ``torch.optim``'s start-up cost.

Every ``torch.optim`` optimiser imports ``torch._dynamo`` (and with it sympy and the
compiler stack) the first time it is built or stepped, a large part of a short run.
``FusedAdam`` makes the same update with the same kernel (``torch._fused_adam_``, what
``torch.optim.Adam(fused=True)`` calls) and keeps its state in the same ``state_dict``
format, so checkpoints load either way. The kernel is private, so ``adam`` checks it once
per process against Adam's update written out (two steps of three numbers, microseconds) and
falls back to ``torch.optim.Adam`` where torch lacks it or it disagrees; the suite pins
``FusedAdam`` to ``torch.optim.Adam(fused=True)`` on the torch it installs.

Examples:
    >>> net = torch.nn.Linear(4, 2)
    >>> opt = adam(net.parameters(), 1e-3)
    >>> net(torch.ones(3, 4)).sum().backward()
    >>> opt.step()
    >>> opt.state_dict()["state"][0]["step"].item()
    1.0
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch


class FusedAdam:
    """Adam (no weight decay, no amsgrad) over one parameter group, stepped with
    ``torch._fused_adam_``: the update, the ``param_groups`` and the ``state_dict`` of
    ``torch.optim.Adam(params, lr=lr, eps=eps, fused=True)``."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        *,
        eps: float = 1e-8,
        betas: tuple[float, float] = (0.9, 0.999),
    ) -> None:
        group = {"params": list(params), "lr": lr, "betas": betas, "eps": eps}
        if not group["params"]:
            raise ValueError("optimizer got an empty parameter list")
        self.param_groups = [{**_ADAM_DEFAULTS, **group}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of the parameters that have a gradient."""
        group = self.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        for p in params:
            if p not in self.state:  # as torch.optim.Adam(fused=True) starts a parameter
                zeros = torch.zeros_like(p, memory_format=torch.preserve_format)
                self.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": zeros,
                    "exp_avg_sq": zeros.clone(),
                }
        states = [self.state[p] for p in params]
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        torch._fused_adam_(  # one kernel for all: a learner's parameters share a device
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            steps,
            amsgrad=False,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=0.0,
            eps=group["eps"],
            maximize=False,
        )

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam``'s format: states by parameter index, and the group."""
        params = self.param_groups[0]["params"]
        index = {p: i for i, p in enumerate(params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {
            "state": {index[p]: dict(s) for p, s in self.state.items()},
            "param_groups": [{**group, "params": list(range(len(params)))}],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A state from ``state_dict`` or from ``torch.optim.Adam`` (tensors are
        copied onto each parameter's device)."""
        params = self.param_groups[0]["params"]
        (saved,) = state["param_groups"]
        if len(saved["params"]) != len(params):
            raise ValueError(
                f"the saved optimizer state has {len(saved['params'])} parameters, "
                f"this one {len(params)}"
            )
        self.param_groups[0].update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for i, s in state["state"].items():
            p = params[saved["params"].index(int(i))]
            self.state[p] = {
                "step": torch.as_tensor(s["step"], dtype=torch.float32, device=p.device).clone(),
                "exp_avg": s["exp_avg"].to(p.device, p.dtype, copy=True),
                "exp_avg_sq": s["exp_avg_sq"].to(p.device, p.dtype, copy=True),
            }


_ADAM_DEFAULTS = {
    "weight_decay": 0.0,
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "fused": True,
    "decoupled_weight_decay": False,
}


def adam(params: Iterable[torch.Tensor], lr: float, *, eps: float = 1e-8) -> Any:
    """Adam with the fused kernel: one call per step for all parameters (several times
    faster than the per-tensor loop for small models), as ``FusedAdam`` where the
    kernel makes Adam's update (``fused_kernel_agrees``), else ``torch.optim.Adam``."""
    if fused_kernel_agrees():
        return FusedAdam(params, lr, eps=eps)
    return torch.optim.Adam(params, lr=lr, eps=eps)


@functools.cache
def fused_kernel_agrees() -> bool:
    """Whether ``FusedAdam`` makes Adam's update as written out in the paper, on two
    steps of a three-number parameter (checked once per process: the kernel is private
    to torch, and a release may change or drop it).

    Examples:
        >>> fused_kernel_agrees()
        True
    """
    lr, eps, (b1, b2) = 0.1, 1e-8, (0.9, 0.999)
    param = torch.tensor([1.0, -2.0, 3.0])
    expected, m, v = param.clone(), torch.zeros(3), torch.zeros(3)
    try:
        opt = FusedAdam([param], lr, eps=eps, betas=(b1, b2))
        for t, grad in enumerate(
            (torch.tensor([0.5, -1.0, 2.0]), torch.tensor([1.0, 0.3, -4.0])), 1
        ):
            param.grad = grad
            opt.step()
            m, v = b1 * m + (1 - b1) * grad, b2 * v + (1 - b2) * grad**2
            step = lr * (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
            expected -= step
    except (AttributeError, TypeError, RuntimeError):  # no kernel, or another signature
        return False
    return bool(torch.allclose(param, expected, rtol=1e-5, atol=1e-6))
