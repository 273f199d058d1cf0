"""nn/config/choices.py: which norms each placement owns (read by Block and costs.py) and the d_ff
rule, against the placements' formulas and the widths written out; the choices the config checks are
the registries' names."""

from __future__ import annotations

import pytest

from archlab.nn.config import choices as variants
from archlab.nn.config.choices import default_d_ff, placement_norms


@pytest.mark.parametrize(
    ("position", "parallel", "norms", "single", "want"),
    [
        ("pre", False, 1, False, ["attn_norm", "mlp_norm"]),
        ("pre", True, 1, False, ["attn_norm"]),  # GPT-J, PaLM: one shared input norm
        ("pre", True, 2, False, ["attn_norm", "mlp_norm"]),  # NeoX: one per branch
        ("post", True, 2, False, ["attn_norm"]),  # N(x + A + M): one norm after the sum
        # Gemma 2
        ("double", False, 1, False, ["attn_norm", "mlp_norm", "attn_out_norm", "mlp_out_norm"]),
        ("nonresidual_post", False, 1, False, ["attn_out_norm", "mlp_out_norm"]),  # OLMo 2
        ("deepnorm", False, 1, False, ["attn_norm", "mlp_norm"]),
        ("double", False, 1, True, ["attn_norm", "attn_out_norm"]),  # a GAU: one sublayer
    ],
)
def test_each_placement_owns_its_norms(
    position: str, parallel: bool, norms: int, single: bool, want: list[str]
) -> None:
    assert placement_norms(position, parallel, norms, single) == want


@pytest.mark.parametrize(
    ("kind", "d_model", "multiple", "want"),
    [
        ("mlp", 64, 64, 256),
        ("glu", 64, 64, 192),  # 8/3 * 64 = 170.7 -> 192
        ("glu", 4096, 256, 11008),
        ("mlp", 100, 64, 448),  # Llama 2 7B's 11008; 400 -> 448
    ],
)
def test_the_d_ff_rule(kind: str, d_model: int, multiple: int, want: int) -> None:
    assert default_d_ff(kind, d_model, multiple) == want


def test_the_d_ff_rule_covers_every_ffn_and_shorthand() -> None:
    assert set(variants.FFN_WIDTH_FACTOR) == set(variants.FFNS)
    assert {kind for kind, _ in variants.GLU_SHORTHANDS.values()} <= set(variants.FFNS)
    assert {act for _, act in variants.GLU_SHORTHANDS.values()} <= set(variants.ACTIVATIONS)
    assert set(variants.NORM_PLACEMENTS) == {
        "pre",
        "post",
        "double",
        "nonresidual_post",
        "deepnorm",
    }


def test_the_config_checks_its_string_fields_against_these_choices() -> None:
    """Every string field of ModelConfig with a fixed set of values is in CHOICES (or is a letters
    pattern), and each entry refuses a value outside it naming the choices."""
    import dataclasses

    from archlab.nn.config import ConfigError, ModelConfig

    strings = {f.name for f in dataclasses.fields(ModelConfig) if f.type in ("str", "str | None")}
    # S / F letters, checked as a pattern
    assert strings - set(variants.CHOICES) == {"window_pattern"}
    for name, allowed in variants.CHOICES.items():
        with pytest.raises(
            ConfigError,
            match=rf"^ModelConfig.{name}='bogus' is not allowed: one of " + ", ".join(allowed),
        ):
            ModelConfig(**{name: "bogus"})
