"""The names `archlab ablate`'s flags offer, without torch or scipy (as nn/variants.py is for the model): how runs
are executed and which sequential designs exist. lab/runs/executor.py and lab/analysis/power.py, which implement them,
import these; `archlab ablate --help` reads them here without importing those modules' dependencies.
"""

from __future__ import annotations

EXECUTORS = ("local", "slurm")  # local: archlab's own process pool (--jobs); slurm: submitit job arrays
# two-look group-sequential designs (lab/analysis/power.py sequential_levels)
SEQUENTIAL_KINDS = ("pocock", "obrien-fleming")
