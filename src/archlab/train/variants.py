"""The optimizers of train/ by name, and the defaults `TrainConfig` shows, without torch (as nn/variants.py is for nn/).

`OPTIMIZERS` (train/optim.py) maps a name to a builder over torch parameters; importing it imports torch, which
`archlab train --help` and a config check do not need. train/config.py validates against the names here;
`tests/train/test_variants.py` fails when they and the registry differ. (The schedules of train/schedule.py are
plain Python: the config reads that registry itself.)
"""

from __future__ import annotations

OPTIMIZER_NAMES = ("adamw", "lion", "tiger")  # train/optim.py OPTIMIZERS, in its order
# name -> default betas; the builders in train/optim.py read them when the config leaves betas unset.
DEFAULT_BETAS: dict[str, tuple[float, ...]] = {
    "adamw": (0.9, 0.95),  # beta2 0.95 instead of 0.999: faster reaction to loss spikes (GPT-3, LLaMA)
    "lion": (0.9, 0.99),  # the paper's defaults for language modelling
    "tiger": (0.965,),  # kexue.fm/archives/9512 and bojone/tiger for language models (0.945 is the vision value)
}
SIGN_OPTIMIZERS = ("lion", "tiger")  # the optimizers the embedding remedies apply to
EMBEDDING_OPTIMIZERS = ("same", "adamw")  # how tables are stepped: like everything else, or by AdamW (mixed)
EMBEDDING_LR_RATIO = 3.0  # mixed optimizer: the tables' AdamW lr = this x the sign optimizer's lr
NAN_SHRINK = 0.99  # Tiger's NaN guard: theta <- 0.99 theta (gains: 1 + 0.99 (theta - 1)) (bojone/tiger)
