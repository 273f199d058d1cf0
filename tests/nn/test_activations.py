"""The activations (nn/config/choices.py ACTIVATIONS, nn/activations.py) against their
formulas in float64."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from archlab.nn.activations import get_activation
from archlab.nn.config.choices import ACTIVATIONS


def test_activation_formulas():
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    refs = {
        "relu": x.clamp_min(0),
        "gelu": 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
        "gelu_tanh": 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "silu": x / (1 + torch.exp(-x)),
        "swish": x / (1 + torch.exp(-x)),
        "sigmoid": 1 / (1 + torch.exp(-x)),
        "tanh": torch.tanh(x),
        "leaky_relu": torch.where(x > 0, x, 0.01 * x),
    }
    assert set(refs) == set(ACTIVATIONS)
    for name, ref in refs.items():
        torch.testing.assert_close(get_activation(name)(x), ref, msg=name)
    torch.testing.assert_close(get_activation("swish", 2.0)(x), x * torch.sigmoid(2 * x))
    # large beta approaches ReLU
    torch.testing.assert_close(get_activation("swish", 1e3)(x), F.relu(x), atol=1e-2, rtol=0)
