"""train/variants.py lists the optimizers of train/optim.py without torch; the names must be the registry's keys, in
its order, so an optimizer added to one and not the other fails here."""

from __future__ import annotations

from archlab.train import variants
from archlab.train.optim import OPTIMIZERS


def test_optimizer_names_are_the_registrys_keys_in_order() -> None:
    assert variants.OPTIMIZER_NAMES == tuple(OPTIMIZERS)


def test_every_optimizer_has_default_betas_and_the_sign_ones_are_registered() -> None:
    assert tuple(variants.DEFAULT_BETAS) == tuple(OPTIMIZERS)
    assert set(variants.SIGN_OPTIMIZERS) <= set(OPTIMIZERS)
    assert set(variants.EMBEDDING_OPTIMIZERS) - {"same"} <= set(OPTIMIZERS)
