"""The ablation lab: a lecture's claims as equal-budget experiments with computed
verdicts (`archlab ablate`).

`archlab.lab.Experiment` is the front door (lab/experiment.py). Code outside the lab
(commands/, scripts/) imports only the names below, never a module of the lab's subpackages
(tests/test_layout.py checks it):

    spec/         what a suite asks for: the suite file, arms, budgets, designs, the names
                  ablate's flags offer
    measures/     what is measured of one run, and the timing pairs
    analysis/     the table of measured values, the verdict rule and its tests, power, screening,
                  the ladder's fit
    runs/         the plan, the store, the runner and its worker, executors, collecting, planning
                  seeds
    publishing/   the record, the pages, the report, docs/results

Each name is imported when first used, so the torch-free parts (`archlab ablate --help`, `--list`:
the budgets, the flags' names, the suite index) stay light.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archlab.lab.experiment import Experiment
    from archlab.lab.measures.measure import MEASURES, measure_run
    from archlab.lab.publishing.books import pages as published_pages
    from archlab.lab.publishing.legacy import from_legacy, register_published
    from archlab.lab.publishing.publish import check as check_pages
    from archlab.lab.publishing.publish import import_folder
    from archlab.lab.publishing.publish import rebuild as rebuild_pages
    from archlab.lab.publishing.summary import SUMMARY
    from archlab.lab.publishing.verify import verify
    from archlab.lab.runs.executor import SlurmOptions
    from archlab.lab.runs.runner import LabError, Progress
    from archlab.lab.spec.budgets import BUDGETS
    from archlab.lab.spec.suite_file import suite_index
    from archlab.lab.spec.variants import EXECUTORS, MODES, SEQUENTIAL_KINDS

# public name -> (module, its name there)
_PUBLIC = {
    "Experiment": ("archlab.lab.experiment", "Experiment"),
    # torch-free: `archlab ablate`'s flags and --list
    "BUDGETS": ("archlab.lab.spec.budgets", "BUDGETS"),
    "EXECUTORS": ("archlab.lab.spec.variants", "EXECUTORS"),
    "SEQUENTIAL_KINDS": ("archlab.lab.spec.variants", "SEQUENTIAL_KINDS"),
    "MODES": ("archlab.lab.spec.variants", "MODES"),
    "suite_index": ("archlab.lab.spec.suite_file", "suite_index"),
    # what an experiment takes, reports and raises
    "SlurmOptions": ("archlab.lab.runs.executor", "SlurmOptions"),
    "Progress": ("archlab.lab.runs.runner", "Progress"),
    "LabError": ("archlab.lab.runs.runner", "LabError"),
    # a published page or suite folder: `archlab ablate --verify`, scripts/publish_results.py
    "verify": ("archlab.lab.publishing.verify", "verify"),
    "import_folder": ("archlab.lab.publishing.publish", "import_folder"),
    "check_pages": ("archlab.lab.publishing.publish", "check"),
    "rebuild_pages": ("archlab.lab.publishing.publish", "rebuild"),
    "published_pages": ("archlab.lab.publishing.books", "pages"),
    "SUMMARY": ("archlab.lab.publishing.summary", "SUMMARY"),
    "from_legacy": ("archlab.lab.publishing.legacy", "from_legacy"),
    "register_published": ("archlab.lab.publishing.legacy", "register_published"),
    # one run's measures, as collecting takes them (scripts/behaviour_hashes.py fingerprints them)
    "MEASURES": ("archlab.lab.measures.measure", "MEASURES"),
    "measure_run": ("archlab.lab.measures.measure", "measure_run"),
}

__all__ = [  # _PUBLIC's names (tests/test_layout.py checks they agree)
    "BUDGETS",
    "EXECUTORS",
    "MEASURES",
    "MODES",
    "SEQUENTIAL_KINDS",
    "SUMMARY",
    "Experiment",
    "LabError",
    "Progress",
    "SlurmOptions",
    "check_pages",
    "from_legacy",
    "import_folder",
    "measure_run",
    "published_pages",
    "rebuild_pages",
    "register_published",
    "suite_index",
    "verify",
]


def __getattr__(name: str) -> object:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = getattr(import_module(module), attribute)
    globals()[name] = value  # the next lookup finds it without __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
