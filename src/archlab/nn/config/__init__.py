"""`ModelConfig` and what it is made of, as one package under everything that takes a config
(docs/configuration.md); torch-free, so a config is built, checked and costed without torch:

- model.py    ModelConfig: every switch as a typed field, derived sizes, the checks across fields
- groups.py   the option groups (rope, gau, cosine; GROUPS: every group and its switch), each
              checking its own fields
- kernels.py  the linear attention kernels' groups (favor, vq): their refusals, costs and builders
- choices.py  every string switch's choices: the variant registries and the plain lists
- layers.py   layers of fields over each other (a preset, the caller's, a resumed run's flags)
- legacy.py   the old spellings (flat keys, `cosine_attention`), read in and spelled back
- base.py     ConfigError, the one-line refusals, `Group`

Import from here: `from archlab.nn.config import ModelConfig, Rope`.
"""

from archlab.nn.config.base import ConfigError, check_finite
from archlab.nn.config.groups import GAU, GROUPS, VQ, Cosine, Favor, Rope
from archlab.nn.config.layers import expand_shorthands, layer_over
from archlab.nn.config.legacy import LEGACY_KEYS, LEGACY_SWITCHES
from archlab.nn.config.model import (
    ModelConfig,
    check_fields,
    from_legacy,
    inapplicable_fields,
    middle_layers,
)
from archlab.nn.positions.scaling import RopeScaling

__all__ = [
    "GAU",
    "GROUPS",
    "LEGACY_KEYS",
    "LEGACY_SWITCHES",
    "VQ",
    "ConfigError",
    "Cosine",
    "Favor",
    "ModelConfig",
    "Rope",
    "RopeScaling",
    "check_fields",
    "check_finite",
    "expand_shorthands",
    "from_legacy",
    "inapplicable_fields",
    "layer_over",
    "middle_layers",
]
