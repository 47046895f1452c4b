"""Entry points: the `mmforge` command line and the worker process."""
