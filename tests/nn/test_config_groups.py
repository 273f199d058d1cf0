"""The option groups of nn/config/ (`rope`, `gau`, `cosine` in groups.py; `favor`, `vq` in
kernels.py): each validated in its own `__post_init__` in one line, filled with its defaults when
its switch is on and refused when it is off (`cosine` is its own switch: None is off); the flat keys
of older configs (`rope_theta`, `favor_features`, ...) mapped into them by `ModelConfig.from_dict`
and the dotted-key grammar, and spelled back by `to_flat_dict` exactly as the old code
saved them (test_config_legacy.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from archlab.nn.config import GAU, GROUPS, VQ, ConfigError, Cosine, Favor, ModelConfig, Rope
from archlab.nn.config.kernels import default_favor_features

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy_runs"
# the fields ModelConfig had before the option groups (main at 92d7561), in their order
OLD_FIELDS = (
    "vocab_size d_model n_layers n_heads n_kv_heads head_dim d_ff d_ff_multiple_of max_seq_len "
    "norm norm_eps norm_bias norm_unit_offset norm_position final_norm block gau_attention "
    "parallel_norms parallel_fused ffn activation swish_beta bias attn_bias mlp_bias lm_head_bias "
    "position rope_theta rope_layout rope_fraction rope_scaling position_pattern rope_theta_local "
    "rope_scaling_local relative_buckets relative_max_distance qk_norm qk_norm_scope key_norm "
    "query_norm cosine_attention cosine_scale attn_softcap attn_scale sliding_window "
    "window_pattern full_layers attn_impl attn_logn attn_logn_base attn_logn_clip attn_kernel "
    "favor_features favor_orthogonal favor_feature favor_redraw vq_codes vq_block vq_commit "
    "vq_ema vq_assign vq_tau vq_cache_grad tie_embeddings tied_head tied_embed_init embed_scale "
    "final_softcap dropout attn_dropout init"
).split()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: Favor(features=0),
            "ModelConfig.favor.features=0 is not allowed: a positive integer or None",
        ),
        (
            lambda: Favor(features=True),
            "ModelConfig.favor.features=True is not allowed: a positive integer or None",
        ),
        (
            lambda: Favor(redraw=-1),
            "ModelConfig.favor.redraw=-1 is not allowed: a positive integer or None",
        ),
        (
            lambda: Favor(feature="trig"),
            "ModelConfig.favor.feature='trig' is not allowed: one of positive, hyperbolic",
        ),
        (
            lambda: Favor(features=7, feature="hyperbolic"),
            "ModelConfig.favor.features=7 is not allowed: an even number with feature='hyperbolic'",
        ),
        (lambda: VQ(codes=0), "ModelConfig.vq.codes=0 is not allowed: a positive integer"),
        (lambda: VQ(block=2.5), "ModelConfig.vq.block=2.5 is not allowed: a positive integer"),
        (lambda: VQ(commit=-1.0), "ModelConfig.vq.commit=-1.0 is not allowed: a number >= 0"),
        (
            lambda: VQ(ema=0.0),
            "ModelConfig.vq.ema=0.0 is not allowed: a decay in (0, 1] (1 = frozen codebook)",
        ),
        (lambda: VQ(tau=float("nan")), "ModelConfig.vq.tau=nan is not allowed: a finite number"),
        (
            lambda: VQ(assign="gumbel"),
            "ModelConfig.vq.assign='gumbel' is not allowed: one of hard, soft",
        ),
        (
            lambda: GAU(attention="relu"),
            "ModelConfig.gau.attention='relu' is not allowed: one of softmax, relu2",
        ),
        (
            lambda: Cosine(scale="per_head"),
            "ModelConfig.cosine.scale='per_head' is not allowed: one of fixed, dynamic",
        ),
        (lambda: Rope(theta=1.0), "ModelConfig.rope.theta=1.0 is not allowed: a base > 1"),
        (lambda: Rope(theta=True), "ModelConfig.rope.theta=True is not allowed: a base > 1"),
        (
            lambda: Rope(layout="paired"),
            "ModelConfig.rope.layout='paired' is not allowed: one of half, interleaved",
        ),
        (
            lambda: Rope(fraction=0.0),
            "ModelConfig.rope.fraction=0.0 is not allowed: a fraction in (0, 1]",
        ),
        (
            lambda: Rope(fraction=1.5),
            "ModelConfig.rope.fraction=1.5 is not allowed: a fraction in (0, 1]",
        ),
        (
            lambda: Rope(pattern="RX"),
            "ModelConfig.rope.pattern='RX' is not allowed: a non-empty string of R (RoPE) "
            "and N (NoPE)",
        ),
        (
            lambda: Rope(pattern=""),
            "ModelConfig.rope.pattern='' is not allowed: a non-empty string of R (RoPE) "
            "and N (NoPE)",
        ),
        (
            lambda: Rope(local_theta=1.0),
            "ModelConfig.rope.local_theta=1.0 is not allowed: None or a base > 1",
        ),
        (
            lambda: Rope(local_scaling=0),
            "ModelConfig.rope.local_scaling=0 is not allowed: True or False",
        ),
        (
            lambda: Rope(theta=float("inf")),
            "ModelConfig.rope.theta=inf is not allowed: a finite number",
        ),
        (
            lambda: Rope(scaling={"kind": "linear", "factor": float("inf")}),
            "ModelConfig.rope.scaling.factor=inf is not allowed: a finite number",
        ),
        (
            lambda: Rope(scaling={"kind": "linear", "bogus": 1}),
            "ModelConfig.rope.scaling has no field 'bogus'; RopeScaling has the fields "
            "kind, factor, original_max_seq_len, beta_fast, beta_slow, low_freq_factor, "
            "high_freq_factor, attention_factor, mscale, mscale_all_dim, truncate, "
            "window, inference_only, mixed_b",
        ),
        (
            lambda: Rope(scaling="yarn"),
            "ModelConfig.rope.scaling='yarn' is not allowed: None, a dict of RopeScaling "
            "fields or a RopeScaling",
        ),
    ],
)
def test_each_group_refuses_a_bad_value_in_one_line(make, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        make()
    assert str(err.value) == message


def test_a_group_given_as_a_dict_is_refused_as_a_config_error_naming_the_field() -> None:
    with pytest.raises(
        ConfigError, match=r"^ModelConfig.vq.codes=0 is not allowed: a positive integer$"
    ):
        ModelConfig(attn_kernel="vq", vq={"codes": 0})
    with pytest.raises(
        ConfigError, match=r"^ModelConfig.favor has no field 'feature_count'; Favor has the fields"
    ):
        ModelConfig(attn_kernel="favor", favor={"feature_count": 8})


@pytest.mark.parametrize(
    "name", [name for name, (_, switch, _) in GROUPS.items() if switch is not None]
)
def test_the_switch_fills_its_group_and_refuses_it_when_off(name: str) -> None:
    cls, switch, on = GROUPS[name]
    fields = {switch: on, **({"n_heads": 1} if name == "gau" else {})}
    config = ModelConfig(**fields)
    assert getattr(config, name) == cls().resolved(config.head_dim)
    off = ModelConfig(position="alibi")
    assert all(getattr(off, other) is None for other in GROUPS)
    # the default's
    assert [other for other in GROUPS if getattr(ModelConfig(), other) is not None] == ["rope"]
    with pytest.raises(
        ConfigError,
        match=rf"^ModelConfig.{name}={cls.__name__}\(.* is not allowed: only with {switch}={on!r}",
    ):
        ModelConfig(**{name: cls(), **({"position": "alibi"} if name == "rope" else {})})


def test_cosine_is_its_own_switch() -> None:
    """None is off, a Cosine (its defaults, or a dict of its fields) on; `replace` keeps it
    on with its defaults (another group at its defaults collapses to None and is filled again
    by its switch)."""
    assert ModelConfig().cosine is None
    on = ModelConfig(cosine={})
    assert on.cosine == Cosine() and on.resolved_attn_scale == pytest.approx(4 * math.log(128))
    assert ModelConfig(cosine=Cosine("dynamic")).dynamic_cosine and not on.dynamic_cosine
    assert on.replace(d_model=32).cosine == Cosine() and on.replace(cosine=None).cosine is None
    assert ModelConfig().replace(cosine={"scale": "dynamic"}).cosine == Cosine("dynamic")


def test_favor_features_are_derived_from_the_head_dim_and_kept_when_given() -> None:
    assert (
        ModelConfig(attn_kernel="favor").favor.features
        == default_favor_features(16, "positive")
        == 44
    )
    assert ModelConfig(
        attn_kernel="favor", favor=Favor(feature="hyperbolic"), d_model=40, n_heads=4
    ).favor == Favor(features=24, feature="hyperbolic")  # round(10 ln 10) = 23, even for hyperbolic
    assert ModelConfig(attn_kernel="favor", favor=Favor(features=7)).favor.features == 7
