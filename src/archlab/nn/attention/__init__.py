"""Attention: the module (`attention.py`), what it is given per forward (`inputs.py`), its kernels
(`kernels.py`), the gated attention unit (`gau.py`), the option groups of its switches
(`options.py`, torch-free) and the linear kernels (`linear/`). Empty on purpose: `options.py` is
read by the config without torch."""
