"""The option groups of the linear attention kernels (`attn_kernel`, docs/linear-attention.md),
without torch: FAVOR+ (`Favor`) and Transformer-VQ (`VQ`). Each validates its own fields, refuses
what its kernel cannot carry (`LinearKernel.check_with`), knows what the kernel costs (FLOPs,
decoding state bytes, the phrases `archlab inspect` and `generate --report-memory` print) and builds
its module, so no code outside nn/ asks which kernel a model has. Their names are
nn/config/choices.py's LINEAR_KERNELS; the other option groups are in groups.py.

No torch here: the config imports this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from archlab.nn.config.base import Group, bad, flag, number, one_of, positive_int
from archlab.nn.config.choices import FAVOR_FEATURES, VQ_ASSIGNS
from archlab.nn.positions.scaling import ROPE_KINDS, RopeScaling
from archlab.nn.registry import resolve


class LinearKernel(Group):
    """What the linear kernels' groups share: the refusals of what they cannot do. A linear kernel
    never forms the T x S scores, so nothing that edits them can work, except ALiBi where its decay
    factors into the state (`takes_alibi`: VQ's per-head decayed code sums); it folds each key into
    a state once, so keys cannot be re-rotated later either."""

    takes_alibi: ClassVar[bool] = False

    def check_with(
        self,
        kernel: str,
        position: str,
        attn_softcap: float | None,
        sliding_window: int | None,
        attn_dropout: float,
        rope_scaling: RopeScaling | None,
    ) -> None:
        """Refuse, in one line, a setting of the model that this kernel (`kernel`) cannot carry."""
        if attn_softcap is not None:
            allowed = f"None with attn_kernel={kernel!r} (no scores to cap)"
            raise bad("attn_softcap", attn_softcap, allowed)
        if position == "relative":
            raise bad(
                "position",
                "relative",
                f"rope, sinusoidal, learned, none or (vq) alibi with attn_kernel={kernel!r} (T5's "
                "bucketed bias is not a query factor times a key factor, so no state can carry it)",
            )
        if position == "alibi" and not self.takes_alibi:
            raise bad(
                "position",
                "alibi",
                f"rope, sinusoidal, learned or none with attn_kernel={kernel!r} (its running sums "
                "are not decayed per query head; attn_kernel='vq' takes ALiBi)",
            )
        if sliding_window is not None:
            raise bad("sliding_window", sliding_window, f"None with attn_kernel={kernel!r}")
        if attn_dropout:
            allowed = f"0 with attn_kernel={kernel!r} (no probabilities)"
            raise bad("attn_dropout", attn_dropout, allowed)
        kind = ROPE_KINDS[rope_scaling.kind] if rope_scaling is not None else None
        if kind is not None and (kind.length_dependent or kind.remaps_positions):
            raise bad(
                "rope.scaling.kind",
                rope_scaling.kind,
                f"a static schedule with attn_kernel={kernel!r} (cached keys are folded into the "
                "state, never re-rotated)",
            )


@dataclass(frozen=True)
class Favor(LinearKernel):
    """FAVOR+ (Choromanski et al., "Rethinking Attention with Performers", arXiv 2009.14794)."""

    # random features per head; None = round(head_dim ln head_dim) (Theta(d log d))
    features: int | None = None
    # orthogonal blocks of features: lower variance, still unbiased (paper, sec. 2.4)
    orthogonal: bool = True
    # positive (exp) | hyperbolic (exp(+-w.x): lower variance, same width)
    feature: str = "positive"
    # draw new features every n training forwards; None = fixed (from the seed)
    redraw: int | None = None

    kernel: ClassVar[str] = "archlab.nn.attention.linear.favor:FavorKernel"
    # its state is one size at every step: a compiled step never recompiles
    static_decode_shape: ClassVar[bool] = True
    flops_formula: ClassVar[str] = "4*(H+K)*M*Dh per layer: features, state read and update"
    state_formula: ClassVar[str] = "state [S | z]: layers*K*M*(Dh+1)*4"
    state_kind: ClassVar[str] = "a fixed-size state"

    def __post_init__(self) -> None:
        positive_int("favor.features", self.features, or_none=True)
        positive_int("favor.redraw", self.redraw, or_none=True)
        one_of("favor.feature", self.feature, FAVOR_FEATURES)
        flag("favor.orthogonal", self.orthogonal)
        if self.feature == "hyperbolic" and self.features is not None and self.features % 2:
            raise bad("favor.features", self.features, "an even number with feature='hyperbolic'")

    def derived(self, head_dim: int) -> dict[str, Any]:
        return {"features": default_favor_features(head_dim, self.feature)}

    def build(self, n_kv_heads: int, head_dim: int, scale: float, layer_idx: int) -> Any:
        return resolve(self.kernel)(
            head_dim, self.features, self.feature, self.orthogonal, self.redraw, scale, layer_idx
        )

    def attention_flops(self, heads: int, kv_heads: int, head_dim: int, context: int) -> int:
        """Per token and layer: phi of q and k (M x Dh each), the state update and read (M
        x Dh each)."""
        return 4 * (heads + kv_heads) * self.features * head_dim

    def state_bytes(
        self, heads: int, kv_heads: int, head_dim: int, context: int, element: int, alibi: bool
    ) -> int:
        """One layer's [S | z] per K/V head: M x (Dh + 1), at every context."""
        return kv_heads * self.features * (head_dim + 1) * element

    def largest_state_context(self, max_seq_len: int) -> int:
        return max_seq_len  # one size at every context

    def describe_state(self, bound: int, alibi: bool) -> str:
        return (
            "one size at any context: per layer and K/V head the running sums [S | z] of "
            f"{self.features} features x (head_dim + 1), {bound:,} bytes"
        )


def default_favor_features(head_dim: int, feature: str) -> int:
    """round(head_dim ln head_dim), Performer's Theta(d log d) (lucidrains' default),
    even for hyperbolic."""
    m = max(2, round(head_dim * math.log(head_dim)))
    return m + m % 2 if feature == "hyperbolic" else m


@dataclass(frozen=True)
class VQ(LinearKernel):
    """Transformer-VQ (Lingle, arXiv 2309.16354), and soft VQ (Su, kexue.fm/archives/9862)."""

    codes: int = 512  # codebook size per K/V head (512 in all of Lingle's experiments)
    block: int = 64  # block length: the current and previous block are exact, older ones compressed
    commit: float = 1e-4  # commitment loss coefficient (Lingle's c_beta), added to the model's loss
    # EMA decay of the codebook statistics (Lingle's c_gamma); 1 = frozen codebook
    ema: float = 0.99
    # hard (nearest code + STE) | soft (softmax(-|k - c|^2 / 2 tau), Su kexue.fm/archives/9862)
    assign: str = "hard"
    tau: float = 1.0  # soft assignment temperature (-> hard as tau -> 0)
    # let gradients flow through the compressed cache (Lingle: off, like Transformer-XL)
    cache_grad: bool = False

    kernel: ClassVar[str] = "archlab.nn.attention.linear.vq:VQKernel"
    takes_alibi: ClassVar[bool] = True  # its decay factors into per-head decayed code sums
    static_decode_shape: ClassVar[bool] = False  # its tail grows a token a step (up to two blocks)
    flops_formula: ClassVar[str] = "H*(4*C*Dh + 4*Dh*min(T, 2L)) + 2*K*C*Dh per layer"
    state_formula: ClassVar[str] = "state: last 2 blocks + per-code sums and counts"
    state_kind: ClassVar[str] = "a bounded state"

    def __post_init__(self) -> None:
        positive_int("vq.codes", self.codes)
        positive_int("vq.block", self.block)
        for name in ("commit", "ema", "tau"):
            number(f"vq.{name}", getattr(self, name))
        if self.commit < 0:
            raise bad("vq.commit", self.commit, "a number >= 0")
        if not 0 < self.ema <= 1:
            raise bad("vq.ema", self.ema, "a decay in (0, 1] (1 = frozen codebook)")
        if not self.tau > 0:
            raise bad("vq.tau", self.tau, "a positive temperature")
        one_of("vq.assign", self.assign, VQ_ASSIGNS)
        flag("vq.cache_grad", self.cache_grad)

    def build(self, n_kv_heads: int, head_dim: int, scale: float, layer_idx: int) -> Any:
        return resolve(self.kernel)(
            n_kv_heads,
            head_dim,
            self.codes,
            self.block,
            self.commit,
            self.ema,
            self.assign,
            self.tau,
            scale,
            self.cache_grad,
        )

    def attention_flops(self, heads: int, kv_heads: int, head_dim: int, context: int) -> int:
        """Per token and layer: scores against the C codes and the exact last two blocks, the cache
        read, the per-code sums' update."""
        C, Dh = self.codes, head_dim
        return heads * (4 * C * Dh + 4 * Dh * min(context, 2 * self.block)) + 2 * kv_heads * C * Dh

    def state_bytes(
        self, heads: int, kv_heads: int, head_dim: int, context: int, element: int, alibi: bool
    ) -> int:
        """One layer: the exact tail (L to 2L - 1 tokens once past the first block) as assignment
        rows and values, and the per-code value sums and counts (per query head with ALiBi, which
        decays them per head)."""
        L, C = self.block, self.codes
        tail = L + context % L if context >= L else context
        sums = heads if alibi else kv_heads
        return (kv_heads * tail * (C + head_dim) + sums * C * (head_dim + 1)) * element

    def largest_state_context(self, max_seq_len: int) -> int:
        return 2 * self.block - 1  # the tail peaks at 2L - 1 tokens

    def describe_state(self, bound: int, alibi: bool) -> str:
        L, C = self.block, self.codes
        sums = "query" if alibi else "K/V"
        return (
            f"bounded, not constant: per layer the exact tail (the last complete block of {L} "
            f"tokens and the current one, {L} to {2 * L - 1} tokens, each held as its assignment "
            f"row of {C} codes and its value) and per {sums} head the {C} codes' value sums and "
            f"counts; it rises and falls with the position in the block, at most {bound:,} bytes "
            "at any context"
        )
