"""Building blocks of the model, each small and testable alone.

Leaf modules (norms, activations, ffn, positions, rope, kv_cache) take plain typed arguments and
never import `archlab.nn.config`; `attention`, `block` and `model` take the `ModelConfig`.
"""
