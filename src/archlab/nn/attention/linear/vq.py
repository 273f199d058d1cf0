"""Transformer-VQ and soft VQ: softmax attention over vector-quantised keys, linear in length.

Transformer-VQ (Lingle, arXiv 2309.16354; Su, kexue.fm/archives/9844) replaces each key by its
nearest code of a codebook C (c x d), K^ = Delta C with Delta one-hot, so exp(Q K^T) V = exp(Q C^T)
(Delta^T V). Causally, in blocks of L tokens, block n attends exactly (quantised keys, a windowed
bias) to itself and block n-1, and to every older block through the compressed cache U_{n-2} =
sum_{b <= n-2} Delta_b^T [V_b | 1]: per code, the sum of its values and its count. Decoding keeps
the last two blocks and U, whatever the context length. How keys get their codes (hard with a
straight-through estimator, or soft: Su's p(y|k)) and how the codebook follows them (EMA) is
codebook.py. The cache gets no gradient by default, like Transformer-XL's memory.

All weights are computed relative to one number per query, m_i, from what the query can see only
(so nothing of the future enters a past output). With soft rows every key holds every code, and m_i
= max_y q_i . c_y. With hard rows m_i is the largest score among the keys the query sees exactly and
the codes its compressed cache holds, so the weights sum to at least 1 (the best key's exp(0), less
only ALiBi's decay). The maximum over every code is not enough there: a query whose favourite code
no visible key holds had every weight underflow once that code led by ~87 nats (float32), its output
became 0 / tiny and its backward overflowed, and a 300-step Transformer-VQ run at lr 3e-3 met NaN
gradients from step 141 on.

Two position biases: `bias`, additive by distance inside the two exact blocks only (Lingle's
Transformer-XL bias; the cache gets none, so it changes with the block length), and `slopes`, ALiBi
(Press et al. arXiv 2108.12409): every key's weight times exp(-m_h (i - j)), the compressed cache's
too. ALiBi factors, exp(-m (i - j)) = exp(-m (i - s)) exp(-m (s - j)) for any s between, so the
cache holds per query head the sums decayed to a reference position s, D = sum_j exp(-m (s - j))
Delta_j [v_j | 1], and a block multiplies the older ones by exp(-m L) as it moves on. That is exact
(dense softmax attention over the quantised keys with ALiBi, independent of the block length) at the
price of a cache per query head instead of per K/V head (H / K times larger with GQA).

Shapes: B batch, H query heads, K K/V heads, R = H / K, T tokens, L block, N blocks, C codes, d head
dim, Dv value dim.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from archlab.nn.attention.linear.codebook import (
    codebook_from,
    ema_update,
    ema_update_codes,
    hard_assign,
    nearest_codes,
    soft_assign,
)


class VQState:
    """Constant-size decoding state of one VQ layer: the tail (the last complete block and the
    current partial one) as assignments (B, K, <2L, C) and values (B, K, <2L, Dv), and the
    compressed cache (B, K, C, Dv + 1) of every older token: per code, its values' sum and its
    count. With ALiBi the cache is per query head (B, K, R, C, Dv + 1), each sum decayed to the
    tail's first position (module doc)."""

    def __init__(
        self, tail_assign: torch.Tensor, tail_v: torch.Tensor, cache: torch.Tensor
    ) -> None:
        self.tail_assign, self.tail_v, self.cache = tail_assign, tail_v, cache

    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for t in (self.tail_assign, self.tail_v, self.cache)
        )


def _shift_blocks(x: torch.Tensor) -> torch.Tensor:
    """(B, K, N, ...) -> the previous block of each block (zeros before the first)."""
    return torch.cat((torch.zeros_like(x[:, :, :1]), x[:, :, :-1]), dim=2)


def _window_bias(bias: torch.Tensor, L: int, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """exp of a bias by distance (H, 2L) for the current block (K, R, L, L) and the previous one (K,
    R, L, L)."""
    i = torch.arange(L, device=bias.device)
    dist = i[:, None] - i[None, :]  # (L, L)
    e = bias.exp().view(K, -1, bias.shape[-1])  # (K, R, 2L)
    return e[..., dist.clamp_min(0)], e[..., dist + L]


def alibi_window(slopes: torch.Tensor, L: int, bias: torch.Tensor | None) -> torch.Tensor:
    """ALiBi inside the two exact blocks as a bias by distance (H, 2L): -m_h d, plus
    `bias` if any."""
    # (H, 2L)
    decay = -slopes[:, None] * torch.arange(2 * L, device=slopes.device, dtype=slopes.dtype)
    return decay if bias is None else bias + decay


def _decayed_cache_term(eq, ab, vb, cache0, slopes, L, cache_grad):
    """What the compressed cache adds under ALiBi (module doc): query s_n + a of block n reads D_n
    = sum over keys j before block n - 1 of exp(-m (s_n - j)) Delta_j [v_j | 1], weighted exp(-m
    a). Each block's sums decayed to its end, E_b, reach block n times exp(-m L (n - 1 - b)); the
    state's cache0 (decayed to position 0) times exp(-m L n). eq (B, K, R, N, L, C), ab (B, K,
    N, L, C), vb (B, K, N, L, Dv+1), cache0 (B, K, R, C, Dv+1) or None, slopes (H,) -> (B, K, R,
    N, L, Dv+1)."""
    B, K, R, N = eq.shape[:4]
    m = slopes.to(eq.dtype).view(K, R, 1)  # (K, R, 1)
    pos = torch.arange(L, device=eq.device, dtype=eq.dtype)
    to_end = torch.exp(-m * (L - pos))  # (K, R, L): token l of a block to the block's end
    block_sums = ab.transpose(-1, -2)[:, :, None] @ (
        vb[:, :, None] * to_end[None, :, :, None, :, None]
    )  # E_b
    sums = block_sums if cache_grad else block_sums.detach()  # (B, K, R, N, C, Dv+1)
    blocks = torch.arange(N, device=eq.device)
    # (N, N): n - 1 - b, >= 1 for the blocks older than n - 1
    gap = blocks[:, None] - 1 - blocks[None, :]
    reach = torch.exp(-m[..., None] * L * gap.clamp_min(0)) * (gap >= 1)  # (K, R, N, N)
    older = (reach[None] @ sums.flatten(-2)).view_as(sums)  # (B, K, R, N, C, Dv+1)
    if cache0 is not None:
        older = older + torch.exp(-m * L * blocks)[..., None, None] * cache0[:, :, :, None]
    return (eq * torch.exp(-m * pos)[None, :, :, None, :, None]) @ older  # (B, K, R, N, L, Dv+1)


def _prepend_tail(q, v, assign, k_hat, codebook, state):
    """Put the state's tail (a whole number of blocks back) before the new tokens; its
    queries are dummies."""
    r = state.tail_v.shape[2]
    B, H, _, d = q.shape
    q = torch.cat((q.new_zeros(B, H, r, d), q), 2)
    v = torch.cat((state.tail_v.to(v.dtype), v), 2)
    if k_hat is not None:
        k_hat = torch.cat(((state.tail_assign @ codebook[None]).to(k_hat.dtype), k_hat), 2)
    return q, v, torch.cat((state.tail_assign.to(assign.dtype), assign), 2), k_hat, r


def vq_attention(
    q: torch.Tensor,
    v: torch.Tensor,
    assign: torch.Tensor,
    codebook: torch.Tensor,
    block: int,
    k_hat: torch.Tensor | None = None,
    state: VQState | None = None,
    bias: torch.Tensor | None = None,
    cache_grad: bool = False,
    with_state: bool = True,
    slopes: torch.Tensor | None = None,
) -> tuple[torch.Tensor, VQState | None]:
    """Blockwise causal VQ attention. q (B, H, T, d) with the softmax scale applied; v (B, K, T,
    Dv); assign (B, K, T, C) one-hot (hard) or soft rows (all-zero rows are padding); codebook
    (K, C, d); k_hat (B, K, T, d) the straight-through keys for hard VQ (local scores q . k^,
    which carry the key gradient), None for soft; state of the tokens before, or None; bias (H,
    2L) additive by distance, applied inside the two exact blocks; slopes (H,) ALiBi's m_h,
    applied to every key (module doc). -> (o (B, H, T, Dv), the state after these tokens, or
    None without `with_state`)."""
    if slopes is not None:  # inside the two exact blocks ALiBi is a bias by distance
        bias = alibi_window(slopes, block, bias)
    if state is not None and q.shape[2] == 1:
        return _decode_step(q, v, assign, codebook, block, k_hat, state, bias, slopes)
    K, C = codebook.shape[:2]
    L, H, Dv = block, q.shape[1], v.shape[-1]
    B, R = q.shape[0], H // K
    cache0, r = None, 0
    if state is not None:
        q, v, assign, k_hat, r = _prepend_tail(q, v, assign, k_hat, codebook, state)
        cache0 = state.cache
    total = q.shape[2]
    pad = (-total) % L  # padded keys come after every real query, so causality hides them
    v1 = torch.cat((v, v.new_ones(*v.shape[:-1], 1)), -1)  # (B, K, S, Dv+1): [v | 1]
    if pad:
        q, v1, assign = (nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, v1, assign))
        k_hat = None if k_hat is None else nn.functional.pad(k_hat, (0, 0, 0, pad))
    N = (total + pad) // L
    qb = q.reshape(B, K, R, N, L, -1)  # (B, K, R, N, L, d)
    ab, vb = assign.reshape(B, K, N, L, C), v1.reshape(B, K, N, L, Dv + 1)
    qc = qb @ codebook[None, :, None, None].transpose(-1, -2)  # (B, K, R, N, L, C)
    if k_hat is None:
        w_cur, w_prev, eq = _soft_weights(qc, ab)  # (B, K, R, N, L, L) twice, (B, K, R, N, L, C)
    else:
        w_cur, w_prev, eq = _hard_weights(qb, qc, ab, k_hat, cache0, L)
    if bias is not None:
        e_cur, e_prev = _window_bias(bias.to(eq.dtype), L, K)
        w_cur, w_prev = w_cur * e_cur[None, :, :, None], w_prev * e_prev[None, :, :, None]
    w_cur = w_cur.masked_fill(~torch.ones(L, L, dtype=torch.bool, device=q.device).tril(), 0.0)
    if slopes is None:
        cached = _cache_term(eq, ab, vb, cache0, cache_grad)  # (B, K, R, N, L, Dv+1)
    else:
        cached = _decayed_cache_term(eq, ab, vb, cache0, slopes, L, cache_grad)
    out = w_cur @ vb[:, :, None] + w_prev @ _shift_blocks(vb)[:, :, None] + cached
    out = out.reshape(B, H, N * L, Dv + 1)[:, :, r:total]  # (B, H, T, Dv+1)
    y = out[..., :-1] / out[..., -1:].clamp_min(torch.finfo(out.dtype).tiny)
    return y, _next_state(
        assign[:, :, :total], v1[:, :, :total], cache0, L, slopes
    ) if with_state else None


def _cache_term(
    eq: torch.Tensor,
    ab: torch.Tensor,
    vb: torch.Tensor,
    cache0: torch.Tensor | None,
    cache_grad: bool,
) -> torch.Tensor:
    """What each query reads from the compressed cache (without ALiBi): exp(q . c) times the code
    sums of every block before the previous one, plus the state's cache from before the call.
    eq (B, K, R, N, L, C), ab (B, K, N, L, C), vb (B, K, N, L, Dv+1) -> (B, K, R, N, L, Dv+1)."""
    block_sums = ab.transpose(-1, -2) @ vb  # (B, K, N, C, Dv+1): Delta_b^T [V_b | 1]
    older = _before_previous(block_sums if cache_grad else block_sums.detach())
    if cache0 is not None:
        # (B, K, N, C, Dv+1): the compressed cache before each block
        older = older + cache0[:, :, None]
    return eq @ older[:, :, None]  # (B, K, R, N, L, Dv+1)


def _decode_step(q, v, assign, codebook, L, k_hat, state, bias, slopes=None):
    """One new token after a state: the tail plus it is at most 2L tokens from the start of the
    previous block, so every one of them is exact for the new query; older tokens are the cache
    (with ALiBi decayed to the tail's start, S - 1 tokens before the query). O(L + C) per token."""
    B, H, _, d = q.shape
    K = codebook.shape[0]
    R = H // K
    a = torch.cat((state.tail_assign.to(assign.dtype), assign), 2)  # (B, K, S, C), S <= 2L
    v1 = torch.cat(
        (torch.cat((state.tail_v.to(v.dtype), v), 2), v.new_ones(B, K, a.shape[2], 1)), -1
    )
    qi = q.reshape(B, K, R, 1, d)  # the group's query heads as rows
    qc = qi @ codebook[None, :, None].transpose(-1, -2)  # (B, K, R, 1, C)
    if k_hat is None:
        m = qc.amax(-1, keepdim=True)
        eq = torch.exp(qc - m)
        w = eq @ a[:, :, None].transpose(-1, -2)  # (B, K, R, 1, S)
    else:  # the largest score among the tail's keys and the cache's codes (module doc)
        # (B, K, S, d)
        keys = torch.cat(((state.tail_assign @ codebook[None]).to(k_hat.dtype), k_hat), 2)
        s = (qi @ keys[:, :, None].transpose(-1, -2)).masked_fill(
            ~(a.sum(-1) > 0)[:, :, None, None, :], -torch.inf
        )  # (B, K, R, 1, S)
        s_cache = qc.masked_fill(~_held_codes(state.cache)[..., None, :], -torch.inf)
        m = torch.maximum(s.amax(-1, keepdim=True), s_cache.amax(-1, keepdim=True))
        w, eq = torch.exp(s - m), torch.exp(s_cache - m)
    if bias is not None:
        S = a.shape[2]
        w = (
            w
            * bias.exp().view(K, R, -1)[..., S - 1 - torch.arange(S, device=q.device)][
                None, :, :, None
            ]
        )
    if slopes is None:
        cached = eq @ state.cache[:, :, None]  # (B, K, R, 1, Dv+1)
    else:
        cached = (
            eq * torch.exp(-slopes.to(eq.dtype).view(K, R, 1, 1) * (a.shape[2] - 1))
        ) @ state.cache
    out = w @ v1[:, :, None] + cached  # (B, K, R, 1, Dv+1)
    y = (out[..., :-1] / out[..., -1:].clamp_min(torch.finfo(out.dtype).tiny)).reshape(B, H, 1, -1)
    return y, _next_state(a, v1, state.cache, L, slopes)


def _before_previous(x: torch.Tensor) -> torch.Tensor:
    """Per block n, the sum of x over every block before n - 1 (zeros for blocks 0 and 1): x (B,
    K, N, ...) -> (B, K, N, ...)."""
    N = x.shape[2]
    return torch.cat((torch.zeros_like(x[:, :, :2]), x.cumsum(2)[:, :, : N - 2]), 2)[:, :, :N]


def _held_codes(cache: torch.Tensor) -> torch.Tensor:
    """The codes a compressed cache holds (a positive count): cache (B, K, C, Dv+1) -> (B, K, 1,
    C); with ALiBi (B, K, R, C, Dv+1) -> (B, K, R, C)."""
    held = cache[..., -1] > 0
    return held[:, :, None] if held.dim() == 3 else held


def _soft_weights(qc, ab):
    """Soft rows: each query's weight of a key is sum_y p(y|k) exp(q . c_y - m), m = max_y q . c_y
    (every key holds every code). qc (B, K, R, N, L, C), ab (B, K, N, L, C) -> (w_cur, w_prev (B, K,
    R, N, L, L), eq = exp(qc - m))."""
    m = qc.amax(-1, keepdim=True).detach()  # per query: cancels between numerator and denominator
    eq = torch.exp(qc - m)  # each <= 1
    return (
        eq @ ab[:, :, None].transpose(-1, -2),
        eq @ _shift_blocks(ab)[:, :, None].transpose(-1, -2),
        eq,
    )


def _hard_weights(qb, qc, ab, k_hat, cache0, L):
    """Hard rows: exp(score - m) of each query against its own block (causal) and the previous one,
    and exp(q . c - m) of the codes its compressed cache holds (0 for the others), m the largest of
    those scores (module doc). qb (B, K, R, N, L, d), qc (B, K, R, N, L, C), ab (B, K, N, L, C),
    k_hat (B, K, T, d), cache0 None or (B, K, C, Dv+1), or (B, K, R, C, Dv+1) with ALiBi ->
    (w_cur, w_prev (B, K, R, N, L, L), eq (B, K, R, N, L, C))."""
    B, K, N = ab.shape[:3]
    kb = k_hat.reshape(B, K, N, L, -1)  # (B, K, N, L, d)
    real = ab.sum(-1) > 0  # (B, K, N, L): False for padding (and before the first block)
    causal = torch.ones(L, L, dtype=torch.bool, device=qb.device).tril()
    s_cur = (qb @ kb[:, :, None].transpose(-1, -2)).masked_fill(
        ~(causal & real[:, :, None, :, None, :]), -torch.inf
    )
    s_prev = (qb @ _shift_blocks(kb)[:, :, None].transpose(-1, -2)).masked_fill(
        ~_shift_blocks(real)[:, :, None, :, None, :], -torch.inf
    )
    # the codes of every block before n - 1 (each block's keys per code, summed), and the state's
    held = (_before_previous(ab.sum(-2)) > 0)[:, :, None, :, None, :]
    if cache0 is not None:
        held = held | _held_codes(cache0)[..., None, None, :]
    s_cache = qc.masked_fill(~held, -torch.inf)
    m = (
        torch.stack((s_cur.amax(-1), s_prev.amax(-1), s_cache.amax(-1)), -1)
        .amax(-1, keepdim=True)
        .detach()
    )
    m = m.nan_to_num(0.0, posinf=0.0, neginf=0.0)  # a query that sees nothing (none in practice)
    return torch.exp(s_cur - m), torch.exp(s_prev - m), torch.exp(s_cache - m)


def _next_state(assign, v1, cache0, L, slopes=None):
    """The tail (from the start of the block before the next token's) and the cache of everything
    before it; v1 = [v | 1] (B, K, S, Dv+1). With ALiBi slopes (H,) the cache is per query
    head, decayed to the new tail's first position `start` (cache0 was decayed to position 0
    of these tokens)."""
    total = assign.shape[2]
    start = max(total // L - 1, 0) * L
    assign, v1 = assign.detach(), v1.detach()
    if slopes is None:
        cache = assign[:, :, :start].transpose(-1, -2) @ v1[:, :, :start]  # (B, K, C, Dv+1)
        if cache0 is not None:
            cache = cache + cache0
    else:
        K = assign.shape[1]
        m = slopes.to(v1.dtype).view(K, -1, 1)  # (K, R, 1)
        # (K, R, start)
        to_start = torch.exp(-m * (start - torch.arange(start, device=v1.device, dtype=v1.dtype)))
        cache = assign[:, :, None, :start].transpose(-1, -2) @ (
            v1[:, :, None, :start] * to_start[..., None]
        )
        if cache0 is not None:  # (B, K, R, C, Dv+1)
            cache = cache + torch.exp(-m * start)[..., None] * cache0
    return VQState(assign[:, :, start:], v1[:, :, start:, :-1], cache)


class VQKernel(nn.Module):
    """One layer's VQ attention: the codebook statistics (buffers: EMA sums and counts per K/V
    head), the assignment, the commitment loss and the call into `vq_attention`. The codebook starts
    as random keys of the first training batch (random codes far from every key would never be
    chosen, and EMA never moves them)."""

    def __init__(
        self,
        n_kv_heads: int,
        head_dim: int,
        codes: int,
        block: int,
        commit: float,
        ema: float,
        assign: str,
        tau: float,
        scale: float,
        cache_grad: bool = False,
    ) -> None:
        super().__init__()
        self.codes, self.block, self.commit, self.ema, self.assign, self.tau = (
            codes,
            block,
            commit,
            ema,
            assign,
            tau,
        )
        self.scale, self.cache_grad = scale, cache_grad
        self.register_buffer("code_sums", torch.randn(n_kv_heads, codes, head_dim))  # (K, C, d)
        self.register_buffer("code_counts", torch.ones(n_kv_heads, codes))  # (K, C)
        # set by the first training batch
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))
        self.aux_loss: torch.Tensor | None = None  # the last training forward's commitment loss

    def reset_buffers(self) -> None:
        with torch.no_grad():
            self.code_sums.normal_()
            self.code_counts.fill_(1.0)
            self.initialised.fill_(False)

    @property
    def codebook(self) -> torch.Tensor:
        return codebook_from(self.code_sums, self.code_counts)  # (K, C, d)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        state: VQState | None,
        key_mask: torch.Tensor | None = None,
        decoding: bool = False,
        slopes: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, VQState | None]:
        """q (B, H, T, d), k and v (B, K, T, d) -> (o (B, H, T, d), the new state when `decoding`);
        slopes (H,) ALiBi's, or None. A training forward leaves its commitment loss in
        `aux_loss` (None otherwise)."""
        learning = self.training and not decoding
        if learning and not bool(self.initialised):
            self._init_from(k.detach().float())
        codebook = self.codebook.to(k.dtype)
        codes = None
        if self.assign == "hard":
            codes = nearest_codes(k.detach(), codebook)  # (B, K, T)
            assign, k_hat, sq_err = hard_assign(k, codebook, codes)
        else:
            (assign, sq_err), k_hat = soft_assign(k, codebook, self.tau), None
        if key_mask is not None:
            # padding: no weight anywhere
            assign = assign * key_mask[:, None, :, None].to(assign.dtype)
        self.aux_loss = self.commit * sq_err.mean() if learning else None
        if learning and self.ema < 1:
            with torch.no_grad():
                # hard: by index, without the (B, K, T, C) one-hot
                if codes is not None and key_mask is None:
                    sums, counts = ema_update_codes(
                        self.code_sums, self.code_counts, k.detach().float(), codes, self.ema
                    )
                else:
                    sums, counts = ema_update(
                        self.code_sums,
                        self.code_counts,
                        k.detach().float(),
                        assign.float(),
                        self.ema,
                    )
                self.code_sums.copy_(sums)
                self.code_counts.copy_(counts)
        o, new_state = vq_attention(
            q * self.scale,
            v,
            assign,
            codebook,
            self.block,
            k_hat,
            state,
            cache_grad=self.cache_grad,
            with_state=decoding,
            slopes=slopes,
        )
        return o, new_state

    def _init_from(self, k: torch.Tensor) -> None:
        """Codes = `codes` keys drawn at random from the batch, per K/V head; counts 1."""
        keys = k.transpose(0, 1).flatten(1, 2)  # (K, B*T, d)
        pick = torch.randint(keys.shape[1], (self.codes,), device=k.device)
        self.code_sums.copy_(keys[:, pick])
        self.code_counts.fill_(1.0)
        self.initialised.fill_(True)
