"""Training: data, tokenizers, optimizers, schedules, checkpoints, the loop, distributed wrapping."""
