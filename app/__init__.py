"""Entry points: the `mmforge` command line and the worker process."""

__version__ = "0.1.0"
