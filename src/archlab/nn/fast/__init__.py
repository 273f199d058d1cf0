"""The CPU training fast paths: hand-written kernels (`ops.py`, `losses.py`,
`attention.py`) and `install(model)` (`install.py`), which puts them into a built model from
outside. No readable module of nn/ imports this package."""
