"""Causal linear attention by chunked prefix sums, the engine behind every kernelised attention.

With a feature map phi, sim(q, k) = phi(q) . phi(k) and a causal layer's output is
    o_i = phi(q_i)^T S_i / phi(q_i)^T z_i,  with S_i = sum_{j<=i} phi(k_j) v_j^T
                                            and z_i = sum_{j<=i} phi(k_j)
(Katharopoulos et al., arXiv 2006.16236; Choromanski et al., arXiv 2009.14794). Both sums are prefix
sums, so decoding keeps (S, z) as a fixed-size state. Training splits the sequence into chunks of C
tokens: inside a chunk a C x C masked product, across chunks the exclusive prefix sum of the chunks'
phi(k)^T v; nothing of size T x T is ever formed. z rides along as an extra column of ones on v, so
numerator and denominator are one matmul, and the state is one tensor `kv` = [S | z] of shape (B, K,
M, Dv + 1).

GQA: phi(q) has H = K * R heads, phi(k) and v have K; query head h reads K/V head h // R, and the
state is kept per K/V head only.

Shapes: B batch, H query heads, K K/V heads, R = H / K, T tokens, M features, Dv value dim, C
chunk, N chunks.
"""

from __future__ import annotations

import torch

# chunk length: the C x C intra-chunk product stays small, the number of chunks T/C moderate
DEFAULT_CHUNK = 64


def causal_linear_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor | None = None,
    chunk: int = DEFAULT_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """phi_q (B, H, T, M), phi_k (B, K, T, M), v (B, K, T, Dv), state [S | z] (B, K, M, Dv + 1)
    of the tokens before these (None = none) -> (o (B, H, T, Dv), the state after these tokens).
    Features must be positive (or the denominator can vanish); the output is in v's dtype, the
    sums in phi's."""
    B, H, T, M = phi_q.shape
    K, Dv = phi_k.shape[1], v.shape[-1]
    R = H // K
    chunk = max(1, min(chunk, T))
    # (B, K, T, Dv+1): [v | 1]
    v1 = torch.cat((v.to(phi_k.dtype), phi_k.new_ones(B, K, T, 1)), dim=-1)
    pad = (-T) % chunk
    if pad:  # zero features past the end add nothing to any sum
        phi_q, phi_k, v1 = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, v1))
    N = (T + pad) // chunk
    qc = phi_q.reshape(B, K, R, N, chunk, M)  # (B, K, R, N, C, M)
    kc = phi_k.reshape(B, K, N, chunk, M)  # (B, K, N, C, M)
    vc = v1.reshape(B, K, N, chunk, Dv + 1)  # (B, K, N, C, Dv+1)
    kv_chunk = kc.transpose(-1, -2) @ vc  # (B, K, N, M, Dv+1): each chunk's sum of phi(k) [v | 1]^T
    before = torch.cat(
        (torch.zeros_like(kv_chunk[:, :, :1]), kv_chunk[:, :, :-1].cumsum(dim=2)), dim=2
    )
    if state is not None:
        before = before + state[:, :, None]  # (B, K, N, M, Dv+1): everything before each chunk
    scores = qc @ kc[:, :, None].transpose(-1, -2)  # (B, K, R, N, C, C) within a chunk only
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=phi_q.device).tril()
    scores = scores.masked_fill(~causal, 0.0)
    out = qc @ before[:, :, None] + scores @ vc[:, :, None]  # (B, K, R, N, C, Dv+1)
    out = out.reshape(B, H, N * chunk, Dv + 1)[:, :, :T]  # (B, H, T, Dv+1)
    den = out[..., -1:].clamp_min(torch.finfo(out.dtype).tiny)
    new_state = before[:, :, -1] + kv_chunk[:, :, -1]  # (B, K, M, Dv+1)
    return (out[..., :-1] / den).to(v.dtype), new_state


def quadratic_linear_attention(
    phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """The same causal output from the explicit T x T form tril(phi_q phi_k^T) v / tril(phi_q
    phi_k^T) 1: the readable reference (and what a short sequence costs the same either way)."""
    R = phi_q.shape[1] // phi_k.shape[1]
    phi_k, v = phi_k.repeat_interleave(R, dim=1), v.repeat_interleave(R, dim=1)  # (B, H, T, .)
    a = (phi_q @ phi_k.transpose(-1, -2)).tril()  # (B, H, T, T)
    return (a @ v.to(a.dtype)) / a.sum(dim=-1, keepdim=True)  # (B, H, T, Dv)
