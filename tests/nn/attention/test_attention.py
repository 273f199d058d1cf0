"""Attention against a per-head float64 reference; SDPA equals eager; GQA/MQA relate to MHA."""

import math

import pytest
import torch

from archlab import ModelConfig, TransformerLM
from archlab.nn.positions.rope import apply_rope
from tests.conftest import randomize_


def reference_attention(attn, x, inp, cfg: ModelConfig) -> torch.Tensor:
    """Loop over heads in float64; query head h reads K/V head h // (H / K)."""
    B, T, D = x.shape
    H, K, Dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    W, b = attn.qkv_proj.weight.double(), attn.qkv_proj.bias
    qkv = x.double() @ W.T + (b.double() if b is not None else 0)
    q, k, v = qkv.split([H * Dh, K * Dh, K * Dh], -1)
    if cfg.qk_norm != "none" and cfg.qk_norm_scope == "proj":
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k, v = (t.view(B, T, -1, Dh).transpose(1, 2) for t in (q, k, v))
    if cfg.qk_norm != "none" and cfg.qk_norm_scope == "head":
        q, k = attn.q_norm(q), attn.k_norm(k)
    if cfg.key_norm:
        k = k / k.norm(dim=-1, keepdim=True)
    if inp.rope is not None:
        # (B, 1, T, d) for (B, H, T, Dh)
        cos, sin = (t.double().transpose(1, 2) for t in (inp.rope.cos, inp.rope.sin))
        q, k = apply_rope(q, cos, sin, cfg.rope.layout), apply_rope(k, cos, sin, cfg.rope.layout)
    scale = cfg.attn_scale or (1.0 if cfg.key_norm else 1 / math.sqrt(Dh))
    outs = []
    for h in range(H):
        g = h // (H // K)
        s = q[:, h] @ k[:, g].transpose(-1, -2) * scale  # (B, T, T)
        if cfg.attn_softcap:
            s = cfg.attn_softcap * torch.tanh(s / cfg.attn_softcap)
        if inp.bias is not None:
            s = s + inp.bias[0, h].double()
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        visible = j <= i
        if cfg.sliding_window and cfg.layer_is_sliding(attn.layer_idx):
            visible &= i - j < cfg.sliding_window
        s = s.masked_fill(~visible, float("-inf"))
        outs.append(torch.softmax(s, -1) @ v[:, g])
    y = torch.cat(outs, -1)  # (B, T, H*Dh), heads in order
    Wo, bo = attn.o_proj.weight.double(), attn.o_proj.bias
    return y @ Wo.T + (bo.double() if bo is not None else 0)


VARIANTS = {
    "mha": {},
    "gqa": dict(n_kv_heads=2),
    "mqa": dict(n_kv_heads=1),
    "qk_rms_head": dict(qk_norm="rmsnorm"),
    "qk_ln_proj": dict(qk_norm="layernorm", qk_norm_scope="proj", n_kv_heads=2),
    "key_norm": dict(key_norm=True),
    "softcap": dict(attn_softcap=5.0, attn_scale=0.7),
    "window": dict(sliding_window=3, window_pattern="S"),
    "alibi": dict(position="alibi"),
    "relative": dict(position="relative", relative_buckets=8, relative_max_distance=16),
    "partial_interleaved": dict(rope=dict(layout="interleaved", fraction=0.5)),
    "bias": dict(bias=True),
}


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("impl", ["auto", "eager"])
def test_attention_matches_reference(name, impl):
    cfg = ModelConfig(
        d_model=32, n_heads=4, n_layers=1, vocab_size=40, attn_impl=impl, **VARIANTS[name]
    )
    model = randomize_(TransformerLM(cfg), std=0.5)
    attn = model.layers[0].attn
    x = torch.randn(2, 7, 32)
    inp = model.attention_inputs(torch.arange(7)[None].expand(2, 7))[0]
    torch.testing.assert_close(
        attn(x, inp).double(), reference_attention(attn, x, inp, cfg), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("name", [n for n in VARIANTS if n != "softcap"])
def test_sdpa_equals_eager(name):
    kw = dict(d_model=32, n_heads=4, n_layers=2, vocab_size=40, **VARIANTS[name])
    fast = randomize_(TransformerLM(ModelConfig(attn_impl="sdpa", **kw)), std=0.3)
    eager = TransformerLM(ModelConfig(attn_impl="eager", **kw))
    eager.load_state_dict(fast.state_dict())
    ids = torch.randint(0, 40, (2, 9))
    torch.testing.assert_close(fast(ids), eager(ids), rtol=1e-5, atol=1e-5)


def _mha_from_grouped(grouped: TransformerLM) -> TransformerLM:
    """An MHA model whose K/V heads are copies of the grouped model's, head h taking group
    h // r."""
    c = grouped.config
    mha = TransformerLM(ModelConfig(**{**c.to_dict(), "n_kv_heads": c.n_heads}))
    sd = grouped.state_dict()
    H, K, Dh, r = c.n_heads, c.n_kv_heads, c.head_dim, c.n_heads // c.n_kv_heads
    for i in range(c.n_layers):
        key = f"layers.{i}.attn.qkv_proj.weight"
        q, k, v = sd[key].split([H * Dh, K * Dh, K * Dh])
        expand = lambda t: t.view(K, 1, Dh, -1).expand(K, r, Dh, t.shape[-1]).reshape(H * Dh, -1)  # noqa: E731
        sd[key] = torch.cat([q, expand(k), expand(v)])
    mha.load_state_dict(sd)
    return mha


@pytest.mark.parametrize("n_kv", [1, 2])
def test_grouped_attention_equals_mha_with_shared_heads(n_kv):
    grouped = randomize_(
        TransformerLM(ModelConfig(d_model=32, n_heads=4, n_kv_heads=n_kv, vocab_size=40)), 0.3
    )
    mha = _mha_from_grouped(grouped)
    ids = torch.randint(0, 40, (2, 8))
    torch.testing.assert_close(grouped(ids), mha(ids), rtol=1e-5, atol=1e-5)
    kv_rows = grouped.layers[0].attn.qkv_proj.weight.shape[0] - 32
    # MQA keeps one K and one V head: fewer parameters, smaller cache
    assert kv_rows == 2 * n_kv * 8


def test_gqa_with_all_kv_heads_is_mha():
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=4, n_layers=1, vocab_size=40)
    # n_kv_heads=None resolves to H
    assert cfg == ModelConfig(d_model=32, n_heads=4, n_layers=1, vocab_size=40)
    model = randomize_(TransformerLM(cfg), 0.5)
    attn = model.layers[0].attn
    x = torch.randn(1, 5, 32)
    inp = model.attention_inputs(torch.arange(5)[None])[0]
    torch.testing.assert_close(
        attn(x, inp).double(), reference_attention(attn, x, inp, cfg), rtol=1e-4, atol=1e-5
    )


def test_key_norm_scores_are_bounded_by_query_norm():
    """Under KeyNorm with scale 1, |score| = |q . k/|k|| <= |q| whatever the keys' size."""
    cfg = ModelConfig(
        d_model=32,
        n_heads=4,
        n_layers=1,
        vocab_size=40,
        key_norm=True,
        position="none",
        attn_impl="eager",
    )
    assert cfg.resolved_attn_scale == 1.0
    model = randomize_(TransformerLM(cfg), 0.5)
    attn = model.layers[0].attn
    x = torch.randn(1, 6, 32) * 100
    q, k, _ = attn.project(x, model.attention_inputs(torch.arange(6)[None])[0])
    assert torch.allclose(k.norm(dim=-1), torch.ones(1, 4, 6), atol=1e-5)
    assert ((q @ k.transpose(-1, -2)).abs() <= q.norm(dim=-1, keepdim=True) + 1e-4).all()


# ----------------------------------------------------- QueryNorm and scaled cosine attention (9859)
def _explicit_normed_attention(attn, x, cfg: ModelConfig, inp) -> torch.Tensor:
    """Queries (and with cosine, keys) over their L2 norm, then RoPE, then score(m, n) = lambda q_m
    . k_n with lambda = 1 (QueryNorm), 4 log(N/2) (fixed cosine) or 4 log(m + 1) (dynamic cosine),
    written per pair in float64; softmax over n <= m, times v, through o_proj."""
    B, T, _ = x.shape
    H, Dh = cfg.n_heads, cfg.head_dim
    q, k, v = (
        (x.double() @ attn.qkv_proj.weight.double().T).view(B, T, 3 * H, Dh).split([H, H, H], dim=2)
    )
    q = q / q.norm(dim=-1, keepdim=True)
    if cfg.cosine is not None:
        k = k / k.norm(dim=-1, keepdim=True)
    cos, sin = inp.rope.cos.double(), inp.rope.sin.double()  # (B, T, 1, d_rot)
    q, k = apply_rope(q, cos, sin, cfg.rope.layout), apply_rope(k, cos, sin, cfg.rope.layout)
    y = torch.zeros(B, T, H, Dh, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for m in range(T):
                lam = 1.0
                if cfg.cosine is not None:
                    lam = 4 * math.log(m + 1 if cfg.dynamic_cosine else cfg.max_seq_len / 2)
                scores = torch.stack([lam * (q[b, m, h] @ k[b, n, h]) for n in range(m + 1)])
                y[b, m, h] = torch.softmax(scores, 0) @ v[b, : m + 1, h]
    return y.flatten(2) @ attn.o_proj.weight.double().T


@pytest.mark.parametrize(
    "fields", [dict(query_norm=True), dict(cosine={}), dict(cosine={"scale": "dynamic"})]
)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_query_norm_and_cosine_attention_equal_their_formulas(fields, impl):
    cfg = ModelConfig(
        d_model=32, n_heads=4, n_layers=1, vocab_size=40, max_seq_len=16, attn_impl=impl, **fields
    )
    model = randomize_(TransformerLM(cfg), std=0.5).double()
    attn = model.layers[0].attn
    # the fused split + RoPE (nn/fast/install.py) must not skip the normalisation
    assert not attn.plain_qk
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    inp = model.attention_inputs(torch.arange(7)[None].expand(2, 7))[0]
    # eager normalises in float32 (functional.attention_from_scores); sdpa stays float64
    tol = 1e-5 if impl == "eager" or cfg.dynamic_cosine else 1e-10  # log n is float32 too
    torch.testing.assert_close(
        attn(x, inp), _explicit_normed_attention(attn, x, cfg, inp), rtol=tol, atol=tol
    )


def test_query_norm_normalises_queries_only_and_cosine_both():
    x = torch.randn(1, 6, 32) * 10
    for fields, unit_q, unit_k in [
        (dict(query_norm=True), True, False),
        (dict(cosine={}), True, True),
        (dict(key_norm=True), False, True),
    ]:
        model = randomize_(
            TransformerLM(
                ModelConfig(d_model=32, n_heads=4, n_layers=1, position="none", **fields)
            ),
            0.5,
        )
        q, k, _ = model.layers[0].attn.project(x, model.attention_inputs(torch.arange(6)[None])[0])
        assert torch.allclose(q.norm(dim=-1), torch.ones(1, 4, 6), atol=1e-5) == unit_q, fields
        assert torch.allclose(k.norm(dim=-1), torch.ones(1, 4, 6), atol=1e-5) == unit_k, fields
    assert ModelConfig(query_norm=True).resolved_attn_scale == 1.0
    assert ModelConfig(cosine={}, max_seq_len=512).resolved_attn_scale == pytest.approx(
        4 * math.log(256)
    )
    # an explicit lambda wins
    assert ModelConfig(cosine={}, attn_scale=3.0).resolved_attn_scale == 3.0


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            dict(cosine={}, key_norm=True),
            r"cosine=Cosine\(scale='fixed'\) is not allowed: None with key_norm",
        ),
        (
            dict(cosine={}, qk_norm="rmsnorm"),
            r"cosine=Cosine\(scale='fixed'\) is not allowed: None with key_norm, "
            "query_norm or qk_norm",
        ),
        (dict(query_norm=True, key_norm=True), "query_norm=True is not allowed: not with key_norm"),
        (dict(query_norm=True, qk_norm="layernorm"), "query_norm=True is not allowed"),
        (
            dict(cosine={"scale": "dynamic"}, query_norm=True),
            r"cosine=Cosine\(scale='dynamic'\) is not allowed: None "
            "with key_norm, query_norm",
        ),
        (
            dict(cosine={"scale": "per_head"}),
            "cosine.scale='per_head' is not allowed: one of fixed",
        ),
        (dict(cosine={"scale": "dynamic"}, attn_logn=True), "attn_logn=True is not allowed"),
        (
            dict(cosine={}, max_seq_len=2),
            r"None with max_seq_len < 3 \(lambda = 4 log\(max_seq_len / 2\) > 0\)",
        ),
        (dict(cosine={"scale": "dynamic"}, attn_scale=3.0), "attn_scale=3.0 is not allowed: None"),
    ],
)
def test_normed_attention_refuses_conflicts_in_one_line(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        ModelConfig(**fields)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        dict(n_kv_heads=2),
        dict(rope=dict(scaling={"kind": "rerope", "window": 3})),
        dict(attn_logn=True),
        dict(rope=dict(scaling={"kind": "dynamic", "factor": 2.0, "original_max_seq_len": 4})),
        dict(block="gau", n_heads=1),
        dict(block="gau", n_heads=1, gau={"attention": "relu2"}),
    ],
)
def test_scores_are_exactly_what_the_kernel_scores(
    fields: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One score path: `scores` (the lab's largest-logit measure reads it) is bit for bit what the
    eager kernel (or a GAU's relu2 kernel) computed in `core` for the same projected q and k."""
    from archlab.nn.attention import gau
    from archlab.nn.attention import kernels as attention_kernels

    fields = {
        "d_model": 32,
        "n_heads": 4,
        "n_layers": 1,
        "max_seq_len": 16,
        "attn_impl": "eager",
        **fields,
    }
    model = randomize_(TransformerLM(ModelConfig(**fields)), 0.5).eval()
    layer, seen = model.layers[0].attn, []
    real = attention_kernels.attention_scores
    monkeypatch.setattr(
        attention_kernels, "attention_scores", lambda *a: seen.append(real(*a)) or seen[-1]
    )
    monkeypatch.setattr(gau, "attention_scores", attention_kernels.attention_scores)
    inp = model.attention_inputs(torch.arange(9)[None])[0]
    *_, q, k, v = layer.project(torch.randn(1, 9, 32), inp)
    with torch.no_grad():
        layer.core(q, k, v, inp, None)
        # the kernel scored through it
        assert len(seen) == 1 and torch.equal(layer.scores(q, k, inp), seen[0])
    assert seen[0].shape == (1, layer.n_heads if hasattr(layer, "n_heads") else 1, 9, 9)


@pytest.mark.parametrize(
    ("fields", "impl"),
    [
        (dict(), "sdpa"),  # auto, no softcap
        (dict(attn_softcap=30.0), "eager"),  # auto: the softcap must see the scores
        (dict(attn_impl="eager"), "eager"),
        (dict(attn_impl="sdpa"), "sdpa"),
        (dict(block="gau", n_heads=1, attn_softcap=30.0), "eager"),
        (dict(block="gau", n_heads=1), "sdpa"),
    ],
)
def test_the_score_kernel_auto_picks_reaches_attention_and_gau(fields: dict, impl: str) -> None:
    from archlab.nn.attention.kernels import eager, sdpa

    fields = {"n_heads": 4, **fields}
    cfg = ModelConfig(d_model=32, n_layers=1, vocab_size=64, max_seq_len=16, **fields)
    assert cfg.resolved_attn_impl == impl
    layer = TransformerLM(cfg).layers[0]
    assert layer.attn.kernel is {"sdpa": sdpa, "eager": eager}[impl]
