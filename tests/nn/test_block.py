"""Every norm placement and both block types match their equations on a one-layer model (float64).

The attention and FFN sublayers are used as black boxes A and M (they have their own tests); what is
checked here is the wiring of norms and residuals around them.
"""

import pytest
import torch

from archlab import ModelConfig, TransformerLM
from tests.conftest import randomize_

PLACEMENTS = ["pre", "post", "double", "nonresidual_post"]


def _block_and_inputs(position: str, block: str, parallel_norms: int):
    c = ModelConfig(
        d_model=32,
        n_layers=1,
        n_heads=4,
        norm="layernorm",
        norm_bias=True,
        norm_position=position,
        block=block,
        parallel_norms=parallel_norms,
        position="rope",
        vocab_size=50,
    )
    model = randomize_(TransformerLM(c)).double()
    pos = torch.arange(6)[None]
    inputs = model.attention_inputs(pos)[0]
    return model.layers[0], inputs


def _expected(blk, x, inp, position: str, parallel: bool, shared: bool) -> torch.Tensor:
    A = lambda h: blk.attn(h, inp)  # noqa: E731
    M = blk.mlp
    N = lambda name: getattr(blk, name)  # noqa: E731
    m_in = "attn_norm" if shared else "mlp_norm"
    if not parallel:
        if position == "pre":
            x = x + A(N("attn_norm")(x))
            return x + M(N("mlp_norm")(x))
        if position == "post":
            x = N("attn_norm")(x + A(x))
            return N("mlp_norm")(x + M(x))
        if position == "double":
            x = x + N("attn_out_norm")(A(N("attn_norm")(x)))
            return x + N("mlp_out_norm")(M(N("mlp_norm")(x)))
        x = x + N("attn_out_norm")(A(x))  # nonresidual_post
        return x + N("mlp_out_norm")(M(x))
    if position == "pre":
        return x + A(N("attn_norm")(x)) + M(N(m_in)(x))
    if position == "post":
        return N("attn_norm")(x + A(x) + M(x))
    if position == "double":
        return x + N("attn_out_norm")(A(N("attn_norm")(x))) + N("mlp_out_norm")(M(N(m_in)(x)))
    return x + N("attn_out_norm")(A(x)) + N("mlp_out_norm")(M(x))


EXPECTED_NORMS = {
    ("pre", "serial", 1): {"attn_norm", "mlp_norm"},
    ("post", "serial", 1): {"attn_norm", "mlp_norm"},
    ("double", "serial", 1): {"attn_norm", "mlp_norm", "attn_out_norm", "mlp_out_norm"},
    ("nonresidual_post", "serial", 1): {"attn_out_norm", "mlp_out_norm"},
    ("pre", "parallel", 1): {"attn_norm"},
    ("pre", "parallel", 2): {"attn_norm", "mlp_norm"},
    ("post", "parallel", 1): {"attn_norm"},
    ("double", "parallel", 1): {"attn_norm", "attn_out_norm", "mlp_out_norm"},
    ("double", "parallel", 2): {"attn_norm", "mlp_norm", "attn_out_norm", "mlp_out_norm"},
    ("nonresidual_post", "parallel", 1): {"attn_out_norm", "mlp_out_norm"},
}


@pytest.mark.parametrize("position,block,n_norms", list(EXPECTED_NORMS))
def test_block_matches_equation(position, block, n_norms):
    blk, inp = _block_and_inputs(position, block, n_norms)
    present = {name for name, _ in blk.named_children() if "norm" in name}
    assert present == EXPECTED_NORMS[(position, block, n_norms)]
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    ref = _expected(blk, x, inp, position, block == "parallel", n_norms == 1)
    torch.testing.assert_close(blk(x, inp), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_layers", [1, 3])
def test_deepnorm_block_is_layernorm_of_alpha_x_plus_sublayer(n_layers):
    """x <- LN(alpha x + F(x)) per sublayer, alpha = (2N)^(1/4) written out by
    hand (DeepNet, decoder-only)."""
    c = ModelConfig(
        d_model=32,
        n_layers=n_layers,
        n_heads=4,
        norm="layernorm",
        norm_bias=True,
        norm_position="deepnorm",
        vocab_size=50,
    )
    model = randomize_(TransformerLM(c)).double()
    assert model.norm is None  # the last block already normed, as post-norm
    blk, inp = model.layers[-1], model.attention_inputs(torch.arange(6)[None])[0]
    assert {name for name, _ in blk.named_children() if "norm" in name} == {"attn_norm", "mlp_norm"}
    alpha = (2.0 * n_layers) ** 0.25

    def ln(norm, h):
        mean, var = h.mean(-1, keepdim=True), h.var(-1, unbiased=False, keepdim=True)
        return (h - mean) / torch.sqrt(var + c.norm_eps) * norm.weight + norm.bias

    x = torch.randn(1, 6, 32, dtype=torch.float64)
    h = ln(blk.attn_norm, alpha * x + blk.attn(x, inp))
    ref = ln(blk.mlp_norm, alpha * h + blk.mlp(h))
    # LayerNorm normalises in float32
    torch.testing.assert_close(blk(x, inp), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position", ["pre", "post", "double", "nonresidual_post", "deepnorm"])
def test_gau_block_has_one_sublayer_in_every_placement(position):
    c = ModelConfig(
        d_model=32,
        n_layers=2,
        n_heads=1,
        head_dim=16,
        block="gau",
        norm="layernorm",
        norm_bias=True,
        norm_position=position,
        vocab_size=50,
    )
    model = randomize_(TransformerLM(c)).double()
    blk, inp = model.layers[0], model.attention_inputs(torch.arange(6)[None])[0]
    assert blk.mlp is None
    present = {name for name, _ in blk.named_children() if "norm" in name}
    assert (
        present
        == {
            "pre": {"attn_norm"},
            "post": {"attn_norm"},
            "deepnorm": {"attn_norm"},
            "double": {"attn_norm", "attn_out_norm"},
            "nonresidual_post": {"attn_out_norm"},
        }[position]
    )
    G, N = (lambda h: blk.attn(h, inp)), (lambda name: getattr(blk, name))  # noqa: E731
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    ref = {
        "pre": lambda: x + G(N("attn_norm")(x)),
        "post": lambda: N("attn_norm")(x + G(x)),
        "deepnorm": lambda: N("attn_norm")(4**0.25 * x + G(x)),
        "double": lambda: x + N("attn_out_norm")(G(N("attn_norm")(x))),
        "nonresidual_post": lambda: x + N("attn_out_norm")(G(x)),
    }[position]()
    torch.testing.assert_close(blk(x, inp), ref, rtol=1e-12, atol=1e-12)


def test_deepnorm_refuses_the_parallel_block():
    with pytest.raises(
        ValueError, match="norm_position='deepnorm' is not allowed: only with block='serial'"
    ):
        ModelConfig(norm_position="deepnorm", block="parallel")


def test_post_norm_has_no_final_norm_and_pre_norm_has_one():
    assert TransformerLM(ModelConfig(norm_position="post")).norm is None
    for p in ("pre", "double", "nonresidual_post"):
        assert TransformerLM(ModelConfig(norm_position=p)).norm is not None


def test_prenorm_residual_is_identity_path():
    """d x_{l+1} / d x_l = I + J_F J_N for pre-norm: with the sublayers' outputs zeroed, the
    block is x."""
    blk, inp = _block_and_inputs("pre", "serial", 1)
    with torch.no_grad():
        blk.attn.o_proj.weight.zero_()
        blk.mlp.down_proj.weight.zero_()
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    torch.testing.assert_close(blk(x, inp), x)
