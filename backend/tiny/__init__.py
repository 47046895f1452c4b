"""Tiny random-weight checkpoints."""
