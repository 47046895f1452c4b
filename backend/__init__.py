"""Backend: every stage of the pipeline, with no Qt."""
