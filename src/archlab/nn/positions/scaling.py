"""`RopeScaling` (RoPE stretched past the training length) and `ROPE_KINDS`: what each kind is.

A kind is one `RopeKind` entry: its frequency function (torch, named lazily as "module:function",
resolved where the tables are built), the `RopeScaling` fields it requires and reads, whether it
takes a factor, whether its frequencies follow the current length, whether it remaps relative
positions (in training only?), the context it handles, and the scaling it applies to evaluate a
model at a longer length (`RopeKind.at`: `archlab eval length`, the lab's long-context measures and
`archlab plot rope` ask it). The formulas are in nn/positions/rope.py.

No torch here: the config (nn/config/) imports this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from archlab.nn.registry import resolve


def _bad(name: str, value: object, allowed: str) -> ValueError:
    return ValueError(f"RopeScaling.{name}={value!r} is not allowed: {allowed}")


@dataclass(frozen=True)
class RopeScaling:
    """How to stretch RoPE's frequencies past the training length; `kind` is a key of ROPE_KINDS.

    Each kind reads only the fields its `RopeKind` entry lists (required, optional); setting any
    other field away from its default is an error, so a typo'd schedule never silently falls
    back to defaults.
    """

    kind: str = "none"  # a key of ROPE_KINDS; "none" keeps theta^(-2i/d)
    factor: float = 1.0  # context extension ratio s (>= 1); 1 reproduces plain RoPE for every kind
    # L0, the length trained at (dynamic: M, where scaling starts)
    original_max_seq_len: int | None = None
    # by-parts ramp end: pairs with > beta_fast rotations in L0 keep w_i (paper beta)
    beta_fast: float = 32.0
    # by-parts ramp start: pairs with < beta_slow rotations in L0 get w_i / s (alpha)
    beta_slow: float = 1.0
    low_freq_factor: float | None = None  # llama3: alpha of the by-parts ramp (Llama 3.1 uses 1)
    high_freq_factor: float | None = None  # llama3: beta of the by-parts ramp (Llama 3.1 uses 4)
    attention_factor: float | None = None  # yarn: explicit cos/sin multiplier; None = 0.1 ln s + 1
    mscale: float | None = None  # yarn (DeepSeek): numerator k of m(s, k) = 0.1 k ln s + 1
    # yarn (DeepSeek): denominator k; both set -> m(s, mscale)/m(s, all_dim)
    mscale_all_dim: float | None = None
    # yarn: floor/ceil the ramp ends to whole pairs, as the authors' code does
    truncate: bool = True
    # rerope, leaky_rerope, inv_leaky_rerope: W, the relative distances kept exact
    window: int | None = None
    # rerope, leaky_rerope: remap in eval mode only, plain RoPE in training (HWFA2, 9731)
    inference_only: bool = False
    # ntk_mixed: exponent b of the per-pair stretch exp(-a j^b) (kexue.fm/archives/9706)
    mixed_b: float = 0.75

    def __post_init__(self) -> None:
        if self.kind not in ROPE_KINDS:
            raise _bad("kind", self.kind, "one of " + ", ".join(ROPE_KINDS))
        if (
            isinstance(self.factor, bool)
            or not isinstance(self.factor, (int, float))
            or not self.factor >= 1
        ):
            raise _bad("factor", self.factor, "a number >= 1 (the context extension ratio)")
        kind = ROPE_KINDS[self.kind]
        if kind.no_factor is not None and self.factor != 1:
            raise _bad("factor", self.factor, f"1 with kind={self.kind!r} ({kind.no_factor})")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in kind.required and value is None:
                raise _bad(f.name, None, f"required with kind={self.kind!r}")
            if (
                f.name not in ("kind", "factor", *kind.required, *kind.optional)
                and value != f.default
            ):
                users = [
                    k
                    for k, entry in ROPE_KINDS.items()
                    if f.name in entry.required + entry.optional
                ]
                raise _bad(f.name, value, f"only with kind in {users} (kind={self.kind!r})")
        self._check_values()

    def _check_values(self) -> None:
        if self.original_max_seq_len is not None and (
            isinstance(self.original_max_seq_len, bool)
            or not isinstance(self.original_max_seq_len, int)
            or self.original_max_seq_len < 1
        ):
            raise _bad("original_max_seq_len", self.original_max_seq_len, "a positive integer")
        if not 0 < self.beta_slow < self.beta_fast:
            raise _bad("beta_fast", self.beta_fast, f"> beta_slow={self.beta_slow} > 0")
        if self.low_freq_factor is not None and not 0 < self.low_freq_factor < (
            self.high_freq_factor or math.inf
        ):
            raise _bad(
                "high_freq_factor",
                self.high_freq_factor,
                f"> low_freq_factor={self.low_freq_factor} > 0",
            )
        if self.window is not None and (
            isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1
        ):
            raise _bad("window", self.window, "a positive integer (the exact distances of ReRoPE)")
        if not isinstance(self.inference_only, bool):
            raise _bad("inference_only", self.inference_only, "True or False")
        if ROPE_KINDS[self.kind].training_only and not self.factor > 1:
            raise _bad(
                "factor", self.factor, f"> 1 with kind={self.kind!r} (the training slope beyond W)"
            )
        if (
            isinstance(self.mixed_b, bool)
            or not isinstance(self.mixed_b, (int, float))
            or not self.mixed_b > 0
        ):
            raise _bad("mixed_b", self.mixed_b, "a number > 0 (the exponent of NTK-RoPE-mixed)")
        for name in ("attention_factor", "mscale", "mscale_all_dim"):
            if getattr(self, name) is not None and not getattr(self, name) >= 0:
                raise _bad(name, getattr(self, name), "None or a number >= 0")


def ntk_theta(theta: float, d_rot: int, factor: float) -> float:
    """NTK-aware base b' = b * s^(d/(d-2)): the lowest frequency is interpolated by exactly s
    (nn/positions/rope.py's tables and the Hugging Face export of a static NTK scaling use it;
    arithmetic, no torch)."""
    return theta * factor ** (d_rot / (d_rot - 2))


def stretched_limit(scaling: RopeScaling, max_seq_len: int) -> int | None:
    """Tokens a model with this scaling handles: the stretched length factor * L0
    (at least max_seq_len)."""
    return max(max_seq_len, int((scaling.original_max_seq_len or max_seq_len) * scaling.factor))


def no_limit(scaling: RopeScaling, max_seq_len: int) -> int | None:
    """ReRoPE: no relative position past the window is ever seen, so no length is out of range."""
    return None


def leaky_rerope_limit(scaling: RopeScaling, max_seq_len: int) -> int | None:
    """Leaky ReRoPE: the longest L whose largest relative position W + (L - 1 - W) / k stays within
    the trained max_seq_len - 1."""
    return max(
        max_seq_len, scaling.window + 1 + int(scaling.factor * (max_seq_len - 1 - scaling.window))
    )


def inv_leaky_rerope_limit(scaling: RopeScaling, max_seq_len: int) -> int | None:
    """Inverse Leaky ReRoPE: training at N = max_seq_len reached relative positions up to W + (N - 1
    - W) s, so plain RoPE at inference covers that many distances."""
    return max(
        max_seq_len, scaling.window + 1 + int(scaling.factor * (max_seq_len - 1 - scaling.window))
    )


Evaluation = Callable[[float, int, "int | None", "float | str"], "dict[str, Any] | None"]
LEAKY_K_MIN = 16.0  # Su's ablation (9708): k = 16, 32, 64 score alike, k = 8 is worse


def leaky_slope(length: int, train_len: int, window: int, leaky_k: float | str = "half") -> float:
    """Leaky ReRoPE's k at `length`: "half" is Su's rule (kexue.fm/archives/9708: the largest
    relative position any query sees, W + (L - 1 - W) / k, stays within half the training length; k
    >= LEAKY_K_MIN), "train" the older mapping onto the longest trained distance, k = (L - 1 - W) /
    (L_train - 1 - W); a number is k itself."""
    if leaky_k == "train":
        return max(1.0, (length - 1 - window) / (train_len - 1 - window))
    if leaky_k != "half":
        if isinstance(leaky_k, bool) or not isinstance(leaky_k, (int, float)) or not leaky_k >= 1:
            raise ValueError(
                f"leaky_k={leaky_k!r} is not allowed: 'half' (Su's rule), 'train' or a number >= 1"
            )
        return float(leaky_k)
    if not window < train_len / 2:
        raise ValueError(
            f"window={window} is not allowed with leaky_k='half': below max_seq_len / 2 = "
            f"{train_len / 2:g} (the largest position Su's rule allows), or pass leaky_k"
        )
    return max(LEAKY_K_MIN, (length - 1 - window) / (train_len / 2 - window))


def plain_at(
    length: float, train_len: int, window: int | None, leaky_k: float | str
) -> dict[str, Any] | None:
    """The model as trained: no scaling."""
    return None


def stretch_at(
    length: float, train_len: int, window: int | None, leaky_k: float | str
) -> dict[str, Any]:
    """Factor s = max(1, L / L_train)."""
    return {"factor": max(1.0, length / train_len)}


def stretch_from_at(
    length: float, train_len: int, window: int | None, leaky_k: float | str
) -> dict[str, Any]:
    """Factor s from the training length L0 = L_train (by-parts, Dynamic NTK, YaRN)."""
    return {"factor": max(1.0, length / train_len), "original_max_seq_len": train_len}


def llama3_at(
    length: float, train_len: int, window: int | None, leaky_k: float | str
) -> dict[str, Any]:
    """By-parts with Llama 3.1's ramp (alpha = low_freq_factor 1, beta = high_freq_factor 4)."""
    return {
        **stretch_from_at(length, train_len, window, leaky_k),
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    }


def rerope_at(
    length: float, train_len: int, window: int | None, leaky_k: float | str
) -> dict[str, Any]:
    """Window W (default L_train / 2), up to the trained length: W = L_train is plain RoPE there."""
    w = train_len // 2 if window is None else window
    if not 1 <= w <= train_len:
        raise ValueError(f"window={w} is not allowed: between 1 and max_seq_len = {train_len}")
    return {"window": w}


def leaky_rerope_at(
    length: float, train_len: int, window: int | None, leaky_k: float | str
) -> dict[str, Any]:
    """Window W (default L_train / 4) and slope 1/k by `leaky_slope`'s rule."""
    w = train_len // 4 if window is None else window
    if not 1 <= w < train_len - 1:
        raise ValueError(
            f"window={w} is not allowed: between 1 and max_seq_len - 2 = {train_len - 2}"
        )
    return {"factor": leaky_slope(length, train_len, w, leaky_k), "window": w}


@dataclass(frozen=True)
class RopeKind:
    """What archlab knows about one RoPE scaling kind (its Hugging Face spelling lives in
    interop/hf_rope.py, which knows that format). One entry of ROPE_KINDS is the whole kind: nothing
    else lists kinds."""

    name: str  # the key of ROPE_KINDS and RopeScaling.kind
    # "module:function", (d_rot, theta, scaling[, seq_len]) -> (inv_freq (d_rot/2,), attention
    # factor)
    frequencies: str
    required: tuple[str, ...] = ()  # RopeScaling fields the kind needs (besides kind and factor)
    # fields it reads when given; every other field must keep its default
    optional: tuple[str, ...] = ()
    # frequencies change with the current length: keys are cached unrotated
    length_dependent: bool = False
    # relative positions remapped per (query, key): the plan of nn/positions/rerope.py
    remaps_positions: bool = False
    # (scaling, max_seq_len) -> tokens
    context_limit: Callable[[RopeScaling, int], int | None] = stretched_limit
    no_factor: str | None = None  # why the kind takes no factor (it must be 1); None: it takes one
    # the remap holds in training mode only; in eval mode the kind is plain RoPE
    training_only: bool = False
    # (length, train_len, window, leaky_k) -> the RopeScaling fields (besides kind) for evaluating a
    # model trained at train_len at length tokens, or None for plain RoPE; None here: no
    # inference-time form (training_only)
    evaluation: Evaluation | None = stretch_at

    def frequency_function(self) -> Callable[..., Any]:
        """The frequency function (imports its torch module)."""
        return resolve(self.frequencies)

    def at(
        self,
        length: float,
        train_len: int,
        window: int | None = None,
        leaky_k: float | str = "half",
    ) -> RopeScaling | None:
        """The scaling this kind applies to a model trained at `train_len` tokens evaluated at
        `length` (`window`: ReRoPE's W, default from the training length; `leaky_k`: Leaky ReRoPE's
        slope rule, `leaky_slope`), or None for plain RoPE. A kind without an inference-time form
        refuses in one line."""
        if self.evaluation is None:
            raise ValueError(
                f"rope.scaling.kind={self.name!r} has no inference-time form (it "
                "changes training only)"
            )
        fields_ = self.evaluation(length, train_len, window, leaky_k)
        return None if fields_ is None else RopeScaling(self.name, **fields_)


def inference_kinds() -> tuple[str, ...]:
    """The kinds a trained model can be evaluated under (an inference-time form), in ROPE_KINDS
    order, read when called: a kind registered later (a plugin, a test) is included."""
    return tuple(name for name, kind in ROPE_KINDS.items() if kind.evaluation is not None)


BY_PARTS = ("beta_fast", "beta_slow")
FORMULAS = "archlab.nn.positions.frequencies"  # the module of the frequency functions
# kind -> its description; the formulas of each kind are in nn/positions/rope.py (module docstring)
ROPE_KINDS: dict[str, RopeKind] = {
    kind.name: kind
    for kind in (
        RopeKind(
            "none",
            f"{FORMULAS}:no_scaling",
            no_factor="pick a scaling kind to stretch the context",
            evaluation=plain_at,
        ),
        RopeKind("linear", f"{FORMULAS}:linear"),
        RopeKind("ntk", f"{FORMULAS}:ntk"),
        RopeKind(
            "ntk_by_parts",
            f"{FORMULAS}:ntk_by_parts",
            ("original_max_seq_len",),
            BY_PARTS,
            evaluation=stretch_from_at,
        ),
        RopeKind(
            "dynamic",
            f"{FORMULAS}:dynamic",
            ("original_max_seq_len",),
            length_dependent=True,
            evaluation=stretch_from_at,
        ),
        RopeKind(
            "yarn",
            f"{FORMULAS}:yarn",
            ("original_max_seq_len",),
            (*BY_PARTS, "attention_factor", "mscale", "mscale_all_dim", "truncate"),
            evaluation=stretch_from_at,
        ),
        RopeKind(
            "llama3",
            f"{FORMULAS}:llama3",
            ("original_max_seq_len", "low_freq_factor", "high_freq_factor"),
            evaluation=llama3_at,
        ),
        # ReRoPE changes positions, not frequencies (nn/positions/rerope.py): plain RoPE's
        # frequencies
        RopeKind(
            "rerope",
            f"{FORMULAS}:no_scaling",
            ("window",),
            ("inference_only",),
            remaps_positions=True,
            context_limit=no_limit,
            no_factor="leaky_rerope takes the slope 1/factor",
            evaluation=rerope_at,
        ),
        RopeKind(
            "leaky_rerope",
            f"{FORMULAS}:no_scaling",
            ("window",),
            ("inference_only",),
            remaps_positions=True,
            context_limit=leaky_rerope_limit,
            evaluation=leaky_rerope_at,
        ),
        RopeKind(
            "inv_leaky_rerope",
            f"{FORMULAS}:no_scaling",
            ("window",),
            remaps_positions=True,
            training_only=True,
            context_limit=inv_leaky_rerope_limit,
            evaluation=None,
        ),
        RopeKind("ntk_mixed", f"{FORMULAS}:ntk_mixed", optional=("mixed_b",)),
    )
}
