"""`ModelConfig`: every architecture switch as one typed field, validated on construction (docs/configuration.md).

String switches are checked against the names of their family's registry (nn/variants.py, nn/positions/scaling.py), the
settings of a kernel or block against their option group (nn/attention/options.py): a new variant registered there
is accepted here, on the CLI and in error messages without further edits. No torch here, so a config is built,
checked and costed (`archlab inspect`, every `--help`) without it. Derived sizes (n_kv_heads, head_dim, d_ff, a
FAVOR+ width) are resolved in `__post_init__`, so a saved config holds the numbers the model was built with.

NOTE: vary a field of a built config with `config.replace(**changes)`, which re-derives every derived field that
still holds its derived value; `dataclasses.replace` would keep a GLU's d_ff after `ffn="mlp"`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from archlab.nn.attention.options import (
    GAU,
    GROUPS,
    LINEAR_KERNELS,
    VQ,
    Cosine,
    Favor,
    Group,
    OptionError,
)
from archlab.nn.positions.scaling import ROPE_KINDS, RopeScaling
from archlab.nn.variants import (
    ACTIVATIONS,
    ATTENTION_KERNELS,
    FFNS,
    GLU_SHORTHANDS,
    NORM_PLACEMENTS,
    NORMS,
    POSITIONS,
    ROPE_LAYOUTS,
    default_d_ff,
)

NORM_POSITIONS = tuple(NORM_PLACEMENTS)  # pre | post | double | nonresidual_post | deepnorm (nn/variants.py, block.py)
POST_NORMS = ("post", "deepnorm")  # placements whose last block already normed: final_norm defaults to False
# serial | parallel | gau (one gated attention unit per layer, no FFN: Hua et al. arXiv 2202.10447; nn/attention/gau.py)
BLOCKS = ("serial", "parallel", "gau")
QK_NORMS = ("none", *NORMS)
QK_NORM_SCOPES = ("head", "proj")
EMBED_SCALES = ("none", "sqrt_d")
INITS = ("trunc_normal", "gpt2")
ATTN_IMPLS = ("auto", *ATTENTION_KERNELS)  # auto = sdpa unless softcapping needs the scores (eager)
ATTN_KERNELS = ("softmax", *LINEAR_KERNELS)  # softmax, or a linear kernel (nn/attention/options.py)
# what a tied head applies after the final norm (Su, kexue.fm/archives/9698): nothing, the parameter-free swap of
# the two channel halves, or an orthogonally initialised d x d projection; either makes the self-logit ~ 0 at init
TIED_HEADS = ("plain", "swap", "proj")
TIED_EMBED_INITS = ("default", "log_n_over_d")  # tied table std: the init's (d^-1/2 for trunc_normal) | log(V)/d
WINDOW_LAYERS = "SF"  # window_pattern letters: S = sliding-window layer, F = full-attention layer
POSITION_LAYERS = "RN"  # position_pattern letters: R = RoPE layer, N = no positions (NoPE) layer
FULL_LAYER_COUNTS = (1, 2)  # full_layers: HWFA2's one full layer at L/2, or two at L/3 and 2L/3 (9731)
COSINE_LAMBDA = 4.0  # cosine attention's temperature per log n: lambda = 4 log n (Su, kexue.fm/archives/9859)
GAU_EXPANSION = 2.0  # a GAU's value width e = 2 d_model by default (Hua et al. arXiv 2202.10447, section 2)
DEFAULT_ACTIVATION = "silu"  # the activation when neither `activation` nor an ffn shorthand names one
# fields resolved in __post_init__ when None; `ModelConfig.replace` re-derives them (`derived_values`)
DERIVED = ("n_kv_heads", "head_dim", "d_ff", "activation", "attn_bias", "mlp_bias", "final_norm")
# field -> (switch, value): the field means something only with switch == value, and must keep its default otherwise
ONLY_WITH = {
    "rope_theta": ("position", "rope"), "rope_layout": ("position", "rope"), "rope_fraction": ("position", "rope"),
    "rope_scaling": ("position", "rope"), "norm_bias": ("norm", "layernorm"),
    "position_pattern": ("position", "rope"), "rope_theta_local": ("position", "rope"),
    "rope_scaling_local": ("position", "rope"),
    **{name: (switch, on) for name, (_, switch, on) in GROUPS.items()},  # an option group belongs to its switch
}
# the flat keys of configs saved before the option groups -> (group, its field) (docs/configuration.md)
LEGACY_KEYS: dict[str, tuple[str, str]] = {
    "gau_attention": ("gau", "attention"),
    "cosine_scale": ("cosine", "scale"),
    **{f"favor_{f.name}": ("favor", f.name) for f in fields(Favor)},
    **{f"vq_{f.name}": ("vq", f.name) for f in fields(VQ)},
}


class ConfigError(ValueError):
    """A bad config value: the message names the field, the value and what is allowed."""


def check_finite(config: object, prefix: str) -> None:
    """Every float of dataclass `config` (tuples included) is a finite number: NaN and inf pass most range checks
    (`nan <= 0` and `inf <= 1` are both False), so they are refused here first, naming `prefix` + the field."""
    for f in fields(config):
        value = getattr(config, f.name)
        items = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise ConfigError(f"{prefix}{f.name}={value!r} is not allowed: a finite number")


def _bad(name: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(f"ModelConfig.{name}={value!r} is not allowed: {allowed}")


@dataclass(frozen=True)
class ModelConfig:
    # --- sizes ---
    vocab_size: int = 256  # tokens; 256 = the byte tokenizer
    d_model: int = 64  # residual stream width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # query heads
    n_kv_heads: int | None = None  # K/V heads: None = n_heads (MHA), 1 = MQA, between = GQA
    head_dim: int | None = None  # None = d_model / n_heads; may differ (Gemma, Qwen3)
    d_ff: int | None = None  # FFN hidden width; None = 4*d_model (mlp) or 8/3*d_model (glu), rounded up
    d_ff_multiple_of: int = 64  # round the default d_ff up to this, for matmul-friendly shapes
    max_seq_len: int = 256  # context length trained for; learned positions have this many rows
    # --- normalization ---
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    norm_eps: float = 1e-5  # added to the variance / mean square
    norm_bias: bool = False  # LayerNorm's beta (RMSNorm never has one)
    norm_unit_offset: bool = False  # store w zero-centred and scale by (1 + w), as Gemma checkpoints do
    norm_position: str = "pre"  # pre | post | double | nonresidual_post | deepnorm (see nn/block.py)
    final_norm: bool | None = None  # norm before the head; None = yes unless post / deepnorm (already normed)
    # --- block and feed-forward ---
    # gau: one gated attention unit, no FFN (n_heads=1, head_dim = its key width s, d_ff = its value width e, default
    # 2 d_model; nn/attention/gau.py)
    block: str = "serial"  # serial | parallel (attention and MLP read the same input) | gau (see above)
    gau: GAU | None = None  # block="gau": its settings (nn/attention/options.py); None = the defaults
    parallel_norms: int = 1  # parallel block: 1 shared input norm (GPT-J, PaLM) or 2 (GPT-NeoX)
    parallel_fused: bool = True  # parallel block: one input and one output GEMM (PaLM); False: apart, same function
    ffn: str = "glu"  # mlp | glu; shorthands swiglu, geglu, reglu = glu + their activation
    activation: str | None = None  # relu | gelu | gelu_tanh | silu | swish | ...; None = the shorthand's, else silu
    swish_beta: float = 1.0  # beta of swish(x) = x * sigmoid(beta x)
    bias: bool = False  # biases on the attention and FFN linears (modern LMs drop them)
    attn_bias: bool | None = None  # biases on q, k, v, o; None = follow `bias`
    mlp_bias: bool | None = None  # biases on the FFN linears; None = follow `bias` (GPT-J: attention none, MLP yes)
    lm_head_bias: bool = False  # a bias on the output projection (GPT-J, Phi)
    # --- positions ---
    position: str = "rope"  # rope | sinusoidal | learned | relative | alibi | none
    rope_theta: float = 10000.0  # RoPE base: w_i = theta^(-2i/d_rot)
    rope_layout: str = "half"  # half (rotate_half) | interleaved (pairs 2i, 2i+1: RoFormer, GPT-J)
    rope_fraction: float = 1.0  # share of each head that rotates (NeoX 0.25)
    rope_scaling: RopeScaling | None = None  # frequency schedule for longer contexts (nn/positions/scaling.py)
    position_pattern: str = "R"  # cycled over layers: R = RoPE, N = NoPE ("RRRN" = Llama 4 / SmolLM3 style)
    rope_theta_local: float | None = None  # RoPE base of sliding-window layers; None = rope_theta (Gemma 3: 10k)
    rope_scaling_local: bool = True  # window layers take rope_scaling too; False = global layers only (Gemma 3)
    relative_buckets: int = 32  # T5 relative bias: number of distance buckets
    relative_max_distance: int = 128  # T5 relative bias: distance of the last bucket
    # --- attention ---
    qk_norm: str = "none"  # none | rmsnorm | layernorm on q and k before RoPE
    qk_norm_scope: str = "head"  # head (weight [head_dim], Qwen3) | proj (whole projection, OLMo 2)
    key_norm: bool = False  # Su's KeyNorm: L2-normalised keys; attn_scale then defaults to 1
    query_norm: bool = False  # Su's QueryNorm: L2-normalised queries; attn_scale then defaults to 1 (9859)
    cosine_attention: bool = False  # q and k L2-normalised, scores times lambda = 4 log n (Su, kexue.fm/archives/9859)
    cosine: Cosine | None = None  # cosine_attention's lambda: fixed (n = max_seq_len / 2) or dynamic (keys seen)
    attn_softcap: float | None = None  # cap * tanh(scores / cap) (Gemma 2: 50)
    attn_scale: float | None = None  # score scale; None = 1/sqrt(head_dim) (1 with key/query norm, 4 log n cosine)
    sliding_window: int | None = None  # keys a windowed layer sees (itself and window-1 before it)
    window_pattern: str = "S"  # cycled over layers: S = windowed, F = full ("SF" = Gemma 2)
    full_layers: int | None = None  # 1 | 2 full layers mid-stack (L/2; L/3, 2L/3: HWFA2), rest windowed; None: pattern
    attn_impl: str = "auto"  # auto (SDPA unless softcap needs the scores) | sdpa | eager
    attn_logn: bool = False  # scale each query's scores by log(n) / log(attn_logn_base), n = keys it sees
    attn_logn_base: int | None = None  # length where the log-n factor is 1 (kexue.fm/archives/8823); None = max_seq_len
    attn_logn_clip: bool = False  # max(1, log n / log L): only queries past L scaled (inference-time log n, 9708)
    # --- attention kernel (docs/linear-attention.md) ---
    attn_kernel: str = "softmax"  # softmax | favor (Performer, arXiv 2009.14794) | vq (Transformer-VQ, 2309.16354)
    favor: Favor | None = None  # attn_kernel="favor": features, orthogonal, feature, redraw; None = the defaults
    vq: VQ | None = None  # attn_kernel="vq": codes, block, commit, ema, assign, tau, cache_grad; None = the defaults
    # --- embeddings and output ---
    tie_embeddings: bool = False  # lm_head shares the embedding matrix
    tied_head: str = "plain"  # plain | swap | proj: what the tied head applies after the final norm (9698)
    tied_embed_init: str = "default"  # default | log_n_over_d: tied table std log(V)/d, so e^(d std) = V (9698)
    embed_scale: str = "none"  # none | sqrt_d (multiply embeddings by sqrt(d_model): Vaswani, Gemma)
    final_softcap: float | None = None  # cap * tanh(logits / cap) (Gemma 2: 30)
    dropout: float = 0.0  # embedding and residual dropout (modern LMs: 0)
    attn_dropout: float = 0.0  # dropout on attention probabilities
    init: str = "trunc_normal"  # trunc_normal (N(0, 2/(in+out)) clipped at 3 std) | gpt2 (TransformerLM.init_weights)

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
        object.__setattr__(self, name, value)  # frozen dataclass: only __post_init__ resolves fields

    def _resolve(self) -> None:
        ffn, activation = _expand_ffn(self.ffn, self.activation)
        self._set("ffn", ffn)
        self._set("activation", DEFAULT_ACTIVATION if activation is None else activation)
        if isinstance(self.rope_scaling, dict):
            self._set("rope_scaling", _value_object("rope_scaling", RopeScaling, self.rope_scaling))
        for name in ("d_model", "n_heads", "d_ff_multiple_of"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise _bad(name, getattr(self, name), "a positive integer")
        if self.n_kv_heads is None:
            self._set("n_kv_heads", self.n_heads)
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise _bad("n_heads", self.n_heads, f"must divide d_model={self.d_model} (or set head_dim)")
            self._set("head_dim", self.d_model // self.n_heads)
        if self.d_ff is None and self.ffn in FFNS:
            self._set("d_ff", self._default_d_ff())
        for name in ("attn_bias", "mlp_bias"):
            if getattr(self, name) is None:
                self._set(name, self.bias)
        if self.final_norm is None:
            self._set("final_norm", self.norm_position not in POST_NORMS)

    def _resolve_groups(self) -> None:
        """Each option group as its object: a dict built (one line naming an unknown key), the defaults filled in
        where its switch is on and it is None, its derived fields resolved."""
        for name, (cls, switch, on) in GROUPS.items():
            group = getattr(self, name)
            if isinstance(group, dict):
                group = _value_object(name, cls, group)
            if group is None and getattr(self, switch) == on:
                group = cls()
            if group is not None and not isinstance(group, cls):
                raise _bad(name, group, f"None, a dict of {cls.__name__} fields or a {cls.__name__}")
            self._set(name, group.resolved(self.head_dim) if group is not None else None)

    # ----- checks -----
    def _check_choices(self) -> None:
        choices = {
            "norm": NORMS, "norm_position": NORM_POSITIONS, "block": BLOCKS, "ffn": (*FFNS, *GLU_SHORTHANDS),
            "activation": ACTIVATIONS, "position": POSITIONS, "rope_layout": ROPE_LAYOUTS, "qk_norm": QK_NORMS,
            "qk_norm_scope": QK_NORM_SCOPES, "embed_scale": EMBED_SCALES, "init": INITS, "attn_impl": ATTN_IMPLS,
            "attn_kernel": ATTN_KERNELS, "tied_head": TIED_HEADS, "tied_embed_init": TIED_EMBED_INITS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise _bad(name, getattr(self, name), "one of " + ", ".join(allowed))
        if self.rope_scaling is not None and self.rope_scaling.kind not in ROPE_KINDS:
            raise _bad("rope_scaling.kind", self.rope_scaling.kind, "one of " + ", ".join(ROPE_KINDS))
        for name, plain in (("tied_head", "plain"), ("tied_embed_init", "default")):
            if getattr(self, name) != plain and not self.tie_embeddings:
                raise _bad(name, getattr(self, name), f"only with tie_embeddings=True ({plain!r} otherwise)")
        if self.tied_head == "swap" and self.d_model % 2:
            raise _bad("tied_head", "swap", f"needs an even d_model (got {self.d_model}) to swap two halves")
        if self.parallel_norms not in (1, 2):
            raise _bad("parallel_norms", self.parallel_norms, "1 (shared input norm) or 2")
        for name in inapplicable_fields({f.name: getattr(self, f.name) for f in fields(self)}):
            switch, want = ONLY_WITH[name]
            raise _bad(name, getattr(self, name), f"only with {switch}={want!r} ({switch}={getattr(self, switch)!r})")

    def _check_sizes(self) -> None:
        for name in ("vocab_size", "n_layers", "n_kv_heads", "head_dim", "d_ff", "max_seq_len",
                     "relative_buckets", "relative_max_distance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise _bad(name, value, "a positive integer")
        if self.n_heads % self.n_kv_heads:
            raise _bad("n_kv_heads", self.n_kv_heads, f"must divide n_heads={self.n_heads} (1 = MQA)")
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise _bad(name, getattr(self, name), "a probability in [0, 1)")
        if self.norm_eps <= 0:
            raise _bad("norm_eps", self.norm_eps, "a positive number")
        if self.swish_beta <= 0:
            raise _bad("swish_beta", self.swish_beta, "a positive number (x * sigmoid(beta x))")

    def _check_positions(self) -> None:
        if self.position != "rope":
            if self.position == "sinusoidal" and self.d_model % 2:
                raise _bad("d_model", self.d_model, "an even number with sinusoidal positions")
            return
        if not 0.0 < self.rope_fraction <= 1.0:
            raise _bad("rope_fraction", self.rope_fraction, "a fraction in (0, 1]")
        if self.rope_dim % 2 or self.rope_dim == 0:
            raise _bad("rope_fraction", self.rope_fraction,
                       f"must give an even, non-zero rotary dim (head_dim={self.head_dim} * fraction = "
                       f"{self.head_dim * self.rope_fraction:g})")
        if self.rope_theta <= 1:
            raise _bad("rope_theta", self.rope_theta, "a base > 1")
        if self.rope_theta_local is not None and not self.rope_theta_local > 1:
            raise _bad("rope_theta_local", self.rope_theta_local, "None or a base > 1")
        if not self.position_pattern or set(self.position_pattern) - set(POSITION_LAYERS):
            raise _bad("position_pattern", self.position_pattern, "a non-empty string of R (RoPE) and N (NoPE)")
        s = self.rope_scaling
        if s is not None and ROPE_KINDS[s.kind].training_only and not s.window < self.max_seq_len:
            raise _bad("rope_scaling.window", s.window, f"< max_seq_len={self.max_seq_len} with "
                       f"kind={s.kind!r} (training must reach past the window)")

    def _check_attention(self) -> None:
        for name in ("attn_softcap", "final_softcap", "attn_scale"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise _bad(name, value, "None or a positive number")
        if self.attn_softcap is not None and self.attn_impl == "sdpa":
            raise _bad("attn_impl", "sdpa", "auto or eager when attn_softcap is set (SDPA never exposes scores)")
        if self.sliding_window is not None and self.sliding_window < 1:
            raise _bad("sliding_window", self.sliding_window, "None or a positive integer")
        if not self.window_pattern or set(self.window_pattern) - set(WINDOW_LAYERS):
            raise _bad("window_pattern", self.window_pattern, "a non-empty string of S (window) and F (full)")
        if self.full_layers is not None:
            self._check_full_layers()
        if self.attn_logn_base is not None and (isinstance(self.attn_logn_base, bool) or not isinstance(
                self.attn_logn_base, int) or self.attn_logn_base < 2):
            raise _bad("attn_logn_base", self.attn_logn_base, "None (= max_seq_len) or an integer >= 2")
        if self.attn_logn_base is not None and not self.attn_logn:
            raise _bad("attn_logn_base", self.attn_logn_base, "only with attn_logn=True")
        if self.attn_logn_clip and not self.attn_logn:
            raise _bad("attn_logn_clip", True, "only with attn_logn=True")
        if self.attn_logn and self.max_seq_len < 2 and self.attn_logn_base is None:
            raise _bad("attn_logn", True, "needs max_seq_len >= 2 or attn_logn_base (log 1 = 0)")
        if self.qk_norm != "none" and self.key_norm:
            raise _bad("key_norm", True, "not together with qk_norm (KeyNorm is its own key normalisation)")

    def _check_full_layers(self) -> None:
        f = self.full_layers
        if isinstance(f, bool) or not isinstance(f, int) or f not in FULL_LAYER_COUNTS:
            raise _bad("full_layers", f, "None, 1 (layer n_layers/2) or 2 (layers n_layers/3 and 2 n_layers/3)")
        if self.sliding_window is None:
            raise _bad("full_layers", f, "None without sliding_window (the other layers attend within the window)")
        if self.window_pattern != "S":
            raise _bad("window_pattern", self.window_pattern, f"'S' with full_layers={f} (which places the full "
                       "layers itself)")
        if self.n_layers < f:
            raise _bad("n_layers", self.n_layers, f"at least full_layers={f}")

    def _check_kernel(self) -> None:
        """A linear kernel never forms the T x S scores, so nothing that edits them can work, except ALiBi with
        VQ, whose decay factors into per-head decayed code sums (nn/attention/linear/vq.py); it folds each key into a
        state once, so keys cannot be re-rotated later either."""
        kernel = self.attn_kernel
        if kernel == "softmax":
            return
        if self.attn_softcap is not None:
            raise _bad("attn_softcap", self.attn_softcap, f"None with attn_kernel={kernel!r} (no scores to cap)")
        if self.position == "relative":
            raise _bad("position", "relative", f"rope, sinusoidal, learned, none or (vq) alibi with attn_kernel="
                       f"{kernel!r} (T5's bucketed bias is not a query factor times a key factor, so no state "
                       "can carry it)")
        if self.position == "alibi" and kernel == "favor":
            raise _bad("position", "alibi", "rope, sinusoidal, learned or none with attn_kernel='favor' (its running "
                       "sums are not decayed per query head; attn_kernel='vq' takes ALiBi)")
        if self.sliding_window is not None:
            raise _bad("sliding_window", self.sliding_window, f"None with attn_kernel={kernel!r}")
        if self.attn_dropout:
            raise _bad("attn_dropout", self.attn_dropout, f"0 with attn_kernel={kernel!r} (no probabilities)")
        kind = ROPE_KINDS[self.rope_scaling.kind] if self.rope_scaling is not None else None
        if kind is not None and (kind.length_dependent or kind.remaps_positions):
            raise _bad("rope_scaling.kind", self.rope_scaling.kind, f"a static schedule with attn_kernel={kernel!r} "
                       "(cached keys are folded into the state, never re-rotated)")

    def _default_d_ff(self) -> int:
        """The FFN's default width, or a GAU's value width e = GAU_EXPANSION * d_model (rounded up alike)."""
        if self.block == "gau":
            m = self.d_ff_multiple_of
            return -(-int(GAU_EXPANSION * self.d_model) // m) * m
        return default_d_ff(self.ffn, self.d_model, self.d_ff_multiple_of)

    def _check_switches(self) -> None:
        """QueryNorm, cosine attention, DeepNorm and GAU: combinations that cannot work, refused before compute."""
        if self.cosine_attention and (self.key_norm or self.query_norm or self.qk_norm != "none"):
            raise _bad("cosine_attention", True, "not with key_norm, query_norm or qk_norm (it normalises q and k "
                       "itself)")
        if self.query_norm and (self.key_norm or self.qk_norm != "none"):
            raise _bad("query_norm", True, "not with key_norm (that is cosine_attention=True) or qk_norm")
        if self.cosine_attention and self.max_seq_len < 3:
            raise _bad("cosine_attention", True, "needs max_seq_len >= 3 (lambda = 4 log(max_seq_len / 2) > 0)")
        if self.dynamic_cosine and self.attn_scale is not None:
            raise _bad("attn_scale", self.attn_scale, "None with cosine.scale='dynamic' (lambda is 4 log n per query)")
        if self.dynamic_cosine and self.attn_logn:
            raise _bad("attn_logn", True, "not with cosine.scale='dynamic' (that is already 4 log n per query)")
        if self.norm_position == "deepnorm" and self.block == "parallel":
            raise _bad("norm_position", "deepnorm", "only with block='serial' or 'gau' (x <- LN(alpha x + F(x)) "
                       "per sublayer)")
        if self.block == "gau":
            self._check_gau()

    def _check_gau(self) -> None:
        for name, want in (("n_heads", 1), ("n_kv_heads", 1), ("ffn", "glu"), ("attn_kernel", "softmax")):
            if getattr(self, name) != want:
                raise _bad(name, getattr(self, name), f"{want!r} with block='gau' (one gated attention head, no "
                           "FFN: head_dim is its key width s, d_ff its value width e)")
        for name, off in (("qk_norm", "none"), ("key_norm", False), ("query_norm", False),
                          ("cosine_attention", False)):
            if getattr(self, name) != off:  # GAU.project makes q and k from Z by a scale and an offset only
                raise _bad(name, getattr(self, name), f"{off!r} with block='gau' (its q and k are a per-dimension "
                           "scale and offset of Z; no norm is applied)")
        if self.gau.attention == "relu2" and self.attn_impl == "sdpa":
            raise _bad("attn_impl", "sdpa", "auto or eager with gau.attention='relu2' (SDPA is a softmax)")

    # ----- derived properties -----
    @property
    def linear_kernel(self) -> Favor | VQ | None:
        """The option group of a linear attn_kernel (what it costs, how it is built), or None for softmax."""
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
        if self.cosine_attention:  # lambda = 4 log n, n half the training length (Su, kexue.fm/archives/9859)
            return COSINE_LAMBDA * math.log(self.max_seq_len / 2)
        return 1.0 if self.key_norm or self.query_norm else 1.0 / math.sqrt(self.head_dim)

    def layer_is_sliding(self, layer_idx: int) -> bool:
        """Whether layer `layer_idx` uses the sliding window: every layer but the `full_layers` middle ones, or
        window_pattern cycled over the layers."""
        if self.sliding_window is None:
            return False
        if self.full_layers is not None:
            return layer_idx not in middle_layers(self.n_layers, self.full_layers)
        return self.window_pattern[layer_idx % len(self.window_pattern)] == "S"

    @property
    def has_local_rope(self) -> bool:
        """Whether window layers rotate differently from full ones: their own base, or no share of rope_scaling."""
        unscaled = not self.rope_scaling_local and self.rope_scaling is not None and self.rope_scaling.kind != "none"
        return self.position == "rope" and (self.rope_theta_local is not None or unscaled)

    def layer_rope(self, layer_idx: int) -> str | None:
        """Which RoPE layer `layer_idx` uses: "global", "local" (a window layer when `has_local_rope`), or None
        (no RoPE: another position type, or an N of position_pattern)."""
        if self.position != "rope" or self.position_pattern[layer_idx % len(self.position_pattern)] == "N":
            return None
        return "local" if self.has_local_rope and self.layer_is_sliding(layer_idx) else "global"

    # ----- construction and serialisation -----
    def derived_values(self) -> dict[str, object]:
        """What each field of `DERIVED` would be if left unset (None), from this config's other fields."""
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
        """Option group `name` with each derived field that holds its derived value back at None, and None where
        that leaves the group's defaults (so a switch turned off drops it, and one left on fills it again)."""
        group = getattr(self, name)
        if group is None:
            return None
        reset = {k: None for k, v in group.derived(self.head_dim).items() if getattr(group, k) == v}
        group = dataclasses.replace(group, **reset) if reset else group
        return None if group == type(group)() else group

    def with_inference_logn(self) -> ModelConfig:
        """This config with the log-n query scale at inference only ("log n" with a dagger in Su's tables,
        kexue.fm/archives/9708; bojone/rerope's patch): each query's scores times max(1, log n / log L), L =
        max_seq_len, n its position + 1, for a model trained without log-n (nothing changes up to L)."""
        if self.attn_logn:
            raise _bad("attn_logn", True, "False for log-n at inference only (this model trains with log-n already)")
        return self.replace(attn_logn=True, attn_logn_clip=True)

    def replace(self, **changes: Any) -> ModelConfig:
        """This config with `changes` applied, derived fields re-derived: a field of `DERIVED` that holds its
        derived value and is not in `changes` goes back to None, so the new config derives it from the changed
        fields (a Llama switched to ffn="mlp" gets the MLP's d_ff, as `build_preset(..., ffn="mlp")` does)."""
        check_fields(changes)
        changes = expand_shorthands(changes)  # ffn="swiglu" sets its activation, beating this config's
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
        """`to_dict` with the option groups spelled as the flat keys of configs saved before them (LEGACY_KEYS; a
        group that is off gives its defaults), in the old field order: the lab's run store keys runs by this, so a
        run keeps its folder (tests/lab/test_run_ids.py)."""
        out: dict[str, Any] = {}
        for name, value in dataclasses.asdict(self).items():
            if name not in GROUPS:
                out[name] = value
                continue
            group = value if value is not None else dataclasses.asdict(GROUPS[name][0]())
            out.update({old: group[field] for old, (g, field) in LEGACY_KEYS.items() if g == name})
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """A config from `to_dict`'s output, or from a config saved with the old flat keys (`from_legacy`)."""
        d = from_legacy(d)
        check_fields(d)
        return cls(**d)


def check_fields(values: dict[str, Any]) -> None:
    """Every key of `values` is a ModelConfig field, or one line naming the first that is not (an old flat key
    with its new spelling)."""
    known = {f.name for f in fields(ModelConfig)}
    unknown = sorted(set(values) - known)
    if unknown and unknown[0] in LEGACY_KEYS:
        group, field = LEGACY_KEYS[unknown[0]]
        cls = GROUPS[group][0].__name__
        raise ConfigError(f"ModelConfig has no field {unknown[0]!r}: it is {group}.{field} now ({group}={cls}("
                          f"{field}=...), or --model.{group}.{field} on the command line)")
    if unknown:
        raise ConfigError(f"ModelConfig has no field {unknown[0]!r}; known fields: {', '.join(sorted(known))}")


def from_legacy(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with the flat keys of configs saved before the option groups (LEGACY_KEYS) moved into their groups. A
    flat key at its default whose group's switch is off is dropped: every old config held them all."""
    out = {k: v for k, v in d.items() if k not in LEGACY_KEYS}
    for old in [k for k in d if k in LEGACY_KEYS]:
        group, field = LEGACY_KEYS[old]
        cls, switch, on = GROUPS[group]
        if d[old] == _FIELD_DEFAULTS[group][field] and out.get(switch, _DEFAULTS[switch]) != on:
            continue
        if group in d:
            raise ConfigError(f"ModelConfig: {old!r} is the old spelling of {group}.{field}; give {group!r} alone")
        out.setdefault(group, {})[field] = d[old]
    return out


def middle_layers(n_layers: int, count: int) -> tuple[int, ...]:
    """The full layers of `full_layers=count` (HWFA2, Su kexue.fm/archives/9731): in the middle of the stack, L/2
    for one, L/3 and 2L/3 for two."""
    return (n_layers // 2,) if count == 1 else (n_layers // 3, 2 * n_layers // 3)


def layer_over(lower: dict[str, Any], upper: dict[str, Any]) -> dict[str, Any]:
    """`upper`'s fields over `lower`'s (a preset under the caller's, a built config under `replace`'s changes, a
    saved config under a resume's flags). A value object that `upper` gives as a dict without its kind,
    `rope_scaling={"window": 64}` (what `--model.rope_scaling.window 64` parses to), edits `lower`'s value rather
    than starting from RopeScaling's defaults: hwfa2's ReRoPE window is set that way. A dict naming a kind, an
    instance or None replaces the value, as before."""
    out = {**lower, **upper}
    for name in VALUE_OBJECTS:
        change, base = upper.get(name), lower.get(name)
        if isinstance(change, dict) and "kind" not in change and base is not None:
            base = dataclasses.asdict(base) if dataclasses.is_dataclass(base) else dict(base)
            out[name] = {**base, **change}
    return out


# ----- helpers for building a ModelConfig from layers of fields -----
_DEFAULTS = {f.name: f.default for f in fields(ModelConfig)}
_FIELD_DEFAULTS = {name: {f.name: f.default for f in fields(cls)} for name, (cls, _, _) in GROUPS.items()}
VALUE_OBJECTS = {"rope_scaling": RopeScaling, **{name: cls for name, (cls, _, _) in GROUPS.items()}}


def inapplicable_fields(values: dict[str, Any]) -> list[str]:
    """The fields of `values` set away from their default although their switch (ONLY_WITH) is off."""
    return [name for name, (switch, want) in ONLY_WITH.items()
            if values.get(switch, _DEFAULTS[switch]) != want and values.get(name, _DEFAULTS[name]) != _DEFAULTS[name]]


def expand_shorthands(layer: dict[str, Any]) -> dict[str, Any]:
    """One layer of fields with an ffn shorthand spelled out: {"ffn": "swiglu"} -> {"ffn": "glu", "activation":
    "silu"}, so the shorthand's activation beats a lower layer's (a preset's). The same layer setting another
    activation fails."""
    if layer.get("ffn") not in GLU_SHORTHANDS:
        return dict(layer)
    ffn, activation = _expand_ffn(layer["ffn"], layer.get("activation"))
    return {**layer, "ffn": ffn, "activation": activation}


def _expand_ffn(ffn: str, activation: str | None) -> tuple[str, str | None]:
    """(ffn, activation) with a GLU shorthand spelled out; a shorthand with another activation fails."""
    if ffn not in GLU_SHORTHANDS:
        return ffn, activation
    kind, act = GLU_SHORTHANDS[ffn]
    if activation not in (None, act):
        raise _bad("activation", activation, f"not with ffn={ffn!r} (= glu + {act}): set ffn='glu' for another "
                   "activation")
    return kind, act


def _value_object(name: str, cls: type, d: dict[str, Any]) -> Any:
    """A RopeScaling or option group from a dict (a saved config, or Python callers), unknown keys named in one
    line; a group's own refusal as a ConfigError."""
    known = [f.name for f in fields(cls)]
    unknown = [k for k in d if k not in known]
    if unknown:
        raise ConfigError(f"ModelConfig.{name} has no field {unknown[0]!r}; {cls.__name__} has the fields "
                          f"{', '.join(known)}")
    try:
        return cls(**d)
    except OptionError as err:
        raise ConfigError(str(err)) from None


__all__ = ["GAU", "VQ", "ConfigError", "Cosine", "Favor", "ModelConfig", "RopeScaling", "check_fields",
           "expand_shorthands", "from_legacy", "inapplicable_fields", "layer_over", "middle_layers"]
