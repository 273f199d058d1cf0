"""`ModelConfig`: every architecture switch as one typed field (docs/configuration.md).

String switches are checked against their choices (nn/config/choices.py: the names of each family's
registry, the plain lists), the settings of RoPE, a kernel or a block against their option group
(nn/config/groups.py): a new variant registered there is accepted here, on the CLI and in error
messages without further edits. Each group checks its own fields; what must agree across fields
is checked here, beside the fields (`_check_*`). No torch here, so a config is built, checked and
costed (`archlab inspect`, every `--help`) without it. Derived sizes (n_kv_heads, head_dim, d_ff,
a FAVOR+ width) are resolved in `__post_init__`, so a saved config holds the numbers the model
was built with.

NOTE: vary a field of a built config with `config.replace(**changes)`, which re-derives every
derived field that still holds its derived value; `dataclasses.replace` would keep a GLU's
d_ff after `ffn="mlp"`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from archlab.nn.config import legacy
from archlab.nn.config.base import ConfigError, bad, check_finite, value_object
from archlab.nn.config.choices import (
    CHOICES,
    FFNS,
    FULL_LAYER_COUNTS,
    LINEAR_KERNELS,
    POST_NORMS,
    WINDOW_LAYERS,
    default_d_ff,
)
from archlab.nn.config.groups import GAU, GROUPS, VQ, Cosine, Favor, Group, Rope
from archlab.nn.config.layers import expand_ffn, expand_shorthands, layer_over
from archlab.nn.positions.scaling import ROPE_KINDS

# cosine attention's temperature per log n: lambda = 4 log n (Su, kexue.fm/archives/9859)
COSINE_LAMBDA = 4.0
# a GAU's value width e = 2 d_model by default (Hua et al. arXiv 2202.10447, section 2)
GAU_EXPANSION = 2.0
# the activation when neither `activation` nor an ffn shorthand names one
DEFAULT_ACTIVATION = "silu"
# fields resolved in __post_init__ when None; `ModelConfig.replace` re-derives them
# (`derived_values`)
DERIVED = ("n_kv_heads", "head_dim", "d_ff", "activation", "attn_bias", "mlp_bias", "final_norm")
# field -> (switch, value): the field means something only with switch == value, and must keep its
# default otherwise; an option group belongs to its switch
ONLY_WITH = {
    "norm_bias": ("norm", "layernorm"),
    **{name: (switch, on) for name, (_, switch, on) in GROUPS.items() if switch is not None},
}
# a positive integer each
SIZES = (
    "vocab_size",
    "n_layers",
    "n_kv_heads",
    "head_dim",
    "d_ff",
    "max_seq_len",
    "relative_buckets",
    "relative_max_distance",
)


@dataclass(frozen=True)
class ModelConfig:
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
    gau: GAU | None = None  # block="gau": its settings (nn/config/groups.py); None = defaults
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
    # position="rope": its base, layout, share, scaling, NoPE pattern, window layers' own base
    # (nn/config/groups.py); None = the defaults
    rope: Rope | None = None
    relative_buckets: int = 32  # T5 relative bias: number of distance buckets
    relative_max_distance: int = 128  # T5 relative bias: distance of the last bucket
    # --- attention ---
    qk_norm: str = "none"  # none | rmsnorm | layernorm on q and k before RoPE
    qk_norm_scope: str = "head"  # head (weight [head_dim], Qwen3) | proj (whole projection, OLMo 2)
    key_norm: bool = False  # Su's KeyNorm: L2-normalised keys; attn_scale then defaults to 1
    query_norm: bool = False  # Su's QueryNorm: L2-normalised queries; attn_scale defaults to 1
    # cosine attention: q, k L2-normalised, scores x 4 log n (kexue.fm/archives/9859); None = off,
    # Cosine() = on with lambda's n fixed
    cosine: Cosine | None = None
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
            if group is None and switch is not None and getattr(self, switch) == on:
                group = cls()
            if group is not None and not isinstance(group, cls):
                raise bad(name, group, f"None, a dict of {cls.__name__} fields or a {cls.__name__}")
            self._set(name, group.resolved(self.head_dim) if group is not None else None)

    def _default_d_ff(self) -> int:
        """The FFN's default width, or a GAU's value width e = GAU_EXPANSION * d_model
        (rounded up alike)."""
        if self.block == "gau":
            m = self.d_ff_multiple_of
            return -(-int(GAU_EXPANSION * self.d_model) // m) * m
        return default_d_ff(self.ffn, self.d_model, self.d_ff_multiple_of)

    # ----- derived properties -----
    @property
    def linear_kernel(self) -> Favor | VQ | None:
        """The option group of a linear attn_kernel (what it costs, how it is built), or
        None for softmax."""
        return getattr(self, self.attn_kernel) if self.attn_kernel in LINEAR_KERNELS else None

    @property
    def dynamic_cosine(self) -> bool:
        """Cosine attention with lambda = 4 log n per query (n the keys it sees)."""
        return self.cosine is not None and self.cosine.scale == "dynamic"

    @property
    def rope_dim(self) -> int:
        """Rotary dims per head (0 without RoPE): head_dim * rope.fraction, rounded down."""
        return self.rope.rotary_dim(self.head_dim) if self.rope is not None else 0

    @property
    def context_limit(self) -> int | None:
        """Tokens the model handles: max_seq_len, or with a RoPE scaling its kind's limit
        (`RopeKind.context_limit`: the stretched length factor * L0; ReRoPE None, no relative
        position past the window is ever seen; Leaky ReRoPE the longest length whose largest
        relative position stays within the trained max_seq_len - 1)."""
        s = self.rope.scaling if self.rope is not None else None
        if s is None:
            return self.max_seq_len
        return ROPE_KINDS[s.kind].context_limit(s, self.max_seq_len)

    @property
    def resolved_attn_scale(self) -> float:
        if self.attn_scale is not None:
            return self.attn_scale
        # lambda = 4 log n, n half the training length (Su, kexue.fm/archives/9859)
        if self.cosine is not None:
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
        the RoPE scaling."""
        return self.rope is not None and self.rope.local_differs

    def layer_rope(self, layer_idx: int) -> str | None:
        """Which RoPE layer `layer_idx` uses: "global", "local" (a window layer when
        `has_local_rope`), or None (no RoPE: another position type, or an N of rope.pattern)."""
        rope = self.rope
        if rope is None or rope.pattern[layer_idx % len(rope.pattern)] == "N":
            return None
        return "local" if self.has_local_rope and self.layer_is_sliding(layer_idx) else "global"

    # ----- checks: what must agree across fields (each group checks its own) -----
    def _check_choices(self) -> None:
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise bad(name, getattr(self, name), "one of " + ", ".join(allowed))
        for name, plain in (("tied_head", "plain"), ("tied_embed_init", "default")):
            if getattr(self, name) != plain and not self.tie_embeddings:
                allowed = f"only with tie_embeddings=True ({plain!r} otherwise)"
                raise bad(name, getattr(self, name), allowed)
        if self.tied_head == "swap" and self.d_model % 2:
            allowed = f"needs an even d_model (got {self.d_model}) to swap two halves"
            raise bad("tied_head", "swap", allowed)
        if self.parallel_norms not in (1, 2):
            raise bad("parallel_norms", self.parallel_norms, "1 (shared input norm) or 2")
        for name in inapplicable_fields({f.name: getattr(self, f.name) for f in fields(self)}):
            switch, want = ONLY_WITH[name]
            raise bad(
                name,
                getattr(self, name),
                f"only with {switch}={want!r} ({switch}={getattr(self, switch)!r})",
            )

    def _check_sizes(self) -> None:
        for name in SIZES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise bad(name, value, "a positive integer")
        if self.n_heads % self.n_kv_heads:
            raise bad(
                "n_kv_heads", self.n_kv_heads, f"must divide n_heads={self.n_heads} (1 = MQA)"
            )
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise bad(name, getattr(self, name), "a probability in [0, 1)")
        if self.norm_eps <= 0:
            raise bad("norm_eps", self.norm_eps, "a positive number")
        if self.swish_beta <= 0:
            raise bad("swish_beta", self.swish_beta, "a positive number (x * sigmoid(beta x))")

    def _check_positions(self) -> None:
        if self.position == "sinusoidal" and self.d_model % 2:
            raise bad("d_model", self.d_model, "an even number with sinusoidal positions")
        if self.rope is not None:
            self.rope.check_with(self.head_dim, self.max_seq_len)

    def _check_attention(self) -> None:
        for name in ("attn_softcap", "final_softcap", "attn_scale"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise bad(name, value, "None or a positive number")
        if self.attn_softcap is not None and self.attn_impl == "sdpa":
            raise bad(
                "attn_impl",
                "sdpa",
                "auto or eager when attn_softcap is set (SDPA never exposes scores)",
            )
        if self.sliding_window is not None and self.sliding_window < 1:
            raise bad("sliding_window", self.sliding_window, "None or a positive integer")
        if not self.window_pattern or set(self.window_pattern) - set(WINDOW_LAYERS):
            allowed = "a non-empty string of S (window) and F (full)"
            raise bad("window_pattern", self.window_pattern, allowed)
        if self.full_layers is not None:
            self._check_full_layers()
        self._check_logn()
        if self.qk_norm != "none" and self.key_norm:
            raise bad(
                "key_norm", True, "not together with qk_norm (KeyNorm is its own key normalisation)"
            )

    def _check_logn(self) -> None:
        base = self.attn_logn_base
        if base is not None and (isinstance(base, bool) or not isinstance(base, int) or base < 2):
            raise bad("attn_logn_base", base, "None (= max_seq_len) or an integer >= 2")
        if base is not None and not self.attn_logn:
            raise bad("attn_logn_base", base, "only with attn_logn=True")
        if self.attn_logn_clip and not self.attn_logn:
            raise bad("attn_logn_clip", True, "only with attn_logn=True")
        if self.attn_logn and self.max_seq_len < 2 and base is None:
            raise bad("attn_logn", True, "needs max_seq_len >= 2 or attn_logn_base (log 1 = 0)")

    def _check_full_layers(self) -> None:
        f = self.full_layers
        if isinstance(f, bool) or not isinstance(f, int) or f not in FULL_LAYER_COUNTS:
            raise bad(
                "full_layers",
                f,
                "None, 1 (layer n_layers/2) or 2 (layers n_layers/3 and 2 n_layers/3)",
            )
        if self.sliding_window is None:
            raise bad(
                "full_layers",
                f,
                "None without sliding_window (the other layers attend within the window)",
            )
        if self.window_pattern != "S":
            raise bad(
                "window_pattern",
                self.window_pattern,
                f"'S' with full_layers={f} (which places the full layers itself)",
            )
        if self.n_layers < f:
            raise bad("n_layers", self.n_layers, f"at least full_layers={f}")

    def _check_kernel(self) -> None:
        if self.linear_kernel is not None:
            self.linear_kernel.check_with(
                self.attn_kernel,
                self.position,
                self.attn_softcap,
                self.sliding_window,
                self.attn_dropout,
                self.rope.scaling if self.rope is not None else None,
            )

    def _check_switches(self) -> None:
        """QueryNorm, cosine attention, DeepNorm and GAU: combinations that cannot work,
        refused before compute."""
        if self.cosine is not None:
            self._check_cosine()
        if self.query_norm and (self.key_norm or self.qk_norm != "none"):
            raise bad("query_norm", True, "not with key_norm (that is cosine attention) or qk_norm")
        if self.norm_position == "deepnorm" and self.block == "parallel":
            raise bad(
                "norm_position",
                "deepnorm",
                "only with block='serial' or 'gau' (x <- LN(alpha x + F(x)) per sublayer)",
            )
        if self.block == "gau":
            self._check_gau()

    def _check_cosine(self) -> None:
        if self.key_norm or self.query_norm or self.qk_norm != "none":
            raise bad(
                "cosine",
                self.cosine,
                "None with key_norm, query_norm or qk_norm (it normalises q and k itself)",
            )
        if self.max_seq_len < 3:
            raise bad(
                "cosine",
                self.cosine,
                "None with max_seq_len < 3 (lambda = 4 log(max_seq_len / 2) > 0)",
            )
        if self.dynamic_cosine and self.attn_scale is not None:
            raise bad(
                "attn_scale",
                self.attn_scale,
                "None with cosine.scale='dynamic' (lambda is 4 log n per query)",
            )
        if self.dynamic_cosine and self.attn_logn:
            raise bad(
                "attn_logn",
                True,
                "not with cosine.scale='dynamic' (that is already 4 log n per query)",
            )

    def _check_gau(self) -> None:
        for name, want in (
            ("n_heads", 1),
            ("n_kv_heads", 1),
            ("ffn", "glu"),
            ("attn_kernel", "softmax"),
        ):
            if getattr(self, name) != want:
                raise bad(
                    name,
                    getattr(self, name),
                    f"{want!r} with block='gau' (one gated attention head, no FFN: head_dim is "
                    "its key width s, d_ff its value width e)",
                )
        # GAU.project makes q and k from Z by a scale and an offset only
        for name, off in (
            ("qk_norm", "none"),
            ("key_norm", False),
            ("query_norm", False),
            ("cosine", None),
        ):
            if getattr(self, name) != off:
                raise bad(
                    name,
                    getattr(self, name),
                    f"{off!r} with block='gau' (its q and k are a per-dimension scale and offset "
                    "of Z; no norm is applied)",
                )
        if self.gau.attention == "relu2" and self.attn_impl == "sdpa":
            raise bad(
                "attn_impl", "sdpa", "auto or eager with gau.attention='relu2' (SDPA is a softmax)"
            )

    # ----- construction and serialisation -----
    def derived_values(self) -> dict[str, object]:
        """What each field of `DERIVED` would be if left unset (None), from this
        config's other fields."""
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
        and, for a group with a switch, None where that leaves the group's defaults (so a switch
        turned off drops it, and one left on fills it again)."""
        group = getattr(self, name)
        if group is None:
            return None
        reset = {k: None for k, v in group.derived(self.head_dim).items() if getattr(group, k) == v}
        group = dataclasses.replace(group, **reset) if reset else group
        own_switch = GROUPS[name][1] is None  # cosine: the group is the switch
        return None if group == type(group)() and not own_switch else group

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
        `build_preset(..., ffn="mlp")` does). An option group given as a dict edits this config's
        (`rope={"theta": 5e5}` keeps the rest of its RoPE)."""
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
        (nn/config/legacy.py), in the old field order: the lab's run store keys runs by this, so a
        run keeps its folder (tests/lab/test_run_ids.py)."""
        return legacy.flat_view(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """A config from `to_dict`'s output, or from a config saved with older spellings (the flat
        keys, `cosine_attention`: `from_legacy`)."""
        d = from_legacy(d)
        check_fields(d)
        return cls(**d)


def check_fields(values: dict[str, Any]) -> None:
    """Every key of `values` is a ModelConfig field, or one line naming the first that is not (an
    old spelling with its new one)."""
    known = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(values) - known)
    if unknown and legacy.legacy_message(unknown[0]) is not None:
        raise ConfigError(legacy.legacy_message(unknown[0]))
    if unknown:
        raise ConfigError(
            f"ModelConfig has no field {unknown[0]!r}; known fields: {', '.join(sorted(known))}"
        )


def middle_layers(n_layers: int, count: int) -> tuple[int, ...]:
    """The full layers of `full_layers=count` (HWFA2, Su kexue.fm/archives/9731): in the middle of
    the stack, L/2 for one, L/3 and 2L/3 for two."""
    return (n_layers // 2,) if count == 1 else (n_layers // 3, 2 * n_layers // 3)


# ----- helpers for building a ModelConfig from layers of fields -----
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}


def from_legacy(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with the old spellings of configs saved before the option groups (nn/config/legacy.py)
    in their groups."""
    return legacy.from_legacy(d, _DEFAULTS)


def inapplicable_fields(values: dict[str, Any]) -> list[str]:
    """The fields of `values` set away from their default although their switch
    (ONLY_WITH) is off."""
    return [
        name
        for name, (switch, want) in ONLY_WITH.items()
        if values.get(switch, _DEFAULTS[switch]) != want
        and values.get(name, _DEFAULTS[name]) != _DEFAULTS[name]
    ]
