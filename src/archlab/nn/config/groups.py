"""The option groups of `ModelConfig`, without torch: each switch's settings as
one frozen dataclass.

| switch (ModelConfig) | its group (that field)           | code                                 |
|----------------------|----------------------------------|--------------------------------------|
| position="rope"      | rope: `Rope` (RoPE)              | nn/positions/ (rope.py, scaling.py)  |
| attn_kernel="favor"  | favor: `Favor` (FAVOR+)          | nn/attention/linear/favor.py         |
| attn_kernel="vq"     | vq: `VQ` (Transformer-VQ)        | nn/attention/linear/vq.py            |
| block="gau"          | gau: `GAU` (gated attention)     | nn/attention/gau.py                  |
| (the group itself)   | cosine: `Cosine` (cosine scores) | nn/attention/attention.py, inputs.py |

A group validates its own fields in `__post_init__` (one line naming `ModelConfig.group.field`), as
`RopeScaling` does; `ModelConfig` fills it with its defaults when its switch is on and refuses it
when the switch is off, and checks what it must agree with elsewhere in the config (the rotary dims
against head_dim, ...). `cosine` has no switch beside it: None is off, a `Cosine` on. A linear
kernel's group also knows what the kernel costs (FLOPs, decoding state bytes, the phrases `archlab
inspect` and `generate --report-memory` print) and how to build its module, so no code outside nn/
asks which kernel a model has (docs/linear-attention.md): those two groups are kernels.py's. The
string choices the groups accept are nn/config/choices.py's.

No torch here: the config imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from archlab.nn.config.base import Group, bad, check_finite, flag, one_of, value_object
from archlab.nn.config.choices import COSINE_SCALES, GAU_ATTENTIONS, POSITION_LAYERS, ROPE_LAYOUTS
from archlab.nn.config.kernels import VQ, Favor
from archlab.nn.positions.scaling import ROPE_KINDS, RopeScaling


@dataclass(frozen=True)
class GAU(Group):
    """The gated attention unit (Hua et al., "Transformer Quality in Linear
    Time", arXiv 2202.10447)."""

    # softmax (Su) | relu2: relu(scale q.k)^2 / n, n the keys seen (Hua et al.)
    attention: str = "softmax"

    def __post_init__(self) -> None:
        one_of("gau.attention", self.attention, GAU_ATTENTIONS)


@dataclass(frozen=True)
class Cosine(Group):
    """Scaled cosine attention (Su, "Transformer upgrade 15", kexue.fm/archives/9859): q and k
    L2-normalised, scores times lambda = 4 log n."""

    scale: str = "fixed"  # lambda's n: fixed (max_seq_len / 2) | dynamic (the keys a query sees)

    def __post_init__(self) -> None:
        one_of("cosine.scale", self.scale, COSINE_SCALES)


@dataclass(frozen=True)
class Rope(Group):
    """Rotary position embedding (Su et al., RoFormer, arXiv 2104.09864): q and k rotated by their
    positions, so scores depend on relative distance; its scaling stretches it past the training
    length (nn/positions/scaling.py), its pattern mixes in NoPE layers, and window layers may rotate
    with their own base (Gemma 3)."""

    theta: float = 10000.0  # base: w_i = theta^(-2i/d_rot)
    layout: str = "half"  # half (rotate_half) | interleaved (pairs 2i, 2i+1: RoFormer, GPT-J)
    fraction: float = 1.0  # share of each head that rotates (NeoX 0.25)
    scaling: RopeScaling | None = None  # longer contexts (nn/positions/scaling.py)
    pattern: str = "R"  # cycled over layers: R = RoPE, N = NoPE ("RRRN": SmolLM3)
    local_theta: float | None = None  # window layers' base; None = theta (Gemma 3: 10k)
    local_scaling: bool = True  # window layers take `scaling` too; False: Gemma 3's

    def __post_init__(self) -> None:
        if isinstance(self.scaling, dict):  # a saved config, a Python caller
            scaling = value_object("rope.scaling", RopeScaling, self.scaling)
            object.__setattr__(self, "scaling", scaling)
        if self.scaling is not None and not isinstance(self.scaling, RopeScaling):
            allowed = "None, a dict of RopeScaling fields or a RopeScaling"
            raise bad("rope.scaling", self.scaling, allowed)
        check_finite(self, "ModelConfig.rope.")
        if self.scaling is not None:
            check_finite(self.scaling, "ModelConfig.rope.scaling.")
        if not _real(self.theta) or not self.theta > 1:
            raise bad("rope.theta", self.theta, "a base > 1")
        one_of("rope.layout", self.layout, ROPE_LAYOUTS)
        if not _real(self.fraction) or not 0.0 < self.fraction <= 1.0:
            raise bad("rope.fraction", self.fraction, "a fraction in (0, 1]")
        if (
            not isinstance(self.pattern, str)
            or not self.pattern
            or set(self.pattern) - set(POSITION_LAYERS)
        ):
            raise bad("rope.pattern", self.pattern, "a non-empty string of R (RoPE) and N (NoPE)")
        local = self.local_theta
        if local is not None and (not _real(local) or not local > 1):
            raise bad("rope.local_theta", local, "None or a base > 1")
        flag("rope.local_scaling", self.local_scaling)

    def check_with(self, head_dim: int, max_seq_len: int) -> None:
        """What the model's shape decides: an even, non-zero rotary dim, and a training-only
        remap whose window training reaches past."""
        d_rot = self.rotary_dim(head_dim)
        if d_rot % 2 or d_rot == 0:
            raise bad(
                "rope.fraction",
                self.fraction,
                f"must give an even, non-zero rotary dim (head_dim={head_dim} * "
                f"fraction = {head_dim * self.fraction:g})",
            )
        s = self.scaling
        if s is not None and ROPE_KINDS[s.kind].training_only and not s.window < max_seq_len:
            raise bad(
                "rope.scaling.window",
                s.window,
                f"< max_seq_len={max_seq_len} with kind={s.kind!r} (training must reach "
                "past the window)",
            )

    def rotary_dim(self, head_dim: int) -> int:
        """Rotary dims per head: head_dim * fraction, rounded down."""
        return int(head_dim * self.fraction)

    @property
    def local_differs(self) -> bool:
        """Whether window layers rotate differently from full ones: their own base, or no share
        of the scaling."""
        unscaled = not self.local_scaling and self.kind != "none"
        return self.local_theta is not None or unscaled

    @property
    def local(self) -> tuple[float, RopeScaling | None]:
        """The base and scaling of window layers (where `local_differs`)."""
        theta = self.theta if self.local_theta is None else self.local_theta
        return theta, self.scaling if self.local_scaling else None

    @property
    def kind(self) -> str:
        """The scaling kind, "none" without one."""
        return "none" if self.scaling is None else self.scaling.kind


def _real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ModelConfig field -> (its group's class, the switch and the value that turn the group on); a
# group with no switch (None) is its own: None off, a group on. The linear kernels' groups are
# choices.LINEAR_KERNELS' entries (tests/nn/test_registry.py checks they agree)
GROUPS: dict[str, tuple[type, str | None, object]] = {
    "rope": (Rope, "position", "rope"),
    "gau": (GAU, "block", "gau"),
    "cosine": (Cosine, None, None),
    "favor": (Favor, "attn_kernel", "favor"),
    "vq": (VQ, "attn_kernel", "vq"),
}
