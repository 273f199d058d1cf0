"""The choices of the length evaluation by name, without torch (as nn/variants.py is for the model).

eval/length.py (torch) computes them; `archlab eval --help` lists them, so they live here, where the command can
read them without importing torch. The module docstring of eval/length.py says what each one is.
"""

from __future__ import annotations

METHODS = ("none", "linear", "ntk", "ntk_by_parts", "dynamic", "yarn", "rerope", "leaky_rerope")  # RoPE extension
METRICS = ("loss", "accuracy")  # what a table shows; both are always computed (one forward)
SAMPLES = ("plain", "repeated")  # how a window's tokens are drawn (eval/length.py docstring)
