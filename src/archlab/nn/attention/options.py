"""The option groups of attention, without torch: each switch's settings as one frozen dataclass.

| switch (ModelConfig)  | its group (that field)           | code                                 |
|-----------------------|----------------------------------|--------------------------------------|
| attn_kernel="favor"   | favor: `Favor` (FAVOR+)          | nn/attention/linear/favor.py         |
| attn_kernel="vq"      | vq: `VQ` (Transformer-VQ)        | nn/attention/linear/vq.py            |
| block="gau"           | gau: `GAU` (gated attention)     | nn/attention/gau.py                  |
| cosine_attention=True | cosine: `Cosine` (cosine scores) | nn/attention/attention.py, inputs.py |

A group is validated in its own `__post_init__`, as `RopeScaling` is; `ModelConfig` fills it with
its defaults when the switch is on and refuses it when the switch is off. A linear kernel's group
also knows what the kernel costs (FLOPs, decoding state bytes, the phrases `archlab inspect` and
`generate --report-memory` print) and how to build its module, so no code outside nn/ asks which
kernel a model has (docs/linear-attention.md).

No torch here: nn/config.py imports this module.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from archlab.nn.registry import Registry, resolve

# FAVOR+ feature maps (nn/attention/linear/favor.py): positive exp features | hyperbolic exp(+-w.x),
# lower variance (paper, lemma 2)
FAVOR_FEATURES = Registry(
    "favor feature",
    {
        "positive": "archlab.nn.attention.linear.favor:positive_features",
        "hyperbolic": "archlab.nn.attention.linear.favor:hyperbolic_features",
    },
)
# nn/attention/linear/codebook.py: nearest code + straight-through | softmax over codes (Su, 9862)
VQ_ASSIGNS = ("hard", "soft")
# a GAU's A: softmax (Su, kexue.fm/archives/8934) | relu(s)^2 / n (Hua et al.)
GAU_ATTENTIONS = ("softmax", "relu2")
# cosine attention's lambda: 4 log(max_seq_len / 2) | 4 log(keys seen)
COSINE_SCALES = ("fixed", "dynamic")


class OptionError(ValueError):
    """A bad group value; nn/config.py re-raises it as a ConfigError (same message)."""


def _bad(group: str, name: str, value: object, allowed: str) -> OptionError:
    return OptionError(f"ModelConfig.{group}.{name}={value!r} is not allowed: {allowed}")


def _positive_int(group: str, name: str, value: object, or_none: bool = False) -> None:
    if value is None and or_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(group, name, value, "a positive integer" + (" or None" if or_none else ""))


def _one_of(group: str, name: str, value: object, allowed: tuple[str, ...] | Registry) -> None:
    if value not in allowed:
        raise _bad(group, name, value, "one of " + ", ".join(allowed))


def _number(group: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(group, name, value, "a finite number")


class Group:
    """What every option group offers: its fields derived from the model's shape where left None."""

    def derived(self, head_dim: int) -> dict[str, Any]:
        """field -> the value it takes when None (none by default)."""
        return {}

    def resolved(self, head_dim: int) -> Group:
        """These settings with every derived field that is None filled in."""
        fill = {k: v for k, v in self.derived(head_dim).items() if getattr(self, k) is None}
        return dataclasses.replace(self, **fill) if fill else self


@dataclass(frozen=True)
class Favor(Group):
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
        _positive_int("favor", "features", self.features, or_none=True)
        _positive_int("favor", "redraw", self.redraw, or_none=True)
        _one_of("favor", "feature", self.feature, FAVOR_FEATURES)
        if not isinstance(self.orthogonal, bool):
            raise _bad("favor", "orthogonal", self.orthogonal, "True or False")
        if self.feature == "hyperbolic" and self.features is not None and self.features % 2:
            raise _bad(
                "favor", "features", self.features, "an even number with feature='hyperbolic'"
            )

    def derived(self, head_dim: int) -> dict[str, Any]:
        return {"features": default_favor_features(head_dim, self.feature)}

    def build(self, n_kv_heads: int, head_dim: int, scale: float, layer_idx: int) -> Any:
        return resolve(self.kernel)(
            head_dim, self.features, self.feature, self.orthogonal, self.redraw, scale, layer_idx
        )

    def attention_flops(self, heads: int, kv_heads: int, head_dim: int, context: int) -> int:
        """Per token and layer: phi of q and k (M x Dh each), the state update and read (M x Dh
        each)."""
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
            f"{self.features} "
            f"features x (head_dim + 1), {bound:,} bytes"
        )


def default_favor_features(head_dim: int, feature: str) -> int:
    """round(head_dim ln head_dim), Performer's Theta(d log d) (lucidrains' default), even for
    hyperbolic."""
    m = max(2, round(head_dim * math.log(head_dim)))
    return m + m % 2 if feature == "hyperbolic" else m


@dataclass(frozen=True)
class VQ(Group):
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
    static_decode_shape: ClassVar[bool] = False  # its tail grows a token a step (up to two blocks)
    flops_formula: ClassVar[str] = "H*(4*C*Dh + 4*Dh*min(T, 2L)) + 2*K*C*Dh per layer"
    state_formula: ClassVar[str] = "state: last 2 blocks + per-code sums and counts"
    state_kind: ClassVar[str] = "a bounded state"

    def __post_init__(self) -> None:
        _positive_int("vq", "codes", self.codes)
        _positive_int("vq", "block", self.block)
        for name in ("commit", "ema", "tau"):
            _number("vq", name, getattr(self, name))
        if self.commit < 0:
            raise _bad("vq", "commit", self.commit, "a number >= 0")
        if not 0 < self.ema <= 1:
            raise _bad("vq", "ema", self.ema, "a decay in (0, 1] (1 = frozen codebook)")
        if not self.tau > 0:
            raise _bad("vq", "tau", self.tau, "a positive temperature")
        _one_of("vq", "assign", self.assign, VQ_ASSIGNS)
        if not isinstance(self.cache_grad, bool):
            raise _bad("vq", "cache_grad", self.cache_grad, "True or False")

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
            "tokens and the "
            f"current one, {L} to {2 * L - 1} tokens, each held as its assignment row of {C} codes "
            "and its "
            f"value) and per {sums} head the {C} codes' value sums and counts; it rises and falls "
            "with the "
            f"position in the block, at most {bound:,} bytes at any context"
        )


@dataclass(frozen=True)
class GAU(Group):
    """The gated attention unit (Hua et al., "Transformer Quality in Linear Time", arXiv
    2202.10447)."""

    # softmax (Su) | relu2: relu(scale q.k)^2 / n, n the keys seen (Hua et al.)
    attention: str = "softmax"

    def __post_init__(self) -> None:
        _one_of("gau", "attention", self.attention, GAU_ATTENTIONS)


@dataclass(frozen=True)
class Cosine(Group):
    """Scaled cosine attention (Su, "Transformer upgrade 15", kexue.fm/archives/9859): q and k
    L2-normalised, scores times lambda = 4 log n."""

    scale: str = "fixed"  # lambda's n: fixed (max_seq_len / 2) | dynamic (the keys a query sees)

    def __post_init__(self) -> None:
        _one_of("cosine", "scale", self.scale, COSINE_SCALES)


# attn_kernel -> its option group (ModelConfig's field of the same name holds one); "softmax" has
# none
LINEAR_KERNELS: dict[str, type[Favor] | type[VQ]] = {"favor": Favor, "vq": VQ}
# ModelConfig field -> (its group's class, the switch and the value that turns the group on)
GROUPS: dict[str, tuple[type, str, object]] = {
    **{name: (cls, "attn_kernel", name) for name, cls in LINEAR_KERNELS.items()},
    "gau": (GAU, "block", "gau"),
    "cosine": (Cosine, "cosine_attention", True),
}
