"""Evaluations of trained models: loss against context length per RoPE method (`length`)."""
