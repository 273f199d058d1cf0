"""RMSNorm and LayerNorm against their formulas in float64."""

import pytest
import torch

from archlab.nn.config.choices import NORMS
from archlab.nn.norms import LayerNorm, RMSNorm, build_norm


def rms_ref(x, w, eps, b=None):
    x = x.double()
    y = x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * w.double()
    return y if b is None else y + b.double()


def ln_ref(x, w, b, eps):
    x = x.double()
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance
    y = (x - mu) / torch.sqrt(var + eps) * w.double()
    return y if b is None else y + b.double()


def _random_params(norm):
    with torch.no_grad():
        for p in norm.parameters():
            p.normal_()


@pytest.mark.parametrize("eps", [1e-6, 1e-2])
def test_rmsnorm_formula(eps):
    x = torch.randn(3, 5, 16) * 4 + 1
    n = RMSNorm(16, eps)
    _random_params(n)
    torch.testing.assert_close(n(x).double(), rms_ref(x, n.weight, eps), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_formula(bias):
    x = torch.randn(3, 5, 16) * 4 + 3
    n = LayerNorm(16, 1e-5, bias=bias)
    _random_params(n)
    torch.testing.assert_close(
        n(x).double(), ln_ref(x, n.weight, n.bias, 1e-5), rtol=1e-5, atol=1e-6
    )


def test_layernorm_removes_mean_rmsnorm_does_not():
    x = torch.randn(4, 32) + 5.0
    assert LayerNorm(32)(x).mean(-1).abs().max() < 1e-5
    assert RMSNorm(32)(x).mean(-1).abs().min() > 0.5  # a shifted input stays shifted


def test_unit_offset_is_one_plus_w():
    x = torch.randn(2, 8)
    n = RMSNorm(8, 1e-6, unit_offset=True)
    assert torch.all(n.weight == 0)  # zero-centred storage starts at the identity gain
    with torch.no_grad():
        n.weight.normal_()
    torch.testing.assert_close(n(x).double(), rms_ref(x, 1 + n.weight, 1e-6), rtol=1e-5, atol=1e-6)


def test_bf16_input_normalised_in_float32():
    x = (torch.randn(4, 64) * 100).bfloat16()
    y = RMSNorm(64)(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(
        y.double(), rms_ref(x.float(), torch.ones(64), 1e-5), rtol=1e-2, atol=1e-2
    )


def test_registry_builds_every_norm():
    for kind, cls in NORMS.items():
        assert type(build_norm(kind, 8, 1e-5)) is cls


def test_layernorm_with_a_non_default_eps():
    # a small-variance input makes eps matter: with eps 1e-5 in place of 0.1 the output would
    # be ~3x larger
    x = torch.randn(3, 16) * 0.05
    n = LayerNorm(16, eps=0.1, bias=True)
    _random_params(n)
    torch.testing.assert_close(
        n(x).double(), ln_ref(x, n.weight, n.bias, 0.1), rtol=1e-5, atol=1e-6
    )
    assert build_norm("layernorm", 16, 0.1).eps == 0.1


def test_rmsnorm_with_a_bias_adds_it_after_the_gain():
    x = torch.randn(3, 5, 16) * 2
    n = RMSNorm(16, 1e-5, bias=True)
    _random_params(n)
    assert n.bias is not None
    torch.testing.assert_close(
        n(x).double(), rms_ref(x, n.weight, 1e-5, n.bias), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_composite_formulas_equal_the_float64_references_and_the_modules(kind, with_bias):
    """Each norm's `formula` (what the norm_op timing builds alike) computes the norm:
    values and gradients."""
    torch.manual_seed(0)
    x = torch.randn(6, 48, dtype=torch.float64, requires_grad=True)
    w, b = (
        torch.randn(48, dtype=torch.float64),
        torch.randn(48, dtype=torch.float64) if with_bias else None,
    )
    y = NORMS[kind].formula(x, w, b, 1e-5)
    ref = rms_ref(x, w, 1e-5, b) if kind == "rmsnorm" else ln_ref(x, w, b, 1e-5)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    module = NORMS[kind](48, eps=1e-5, bias=with_bias)  # normalises in float32 (its own fast paths)
    with torch.no_grad():
        module.weight.copy_(w)
        if b is not None:
            module.bias.copy_(b)
    g = torch.randn(6, 48, dtype=torch.float64)
    (dx,) = torch.autograd.grad(y, x, g)
    x32 = x.detach().float().requires_grad_()
    (dx_module,) = torch.autograd.grad(module(x32), x32, g.float())
    torch.testing.assert_close(dx_module.double(), dx, rtol=1e-4, atol=1e-4)
