"""The hand-written backward passes of nn/fast/ (ops, losses, attention) against autograd through
the plain formulas (float64, so any wrong term shows far above rounding), and the modules
`fused.install` puts them into against the plain modules (fused equals unfused), only where
installed, only on the measured devices."""

from __future__ import annotations

import pytest
import torch

from archlab.nn.fast import attention as fused_attention
from archlab.nn.fast import install as fused
from archlab.nn.fast.install import FusedGatedMLP, FusedRMSNorm
from archlab.nn.fast.losses import cross_entropy as fused_cross_entropy
from archlab.nn.ffn import GatedMLP
from archlab.nn.functional import cross_entropy
from archlab.nn.norms import RMSNorm


def _grads(out: torch.Tensor, inputs: list[torch.Tensor], seed: int = 0) -> list[torch.Tensor]:
    upstream = torch.randn(
        out.shape, dtype=out.dtype, generator=torch.Generator().manual_seed(seed)
    )
    return list(torch.autograd.grad(out, inputs, upstream if out.dim() else None))


def _rotate_reference(x: torch.Tensor, angles: torch.Tensor, layout: str) -> torch.Tensor:
    """The textbook rotation of each pair (a, b) by its angle: (a cos - b sin, b cos + a sin), then
    the pass-through dims; angles (B, T, 1, d_rot/2)."""
    d_rot = 2 * angles.size(-1)
    pairs = x[..., :d_rot].unflatten(-1, (2, -1) if layout == "half" else (-1, 2))
    a, b = pairs.unbind(-2 if layout == "half" else -1)
    cos, sin = angles.cos(), angles.sin()
    rotated = torch.stack(
        (a * cos - b * sin, b * cos + a * sin), dim=-2 if layout == "half" else -1
    )
    return torch.cat((rotated.flatten(-2), x[..., d_rot:]), dim=-1)


def installed(model: torch.nn.Module) -> torch.nn.Module:
    assert fused.install(model)
    return model


def test_modules_take_the_fused_path_in_training_and_agree_with_the_plain_one() -> None:
    """RMSNorm, SwiGLU and the loss: fused (grad recorded) equals plain (no grad / the plain module)
    to fp32 rounding; the plain modules never take a fused path."""
    torch.manual_seed(0)
    norm, mlp = RMSNorm(32, unit_offset=True), GatedMLP(32, 48, "silu", bias=False)
    with torch.no_grad():
        norm.weight.normal_()
    fast_norm, fast_mlp = RMSNorm(32, unit_offset=True), GatedMLP(32, 48, "silu", bias=False)
    fast_norm.load_state_dict(norm.state_dict())
    fast_mlp.load_state_dict(mlp.state_dict())
    fast_norm.__class__, fast_mlp.__class__ = FusedRMSNorm, FusedGatedMLP
    x = torch.randn(2, 6, 32, requires_grad=True)
    for module, fast in ((norm, fast_norm), (mlp, fast_mlp)):
        with torch.no_grad():
            plain = module(x)
        torch.testing.assert_close(fast(x), plain, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(fast(x), module(x), rtol=1e-6, atol=1e-6)
    logits = torch.randn(2, 6, 50, requires_grad=True)
    targets = torch.randint(0, 50, (2, 6))
    torch.testing.assert_close(
        fused_cross_entropy(logits.flatten(0, 1), targets.flatten()), cross_entropy(logits, targets)
    )
    assert "_RMSNormBackward" in _graph(fast_norm(x)) and "_SiluMulBackward" in _graph(fast_mlp(x))
    assert "_RMSNormBackward" not in _graph(norm(x)) and "_SiluMulBackward" not in _graph(mlp(x))
    # the reference is plain
    assert "_CrossEntropyBackward" not in _graph(cross_entropy(logits, targets))


def test_install_reaches_every_module_it_speeds_up_and_no_other() -> None:
    """Exact classes only: a LayerNorm (an RMSNorm subclass), a GELU GLU's activation and a
    softcapped layer's eager kernel stay plain; the model and its attention layers are swapped;
    a second install changes nothing; a model on a device the kernels were not measured on
    is left alone."""
    from archlab import TransformerLM, build_preset
    from archlab.nn.attention.attention import Attention
    from archlab.nn.config.choices import ATTENTION_KERNELS
    from archlab.nn.norms import LayerNorm

    model = installed(TransformerLM(build_preset("llama", "tiny", qk_norm="layernorm")))
    assert type(model) is fused.FusedTransformerLM and isinstance(model, TransformerLM)
    kinds = {type(m) for m in model.modules()}
    assert {fused.FusedRMSNorm, FusedGatedMLP, fused.FusedAttention, LayerNorm} <= kinds
    assert not {RMSNorm, GatedMLP, Attention, TransformerLM} & kinds
    assert all(
        isinstance(m.kernel, fused.CausalAttentionKernel)
        for m in model.modules()
        if isinstance(m, Attention)
    )
    kernel = model.layers[0].attn.kernel
    assert fused.install(model) and model.layers[0].attn.kernel is kernel  # not wrapped twice
    capped = installed(TransformerLM(build_preset("gemma2", "tiny")))
    assert all(
        m.kernel is ATTENTION_KERNELS["eager"] for m in capped.modules() if isinstance(m, Attention)
    )
    on_meta = TransformerLM(build_preset("llama", "tiny")).to("meta")
    assert not fused.install(on_meta) and type(on_meta) is TransformerLM


@pytest.mark.parametrize(
    "fields", [dict(), dict(rope=dict(layout="interleaved", fraction=0.5), n_kv_heads=1)]
)
def test_attention_takes_rope_qkv_in_training_and_agrees_with_the_plain_path(fields: dict) -> None:
    """An installed model, whose attention runs rope_qkv, equals a plain one with the same weights
    (split + apply_rope through autograd), in loss and every gradient; the fast path is taken only
    when installed and with autograd recording."""
    from archlab import TransformerLM, build_preset

    torch.manual_seed(0)
    config = build_preset(
        "llama", "tiny", d_model=32, n_layers=2, n_heads=4, vocab_size=64, **fields
    )
    plain = TransformerLM(config)
    fast = TransformerLM(config)
    fast.load_state_dict(plain.state_dict())
    installed(fast)
    x, y = torch.randint(0, 64, (2, 12)), torch.randint(0, 64, (2, 12))
    losses = [cross_entropy(model(x), y) for model in (fast, plain)]
    assert "_RopeQKVBackward" in _graph(losses[0]) and "_RopeQKVBackward" not in _graph(losses[1])
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-6)
    for loss in losses:
        loss.backward()
    for (name, a), b in zip(fast.named_parameters(), plain.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6, msg=name)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), plain(x))


@pytest.mark.parametrize(
    "fields",
    [
        dict(qk_norm="rmsnorm"),
        dict(key_norm=True),
        dict(query_norm=True),
        dict(cosine={}),
        dict(rope=dict(scaling=dict(kind="rerope", window=4))),
    ],
)
def test_attention_keeps_the_plain_path_where_rope_qkv_does_not_apply(fields: dict) -> None:
    from archlab import TransformerLM, build_preset

    config = build_preset(
        "llama", "tiny", d_model=32, n_layers=1, n_heads=4, vocab_size=64, **fields
    )
    model = installed(TransformerLM(config))
    loss = cross_entropy(model(torch.randint(0, 64, (2, 12))), torch.randint(0, 64, (2, 12)))
    assert "_RopeQKVBackward" not in _graph(loss)


def _head_loss_reference(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    targets: torch.Tensor,
    cap: float | None,
    coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean CE and coef * mean log(Z)^2 over scored rows, written out in the inputs' dtype."""
    logits = x @ w.t() + (0 if b is None else b)
    logits = logits if cap is None else cap * torch.tanh(logits / cap)
    keep = targets != -100
    lse = logits.exp().sum(-1).log()[keep]
    ce = (lse - logits[keep].gather(1, targets[keep, None]).squeeze(1)).mean()
    return ce, coef * lse.square().mean()


@pytest.mark.parametrize(
    "fields", [dict(), dict(final_softcap=3.0, tie_embeddings=True, lm_head_bias=True)]
)
def test_model_loss_takes_the_chunked_head_in_training_and_agrees_with_the_logits(
    fields: dict,
) -> None:
    """forward(targets=...) with grad: linear_cross_entropy, equal to CE + z of the model's
    own logits (float64 reference) in value and every gradient; without grad: the logits
    path, same values."""
    from archlab import TransformerLM, build_preset

    torch.manual_seed(0)
    config = build_preset(
        "llama", "tiny", d_model=32, n_layers=1, n_heads=2, vocab_size=64, **fields
    )
    model = TransformerLM(config)
    x, y = torch.randint(0, 64, (2, 12)), torch.randint(0, 64, (2, 12))
    # plain until installed
    assert "_LinearCrossEntropyBackward" not in _graph(model(x, targets=y).loss)
    installed(model)
    out = model(x, targets=y, z_loss_coef=0.01)
    assert "_LinearCrossEntropyBackward" in _graph(out.loss)
    out.loss.backward()
    got = {name: p.grad for name, p in model.named_parameters()}
    model.zero_grad()
    ref = model.double()
    logits = ref(x)
    lse = logits.logsumexp(-1)
    ce = (lse - logits.gather(-1, y[..., None]).squeeze(-1)).mean()
    z = 0.01 * lse.square().mean()
    torch.testing.assert_close(out.ce.double(), ce, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out.z.double(), z, rtol=1e-6, atol=1e-8)
    (ce + z).backward()
    for name, p in ref.named_parameters():
        torch.testing.assert_close(got[name].double(), p.grad, rtol=1e-4, atol=1e-6, msg=name)
    with torch.no_grad():
        plain = model.float()(x, targets=y, z_loss_coef=0.01)
    torch.testing.assert_close(plain.loss, out.loss, rtol=1e-6, atol=1e-6)


def _graph(out: torch.Tensor) -> set[str]:
    """Names of the autograd nodes behind `out`."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:  # by node, not by name: every branch is walked
            seen.add(node)
            todo.extend(n for n, _ in node.next_functions)
    return {type(node).__name__ for node in seen}


def test_compiled_training_step_equals_the_eager_one() -> None:
    """torch.compile takes the plain formulas (Inductor fuses them); eager takes the hand-written
    backward. Loss and every gradient agree to fp32 rounding."""
    from archlab import TransformerLM, build_preset

    torch.manual_seed(0)
    config = build_preset(
        "llama", "tiny", d_model=32, n_layers=1, n_heads=2, vocab_size=64, final_softcap=5.0
    )
    eager = installed(TransformerLM(config))
    compiled = installed(TransformerLM(config))
    compiled.load_state_dict(eager.state_dict())
    compiled.compile()
    x, y = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    losses = {
        "logits": lambda model: cross_entropy(model(x), y),
        # eager: the chunked head; compiled: the logits
        "head loss": lambda model: model(x, targets=y).loss,
        "head loss + z": lambda model: model(x, targets=y, z_loss_coef=0.01).loss,
    }
    for what, loss_of in losses.items():
        got = []
        for model in (eager, compiled):
            model.zero_grad(set_to_none=True)
            loss = loss_of(model)
            loss.backward()
            got.append(loss)
        torch.testing.assert_close(got[1], got[0], rtol=1e-5, atol=1e-6, msg=what)
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=f"{what}: {name}")


def _bf16(t: torch.Tensor) -> torch.Tensor:
    """t rounded to bf16, in float64: what a bf16 GEMM reads."""
    return t.detach().bfloat16().double()


def test_bf16_autocast_training_takes_the_fused_rope_and_head_and_agrees_with_the_plain_path() -> (
    None
):
    """Under bf16 autocast the model rotates q and k with `rope_qkv` (bf16 tables) and computes the
    loss with the chunked head in bf16; the same weights in a plain model (split + apply_rope, the
    (B, T, V) logits) give the same loss and gradients to bf16 rounding."""
    from archlab import TransformerLM, build_preset

    torch.manual_seed(0)
    config = build_preset("llama", "tiny", d_model=64, n_layers=2, n_heads=4, vocab_size=96)
    fast, plain = TransformerLM(config), TransformerLM(config)
    plain.load_state_dict(fast.state_dict())
    installed(fast)
    x, y = torch.randint(0, 96, (2, 24)), torch.randint(0, 96, (2, 24))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = fast(x, targets=y).loss
        want = cross_entropy(plain(x), y)  # logits path: bf16 logits, float32 softmax
    nodes = _graph(got)
    assert {"_RopeQKVBackward", "_LinearCrossEntropyBackward"} <= nodes
    assert not {"_RopeQKVBackward", "_LinearCrossEntropyBackward"} & _graph(want)
    torch.testing.assert_close(got, want, rtol=5e-3, atol=5e-3)
    got.backward()
    want.backward()
    for (name, a), b in zip(fast.named_parameters(), plain.parameters()):
        assert a.grad.dtype == torch.float32, name
        scale = float(b.grad.abs().max())
        torch.testing.assert_close(a.grad, b.grad, rtol=5e-2, atol=5e-2 * scale, msg=name)


def test_rope_plan_casts_its_tables_once_per_dtype() -> None:
    from archlab.nn.positions.rope import RopePositions

    cos, sin = torch.randn(1, 5, 1, 8), torch.randn(1, 5, 1, 8)
    plan = RopePositions(cos, sin, "half")
    assert plan.tables(torch.float32) == (cos, sin)
    first = plan.tables(torch.bfloat16)
    assert first[0].dtype == torch.bfloat16 and torch.equal(first[0], cos.bfloat16())
    assert torch.equal(first[1], sin.bfloat16())
    assert plan.tables(torch.bfloat16)[0] is first[0]  # every layer of the forward shares one cast


def _attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention written out in float64."""
    T, S = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def test_bf16_training_attention_takes_causal_attention_only_where_it_applies() -> None:
    """bf16 autocast training with a causal mask of <= 512 tokens runs `causal_attention`; float32,
    inference, longer sequences and attention with an additive bias keep SDPA. The bf16 loss and
    gradients stay those of the float32 model to bf16 rounding."""
    from archlab import TransformerLM, build_preset

    torch.manual_seed(0)
    config = build_preset(
        "llama", "tiny", d_model=64, n_layers=2, n_heads=4, vocab_size=96, max_seq_len=520
    )
    model = installed(TransformerLM(config))
    x, y = torch.randint(0, 96, (2, 24)), torch.randint(0, 96, (2, 24))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = model(x, targets=y).loss
        longer = model(torch.randint(0, 96, (1, 513)), targets=torch.randint(0, 96, (1, 513))).loss
    assert "_CausalAttentionBackward" in _graph(bf16)
    assert "_CausalAttentionBackward" not in _graph(longer)
    fp32 = model(x, targets=y).loss
    assert "_CausalAttentionBackward" not in _graph(fp32)
    torch.testing.assert_close(bf16, fp32, rtol=2e-2, atol=2e-2)
    bf16_grads = torch.autograd.grad(bf16, list(model.parameters()))
    fp32_grads = torch.autograd.grad(fp32, list(model.parameters()))
    for (name, _), a, b in zip(model.named_parameters(), bf16_grads, fp32_grads):
        error = float((a - b).norm() / b.norm())
        assert error < 5e-2, (name, error)
    q = torch.randn(1, 2, 8, 4, dtype=torch.bfloat16, requires_grad=True)
    assert fused_attention.use_causal_attention(q, q)
    with torch.no_grad():
        assert not fused_attention.use_causal_attention(q, q)  # inference keeps SDPA
    alibi = installed(
        TransformerLM(
            build_preset(
                "llama", "tiny", d_model=64, n_layers=1, n_heads=4, vocab_size=96, position="alibi"
            )
        )
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert "_CausalAttentionBackward" not in _graph(alibi(x, targets=y).loss)
