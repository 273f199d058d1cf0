"""FFN and activations: formulas, and the 8/3 rule keeping a GLU at the 4x MLP's parameter count."""

import pytest
import torch

from archlab.nn.config.choices import default_d_ff
from archlab.nn.ffn import MLP, GatedMLP


def _ffn_params(kind: str, d_model: int, multiple_of: int) -> int:
    cls, act = (GatedMLP, "silu") if kind == "glu" else (MLP, "relu")
    with torch.device("meta"):  # shapes only: an 8192-wide FFN would allocate gigabytes
        module = cls(d_model, default_d_ff(kind, d_model, multiple_of), act, False)
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("d_model", [768, 1024, 2048, 3072, 4096, 5120, 8192])
def test_glu_8_3_rule_matches_mlp_params_within_2_percent(d_model):
    """At real model widths the rounded 8/3 rule lands within 2% of the 4x MLP."""
    n_mlp, n_glu = _ffn_params("mlp", d_model, 64), _ffn_params("glu", d_model, 64)
    assert abs(n_glu - n_mlp) / n_mlp <= 0.02
    assert (
        default_d_ff("glu", d_model) % 64 == 0 and default_d_ff("glu", d_model) >= 8 * d_model / 3
    )


@pytest.mark.parametrize("d_model", [48, 64, 96, 100, 256, 512])
def test_glu_rule_error_is_only_rounding(d_model):
    """Unrounded, 3 * 8/3 d = 2 * 4d up to one unit; rounding to 64 adds at most 3 * 63
    * d parameters."""
    n_mlp = _ffn_params("mlp", d_model, 1)
    assert abs(_ffn_params("glu", d_model, 1) - n_mlp) <= 3 * d_model
    assert 0 <= _ffn_params("glu", d_model, 64) - n_mlp + 3 * d_model <= 3 * 64 * d_model


def test_d_ff_rounds_up_to_multiple():
    assert default_d_ff("glu", 96, 64) == 256  # 8/3 * 96 = 256 exactly
    assert default_d_ff("glu", 100, 64) == 320  # 266.7 -> 320
    assert default_d_ff("mlp", 100, 1) == 400


def test_gated_mlp_formula():
    f = GatedMLP(8, 16, "silu", bias=True)
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    f = f.double()
    gate_w, up_w = f.gate_up_proj.weight[:16], f.gate_up_proj.weight[16:]
    gate_b, up_b = f.gate_up_proj.bias[:16], f.gate_up_proj.bias[16:]
    g = x @ gate_w.T + gate_b
    ref = (g * torch.sigmoid(g) * (x @ up_w.T + up_b)) @ f.down_proj.weight.T + f.down_proj.bias
    torch.testing.assert_close(f(x), ref)


def test_mlp_formula_relu():
    f = MLP(8, 32, "relu", bias=True).double()
    x = torch.randn(4, 8, dtype=torch.float64)
    ref = (
        torch.clamp(x @ f.up_proj.weight.T + f.up_proj.bias, min=0) @ f.down_proj.weight.T
        + f.down_proj.bias
    )
    torch.testing.assert_close(f(x), ref)
