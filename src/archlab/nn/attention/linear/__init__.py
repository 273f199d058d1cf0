"""Linear attention: causal prefix sums (`prefix_sums.py`), FAVOR+ (`favor.py`), Transformer-VQ
(`vq.py`, its codebook in `codebook.py`) and the layer that keeps their state in the KV
cache (`layer.py`); docs/linear-attention.md."""
