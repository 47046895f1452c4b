"""Backend: every stage of the pipeline, with no Qt."""

__version__ = "0.1.0"
