"""Training: data, optimizers, schedules, checkpoints, the loop, distributed wrapping."""
