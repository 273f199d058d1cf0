"""Every variant family is one registry of lazy "module:attr" references (nn/registry.py): each
reference resolves to the code it names, a lookup imports only then, and the config's names are
the registries' keys."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest

from archlab.nn import registry
from archlab.nn.config import GROUPS
from archlab.nn.config.choices import LINEAR_KERNELS
from archlab.nn.positions.scaling import ROPE_KINDS, RopeScaling
from archlab.nn.registry import Registry
from archlab.train.variants import DEFAULT_BETAS, OPTIMIZERS, SIGN_OPTIMIZERS
from tests.conftest import run_without_torch

SRC = Path(__file__).resolve().parents[2] / "src" / "archlab"


def modules_with_registries() -> list[str]:
    """The modules of src/ that build a Registry (read with ast, so a new one is found without
    a list here)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(
            isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Registry"
            for n in ast.walk(tree)
        ):
            found.append(".".join(path.relative_to(SRC.parent).with_suffix("").parts))
    return found


def all_registries() -> list[Registry]:
    for module in modules_with_registries():
        importlib.import_module(module)
    return list(registry.ALL)


def test_the_registries_are_found_where_they_are_built() -> None:
    assert {"archlab.nn.config.choices", "archlab.train.variants"} <= set(modules_with_registries())
    assert {r.family for r in all_registries()} >= {
        "norm",
        "activation",
        "ffn",
        "absolute position",
        "attention bias",
        "attn_impl",
        "favor feature",
        "linear attention kernel",
        "schedule",
        "decay shape",
    }


@pytest.mark.parametrize("reg", all_registries(), ids=lambda r: r.family)
def test_every_reference_resolves_to_code(reg: Registry) -> None:
    for name in reg:
        assert callable(reg[name]), (
            f"{reg.family} {name!r} -> {reg.references[name]} is not callable"
        )


def test_every_rope_kind_names_its_frequency_function_and_real_fields() -> None:
    """A kind's function takes the current length exactly when the kind is marked length_dependent,
    and the fields it requires or reads are fields of RopeScaling (a typo would make
    the kind unusable)."""
    known = {f.name for f in dataclasses.fields(RopeScaling)} - {"kind", "factor"}
    for name, kind in ROPE_KINDS.items():
        assert kind.name == name
        takes_length = "seq_len" in inspect.signature(kind.frequency_function()).parameters
        assert takes_length == kind.length_dependent, name
        assert set(kind.required + kind.optional) <= known, name


def test_every_optimizer_names_its_builder() -> None:
    import torch

    for name, kind in OPTIMIZERS.items():
        params = [torch.nn.Parameter(torch.ones(3))]
        built = kind.build_function()([{"params": params}], 1e-3, kind.betas, 1e-8)
        assert isinstance(built, torch.optim.Optimizer), name
    assert SIGN_OPTIMIZERS == ("lion", "tiger") and DEFAULT_BETAS["adamw"] == (0.9, 0.95)


def test_every_linear_kernel_names_its_module() -> None:
    import torch.nn as nn

    for name, options in LINEAR_KERNELS.items():
        kernel = options().resolved(8).build(2, 8, 0.35, 0)
        assert isinstance(kernel, nn.Module) and kernel.aux_loss is None, name
        assert GROUPS[name] == (options, "attn_kernel", name)  # its option group, on with its name


def test_a_lookup_imports_the_module_and_names_the_family_when_it_fails() -> None:
    reg = Registry("test family", {"gelu": "torch.nn.functional:gelu"})
    import torch.nn.functional as F

    assert reg["gelu"] is F.gelu and "gelu" in reg and list(reg) == ["gelu"] and len(reg) == 1
    with pytest.raises(KeyError, match="test family has no 'relu': one of gelu"):
        reg["relu"]
    reg.register("relu", "torch.nn.functional:relu")
    assert reg["relu"] is F.relu
    reg.unregister("relu")
    assert "relu" not in reg
    with pytest.raises(ValueError, match=r"test family\['x'\] = 'torch.relu' is not allowed"):
        reg.register("x", "torch.relu")
    registry.ALL.remove(reg)


def test_names_are_read_without_torch() -> None:
    run_without_torch(
        "from archlab.nn.config.choices import NORMS, ATTENTION_KERNELS\n"
        "assert list(NORMS) == ['rmsnorm', 'layernorm'] and 'eager' in ATTENTION_KERNELS\n"
        "from archlab.train.variants import OPTIMIZERS\nassert 'lion' in OPTIMIZERS\n"
    )
