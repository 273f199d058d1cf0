"""Positions: RoPE (`rope.py`), its frequency schedules (`frequencies.py`) and scaling kinds
(`scaling.py`, torch-free), ReRoPE's remapped positions (`rerope.py`), absolute embeddings
(`absolute.py`) and attention biases (`biases.py`). Empty on purpose: `scaling.py` is read by the
config without torch."""
