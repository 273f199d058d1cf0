"""`ModelConfig`: every architecture switch as one typed field (docs/configuration.md).

String switches are checked against the names of their family's registry (nn/variants.py,
nn/positions/scaling.py), the settings of a kernel or block against their option group
(nn/attention/options.py): a new variant registered there is accepted here, on the CLI and in error
messages without further edits. No torch here, so a config is built, checked and costed (`archlab
inspect`, every `--help`) without it. Derived sizes (n_kv_heads, head_dim, d_ff, a FAVOR+ width) are
resolved in `__post_init__`, so a saved config holds the numbers the model was built with.

NOTE: vary a field of a built config with `config.replace(**changes)`, which re-derives every
derived field that still holds its derived value; `dataclasses.replace` would keep a GLU's d_ff
after `ffn="mlp"`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from archlab.nn import config_dicts, config_rules
from archlab.nn.attention.options import (
    GAU,
    GROUPS,
    LINEAR_KERNELS,
    VQ,
    Cosine,
    Favor,
    Group,
)
from archlab.nn.config_checks import ConfigChecks
from archlab.nn.config_dicts import LEGACY_KEYS, layer_over, value_object
from archlab.nn.config_rules import (
    COSINE_LAMBDA,
    DEFAULT_ACTIVATION,
    GAU_EXPANSION,
    POST_NORMS,
    ConfigError,
    bad,
    check_finite,
    expand_ffn,
    expand_shorthands,
    middle_layers,
)
from archlab.nn.positions.scaling import RopeScaling
from archlab.nn.variants import FFNS, default_d_ff


@dataclass(frozen=True)
class ModelConfig(ConfigChecks):
    # --- sizes ---
    vocab_size: int = 256  # tokens; 256 = the byte tokenizer
    d_model: int = 64  # residual stream width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # query heads
    n_kv_heads: int | None = None  # K/V heads: None = n_heads (MHA), 1 = MQA, between = GQA
    head_dim: int | None = None  # None = d_model / n_heads; may differ (Gemma, Qwen3)
    d_ff: int | None = None  # FFN width; None = 4 d_model (mlp) or 8/3 d_model (glu), rounded up
    d_ff_multiple_of: int = 64  # round the default d_ff up to this, for matmul-friendly shapes
    max_seq_len: int = 256  # context length trained for; learned positions have this many rows
    # --- normalization ---
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    norm_eps: float = 1e-5  # added to the variance / mean square
    norm_bias: bool = False  # LayerNorm's beta (RMSNorm never has one)
    norm_unit_offset: bool = False  # store w zero-centred, scale by (1 + w) (Gemma checkpoints)
    norm_position: str = "pre"  # pre | post | double | nonresidual_post | deepnorm (nn/block.py)
    final_norm: bool | None = None  # norm before the head; None = yes unless post / deepnorm
    # --- block and feed-forward ---
    # gau: one gated attention unit, no FFN (n_heads=1, head_dim = its key width s, d_ff = its
    # value width e, default 2 d_model; nn/attention/gau.py)
    block: str = "serial"  # serial | parallel (attention and MLP read one input) | gau (above)
    gau: GAU | None = None  # block="gau": its settings (nn/attention/options.py); None = defaults
    parallel_norms: int = 1  # parallel block: 1 shared input norm (GPT-J, PaLM) or 2 (GPT-NeoX)
    parallel_fused: bool = True  # parallel block: one input and one output GEMM (nn/parallel.py)
    ffn: str = "glu"  # mlp | glu; shorthands swiglu, geglu, reglu = glu + their activation
    activation: str | None = None  # relu | gelu | silu | ...; None = the shorthand's, else silu
    swish_beta: float = 1.0  # beta of swish(x) = x * sigmoid(beta x)
    bias: bool = False  # biases on the attention and FFN linears (modern LMs drop them)
    attn_bias: bool | None = None  # biases on q, k, v, o; None = follow `bias`
    mlp_bias: bool | None = None  # biases on the FFN linears; None = `bias` (GPT-J: MLP only)
    lm_head_bias: bool = False  # a bias on the output projection (GPT-J, Phi)
    # --- positions ---
    position: str = "rope"  # rope | sinusoidal | learned | relative | alibi | none
    rope_theta: float = 10000.0  # RoPE base: w_i = theta^(-2i/d_rot)
    rope_layout: str = "half"  # half (rotate_half) | interleaved (pairs 2i, 2i+1: RoFormer, GPT-J)
    rope_fraction: float = 1.0  # share of each head that rotates (NeoX 0.25)
    rope_scaling: RopeScaling | None = None  # longer contexts (nn/positions/scaling.py)
    position_pattern: str = "R"  # cycled over layers: R = RoPE, N = NoPE ("RRRN": SmolLM3)
    rope_theta_local: float | None = None  # window layers' base; None = rope_theta (Gemma 3: 10k)
    rope_scaling_local: bool = True  # window layers take rope_scaling too; False: Gemma 3's
    relative_buckets: int = 32  # T5 relative bias: number of distance buckets
    relative_max_distance: int = 128  # T5 relative bias: distance of the last bucket
    # --- attention ---
    qk_norm: str = "none"  # none | rmsnorm | layernorm on q and k before RoPE
    qk_norm_scope: str = "head"  # head (weight [head_dim], Qwen3) | proj (whole projection, OLMo 2)
    key_norm: bool = False  # Su's KeyNorm: L2-normalised keys; attn_scale then defaults to 1
    query_norm: bool = False  # Su's QueryNorm: L2-normalised queries; attn_scale defaults to 1
    cosine_attention: bool = False  # q, k L2-normalised, scores x 4 log n (kexue.fm/archives/9859)
    cosine: Cosine | None = None  # cosine_attention's settings (lambda's n); None = defaults
    attn_softcap: float | None = None  # cap * tanh(scores / cap) (Gemma 2: 50)
    attn_scale: float | None = None  # score scale; None = 1/sqrt(head_dim) (resolved_attn_scale)
    sliding_window: int | None = None  # keys a windowed layer sees (itself and window-1 before it)
    window_pattern: str = "S"  # cycled over layers: S = windowed, F = full ("SF" = Gemma 2)
    full_layers: int | None = None  # 1 | 2 full layers mid-stack (HWFA2), the rest windowed
    attn_impl: str = "auto"  # auto (SDPA unless softcap needs the scores) | sdpa | eager
    attn_logn: bool = False  # each query's scores times log(n) / log(attn_logn_base), n keys seen
    attn_logn_base: int | None = None  # length where log-n is 1 (8823); None = max_seq_len
    attn_logn_clip: bool = False  # max(1, log n / log L): only queries past L scaled (9708)
    # --- attention kernel (docs/linear-attention.md) ---
    attn_kernel: str = "softmax"  # softmax | favor (Performer, 2009.14794) | vq (2309.16354)
    favor: Favor | None = None  # attn_kernel="favor": its settings; None = the defaults
    vq: VQ | None = None  # attn_kernel="vq": its settings; None = the defaults
    # --- embeddings and output ---
    tie_embeddings: bool = False  # lm_head shares the embedding matrix
    tied_head: str = "plain"  # plain | swap | proj: applied after the final norm when tied (9698)
    tied_embed_init: str = "default"  # default | log_n_over_d: tied table std log(V)/d (9698)
    embed_scale: str = "none"  # none | sqrt_d (embeddings times sqrt(d_model): Vaswani, Gemma)
    final_softcap: float | None = None  # cap * tanh(logits / cap) (Gemma 2: 30)
    dropout: float = 0.0  # embedding and residual dropout (modern LMs: 0)
    attn_dropout: float = 0.0  # dropout on attention probabilities
    init: str = "trunc_normal"  # trunc_normal | gpt2 (the table in nn/init.py)

    def __post_init__(self) -> None:
        check_finite(self, "ModelConfig.")
        self._resolve()
        if self.rope_scaling is not None:
            check_finite(self.rope_scaling, "ModelConfig.rope_scaling.")
        self._resolve_groups()
        self._check_choices()
        self._check_sizes()
        self._check_positions()
        self._check_attention()
        self._check_kernel()
        self._check_switches()

    # ----- derived values -----
    def _set(self, name: str, value: object) -> None:
        # frozen dataclass: only __post_init__ resolves fields
        object.__setattr__(self, name, value)

    def _resolve(self) -> None:
        ffn, activation = expand_ffn(self.ffn, self.activation)
        self._set("ffn", ffn)
        self._set("activation", DEFAULT_ACTIVATION if activation is None else activation)
        if isinstance(self.rope_scaling, dict):
            self._set("rope_scaling", value_object("rope_scaling", RopeScaling, self.rope_scaling))
        for name in ("d_model", "n_heads", "d_ff_multiple_of"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad(name, getattr(self, name), "a positive integer")
        if self.n_kv_heads is None:
            self._set("n_kv_heads", self.n_heads)
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise bad(
                    "n_heads", self.n_heads, f"must divide d_model={self.d_model} (or set head_dim)"
                )
            self._set("head_dim", self.d_model // self.n_heads)
        if self.d_ff is None and self.ffn in FFNS:
            self._set("d_ff", self._default_d_ff())
        for name in ("attn_bias", "mlp_bias"):
            if getattr(self, name) is None:
                self._set(name, self.bias)
        if self.final_norm is None:
            self._set("final_norm", self.norm_position not in POST_NORMS)

    def _resolve_groups(self) -> None:
        """Each option group as its object: a dict built (one line naming an unknown key), the
        defaults filled in where its switch is on and it is None, its derived fields resolved."""
        for name, (cls, switch, on) in GROUPS.items():
            group = getattr(self, name)
            if isinstance(group, dict):
                group = value_object(name, cls, group)
            if group is None and getattr(self, switch) == on:
                group = cls()
            if group is not None and not isinstance(group, cls):
                raise bad(name, group, f"None, a dict of {cls.__name__} fields or a {cls.__name__}")
            self._set(name, group.resolved(self.head_dim) if group is not None else None)

    def _default_d_ff(self) -> int:
        """The FFN's default width, or a GAU's value width e = GAU_EXPANSION * d_model (rounded up
        alike)."""
        if self.block == "gau":
            m = self.d_ff_multiple_of
            return -(-int(GAU_EXPANSION * self.d_model) // m) * m
        return default_d_ff(self.ffn, self.d_model, self.d_ff_multiple_of)

    # ----- derived properties -----
    @property
    def linear_kernel(self) -> Favor | VQ | None:
        """The option group of a linear attn_kernel (what it costs, how it is built), or None for
        softmax."""
        return getattr(self, self.attn_kernel) if self.attn_kernel in LINEAR_KERNELS else None

    @property
    def dynamic_cosine(self) -> bool:
        """Cosine attention with lambda = 4 log n per query (n the keys it sees)."""
        return self.cosine_attention and self.cosine.scale == "dynamic"

    @property
    def rope_dim(self) -> int:
        """Rotary dims per head: head_dim * rope_fraction, rounded down."""
        return int(self.head_dim * self.rope_fraction)

    @property
    def resolved_attn_scale(self) -> float:
        if self.attn_scale is not None:
            return self.attn_scale
        # lambda = 4 log n, n half the training length (Su, kexue.fm/archives/9859)
        if self.cosine_attention:
            return COSINE_LAMBDA * math.log(self.max_seq_len / 2)
        return 1.0 if self.key_norm or self.query_norm else 1.0 / math.sqrt(self.head_dim)

    @property
    def resolved_attn_impl(self) -> str:
        """The score kernel `auto` stands for: SDPA, or eager where a softcap needs the scores."""
        if self.attn_impl != "auto":
            return self.attn_impl
        return "sdpa" if self.attn_softcap is None else "eager"

    def layer_is_sliding(self, layer_idx: int) -> bool:
        """Whether layer `layer_idx` uses the sliding window: every layer but the `full_layers`
        middle ones, or window_pattern cycled over the layers."""
        if self.sliding_window is None:
            return False
        if self.full_layers is not None:
            return layer_idx not in middle_layers(self.n_layers, self.full_layers)
        return self.window_pattern[layer_idx % len(self.window_pattern)] == "S"

    @property
    def has_local_rope(self) -> bool:
        """Whether window layers rotate differently from full ones: their own base, or no share of
        rope_scaling."""
        unscaled = (
            not self.rope_scaling_local
            and self.rope_scaling is not None
            and self.rope_scaling.kind != "none"
        )
        return self.position == "rope" and (self.rope_theta_local is not None or unscaled)

    def layer_rope(self, layer_idx: int) -> str | None:
        """Which RoPE layer `layer_idx` uses: "global", "local" (a window layer when
        `has_local_rope`), or None (no RoPE: another position type, or an N of position_pattern)."""
        if (
            self.position != "rope"
            or self.position_pattern[layer_idx % len(self.position_pattern)] == "N"
        ):
            return None
        return "local" if self.has_local_rope and self.layer_is_sliding(layer_idx) else "global"

    # ----- construction and serialisation -----
    def derived_values(self) -> dict[str, object]:
        """What each field of `DERIVED` would be if left unset (None), from this config's other
        fields."""
        divides = self.d_model % self.n_heads == 0
        return {
            "n_kv_heads": self.n_heads,
            "head_dim": self.d_model // self.n_heads if divides else None,
            "d_ff": self._default_d_ff(),
            "activation": DEFAULT_ACTIVATION,
            "attn_bias": self.bias,
            "mlp_bias": self.bias,
            "final_norm": self.norm_position not in POST_NORMS,
        }

    def _underived(self, name: str) -> Group | None:
        """Option group `name` with each derived field that holds its derived value back at None,
        and None where that leaves the group's defaults (so a switch turned off drops it, and one
        left on fills it again)."""
        group = getattr(self, name)
        if group is None:
            return None
        reset = {k: None for k, v in group.derived(self.head_dim).items() if getattr(group, k) == v}
        group = dataclasses.replace(group, **reset) if reset else group
        return None if group == type(group)() else group

    def with_inference_logn(self) -> ModelConfig:
        """This config with the log-n query scale at inference only ("log n" with a dagger in Su's
        tables, kexue.fm/archives/9708; bojone/rerope's patch): each query's scores times max(1, log
        n / log L), L = max_seq_len, n its position + 1, for a model trained without log-n (nothing
        changes up to L)."""
        if self.attn_logn:
            raise bad(
                "attn_logn",
                True,
                "False for log-n at inference only (this model trains with log-n already)",
            )
        return self.replace(attn_logn=True, attn_logn_clip=True)

    def replace(self, **changes: Any) -> ModelConfig:
        """This config with `changes` applied, derived fields re-derived: a field of `DERIVED` that
        holds its derived value and is not in `changes` goes back to None, so the new config derives
        it from the changed fields (a Llama switched to ffn="mlp" gets the MLP's d_ff, as
        `build_preset(..., ffn="mlp")` does)."""
        check_fields(changes)
        # ffn="swiglu" sets its activation, beating this config's
        changes = expand_shorthands(changes)
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, derived in self.derived_values().items():
            if name not in changes and values[name] == derived:
                values[name] = None
        for name in GROUPS:
            values[name] = self._underived(name)
        return ModelConfig(**layer_over(values, changes))

    def to_dict(self) -> dict[str, Any]:
        """Every field, value objects and option groups as nested dicts: what config.json holds."""
        return dataclasses.asdict(self)

    def to_flat_dict(self) -> dict[str, Any]:
        """`to_dict` with the option groups spelled as the flat keys of configs saved before them
        (LEGACY_KEYS), in the old field order: the lab's run store keys runs by this, so a run keeps
        its folder (tests/lab/test_run_ids.py)."""
        return config_dicts.flat_view(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """A config from `to_dict`'s output, or from a config saved with the old flat keys
        (`from_legacy`)."""
        d = config_dicts.from_legacy(d, _DEFAULTS)
        check_fields(d)
        return cls(**d)


def check_fields(values: dict[str, Any]) -> None:
    """Every key of `values` is a ModelConfig field, or one line naming the first that is not (an
    old flat key with its new spelling)."""
    known = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(values) - known)
    if unknown and unknown[0] in LEGACY_KEYS:
        group, field = LEGACY_KEYS[unknown[0]]
        cls = GROUPS[group][0].__name__
        raise ConfigError(
            f"ModelConfig has no field {unknown[0]!r}: it is {group}.{field} now ({group}={cls}("
            f"{field}=...), or --model.{group}.{field} on the command line)"
        )
    if unknown:
        raise ConfigError(
            f"ModelConfig has no field {unknown[0]!r}; known fields: {', '.join(sorted(known))}"
        )


# ----- helpers for building a ModelConfig from layers of fields -----
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}


def from_legacy(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with the flat keys of configs saved before the option groups moved into their groups."""
    return config_dicts.from_legacy(d, _DEFAULTS)


def inapplicable_fields(values: dict[str, Any]) -> list[str]:
    """The fields of `values` set away from their default while their switch (ONLY_WITH) is off."""
    return config_rules.inapplicable_fields(values, _DEFAULTS)


__all__ = ["GAU", "VQ", "ConfigError", "Cosine", "Favor", "ModelConfig", "RopeScaling"]
