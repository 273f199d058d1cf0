"""Hugging Face families: one module per family with its weight-name table (see shared/reference)."""
