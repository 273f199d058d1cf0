"""Activation functions by name, for the MLP and the gate branch of the GLU family.

- relu: max(0, x) (Vaswani et al. 2017); gelu: x * Phi(x), exact erf (Hendrycks & Gimpel, arXiv
  1606.08415); gelu_tanh: the tanh approximation used by GPT-2/Gemma ("gelu_new",
  "gelu_pytorch_tanh" in HF); silu: x * sigmoid(x) (= swish with beta 1, Ramachandran et al. arXiv
  1710.05941); swish: x * sigmoid(beta * x); sigmoid, tanh, leaky_relu (slope 0.01).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from archlab.nn.config.choices import ACTIVATIONS

Activation = Callable[[torch.Tensor], torch.Tensor]


def swish(x: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """x * sigmoid(beta * x); beta = 1 is SiLU, beta -> inf approaches ReLU."""
    return x * torch.sigmoid(beta * x)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation (GPT-2, Gemma)."""
    return F.gelu(x, approximate="tanh")


def get_activation(name: str, swish_beta: float = 1.0) -> Activation:
    """The activation called `name`; `swish_beta` applies to `swish` only."""
    if name == "swish":
        return partial(swish, beta=swish_beta)
    return ACTIVATIONS[name]
