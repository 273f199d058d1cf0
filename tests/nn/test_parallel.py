"""The fused parallel block (nn/parallel.py): its two GEMMs equal the unfused block's formula in
every layout, give the same gradients, decode through the cache as the full forward does, and run
apart in inference and for wrapped projections."""

import pytest
import torch

from archlab import KVCache, ModelConfig, TransformerLM
from archlab.nn import block as block_module
from tests.conftest import randomize_
from tests.nn.test_block import _expected

# ------------------------------------------------------------------------- the fused parallel block
# (placement, parallel_norms) -> (one input GEMM, one output GEMM) without dropout
FUSED_LAYOUTS = {
    ("pre", 1): (True, True),
    ("pre", 2): (False, True),
    ("post", 1): (True, True),
    ("double", 1): (True, False),
    ("double", 2): (False, False),
    ("nonresidual_post", 1): (True, False),
}
VARIANTS = {  # GQA and biases, GLU and not
    "swiglu-mha-nobias": dict(ffn="glu", activation="silu", n_kv_heads=4, bias=False),
    "gelu-gqa-bias": dict(ffn="mlp", activation="gelu", n_kv_heads=2, bias=True),
    "geglu-mqa-mlpbias": dict(
        ffn="glu", activation="gelu", n_kv_heads=1, attn_bias=False, mlp_bias=True
    ),
    "relu-gqa-attnbias": dict(
        ffn="mlp", activation="relu", n_kv_heads=2, attn_bias=True, mlp_bias=False
    ),
}
B, T = 2, 40


def _parallel_model(position: str, n_norms: int, fused: bool = True, **fields) -> TransformerLM:
    torch.manual_seed(0)
    c = ModelConfig(
        d_model=32,
        n_layers=1,
        n_heads=4,
        norm="layernorm",
        norm_bias=True,
        norm_position=position,
        block="parallel",
        parallel_norms=n_norms,
        parallel_fused=fused,
        position="rope",
        vocab_size=50,
        max_seq_len=64,
        **fields,
    )
    return randomize_(TransformerLM(c)).double()


def _projection_calls(blk) -> dict[str, int]:
    """Calls of each projection's own forward during a block call (a fused GEMM calls
    none of them)."""
    calls = {}
    for name in ("attn.qkv_proj", "attn.o_proj", "mlp.in_proj", "mlp.down_proj"):
        module = blk.get_submodule(name) if name != "mlp.in_proj" else blk.mlp.in_proj
        calls[name] = 0
        module.register_forward_hook(lambda *a, name=name: calls.__setitem__(name, calls[name] + 1))
    return calls


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("position,n_norms", list(FUSED_LAYOUTS))
def test_fused_parallel_block_equals_the_unfused_formula(position, n_norms, variant):
    model = _parallel_model(position, n_norms, **VARIANTS[variant])
    blk, inp = model.layers[0], model.attention_inputs(torch.arange(T)[None])[0]
    fuse_in, fuse_out = FUSED_LAYOUTS[(position, n_norms)]
    assert (blk.fuse_in, blk.fuse_out) == (fuse_in, fuse_out)
    x = torch.randn(B, T, 32, dtype=torch.float64)
    calls = _projection_calls(blk)
    got = blk(x, inp)
    assert calls == {
        "attn.qkv_proj": not fuse_in,
        "mlp.in_proj": not fuse_in,
        "attn.o_proj": not fuse_out,
        "mlp.down_proj": not fuse_out,
    }  # the fused GEMMs really ran
    # separate A(h) and M(h): the plain formula
    ref = _expected(blk, x, inp, position, True, n_norms == 1)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant", ["swiglu-mha-nobias", "gelu-gqa-bias"])
def test_fused_training_step_gives_the_unfused_gradients(variant):
    """The training path (hand-written RoPE and SwiGLU backward passes on slices of the fused GEMM)
    gives the unfused block's loss and gradients, and both blocks hold the same parameters under
    the same names."""
    fused, apart = (
        _parallel_model("pre", 1, **VARIANTS[variant]),
        _parallel_model("pre", 1, False, **VARIANTS[variant]),
    )
    apart.load_state_dict(fused.state_dict())
    assert list(fused.state_dict()) == list(apart.state_dict())
    assert fused.num_parameters() == apart.num_parameters()
    ids = torch.randint(50, (B, T + 1), generator=torch.Generator().manual_seed(2))
    losses = [m(ids[:, :-1], targets=ids[:, 1:]).loss for m in (fused, apart)]
    for loss in losses:
        loss.backward()
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-12, atol=1e-12)
    for (name, p), q in zip(fused.named_parameters(), apart.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("position,n_norms", [("pre", 1), ("pre", 2), ("nonresidual_post", 1)])
def test_fused_parallel_cached_decoding_equals_the_full_forward(monkeypatch, position, n_norms):
    """Prefill and one-token steps through a KVCache, every call fused (in inference too,
    for the test)."""
    monkeypatch.setattr(block_module, "fusing", lambda attn, mlp: True)
    model = _parallel_model(position, n_norms, **VARIANTS["geglu-mqa-mlpbias"]).eval()
    blk = model.layers[0]
    ids = torch.randint(50, (B, 12), generator=torch.Generator().manual_seed(3))
    calls = _projection_calls(blk)
    with torch.no_grad():
        full = model(ids)
        cache = KVCache.for_model(model, B, 12)
        steps = [model(ids[:, :5], cache=cache)] + [
            model(ids[:, t : t + 1], cache=cache) for t in range(5, 12)
        ]
    # full + prefill + 7 steps, all fused
    assert calls["attn.qkv_proj"] == (0 if blk.fuse_in else 9)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)


def test_inference_and_wrapped_projections_run_apart():
    """Without autograd (decoding, evaluation) or with a projection that is not a plain Linear (a
    LoRA wrapper) the block runs the projections' own forwards: same values."""
    model = _parallel_model("pre", 1, **VARIANTS["swiglu-mha-nobias"])
    blk = model.layers[0]
    calls = _projection_calls(blk)
    x = torch.randn(B, T, 32, dtype=torch.float64)
    inp = model.attention_inputs(torch.arange(T)[None])[0]
    with torch.no_grad():
        blk(x, inp)
    assert set(calls.values()) == {1}

    class Wrapped(torch.nn.Linear):
        pass

    wrapped = Wrapped(32, blk.attn.qkv_proj.out_features, bias=False).double()
    wrapped.load_state_dict(blk.attn.qkv_proj.state_dict())
    blk.attn.qkv_proj = wrapped
    calls = _projection_calls(blk)
    got = blk(x, inp)
    assert set(calls.values()) == {1}
    torch.testing.assert_close(
        got, _expected(blk, x, inp, "pre", True, True), rtol=1e-12, atol=1e-12
    )
