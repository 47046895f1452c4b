"""How to run an mmforge subcommand in a child process.

A frozen (PyInstaller) app has no `python -m`, so children are started through the app's
own executable. This module imports nothing of mmforge, so any layer may start a child
(the worker client, or a graph builder that runs in its own process).
"""

from __future__ import annotations

import sys


def app_command(*args: str) -> list[str]:
    """The command line of an mmforge subcommand.

    The frozen app's own executable, else this interpreter.
    """
    if getattr(sys, "frozen", False):
        return [sys.executable, *args]
    return [sys.executable, "-m", "mmforge.app", *args]


def worker_command() -> list[str]:
    """How to start a worker."""
    return app_command("worker")
