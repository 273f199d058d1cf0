"""FAVOR+ (Performer): random features whose dot product estimates the softmax kernel without bias.

For w ~ N(0, I_d), exp(x . y) = E_w[exp(w.x - |x|^2/2) exp(w.y - |y|^2/2)] (Choromanski et al.,
"Rethinking Attention with Performers", arXiv 2009.14794; Su, kexue.fm/archives/7921). With M draws
stacked in W (M, d), phi(x) = M^-1/2 exp(W x - |x|^2/2) is positive, and phi(q) . phi(k) is an
unbiased estimate of exp(q . k). The softmax scale s is folded in by feeding sqrt(s) q and sqrt(s) k
(d^-1/4 each for s = d^-1/2).

Feature maps (`FAVOR_FEATURES` of nn/config/choices.py, M features each):
- positive: M^-1/2 exp(W x - |x|^2/2), W of M rows.
- hyperbolic: M^-1/2 exp(-|x|^2/2) [exp(W x), exp(-W x)], W of M/2 rows; lower variance
  (paper, lemma 2).
`trigonometric_features` (exp(|x|^2/2) [sin, cos], the random Fourier features of the softmax
kernel) is here for the benchmark's comparison only: it is not positive, and its error blows up
where exp(q . k) is small.

Projections: iid Gaussian rows, or orthogonal blocks of d rows from the QR of a Gaussian matrix with
the signs of diag(R) moved into Q (LAPACK fixes those signs, so plain `torch.linalg.qr` is not Haar
distributed and biases the estimate), each row rescaled to the length of an independent Gaussian
draw so that it stays marginally N(0, I_d).

Stabilisers: a query's features are divided by their own maximum (one factor per query, which
cancels between numerator and denominator). Keys get none: the references' maximum over the whole
sequence lets a future key change past outputs. Features are computed in float32 (or float64 if
the input is).

`FavorKernel` holds one layer's projection (a buffer outside the state dict: the kernel adds no
trained parameters, so a softmax model's weights load into it), redraws it in training only, and
runs causal linear attention (nn/attention/linear/prefix_sums.py) with the running state [S |
z] for decoding.

Shapes: B batch, H query heads, K K/V heads, T tokens, d = Dh head dim, M features,
P projection rows.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from archlab.nn.attention.linear.prefix_sums import causal_linear_attention
from archlab.nn.config.choices import FAVOR_FEATURES

# base seed of the projections (layer i draws from FAVOR_SEED + i): eval forwards agree
FAVOR_SEED = 20201201


def orthogonal_gaussian(
    rows: int,
    d: int,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float64,
    draws: int | None = None,
) -> torch.Tensor:
    """(rows, d), or (draws, rows, d) independent ones: blocks of d orthogonal directions, Haar
    distributed (sign-corrected QR), each row scaled to the norm of an independent N(0, I_d) vector,
    so every row is marginally N(0, I_d)."""
    lead = () if draws is None else (draws,)
    g = torch.randn(*lead, math.ceil(rows / d), d, d, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(g)  # (..., n_blocks, d, d)
    # Haar: else Q[0, 0] has a fixed sign
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[..., None, :]
    # (..., rows, d): rows orthonormal per block
    directions = q.transpose(-1, -2).flatten(-3, -2)[..., :rows, :]
    norms = torch.randn(*lead, rows, d, generator=generator, dtype=torch.float64).norm(
        dim=-1, keepdim=True
    )
    return (directions * norms).to(dtype)


def draw_projection(
    rows: int,
    d: int,
    orthogonal: bool,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float64,
    draws: int | None = None,
) -> torch.Tensor:
    """(rows, d) (or (draws, rows, d)) random feature directions: orthogonal blocks, or iid
    N(0, I_d) rows."""
    if orthogonal:
        return orthogonal_gaussian(rows, d, generator, dtype, draws)
    lead = () if draws is None else (draws,)
    return torch.randn(*lead, rows, d, generator=generator, dtype=torch.float64).to(dtype)


def _feature_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def positive_features(x: torch.Tensor, w: torch.Tensor, is_query: bool) -> torch.Tensor:
    """x (..., d) already scaled, w (M, d) -> (..., M) = M^-1/2 exp(w . x - |x|^2/2); a query's
    features are divided by their maximum (cancels in attention; set is_query=False for
    the raw estimate)."""
    x = x.to(_feature_dtype(x))
    logits = x @ w.to(x.dtype).transpose(-1, -2) - x.square().sum(-1, keepdim=True) / 2  # (..., M)
    if is_query:
        logits = logits - logits.amax(-1, keepdim=True).detach()
    return torch.exp(logits) / math.sqrt(w.shape[-2])


def hyperbolic_features(x: torch.Tensor, w: torch.Tensor, is_query: bool) -> torch.Tensor:
    """x (..., d), w (M/2, d) -> (..., M) = M^-1/2 exp(-|x|^2/2) [exp(w . x), exp(-w . x)]."""
    x = x.to(_feature_dtype(x))
    proj = x @ w.to(x.dtype).transpose(-1, -2)  # (..., M/2)
    logits = torch.cat((proj, -proj), dim=-1) - x.square().sum(-1, keepdim=True) / 2  # (..., M)
    if is_query:
        logits = logits - logits.amax(-1, keepdim=True).detach()
    return torch.exp(logits) / math.sqrt(2 * w.shape[-2])


def trigonometric_features(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (..., d), w (M/2, d) -> (..., M) = (M/2)^-1/2 exp(|x|^2/2) [sin(w . x), cos(w . x)] (Rahimi
    & Recht features of the softmax kernel; for comparison only)."""
    x = x.to(_feature_dtype(x))
    proj = x @ w.to(x.dtype).transpose(-1, -2)  # (..., M/2)
    scale = torch.exp(x.square().sum(-1, keepdim=True) / 2) / math.sqrt(w.shape[-2])
    return torch.cat((proj.sin(), proj.cos()), dim=-1) * scale


PROJECTION_ROWS = {"positive": 1, "hyperbolic": 2}  # features per projection row


def favor_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w: torch.Tensor,
    scale: float,
    feature: str = "positive",
    state: torch.Tensor | None = None,
    key_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal FAVOR+ attention: q (B, H, T, d), k and v (B, K, T, d), projection w (P, d), softmax
    `scale` folded into both sides; state [S | z] (B, K, M, d + 1) of earlier tokens or None;
    key_mask (B, T) True for real tokens (padding adds nothing to the sums). -> (o (B, H, T, d), the
    state after these tokens)."""
    root = scale**0.5
    features = FAVOR_FEATURES[feature]
    phi_q = features(q * root, w, True)  # (B, H, T, M)
    phi_k = features(k * root, w, False)  # (B, K, T, M)
    if key_mask is not None:
        phi_k = phi_k * key_mask[:, None, :, None].to(phi_k.dtype)
    return causal_linear_attention(phi_q, phi_k, v, state)


class FavorState:
    """Constant-size decoding state of one FAVOR layer: kv = [S | z] (B, K, M, Dv +
    1) in float32."""

    def __init__(self, kv: torch.Tensor) -> None:
        self.kv = kv

    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


class FavorKernel(nn.Module):
    """One layer's FAVOR+ attention: the projection, its redraw policy, the call
    into linear attention.

    The projection is drawn from FAVOR_SEED + layer_idx at build time, so two models of one config
    (and two eval forwards) use the same features. With `redraw` = n, every n-th training forward
    (without a cache) draws anew from that generator; eval and decoding never redraw, so a prefill
    and its decode steps agree. The count of training forwards travels with the trainer's
    checkpoints (`training_state`), so a resumed run continues the same sequence of projections."""

    def __init__(
        self,
        head_dim: int,
        features: int,
        feature: str,
        orthogonal: bool,
        redraw: int | None,
        scale: float,
        layer_idx: int,
    ) -> None:
        super().__init__()
        self.head_dim, self.feature, self.orthogonal = head_dim, feature, orthogonal
        self.redraw, self.scale = redraw, scale
        self.rows = features // PROJECTION_ROWS[feature]
        self.generator = torch.Generator().manual_seed(FAVOR_SEED + layer_idx)
        self.register_buffer("projection", self._draw(), persistent=False)  # (P, d)
        self.calls = 0  # training forwards since build
        self.aux_loss: torch.Tensor | None = None  # FAVOR adds no loss term

    def _draw(self) -> torch.Tensor:
        return draw_projection(
            self.rows, self.head_dim, self.orthogonal, self.generator, torch.float32
        )

    def reset_buffers(self) -> None:
        """The projection of the current draw count (after building on the meta device or
        loading a state)."""
        self.load_training_state({"calls": self.calls})

    def training_state(self) -> dict[str, int]:
        """What the trainer checkpoints beside the weights (state.pt): the training forwards
        counted so far, so a resumed run redraws where the uninterrupted one would, with
        the same projection."""
        return {"calls": self.calls}

    def load_training_state(self, state: dict[str, int]) -> None:
        """Set the call count and replay the generator to that point's projection: the forward with
        count c redraws for c = n, 2n, ..., so after C calls the projection is draw number 1 + (C -
        1) // n."""
        self.calls = int(state["calls"])
        draws = 1 + (self.calls - 1) // self.redraw if self.redraw and self.calls else 1
        self.generator.manual_seed(self.generator.initial_seed())
        for _ in range(draws):
            projection = self._draw()
        self.projection = projection.to(self.projection.device)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        state: FavorState | None,
        key_mask: torch.Tensor | None = None,
        decoding: bool = False,
        slopes: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, FavorState]:
        """q (B, H, T, d), k and v (B, K, T, d) -> (o (B, H, T, d), the new state). `slopes` (ALiBi)
        must be None: the running sums are not decayed (ModelConfig refuses ALiBi with FAVOR)."""
        if slopes is not None:
            raise ValueError(
                "FAVOR+ takes no ALiBi slopes: its running sums are not decayed per query head"
            )
        if self.training and not decoding and self.redraw:
            if self.calls and self.calls % self.redraw == 0:
                self.projection = self._draw().to(self.projection.device)
            self.calls += 1
        o, kv = favor_attention(
            q,
            k,
            v,
            self.projection,
            self.scale,
            self.feature,
            None if state is None else state.kv,
            key_mask,
        )
        return o, FavorState(kv)
