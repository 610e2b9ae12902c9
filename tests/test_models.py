"""Model building blocks against their plain torch equivalents."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from flowrl.learning.models import InputMajorLinear, NatureCNN


def test_input_major_linear_is_a_linear_layer_with_the_weight_transposed():
    torch.manual_seed(0)
    layer = InputMajorLinear(96, 16, gain=2.0)
    x = torch.randn(5, 96)
    expected = F.linear(x, layer.weight.t(), layer.bias)
    torch.testing.assert_close(layer(x), expected)
    # orthogonal init as nn.Linear's [out, in] weight would get: orthonormal rows, scaled
    w = layer.weight.detach().t()
    torch.testing.assert_close(w @ w.t(), 4.0 * torch.eye(16), atol=1e-4, rtol=0)


def test_nature_cnn_equals_the_layer_by_layer_network_on_scaled_frames():
    torch.manual_seed(0)
    cnn = NatureCNN((4, 84, 84))
    frames = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    x = frames.float() / 255.0
    for conv in cnn.convs:
        x = torch.relu(F.conv2d(x, conv.weight, conv.bias, stride=conv.stride))
    expected = torch.relu(x.flatten(1) @ cnn.fc.weight + cnn.fc.bias)
    torch.testing.assert_close(cnn(frames), expected, atol=1e-5, rtol=1e-4)
    # channels-last frames give the same features
    last = NatureCNN((84, 84, 4))
    last.load_state_dict(cnn.state_dict())
    torch.testing.assert_close(last(frames.permute(0, 2, 3, 1)), cnn(frames))


def test_nature_cnn_trains_every_layer():
    torch.manual_seed(0)
    cnn = NatureCNN((4, 84, 84))
    cnn(torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in cnn.parameters())
