"""Absolute positions (nn/positions/absolute.py): the sinusoids against the formula written out."""

from __future__ import annotations

import math

import torch

from archlab.nn.positions.absolute import sinusoidal_embedding


def test_sinusoidal_matches_formula():
    d = 16
    pos = torch.arange(50)[None]
    pe = sinusoidal_embedding(pos, d)[0].double()
    ref = torch.zeros(50, d, dtype=torch.float64)
    for p in range(50):
        for i in range(d // 2):
            ref[p, 2 * i] = math.sin(p / 10000 ** (2 * i / d))
            ref[p, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / d))
    torch.testing.assert_close(pe, ref, rtol=1e-5, atol=1e-5)
