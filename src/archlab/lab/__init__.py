"""The ablation lab: a lecture's claims as equal-budget experiments with computed verdicts (`archlab ablate`).

`archlab.lab.Experiment` is the front door (lab/experiment.py); it is imported when first named, so the
torch-free parts (`archlab ablate --help`, `--list`) stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archlab.lab.experiment import Experiment

__all__ = ["Experiment"]


def __getattr__(name: str) -> object:
    if name == "Experiment":
        from archlab.lab.experiment import Experiment

        return Experiment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
