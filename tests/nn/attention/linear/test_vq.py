"""Transformer-VQ and soft VQ against dense float64 attention over the quantised keys."""

import pytest
import torch

from archlab.nn.attention.linear.codebook import hard_assign, soft_assign
from archlab.nn.attention.linear.vq import VQKernel, vq_attention

f64 = torch.float64


def _data(B=2, H=4, K=2, T=32, d=6, C=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, d, generator=g, dtype=f64) * 0.5
    k = torch.randn(B, K, T, d, generator=g, dtype=f64)
    v = torch.randn(B, K, T, d, generator=g, dtype=f64)
    codebook = torch.randn(K, C, d, generator=g, dtype=f64)
    return q, k, v, codebook


def _dense(q, v, assign, codebook, block, bias=None, slopes=None):
    """Dense reference: w_ij = sum_y p_jy exp(q_i . c_y) (= exp(q_i . k^_j) for one-hot rows) times
    exp(bias[i - j]) when j is in i's block or the one before, times exp(-slopes_h (i - j)) for
    every j (ALiBi), for j <= i; o = w v / w 1."""
    K = codebook.shape[0]
    H, T = q.shape[1], q.shape[2]
    R = H // K
    eqc = torch.exp(q @ codebook.repeat_interleave(R, 0)[None].transpose(-1, -2))  # (B, H, T, C)
    a = assign.repeat_interleave(R, 1)  # (B, H, T, C)
    w = eqc @ a.transpose(-1, -2)  # (B, H, T, T)
    i = torch.arange(T)
    local = (i[:, None] // block - i[None, :] // block) <= 1
    if bias is not None:
        dist = (i[:, None] - i[None, :]).clamp(0, 2 * block - 1)
        w = w * torch.where(local, bias[:, dist].exp(), torch.ones(()))[None]
    if slopes is not None:
        w = w * torch.exp(-slopes[:, None, None] * (i[:, None] - i[None, :]).clamp_min(0))[None]
    w = w * (i[None, :] <= i[:, None])
    return (w @ v.repeat_interleave(R, 1)) / w.sum(-1, keepdim=True)


@pytest.mark.parametrize("assign_kind", ["hard", "soft"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_blockwise_equals_dense_over_quantised_keys(assign_kind, with_bias):
    q, k, v, cb = _data(T=30)  # not a multiple of the block: the last block is padded
    block = 8
    bias = torch.randn(4, 2 * block, dtype=f64) * 0.3 if with_bias else None
    if assign_kind == "hard":
        assign, k_hat, _ = hard_assign(k, cb)
    else:
        (assign, _), k_hat = soft_assign(k, cb, 0.7), None
    o, _ = vq_attention(q, v, assign, cb, block, k_hat, bias=bias)
    assert (o - _dense(q, v, assign, cb, block, bias)).abs().max() < 1e-12


def test_hard_dense_is_softmax_over_quantised_keys():
    """The dense reference itself, for one-hot rows: softmax(q K^T + causal mask) v with K^
    the nearest codes."""
    q, k, v, cb = _data(B=1, H=2, K=2, T=12)
    assign, k_hat, _ = hard_assign(k, cb)
    s = q @ k_hat.transpose(-1, -2)
    s = s.masked_fill(~torch.ones(12, 12, dtype=torch.bool).tril(), float("-inf"))
    assert (_dense(q, v, assign, cb, 4) - torch.softmax(s, -1) @ v).abs().max() < 1e-12
    nearest = torch.cdist(k, cb[None].expand(1, 2, 5, 6)).argmin(-1)
    assert torch.equal(assign.argmax(-1), nearest)


def test_codebook_of_every_key_is_causal_softmax():
    q, k, v, _ = _data(B=1, H=2, K=1, T=24)
    cb = k[0]  # (K, T, d): every key is a code
    assign, k_hat, _ = hard_assign(k, cb)
    o, _ = vq_attention(q, v, assign, cb, 4, k_hat)
    s = (q @ k.transpose(-1, -2)).masked_fill(
        ~torch.ones(24, 24, dtype=torch.bool).tril(), float("-inf")
    )
    assert (o - torch.softmax(s, -1) @ v.expand(1, 2, 24, 6)).abs().max() < 1e-12
    soft, _ = soft_assign(k, cb, 1e-4)  # soft VQ with the same codebook -> the same as tau -> 0
    o_soft, _ = vq_attention(q, v, soft, cb, 4)
    assert (o_soft - o).abs().max() < 1e-8


def test_block_length_T_and_T_over_4_agree():
    """With the compressed cache exact for quantised keys, the block length only
    decides which keys are exact; with no bias every split gives the same output (the
    reference's forward-consistency test)."""
    q, k, v, cb = _data(T=32)
    for kind in ("hard", "soft"):
        if kind == "hard":
            assign, k_hat, _ = hard_assign(k, cb)
        else:
            (assign, _), k_hat = soft_assign(k, cb, 0.5), None
        one, _ = vq_attention(q, v, assign, cb, 32, k_hat)
        four, _ = vq_attention(q, v, assign, cb, 8, k_hat)
        assert (one - four).abs().max() < 1e-12


def test_soft_approaches_hard_as_tau_falls():
    q, k, v, cb = _data()
    assign, k_hat, _ = hard_assign(k, cb)
    hard, _ = vq_attention(q, v, assign, cb, 8, k_hat)
    # the closest key sits 0.0044 nearer one code than the next: tau must pass that
    taus = (1.0, 0.1, 1e-2, 1e-5)
    errs = [
        (vq_attention(q, v, soft_assign(k, cb, tau)[0], cb, 8)[0] - hard).abs().max()
        for tau in taus
    ]
    assert errs[0] > errs[1] > errs[2] > errs[3] and errs[3] < 1e-8


def test_ste_gradient_is_identity_and_cache_gradient_stops():
    q, k, v, cb = _data(B=1, H=1, K=1, T=16)
    k = k.requires_grad_()
    _, k_hat, _ = hard_assign(k, cb)
    g = torch.randn_like(k_hat)
    (k_hat * g).sum().backward()
    assert torch.equal(k.grad, g)
    for cache_grad, expect_zero in ((False, True), (True, False)):
        v2 = v.clone().requires_grad_()
        k2 = k.detach().clone().requires_grad_()
        assign, k_hat, _ = hard_assign(k2, cb)
        o, _ = vq_attention(q, v2, assign, cb, 4, k_hat, cache_grad=cache_grad)
        # block 3 sees blocks 2, 3 exactly, blocks 0, 1 through the cache
        o[:, :, 12:].sum().backward()
        assert (v2.grad[:, :, :8].abs().sum() == 0) == expect_zero
        assert v2.grad[:, :, 8:].abs().sum() > 0
        # older keys reach block 3 only as counts: no key gradient
        assert k2.grad[:, :, :8].abs().sum() == 0
        assert k2.grad[:, :, 8:16].abs().sum() > 0


def _kernel(assign="hard", block=4):
    return VQKernel(
        n_kv_heads=2,
        head_dim=6,
        codes=16,
        block=block,
        commit=1e-4,
        ema=0.99,
        assign=assign,
        tau=0.5,
        scale=6**-0.5,
    )


@pytest.mark.parametrize("assign", ["hard", "soft"])
def test_decoding_with_state_equals_full_forward(assign):
    torch.manual_seed(0)
    q, k, v, _ = (t.float() for t in _data(T=27))
    kern = _kernel(assign)
    kern.train()
    kern(q, k, v, None)  # initialises the codebook from keys and takes one EMA step
    kern.eval()
    full, _ = kern(q, k, v, None)
    assert kern.aux_loss is None
    out, state = kern(q[:, :, :6], k[:, :, :6], v[:, :, :6], None, decoding=True)
    outs, sizes = [out], []
    for t in range(6, 20):
        o, state = kern(
            q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state, decoding=True
        )
        outs.append(o)
        if t % 4 == 3:
            sizes.append(state.nbytes())
    # a chunk after decoding
    o, state = kern(q[:, :, 20:], k[:, :, 20:], v[:, :, 20:], state, decoding=True)
    outs.append(o)
    assert (torch.cat(outs, 2) - full).abs().max() < 1e-5
    # at the same place in a block the state has the same size, any context
    assert len(set(sizes)) == 1


def test_kernel_commitment_and_ema_only_in_training():
    torch.manual_seed(1)
    q, k, v, _ = (t.float() for t in _data())
    kern = _kernel().train()
    kern(q, k, v, None)
    assert bool(kern.initialised)
    # the codes after the first batch's EMA step: recompute the loss
    k_hat = hard_assign(k, kern.codebook)[1]
    kern.ema = 1.0
    kern(q, k, v, None)
    assert torch.allclose(kern.aux_loss, 1e-4 * (k - k_hat).square().sum(-1).mean())
    kern.ema = 0.99
    before = kern.code_sums.clone()
    kern(q, k, v, None)
    assert not torch.equal(before, kern.code_sums)
    kern.eval()
    before = kern.code_sums.clone()
    kern(q, k, v, None)
    assert torch.equal(before, kern.code_sums)


@pytest.mark.parametrize("assign_kind", ["hard", "soft"])
def test_state_with_bias_continues_the_blockwise_form(assign_kind):
    """A prefill, a chunk and one-token steps through the state give the blockwise (= dense)
    output, bias included."""
    q, k, v, cb = _data(T=30)
    bias = torch.randn(4, 8, dtype=f64) * 0.3
    if assign_kind == "hard":
        assign, k_hat, _ = hard_assign(k, cb)
    else:
        (assign, _), k_hat = soft_assign(k, cb, 0.7), None
    full, _ = vq_attention(q, v, assign, cb, 4, k_hat, bias=bias)
    outs, state, start = [], None, 0
    for size in (7, 6, *([1] * 17)):
        sl = slice(start, start + size)
        o, state = vq_attention(
            q[:, :, sl],
            v[:, :, sl],
            assign[:, :, sl],
            cb,
            4,
            None if k_hat is None else k_hat[:, :, sl],
            state,
            bias,
        )
        outs.append(o)
        start += size
    assert (torch.cat(outs, 2) - full).abs().max() < 1e-12


# ALiBi's for 4 heads, but the first steeper
SLOPES = torch.tensor([0.5, 0.25, 0.0625, 2.0**-8], dtype=f64)


def _assign(kind, k, cb):
    if kind == "hard":
        assign, k_hat, _ = hard_assign(k, cb)
        return assign, k_hat
    return soft_assign(k, cb, 0.7)[0], None


@pytest.mark.parametrize("assign_kind", ["hard", "soft"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_alibi_blockwise_equals_dense_over_quantised_keys(assign_kind, with_bias):
    """ALiBi reaches every key, the compressed cache's too (its sums decayed per query head): the
    blockwise form equals dense attention with exp(-m (i - j)) on every weight, and a windowed bias
    still adds on top."""
    q, k, v, cb = _data(T=30)
    bias = torch.randn(4, 16, dtype=f64) * 0.3 if with_bias else None
    assign, k_hat = _assign(assign_kind, k, cb)
    o, _ = vq_attention(q, v, assign, cb, 8, k_hat, bias=bias, slopes=SLOPES)
    assert (o - _dense(q, v, assign, cb, 8, bias, SLOPES)).abs().max() < 1e-12
    no_alibi, _ = vq_attention(q, v, assign, cb, 8, k_hat, bias=bias)
    assert (o - no_alibi).abs().max() > 1e-2  # the slopes do something


def test_alibi_with_a_codebook_of_every_key_is_causal_softmax_with_alibi():
    """The whole claim in one: codes = the keys, so VQ with ALiBi is ordinary causal softmax
    attention with ALiBi's bias -m_h (i - j), the first 16 of 24 keys reached only through the
    compressed cache at block 4."""
    q, k, v, _ = _data(B=1, H=4, K=2, T=24)
    cb = k[0]  # (K, T, d): every key is a code of its K/V head
    assign, k_hat, _ = hard_assign(k, cb)
    o, _ = vq_attention(q, v, assign, cb, 4, k_hat, slopes=SLOPES)
    i = torch.arange(24)
    alibi = -SLOPES[:, None, None] * (i[:, None] - i[None, :])  # (H, T, T)
    s = (q @ k.repeat_interleave(2, 1).transpose(-1, -2) + alibi).masked_fill(
        ~torch.ones(24, 24).bool().tril(), float("-inf")
    )
    assert (o - torch.softmax(s, -1) @ v.repeat_interleave(2, 1)).abs().max() < 1e-12


def test_alibi_block_length_does_not_change_the_output():
    """Exact through the cache, so the block only decides which keys are exact (and get a key
    gradient): T, T/4 and T/8 agree, where a bias applied inside the window alone would not."""
    q, k, v, cb = _data(T=32)
    for kind in ("hard", "soft"):
        assign, k_hat = _assign(kind, k, cb)
        outs = [vq_attention(q, v, assign, cb, L, k_hat, slopes=SLOPES)[0] for L in (32, 8, 4)]
        assert max((o - outs[0]).abs().max() for o in outs[1:]) < 1e-12


@pytest.mark.parametrize("assign_kind", ["hard", "soft"])
def test_alibi_state_continues_the_blockwise_form(assign_kind):
    """A prefill, a chunk and one-token steps through the state (its cache decayed to the tail's
    start, per query head) give the blockwise output; the state's size is the same at the same place
    in a block."""
    q, k, v, cb = _data(T=30)
    assign, k_hat = _assign(assign_kind, k, cb)
    full, _ = vq_attention(q, v, assign, cb, 4, k_hat, slopes=SLOPES)
    outs, state, start, sizes = [], None, 0, []
    for size in (7, 6, *([1] * 17)):
        sl = slice(start, start + size)
        o, state = vq_attention(
            q[:, :, sl],
            v[:, :, sl],
            assign[:, :, sl],
            cb,
            4,
            None if k_hat is None else k_hat[:, :, sl],
            state,
            slopes=SLOPES,
        )
        outs.append(o)
        start += size
        if start % 4 == 1:
            sizes.append(state.nbytes())
    assert (torch.cat(outs, 2) - full).abs().max() < 1e-12
    assert state.cache.shape == (2, 2, 2, 5, 7) and len(set(sizes[1:])) == 1  # (B, K, R, C, Dv + 1)


@pytest.mark.parametrize("tau", [0.25, 1.0, 3.0])
def test_soft_assignment_at_a_finite_temperature_is_the_formula(tau):
    """Su's soft VQ (kexue.fm/archives/9862): p(y|k) = exp(-|k - c_y|^2 / 2 tau) / sum_y' exp(-|k -
    c_y'|^2 / 2 tau), written out per key and code in float64 (the tau -> 0 limit alone cannot see a
    lost factor of 2)."""
    _, k, _, cb = _data(T=5)
    p, expected = soft_assign(k, cb, tau)
    want = torch.empty_like(p)
    for b, h, t in ((b, h, t) for b in range(2) for h in range(2) for t in range(5)):
        d2 = [float(((k[b, h, t] - cb[h, y]) ** 2).sum()) for y in range(5)]
        e = [torch.tensor(-x / (2 * tau), dtype=f64).exp() for x in d2]
        want[b, h, t] = torch.stack(e) / sum(e)
        mean_d2 = sum(float(w) * x for w, x in zip(want[b, h, t], d2))
        assert float(expected[b, h, t]) == pytest.approx(mean_d2, rel=1e-12)
    assert torch.allclose(p, want, rtol=1e-12, atol=0)
    kernel = (
        VQKernel(
            n_kv_heads=2,
            head_dim=6,
            codes=5,
            block=4,
            commit=1.0,
            ema=1.0,
            assign="soft",
            tau=tau,
            scale=1.0,
        )
        .double()
        .train()
    )
    kernel.initialised.fill_(True)
    kernel.code_sums.copy_(cb)
    kernel.code_counts.fill_(1.0)
    q = torch.randn(2, 2, 5, 6, dtype=f64, generator=torch.Generator().manual_seed(2))
    o, _ = kernel(q, k, k, None)
    # the kernel attends with these weights
    assert torch.allclose(o, _dense(q, k, want, cb, 4), atol=1e-12)
    assert float(kernel.aux_loss) == pytest.approx(float(expected.mean()), rel=1e-12)


def _unheld_favourite(T=16, seed=0):
    """float32 data where every query's favourite code (q . c 120 nats above the rest) is held by no
    key: keys lie near code 0 or code 2, never near code 1, the one the queries point at."""
    g = torch.Generator().manual_seed(seed)
    cb = torch.tensor([[[1.0, 0.0], [0.0, 30.0], [-1.0, 0.0]]])  # (K=1, C=3, d=2)
    q = torch.randn(1, 1, T, 2, generator=g) * 0.3
    q[..., 1] = 4.0  # q . c1 = 120
    side = torch.where(torch.rand(T, generator=g) < 0.5, 1.0, -1.0)
    k = (
        torch.stack((side, torch.zeros(T)), -1)[None, None]
        + torch.randn(1, 1, T, 2, generator=g) * 0.1
    )
    v = torch.randn(1, 1, T, 3, generator=g)
    return q, k, v, cb


def test_hard_weights_are_relative_to_what_the_query_sees():
    """A query whose best code no visible key holds: relative to the maximum over every code each
    weight underflowed in float32 (output 0, NaN gradients); relative to the visible maximum the
    output and the gradients of q and v equal dense float64 attention over the quantised keys, in
    the exact blocks and through the compressed cache (T = 4 blocks)."""
    q, k, v, cb = _unheld_favourite()
    k.requires_grad_(True)
    assign, k_hat, _ = hard_assign(k, cb)
    assert set(assign.argmax(-1).flatten().tolist()) == {0, 2}  # code 1 is held by no key
    q.requires_grad_(True)
    v.requires_grad_(True)
    o, _ = vq_attention(q, v, assign, cb, 4, k_hat, cache_grad=True)  # every gradient, as dense
    (o * torch.linspace(-1, 1, 3)).sum().backward()
    q64, v64 = q.detach().double().requires_grad_(True), v.detach().double().requires_grad_(True)
    ref = _dense(q64, v64, assign.double(), cb.double(), 4)
    (ref * torch.linspace(-1, 1, 3, dtype=f64)).sum().backward()
    assert (o.double() - ref).abs().max() < 1e-5
    assert (q.grad.double() - q64.grad).abs().max() < 1e-4
    assert (v.grad.double() - v64.grad).abs().max() < 1e-5
    assert torch.isfinite(k.grad).all()


def test_hard_decoding_is_relative_to_what_the_query_sees():
    """The same data decoded one token at a time through the state (tail and cache) gives the
    dense float64 output."""
    q, k, v, cb = _unheld_favourite()
    assign, k_hat, _ = hard_assign(k, cb)
    ref = _dense(q.double(), v.double(), assign.double(), cb.double(), 4)
    outs, state = [], None
    for t in range(16):
        sl = slice(t, t + 1)
        o, state = vq_attention(
            q[:, :, sl], v[:, :, sl], assign[:, :, sl], cb, 4, k_hat[:, :, sl], state
        )
        outs.append(o)
    assert (torch.cat(outs, 2).double() - ref).abs().max() < 1e-5
