"""Model building blocks against their plain torch equivalents."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from flowrl.models import InputMajorLinear


def test_input_major_linear_is_a_linear_layer_with_the_weight_transposed():
    torch.manual_seed(0)
    layer = InputMajorLinear(96, 16, gain=2.0)
    x = torch.randn(5, 96)
    expected = F.linear(x, layer.weight.t(), layer.bias)
    torch.testing.assert_close(layer(x), expected)
    # orthogonal init as nn.Linear's [out, in] weight would get: orthonormal rows, scaled
    w = layer.weight.detach().t()
    torch.testing.assert_close(w @ w.t(), 4.0 * torch.eye(16), atol=1e-4, rtol=0)
