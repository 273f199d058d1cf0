"""RoPE's frequency schedules: one pure function per scaling kind, named by the kind's
`RopeKind.frequencies` (nn/positions/scaling.py): (d_rot, theta, scaling[, seq_len]) -> (inv_freq,
attention_factor); attention_factor multiplies cos and sin (YaRN's temperature).

Kinds (s = factor, L0 = original_max_seq_len, w_i = theta^(-2i/d_rot)):
    none          w_i
    linear        w_i / s                           Position Interpolation (Chen et al., 2306.15595)
    ntk           base theta * s^(d/(d-2)), static  NTK-aware (bloc97; YaRN paper 2309.00071, 3.1)
    ntk_by_parts  ramp linear in r = L0 / lambda_i  YaRN eq. 17-18 (alpha beta_slow, beta beta_fast)
    dynamic       NTK-aware, its scale set by the current length, as transformers' `dynamic`
    yarn          by-parts ramp linear in the pair index, temperature 0.1 ln s + 1 (2309.00071)
    llama3        by-parts with alpha, beta = low_freq_factor, high_freq_factor (Llama 3.1)
    ntk_mixed     NTK-RoPE-mixed (Su, kexue.fm/archives/9706): pair i (j = i + 1) gets
                  w_i exp(-a j^b), a = ln(s) / (d/2)^b, b = mixed_b (0.75 in Su's patch): high
                  frequencies nearly kept, the lowest interpolated by exactly s
    rerope, leaky_rerope, inv_leaky_rerope: w_i; they remap positions (nn/positions/rerope.py)
Each schedule but ntk_mixed equals transformers 5's `ROPE_INIT_FUNCTIONS` entry
(modeling_rope_utils.py; tested against it); the Hugging Face spelling: `archlab.interop.hf_rope`.

Shapes: inv_freq (d_rot/2,), or (B, d_rot/2) for a length-dependent schedule given lengths (B,).
"""

from __future__ import annotations

import math

import torch

from archlab.nn.positions.scaling import RopeScaling, ntk_theta


def base_inv_freq(d_rot: int, theta: float) -> torch.Tensor:
    """w_i = theta^(-2i/d_rot), i = 0..d_rot/2-1, in float64 for exactness before the cast."""
    return theta ** (-torch.arange(0, d_rot, 2, dtype=torch.float64) / d_rot)


def no_scaling(d_rot: int, theta: float, scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    return base_inv_freq(d_rot, theta), 1.0


def linear(d_rot: int, theta: float, scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    """Position Interpolation: positions / s, i.e. every frequency / s."""
    return base_inv_freq(d_rot, theta) / scaling.factor, 1.0


def ntk(d_rot: int, theta: float, scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    return base_inv_freq(d_rot, ntk_theta(theta, d_rot, scaling.factor)), 1.0


def ntk_mixed(d_rot: int, theta: float, scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    """NTK-RoPE-mixed (Su, kexue.fm/archives/9706): w_i exp(-a (i + 1)^b), a = ln(s) / (d_rot/2)^b,
    so the lowest frequency is divided by exactly s (as PI) and the highest barely moves (as
    NTK-aware keeps them)."""
    b = scaling.mixed_b
    a = math.log(scaling.factor) / (d_rot / 2) ** b
    j = torch.arange(1, d_rot // 2 + 1, dtype=torch.float64)
    return base_inv_freq(d_rot, theta) * torch.exp(-a * j**b), 1.0


def by_parts(inv0: torch.Tensor, factor: float, l0: int, alpha: float, beta: float) -> torch.Tensor:
    """YaRN eq. 18: h(w) = (1 - g) w / s + g w, g = clip((r - alpha) / (beta - alpha), 0, 1), r =
    L0 / lambda."""
    r = l0 * inv0 / (2 * math.pi)  # rotations each pair makes over the training length
    gamma = ((r - alpha) / (beta - alpha)).clamp(0, 1)
    return (1 - gamma) * inv0 / factor + gamma * inv0


def ntk_by_parts(d_rot: int, theta: float, scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    inv0 = base_inv_freq(d_rot, theta)
    return by_parts(
        inv0, scaling.factor, scaling.original_max_seq_len, scaling.beta_slow, scaling.beta_fast
    ), 1.0


def llama3(d_rot: int, theta: float, scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    inv0 = base_inv_freq(d_rot, theta)
    s = scaling
    return by_parts(
        inv0, s.factor, s.original_max_seq_len, s.low_freq_factor, s.high_freq_factor
    ), 1.0


def dynamic(
    d_rot: int, theta: float, scaling: RopeScaling, seq_len: torch.Tensor | int | None = None
) -> tuple[torch.Tensor, float]:
    """transformers' Dynamic NTK at current length l = max(seq_len, M), M = original_max_seq_len: b'
    = b * (s l / M - (s - 1))^(d/(d-2)). The paper (and bloc97's post) scale by s = l / M instead;
    the two agree only for s = 1 (for s = 2 at l = 2M transformers stretches by 3). A (B,) seq_len
    gives (B, d/2)."""
    if seq_len is None:
        return base_inv_freq(d_rot, theta), 1.0
    m = scaling.original_max_seq_len
    ell = torch.as_tensor(seq_len).double().clamp_min(m)
    # (B,) or ()
    base = theta * (scaling.factor * ell / m - (scaling.factor - 1)) ** (d_rot / (d_rot - 2))
    exponent = torch.arange(0, d_rot, 2, dtype=torch.float64, device=ell.device) / d_rot
    return base[..., None] ** -exponent, 1.0


def yarn_mscale(factor: float, k: float = 1.0) -> float:
    """m(s, k) = 0.1 k ln s + 1 (1 for s <= 1): YaRN's sqrt(1/t), applied to cos and sin."""
    return 1.0 if factor <= 1 else 0.1 * k * math.log(factor) + 1.0


def yarn(d_rot: int, theta: float, scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    """By-parts with the ramp linear in the pair index between the pairs making beta_fast and
    beta_slow rotations over L0 (the authors' code, which transformers follows; the paper's ramp is
    linear in r)."""
    s = scaling

    def pair_with_rotations(n: float) -> float:  # solves L0 / lambda_i = n for the pair index
        return d_rot * math.log(s.original_max_seq_len / (2 * math.pi * n)) / (2 * math.log(theta))

    lo, hi = pair_with_rotations(s.beta_fast), pair_with_rotations(s.beta_slow)
    if s.truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d_rot - 1)
    hi = hi + 0.001 if lo == hi else hi  # as transformers: avoid 0/0 when the band is empty
    ramp = ((torch.arange(d_rot // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
    inv0 = base_inv_freq(d_rot, theta)
    inv_freq = inv0 * (1 - ramp) + inv0 / s.factor * ramp
    if s.attention_factor is not None:
        factor = s.attention_factor
    elif s.mscale and s.mscale_all_dim:
        factor = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim)
    else:
        factor = yarn_mscale(s.factor)
    return inv_freq, factor
