"""Gemma 3n (image + text) on the runtime's gemma3 pipeline: the graphs built so far."""
