"""The names `archlab ablate`'s flags offer, without torch or scipy (as nn/config/choices.py is
for the model): how runs are executed, how they train (modes) and which sequential designs exist.
lab/runs/executor.py and lab/analysis/power.py, which implement them, import these; `archlab ablate
--help` reads them here without importing those modules' dependencies.
"""

from __future__ import annotations

# local: archlab's own process pool (--jobs); slurm: submitit job arrays
EXECUTORS = ("local", "slurm")
# how every run of a suite trains (--mode): the train keys each mode sets above every arm's. A
# mode other than default changes the runs' floats, so it enters each run's config and store key
# (lab/runs/store.py) and its provenance; the lab's measures and timing pairs read the eager model
# alike in every mode.
MODES: dict[str, dict[str, object]] = {
    "default": {},  # eager fp32: the published pages' mode
    # torch.compile of the model (train/distributed.py parallelize)
    "compiled": {"precision.compile": True},
    # bf16 autocast: on CPUs with bf16 units (train/hardware.py)
    "bf16": {"precision.dtype": "bf16"},
}
# two-look group-sequential designs (lab/analysis/power.py sequential_levels)
SEQUENTIAL_KINDS = ("pocock", "obrien-fleming")
