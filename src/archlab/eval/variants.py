"""The choices of the length evaluation by name, without torch (as nn/config/choices.py is
for the model).

eval/length.py (torch) computes them; `archlab eval --help` lists them, so they live here, where the
command can read them without importing torch. The module docstrings of eval/length.py (METRICS) and
eval/samples.py (SAMPLES) say what each one is. The RoPE extension methods are the kinds of
ROPE_KINDS with an inference-time form (`nn.positions.scaling.inference_kinds`).
"""

from __future__ import annotations

METRICS = ("loss", "accuracy")  # what a table shows; both are always computed (one forward)
SAMPLES = ("plain", "repeated")  # how a window's tokens are drawn (eval/samples.py docstring)
