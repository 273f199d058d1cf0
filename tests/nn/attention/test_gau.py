"""The GAU (nn/attention/gau.py) against its formula written out in float64, cached decoding against
the full forward, its refusals, and its parameter / FLOP / cache costs against the built model."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from archlab import KVCache, ModelConfig, TransformerLM
from archlab.costs import flops_per_token, kv_cache_bytes, parameter_counts
from archlab.nn.positions.rope import apply_rope
from tests.conftest import randomize_

GAU = dict(
    block="gau", n_heads=1, d_model=32, head_dim=16, vocab_size=50, n_layers=2, max_seq_len=64
)


def reference_gau(gau, x: torch.Tensor, cfg: ModelConfig, inp) -> torch.Tensor:
    """U, V, Z = silu(x W); Q, K = Z gamma + beta; A = softmax(R(Q) R(K)^T / sqrt(s) [* log-n] +
    causal) (relu2: relu(.)^2 / n over the n visible keys); O = (U * A V) W_o, one (query, key) pair
    at a time in float64."""
    B, T, _ = x.shape
    e, s = cfg.d_ff, cfg.head_dim
    h = x.double() @ gau.uvz_proj.weight.double().T
    h = h + (gau.uvz_proj.bias.double() if gau.uvz_proj.bias is not None else 0)
    h = h * torch.sigmoid(h)
    u, v, z = h[..., :e], h[..., e : 2 * e], h[..., 2 * e :]
    q = z * gau.q_scale.double() + gau.q_offset.double()
    k = z * gau.k_scale.double() + gau.k_offset.double()
    if inp.rope is not None:
        cos, sin = inp.rope.cos.double()[:, :, 0], inp.rope.sin.double()[:, :, 0]  # (B, T, d_rot)
        q, k = apply_rope(q, cos, sin, cfg.rope.layout), apply_rope(k, cos, sin, cfg.rope.layout)
    out = torch.zeros(B, T, e, dtype=torch.float64)
    for b in range(B):
        for m in range(T):
            keys = range(max(0, m - cfg.sliding_window + 1) if cfg.sliding_window else 0, m + 1)
            logn = math.log(len(keys)) / math.log(cfg.max_seq_len) if cfg.attn_logn else 1.0
            scores = torch.stack([q[b, m] @ k[b, n] / math.sqrt(s) * logn for n in keys])
            a = (
                torch.relu(scores) ** 2 / len(keys)
                if cfg.gau.attention == "relu2"
                else torch.softmax(scores, 0)
            )
            out[b, m] = u[b, m] * sum(a[i] * v[b, n] for i, n in enumerate(keys))
    y = out @ gau.o_proj.weight.double().T
    return y + (gau.o_proj.bias.double() if gau.o_proj.bias is not None else 0)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        dict(bias=True),
        dict(attn_logn=True),
        dict(position="none"),
        dict(sliding_window=3, rope=dict(layout="interleaved", fraction=0.5)),
        dict(gau={"attention": "relu2"}),
        dict(gau={"attention": "relu2"}, sliding_window=3),
    ],
)
def test_gau_equals_its_formula_in_float64(fields):
    cfg = ModelConfig(**GAU, **fields)
    model = randomize_(TransformerLM(cfg), std=0.4).double()
    gau = model.layers[0].attn
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    inp = model.attention_inputs(torch.arange(7)[None].expand(2, 7))[0]
    # the log-n factor is computed in float32 (nn/attention/inputs.py)
    tol = 1e-6 if cfg.attn_logn else 1e-10
    torch.testing.assert_close(gau(x, inp), reference_gau(gau, x, cfg, inp), rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        dict(norm_position="deepnorm"),
        dict(sliding_window=4),
        dict(rope=dict(scaling={"kind": "rerope", "window": 4})),
        dict(attn_logn=True),
        dict(attn_softcap=3.0),
        dict(position="alibi"),
        dict(attn_impl="eager"),
        dict(gau={"attention": "relu2"}, sliding_window=4),
        dict(
            gau={"attention": "relu2"},
            rope=dict(scaling={"kind": "leaky_rerope", "window": 4, "factor": 2.0}),
        ),
    ],
)
def test_gau_decodes_with_the_cache_equal_to_the_full_forward(fields):
    cfg = ModelConfig(**GAU, **fields)
    model = randomize_(TransformerLM(cfg), std=0.3).double().eval()
    ids = torch.randint(0, 50, (2, 12))
    cache = KVCache.for_model(model, 2, 16)
    # keys s wide, values e wide
    assert cache.k[0].shape[-1] == 16 and cache.v[0].shape[-1] == cfg.d_ff
    steps = [model(ids[:, :5], cache=cache)] + [
        model(ids[:, i : i + 1], cache=cache) for i in range(5, 12)
    ]
    # the eager kernel's softmax and the log-n factor run in
    # float32 (functional.py, attention_inputs.py)
    torch.testing.assert_close(torch.cat(steps, 1), model(ids), rtol=1e-5, atol=1e-5)


def test_gau_defaults_and_wiring():
    cfg = ModelConfig(block="gau", n_heads=1, d_model=64)
    assert (cfg.head_dim, cfg.d_ff, cfg.final_norm) == (64, 128, True)  # s = d / 1 head, e = 2 d
    model = TransformerLM(cfg)
    names = {n for n, _ in model.named_parameters() if n.startswith("layers.0.")}
    assert names == {
        "layers.0.attn.uvz_proj.weight",
        "layers.0.attn.o_proj.weight",
        "layers.0.attn.q_scale",
        "layers.0.attn.q_offset",
        "layers.0.attn.k_scale",
        "layers.0.attn.k_offset",
        "layers.0.attn_norm.weight",
    }
    assert model.layers[0].attn.uvz_proj.weight.shape == (2 * 128 + 64, 64)
    gau = model.layers[1].attn
    assert torch.equal(gau.q_scale, torch.ones(64)) and torch.equal(gau.k_offset, torch.zeros(64))


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(n_heads=4), "n_heads=4 is not allowed: 1 with block='gau'"),
        (dict(n_heads=1, ffn="mlp"), "ffn='mlp' is not allowed: 'glu' with block='gau'"),
        (
            dict(n_heads=1, attn_kernel="favor"),
            "attn_kernel='favor' is not allowed: 'softmax' with block='gau'",
        ),
        (
            dict(n_heads=1, norm_position="deepnorm", block="parallel"),
            "norm_position='deepnorm' is not allowed",
        ),
        (
            dict(n_heads=1, gau={"attention": "relu2"}, attn_impl="sdpa"),
            "attn_impl='sdpa' is not allowed: auto or eager",
        ),
        (
            dict(n_heads=1, gau={"attention": "relu"}),
            "gau.attention='relu' is not allowed: one of softmax, relu2",
        ),
        (
            dict(block="serial", gau={"attention": "relu2"}),
            r"gau=GAU\(attention='relu2'\) is not allowed: only with "
            "block='gau'",
        ),
        (dict(n_heads=1, key_norm=True), "key_norm=True is not allowed: False with block='gau'"),
        (
            dict(n_heads=1, query_norm=True),
            "query_norm=True is not allowed: False with block='gau'",
        ),
        (
            dict(n_heads=1, cosine={}),
            r"cosine=Cosine\(scale='fixed'\) is not allowed: None with block='gau'",
        ),
        (
            dict(n_heads=1, qk_norm="rmsnorm"),
            "qk_norm='rmsnorm' is not allowed: 'none' with block='gau'",
        ),
    ],
)
def test_gau_refuses_what_cannot_work_in_one_line(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        ModelConfig(**{"block": "gau", **fields})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "fields", [{}, dict(bias=True, norm_position="deepnorm"), dict(tie_embeddings=True)]
)
def test_gau_costs_match_the_model(fields):
    cfg = ModelConfig(**{**GAU, **fields, "attn_impl": "eager"})
    model = TransformerLM(cfg)
    counts = parameter_counts(cfg)
    assert counts["total"] == model.num_parameters()
    assert counts["mlp"] == 0
    assert counts["attention"] == sum(
        p.numel() for n, p in model.named_parameters() if ".attn." in n
    )
    t = 24
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 50, (1, t)))
    assert counter.get_total_flops() == t * flops_per_token(cfg, t)["forward"]
    cache = KVCache.for_model(model, 3, 40)
    assert (
        cache.nbytes()
        == kv_cache_bytes(cfg, 40, "fp32", 3)["context"]
        == 3 * 40 * 2 * (16 + 64) * 4
    )


def test_gau_is_not_exported_to_hugging_face(tmp_path):
    from archlab.interop.hf import InteropError, save_hf

    with pytest.raises(
        InteropError, match="no Hugging Face family expresses this model.*block='gau'"
    ):
        save_hf(TransformerLM(ModelConfig(**GAU)), tmp_path / "out")


def test_a_gau_model_trains():
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(**GAU, norm_position="deepnorm"))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.randint(0, 50, (4, 33))
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1.0


def test_relu2_takes_the_plans_scores_and_never_softmax():
    """With a ReRoPE plan (its own scores) a relu2 GAU still runs relu2_attention, not
    the eager softmax."""
    from archlab.nn.attention.gau import relu2_attention

    cfg = ModelConfig(
        **GAU, gau={"attention": "relu2"}, rope=dict(scaling={"kind": "rerope", "window": 3})
    )
    gau = TransformerLM(cfg).layers[0].attn
    assert gau.kernel is relu2_attention and gau.scoring_kernel is relu2_attention
    soft = TransformerLM(ModelConfig(**GAU)).layers[0].attn
    assert soft.scoring_kernel is not relu2_attention
