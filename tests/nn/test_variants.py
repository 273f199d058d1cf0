"""nn/variants.py and nn/rope_scaling.py describe the registries of nn/ without torch; each list must hold exactly
the keys of its registry, in the same order (the config's error messages list them in that order), so a variant
added to one and not the other fails here."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from archlab.nn import variants
from archlab.nn.rope_scaling import ROPE_KINDS, RopeScaling

# name list of nn/variants.py -> (module, registry) it describes
REGISTRIES = {
    "NORM_NAMES": ("archlab.nn.norms", "NORMS"),
    "ACTIVATION_NAMES": ("archlab.nn.activations", "ACTIVATIONS"),
    "FFN_NAMES": ("archlab.nn.ffn", "FFNS"),
    "ABSOLUTE_POSITION_NAMES": ("archlab.nn.positions", "ABSOLUTE_POSITIONS"),
    "ATTENTION_BIAS_NAMES": ("archlab.nn.positions", "ATTENTION_BIASES"),
    "ATTENTION_KERNEL_NAMES": ("archlab.nn.attention_kernels", "ATTENTION_KERNELS"),
    "LINEAR_KERNEL_NAMES": ("archlab.nn.linear_kernels", "LINEAR_KERNELS"),
    "FAVOR_FEATURE_NAMES": ("archlab.nn.favor", "FAVOR_FEATURES"),
}


@pytest.mark.parametrize("names", sorted(REGISTRIES))
def test_each_name_list_holds_its_registrys_keys_in_order(names: str) -> None:
    module, registry = REGISTRIES[names]
    keys = tuple(getattr(importlib.import_module(module), registry))
    assert getattr(variants, names) == keys, f"nn/variants.py {names} != {module}.{registry} keys {keys}"


def test_every_name_list_is_checked_against_a_registry() -> None:
    """A new *_NAMES list in nn/variants.py needs its row in REGISTRIES above (else nothing keeps it true)."""
    lists = {name for name in vars(variants) if name.endswith("_NAMES")}
    assert lists == set(REGISTRIES)


def test_rope_kinds_describe_exactly_the_frequency_functions() -> None:
    """ROPE_KINDS (torch-free) and nn/rope.py's ROPE_SCALINGS (the functions) hold the same kinds in one order;
    a kind whose function takes the current length is the one marked length_dependent."""
    from archlab.nn.rope import ROPE_SCALINGS

    assert tuple(ROPE_KINDS) == tuple(ROPE_SCALINGS)
    for kind, fn in ROPE_SCALINGS.items():
        takes_length = "seq_len" in inspect.signature(fn).parameters
        assert takes_length == ROPE_KINDS[kind].length_dependent, kind


def test_rope_kinds_name_real_fields() -> None:
    """Every field a kind requires or reads is a field of RopeScaling (a typo would make the kind unusable)."""
    known = {f.name for f in dataclasses.fields(RopeScaling)} - {"kind", "factor"}
    for kind, entry in ROPE_KINDS.items():
        assert set(entry.required + entry.optional) <= known, kind


def test_the_d_ff_rule_covers_every_ffn_and_shorthand() -> None:
    assert set(variants.FFN_WIDTH_FACTOR) == set(variants.FFN_NAMES)
    assert {kind for kind, _ in variants.GLU_SHORTHANDS.values()} <= set(variants.FFN_NAMES)
    assert {act for _, act in variants.GLU_SHORTHANDS.values()} <= set(variants.ACTIVATION_NAMES)
