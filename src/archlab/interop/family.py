"""What one Hugging Face family's table holds: `Family`, its config keys and its weight rules.

A family is data, not code: which `ModelConfig` fields it always has (`fixed`), which `config.json`
keys carry the others (`keys`), how RoPE and sliding windows are spelled (`rope`, `window`), and
where each of our parameters lives in its safetensors files (`weights`). One engine (`hf_config.py`
for configs, `weights.py` for tensors) reads and writes every family from these tables, so adding a
family is one file in `families/` plus one line in `families/__init__.py`.

Weight rules (`Rule.kind`), from the HF tensors to ours:
    copy          the same tensor under another name
    fuse_qkv      rows of separate q, k, v projections stacked into our `qkv_proj` ([q | k | v])
    fuse_gate_up  rows of gate and up stacked into our `gate_up_proj` ([gate | up])
    conv1d        GPT-2's Conv1D stores [in, out]: transposed into nn.Linear's [out, in]
    neox_qkv      GPT-NeoX's fused rows are per head [q_h | k_h | v_h]: regrouped into [q | k | v]
    zero          the family has no such tensor but we do (Qwen2's o_proj bias): zeros on import,
                  and export refuses a non-zero one rather than dropping it
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FIXED_THETA = 10000.0  # GPT-J's sinusoid table hard-codes the base
RULE_KINDS = ("copy", "fuse_qkv", "fuse_gate_up", "conv1d", "neox_qkv", "zero")
WINDOWS = ("none", "all", "layer_types", "qwen")
# HF `ACT2FN` name -> ours; every pair is the same function (tanh GELU has three names)
ACTIVATIONS_HF = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
}


# the `layer_types` entries of transformers' configs
SLIDING, FULL = "sliding_attention", "full_attention"


class InteropError(ValueError):
    """A Hugging Face folder or config archlab cannot read or write exactly; the message names the
    file, key or switch, and what is supported."""


def unsupported(family: Family, key: str, value: object, allowed: str) -> InteropError:
    """The one-line refusal of a config.json value: the key, the value, the family and
    what is allowed."""
    return InteropError(
        f"config.json {key}={value!r} is not supported for "
        f"model_type {family.model_type!r}: {allowed}"
    )


def shortest_period(pattern: str) -> str:
    """The shortest string whose repetition, cut to len(pattern), is `pattern`
    ("SFSFSF" -> "SF")."""
    for n in range(1, len(pattern) + 1):
        if all(pattern[i] == pattern[i % n] for i in range(len(pattern))):
            return pattern[:n]
    return pattern


class Missing:
    """Marks a config key that has no default: a config.json without it is refused."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = Missing()
# a value, MISSING, or a function of the fields read so far (e.g. n_inner: null -> 4 * d_model)
Default = Any


@dataclass(frozen=True)
class Key:
    """A config.json key that carries a `ModelConfig` field.

    `values` maps HF spellings to ours where they differ (activations); export writes the first
    HF spelling of our value, or `export_value` when given. `load`/`save` convert values that are
    not renames (Gemma 2's query_pre_attn_scalar -> attn_scale); `save` returns None where HF
    cannot say it.
    """

    field: str
    default: Default = MISSING  # transformers' value when the key is absent from config.json
    values: dict[Any, Any] | None = None
    export_value: dict[Any, Any] | None = None  # our value -> the HF spelling export writes
    load: Callable[[Any, dict[str, Any]], Any] | None = None  # (HF value, fields so far) -> ours
    save: Callable[[Any, Any], Any] | None = None  # (our value, ModelConfig) -> HF value


@dataclass(frozen=True)
class Fixed:
    """A config.json key whose only supported value is `value` (also its default when absent)."""

    value: Any


@dataclass(frozen=True)
class RopeKeys:
    """How a family spells RoPE in config.json, besides transformers 5's `rope_parameters`."""

    # legacy top-level key of the base; None: fixed FIXED_THETA (GPT-J)
    theta_key: str | None = "rope_theta"
    # legacy top-level key of the rotary share; None: whole heads rotate
    fraction_key: str | None = None
    fraction_default: float = 1.0  # the share when no key gives it (NeoX 0.25, Phi 0.5)
    rotary_dim_key: str | None = None  # GPT-J gives rotary dims, not a share
    layout: str = "half"  # half (rotate_half) | interleaved (GPT-J's rotate_every_two)
    scaling: bool = True  # reads `rope_type` (GPT-J's fixed sinusoid table has no scaling)
    # the base when config.json gives none (transformers' `default_theta`)
    theta_default: float = 10000.0
    # Gemma 3: `rope_parameters` keyed by layer type, the window layers' base under this legacy
    # top-level key (rope_local_base_freq) with this default, and a legacy `rope_scaling` for the
    # full layers only
    local_theta_key: str | None = None
    local_theta_default: float = 10000.0
    # SmolLM3: a per-layer list, 1 = RoPE and 0 = NoPE (no_rope_layers), else every n-th layer NoPE
    # (interval key)
    nope_layers_key: str | None = None
    nope_interval_key: str | None = None
    nope_interval_default: int = 4


@dataclass(frozen=True)
class Rule:
    """Where one of our parameters lives in the HF state dict: its source key(s)
    and the transform."""

    kind: str
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in RULE_KINDS:
            raise ValueError(
                f"Rule.kind={self.kind!r} is not allowed: one of {', '.join(RULE_KINDS)}"
            )


def copy(name: str) -> Rule:
    return Rule("copy", (name,))


def fuse_qkv(q: str, k: str, v: str) -> Rule:
    return Rule("fuse_qkv", (q, k, v))


def fuse_gate_up(gate: str, up: str) -> Rule:
    return Rule("fuse_gate_up", (gate, up))


def conv1d(name: str) -> Rule:
    return Rule("conv1d", (name,))


def neox_qkv(name: str) -> Rule:
    return Rule("neox_qkv", (name,))


ZERO = Rule("zero")


def linear(ours: str, theirs: str | tuple[str, ...], kind: str = "copy") -> dict[str, Rule]:
    """Weight and bias rules of one linear (or norm) `ours` stored as `theirs`; a Conv1D bias is
    a plain copy."""
    names = (theirs,) if isinstance(theirs, str) else theirs
    return {
        f"{ours}.weight": Rule(kind, tuple(f"{n}.weight" for n in names)),
        f"{ours}.bias": Rule(
            "copy" if kind == "conv1d" else kind, tuple(f"{n}.bias" for n in names)
        ),
    }


@dataclass(frozen=True)
class Family:
    """One Hugging Face model family, as tables (see the module docstring)."""

    model_type: str
    architecture: str  # the *ForCausalLM class transformers builds for it
    fixed: dict[str, Any]  # ModelConfig fields every model of the family has
    keys: dict[str, Key | Fixed]  # config.json key -> field, in reading order
    weights: dict[str, Rule]  # our parameter name ("{i}" = layer index) -> HF source
    # how config.json spells RoPE; None: learned absolute positions instead
    rope: RopeKeys | None = field(default_factory=RopeKeys)
    # none | all (one window, every layer) | layer_types | qwen (use_sliding_window too)
    window: str = "none"
    # sliding_window when config.json has no such key (transformers' default)
    window_default: int | None = None
    # (config.json, n_layers) -> layer_types, when config.json has none
    default_layer_types: Callable[[dict[str, Any], int], list[str]] | None = None
    # a config.json bool without which layer_types' windows are off (SmolLM3)
    window_switch: str | None = None
    # written as given by export, never read
    export_keys: dict[str, Any] = field(default_factory=dict)
    # a multimodal wrapper: config.json holds the text model's keys under this key
    text_config: str | None = None
    # regexes of saved non-parameters to skip (causal-mask buffers, inv_freq)
    ignore: tuple[str, ...] = ()
    # other names of lm_head.weight in saved files (NeoX embed_out)
    head_aliases: tuple[str, ...] = ()
    # the name export writes lm_head.weight under, if not its table name
    export_head: str | None = None
    # a prefix older files omit (the original GPT-2 files say `h.0.`, `wte`)
    base_prefix: str | None = None
    # (prefix, other prefix): a saved file may name a key with the other prefix instead (multimodal
    # Gemma 3 files written from transformers' in-memory names say `model.language_model.` for
    # `language_model.model.`)
    key_aliases: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.window not in WINDOWS:
            raise ValueError(
                f"Family.window={self.window!r} is not allowed: one of {', '.join(WINDOWS)}"
            )


def text_part(hf: dict[str, Any], family: Family) -> dict[str, Any]:
    """The config.json keys of the text model: `hf` itself, or a multimodal wrapper's text config
    with the wrapper's `tie_word_embeddings`, which is the one transformers ties the head by."""
    if family.text_config is None:
        return hf
    text = hf.get(family.text_config)
    if not isinstance(text, dict):
        raise InteropError(
            f"config.json of model_type {family.model_type!r} has no {family.text_config!r} dict"
        )
    tie = family.keys["tie_word_embeddings"]
    return {**text, "tie_word_embeddings": hf.get("tie_word_embeddings", tie.default)}


def activation_key(hf_key: str, default: str, export_tanh: str) -> dict[str, Key]:
    """The activation key of a family, with its preferred spelling of tanh-GELU for export."""
    values = dict(ACTIVATIONS_HF)
    return {hf_key: Key("activation", default, values, export_value={"gelu_tanh": export_tanh})}
