"""Finds mmforge's packages: every folder under app/, backend/ and gui/, and resources/.

pyproject.toml maps import names to those folders (mmforge.backend = backend/, ...);
setuptools' `find` cannot apply that mapping, so the list is made here, and a new family
folder is packaged without being listed anywhere.
"""

from setuptools import find_packages, setup

ROOTS = {"app": "mmforge.app", "backend": "mmforge.backend", "gui": "mmforge.gui"}


def mmforge_packages() -> list[str]:
    """Every package under its import name."""
    packages = ["mmforge.resources"]
    for folder, name in ROOTS.items():
        packages += [name, *(f"{name}.{sub}" for sub in find_packages(where=folder))]
    return packages


if __name__ == "__main__":  # as setuptools' build backend runs it
    setup(packages=mmforge_packages())
