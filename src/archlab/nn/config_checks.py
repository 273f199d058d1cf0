"""The checks `ModelConfig.__post_init__` runs, as the methods of `ConfigChecks` (ModelConfig
inherits them, so each reads the config's fields by name): the choices of every string switch,
sizes, positions, attention, linear kernels and the switches that exclude each other. Each refusal
is one line naming the field, the value and what is allowed (docs/configuration.md). No torch.
"""

from __future__ import annotations

from dataclasses import fields

from archlab.nn.config_rules import (
    ATTN_IMPLS,
    ATTN_KERNELS,
    BLOCKS,
    EMBED_SCALES,
    FULL_LAYER_COUNTS,
    INITS,
    NORM_POSITIONS,
    ONLY_WITH,
    POSITION_LAYERS,
    QK_NORM_SCOPES,
    QK_NORMS,
    TIED_EMBED_INITS,
    TIED_HEADS,
    WINDOW_LAYERS,
    bad,
    inapplicable_fields,
)
from archlab.nn.positions.scaling import ROPE_KINDS
from archlab.nn.variants import ACTIVATIONS, FFNS, GLU_SHORTHANDS, NORMS, POSITIONS, ROPE_LAYOUTS


class ConfigChecks:
    """The checks of `ModelConfig.__post_init__` (a mixin: every name is a ModelConfig field)."""

    def _check_choices(self) -> None:
        choices = {
            "norm": NORMS,
            "norm_position": NORM_POSITIONS,
            "block": BLOCKS,
            "ffn": (*FFNS, *GLU_SHORTHANDS),
            "activation": ACTIVATIONS,
            "position": POSITIONS,
            "rope_layout": ROPE_LAYOUTS,
            "qk_norm": QK_NORMS,
            "qk_norm_scope": QK_NORM_SCOPES,
            "embed_scale": EMBED_SCALES,
            "init": INITS,
            "attn_impl": ATTN_IMPLS,
            "attn_kernel": ATTN_KERNELS,
            "tied_head": TIED_HEADS,
            "tied_embed_init": TIED_EMBED_INITS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise bad(name, getattr(self, name), "one of " + ", ".join(allowed))
        if self.rope_scaling is not None and self.rope_scaling.kind not in ROPE_KINDS:
            raise bad(
                "rope_scaling.kind", self.rope_scaling.kind, "one of " + ", ".join(ROPE_KINDS)
            )
        for name, plain in (("tied_head", "plain"), ("tied_embed_init", "default")):
            if getattr(self, name) != plain and not self.tie_embeddings:
                raise bad(
                    name,
                    getattr(self, name),
                    f"only with tie_embeddings=True ({plain!r} otherwise)",
                )
        if self.tied_head == "swap" and self.d_model % 2:
            raise bad(
                "tied_head",
                "swap",
                f"needs an even d_model (got {self.d_model}) to swap two halves",
            )
        if self.parallel_norms not in (1, 2):
            raise bad("parallel_norms", self.parallel_norms, "1 (shared input norm) or 2")
        for name in inapplicable_fields(
            {f.name: getattr(self, f.name) for f in fields(self)},
            {f.name: f.default for f in fields(self)},
        ):
            switch, want = ONLY_WITH[name]
            raise bad(
                name,
                getattr(self, name),
                f"only with {switch}={want!r} ({switch}={getattr(self, switch)!r})",
            )

    def _check_sizes(self) -> None:
        for name in (
            "vocab_size",
            "n_layers",
            "n_kv_heads",
            "head_dim",
            "d_ff",
            "max_seq_len",
            "relative_buckets",
            "relative_max_distance",
        ):
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
        if self.position != "rope":
            if self.position == "sinusoidal" and self.d_model % 2:
                raise bad("d_model", self.d_model, "an even number with sinusoidal positions")
            return
        if not 0.0 < self.rope_fraction <= 1.0:
            raise bad("rope_fraction", self.rope_fraction, "a fraction in (0, 1]")
        if self.rope_dim % 2 or self.rope_dim == 0:
            raise bad(
                "rope_fraction",
                self.rope_fraction,
                f"must give an even, non-zero rotary dim (head_dim={self.head_dim} * fraction = "
                f"{self.head_dim * self.rope_fraction:g})",
            )
        if self.rope_theta <= 1:
            raise bad("rope_theta", self.rope_theta, "a base > 1")
        if self.rope_theta_local is not None and not self.rope_theta_local > 1:
            raise bad("rope_theta_local", self.rope_theta_local, "None or a base > 1")
        if not self.position_pattern or set(self.position_pattern) - set(POSITION_LAYERS):
            raise bad(
                "position_pattern",
                self.position_pattern,
                "a non-empty string of R (RoPE) and N (NoPE)",
            )
        s = self.rope_scaling
        if s is not None and ROPE_KINDS[s.kind].training_only and not s.window < self.max_seq_len:
            raise bad(
                "rope_scaling.window",
                s.window,
                f"< max_seq_len={self.max_seq_len} with "
                f"kind={s.kind!r} (training must reach past the window)",
            )

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
            raise bad(
                "window_pattern",
                self.window_pattern,
                "a non-empty string of S (window) and F (full)",
            )
        if self.full_layers is not None:
            self._check_full_layers()
        if self.attn_logn_base is not None and (
            isinstance(self.attn_logn_base, bool)
            or not isinstance(self.attn_logn_base, int)
            or self.attn_logn_base < 2
        ):
            raise bad(
                "attn_logn_base", self.attn_logn_base, "None (= max_seq_len) or an integer >= 2"
            )
        if self.attn_logn_base is not None and not self.attn_logn:
            raise bad("attn_logn_base", self.attn_logn_base, "only with attn_logn=True")
        if self.attn_logn_clip and not self.attn_logn:
            raise bad("attn_logn_clip", True, "only with attn_logn=True")
        if self.attn_logn and self.max_seq_len < 2 and self.attn_logn_base is None:
            raise bad("attn_logn", True, "needs max_seq_len >= 2 or attn_logn_base (log 1 = 0)")
        if self.qk_norm != "none" and self.key_norm:
            raise bad(
                "key_norm", True, "not together with qk_norm (KeyNorm is its own key normalisation)"
            )

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
        """A linear kernel never forms the T x S scores, so nothing that edits them can work, except
        ALiBi with VQ, whose decay factors into per-head decayed code sums
        (nn/attention/linear/vq.py); it folds each key into a state once, so keys cannot be
        re-rotated later either."""
        kernel = self.attn_kernel
        if kernel == "softmax":
            return
        if self.attn_softcap is not None:
            raise bad(
                "attn_softcap",
                self.attn_softcap,
                f"None with attn_kernel={kernel!r} (no scores to cap)",
            )
        if self.position == "relative":
            raise bad(
                "position",
                "relative",
                f"rope, sinusoidal, learned, none or (vq) alibi with attn_kernel="
                f"{kernel!r} (T5's bucketed bias is not a query factor times a key factor, so no "
                "state "
                "can carry it)",
            )
        if self.position == "alibi" and kernel == "favor":
            raise bad(
                "position",
                "alibi",
                "rope, sinusoidal, learned or none with attn_kernel='favor' (its running "
                "sums are not decayed per query head; attn_kernel='vq' takes ALiBi)",
            )
        if self.sliding_window is not None:
            raise bad("sliding_window", self.sliding_window, f"None with attn_kernel={kernel!r}")
        if self.attn_dropout:
            raise bad(
                "attn_dropout",
                self.attn_dropout,
                f"0 with attn_kernel={kernel!r} (no probabilities)",
            )
        kind = ROPE_KINDS[self.rope_scaling.kind] if self.rope_scaling is not None else None
        if kind is not None and (kind.length_dependent or kind.remaps_positions):
            raise bad(
                "rope_scaling.kind",
                self.rope_scaling.kind,
                f"a static schedule with attn_kernel={kernel!r} "
                "(cached keys are folded into the state, never re-rotated)",
            )

    def _check_switches(self) -> None:
        """QueryNorm, cosine attention, DeepNorm and GAU: combinations that cannot work, refused
        before compute."""
        if self.cosine_attention and (self.key_norm or self.query_norm or self.qk_norm != "none"):
            raise bad(
                "cosine_attention",
                True,
                "not with key_norm, query_norm or qk_norm (it normalises q and k itself)",
            )
        if self.query_norm and (self.key_norm or self.qk_norm != "none"):
            raise bad(
                "query_norm", True, "not with key_norm (that is cosine_attention=True) or qk_norm"
            )
        if self.cosine_attention and self.max_seq_len < 3:
            raise bad(
                "cosine_attention",
                True,
                "needs max_seq_len >= 3 (lambda = 4 log(max_seq_len / 2) > 0)",
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
        if self.norm_position == "deepnorm" and self.block == "parallel":
            raise bad(
                "norm_position",
                "deepnorm",
                "only with block='serial' or 'gau' (x <- LN(alpha x + F(x)) per sublayer)",
            )
        if self.block == "gau":
            self._check_gau()

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
                    f"{want!r} with block='gau' (one gated attention head, no "
                    "FFN: head_dim is its key width s, d_ff its value width e)",
                )
        for name, off in (
            ("qk_norm", "none"),
            ("key_norm", False),
            ("query_norm", False),
            ("cosine_attention", False),
        ):
            # GAU.project makes q and k from Z by a scale and an offset only
            if getattr(self, name) != off:
                raise bad(
                    name,
                    getattr(self, name),
                    f"{off!r} with block='gau' (its q and k are a per-dimension "
                    "scale and offset of Z; no norm is applied)",
                )
        if self.gau.attention == "relu2" and self.attn_impl == "sdpa":
            raise bad(
                "attn_impl", "sdpa", "auto or eager with gau.attention='relu2' (SDPA is a softmax)"
            )
