"""What the frozen app must carry of each distribution the lock ships, and a check of a bundle.

PyInstaller follows imports, so it finds code, but a file a package opens beside its own
code (kernels' python_depends.json, a JSON schema, a font) reaches the bundle only when a
hook or the spec names it. The spec (packaging/mmforge.spec) therefore collects the data
files of every distribution in the lock, read from each distribution's RECORD, less the
ones listed here as left out on purpose; and this check, run by the build scripts and CI on
the built folder, fails when one of those files is not there. A new dependency's data is
collected without anyone editing the spec, and a file the freeze misses fails the build.

Usage: python packaging/check_bundle.py APP_FOLDER LOCK_FILE
(run with the build environment's Python: the distributions are read from it)
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path, PurePosixPath

# Distributions in the lock whose files are not in the bundle at all, and why.
NOT_SHIPPED = {
    "setuptools": "builds mmforge in the build environment; the app never imports it",
}

# Data files left out on purpose: (pattern on the path inside site-packages, why). A
# pattern ending in /** covers a folder.
LEFT_OUT = (
    ("*/py.typed", "a marker for type checkers"),
    ("*.pyi", "type stubs"),
    ("*/tests/**", "test suites wheels ship"),
    ("*/test/**", "test suites wheels ship"),
    ("*/testing/**", "test helpers wheels ship"),
    ("*.h", "C headers, for building against the package"),
    ("*.hpp", "C++ headers"),
    ("*.cuh", "CUDA headers"),
    ("*.cmake", "CMake files"),
    ("*.pc", "pkg-config files"),
    ("*.lib", "import libraries, for linking"),
    ("*.a", "static libraries, for linking"),
    ("*.pxd", "Cython declarations"),
    ("*.pyx", "Cython sources"),
    ("*.proto", "protobuf sources; the compiled modules are code"),
    ("*.c", "C sources"),
    ("*.cpp", "C++ sources"),
    ("*.cc", "C++ sources"),
    ("*.cu", "CUDA sources"),
    ("*/LICENSE*", "licence texts: packaging/third_party.py lists every licence"),
    ("*/COPYING*", "licence texts: packaging/third_party.py lists every licence"),
    ("torch/include/**", "torch's C++ headers"),
    ("torch/share/**", "torch's CMake package"),
    ("torch/bin/**", "torch's tools; the build keeps torch_shm_manager (a binary)"),
    ("torch/_inductor/**", "torch.compile's code generator, which mmforge never runs"),
    ("torch/utils/benchmark/**", "torch's benchmark helpers"),
    ("torch/_export/serde/**", "torch.export's schema files; mmforge exports no torch program"),
    ("torchgen/**", "torch's code generator (build time only)"),
    ("torch/testing/**", "torch's test helpers"),
    ("numpy/_core/lib/**", "numpy's C API for building against it"),
    ("numpy/f2py/**", "the Fortran wrapper generator"),
    ("numpy/random/lib/**", "numpy's random C API for building against it"),
    ("numpy/random/_examples/**", "examples"),
    ("onnx/backend/test/**", "onnx's node tests"),
    (
        "PySide6/**",
        "PySide6: Qt's plugins and resources are collected by PyInstaller's hook "
        "for the modules the app uses; the rest (tools, translations, other modules) on purpose",
    ),
    ("shiboken6/**", "shiboken6: collected by PyInstaller's PySide6 hook"),
    ("setuptools/**", "setuptools is not shipped"),
    ("*/benchmarks/**", "benchmark data"),
)

# What counts as code (PyInstaller collects it by following imports or as a binary), and
# where a wheel keeps what is not the package's own files.
CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".so", ".pyd", ".dylib", ".dll", ".exe")
SHARED_LIBRARY = re.compile(r"\.so(\.\d+)+$")


def locked_names(lock: Path) -> list[str]:
    """The distribution names a requirements lock pins (name==version lines)."""
    names = []
    for line in lock.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        if match:
            names.append(match.group(1))
    return names


def left_out(path: str) -> str | None:
    """Why a data file is left out of the bundle on purpose; None when it must be there."""
    for pattern, why in LEFT_OUT:
        folder = pattern.endswith("/**")
        if folder and (path.startswith(pattern[:-2]) or fnmatch.fnmatch(path, pattern)):
            return why
        if not folder and fnmatch.fnmatch(path, pattern):
            return why
    return None


def is_data(path: PurePosixPath) -> bool:
    """Whether a RECORD entry is a data file of the package (not code, metadata or a script)."""
    top = path.parts[0]
    if top.endswith((".dist-info", ".data", ".egg-info")) or top in ("..", "bin"):
        return False
    if "__pycache__" in path.parts or len(path.parts) == 1:
        return False  # top-level files: modules (code) or .pth files
    name = path.name
    return not name.endswith(CODE_SUFFIXES) and not SHARED_LIBRARY.search(name)


def data_files(dist: metadata.Distribution) -> Iterator[tuple[Path, str]]:
    """(file on disk, path inside site-packages) for each data file the bundle must carry."""
    for entry in dist.files or ():
        inside = PurePosixPath(entry.as_posix())
        if is_data(inside) and left_out(str(inside)) is None:
            yield Path(str(dist.locate_file(entry))), str(inside)


def shipped(names: Iterable[str]) -> Iterator[metadata.Distribution]:
    """The installed distributions of `names` that the bundle carries."""
    for name in names:
        if name.lower() not in NOT_SHIPPED:
            yield metadata.distribution(name)


def spec_datas(lock: Path) -> list[tuple[str, str]]:
    """PyInstaller's (source, destination folder) pairs for the lock's data files."""
    return [
        (str(source), str(PurePosixPath(inside).parent))
        for dist in shipped(locked_names(lock))
        for source, inside in data_files(dist)
    ]


def missing(app: Path, lock: Path) -> list[str]:
    """The lock's data files (dist: path) that the bundle in `app` lacks."""
    internal = app / "_internal"
    if not internal.is_dir():  # macOS: the folder inside the .app
        internal = app / "Contents" / "Frameworks"
    return [
        f"{dist.metadata['Name']}: {inside}"
        for dist in shipped(locked_names(lock))
        for _, inside in data_files(dist)
        if not (internal / inside).is_file()
    ]


def main(argv: list[str]) -> int:
    """Check a built bundle; print what is missing and return 1, else 0."""
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    app, lock = Path(argv[0]), Path(argv[1])
    names = locked_names(lock)
    if not names:
        print(f"{lock}: no pinned distribution", file=sys.stderr)
        return 2
    absent = missing(app, lock)
    if absent:
        print(f"{len(absent)} data files of the lock's distributions are not in {app}:")
        for line in absent[:50]:
            print(f"  {line}")
        print("collect them in packaging/mmforge.spec or list them in packaging/check_bundle.py")
        return 1
    carried = sum(1 for dist in shipped(names) for _ in data_files(dist))
    print(
        f"bundle check: {len(names)} distributions in {lock.name}, {len(NOT_SHIPPED)} left out "
        f"on purpose, {carried} data files all in the bundle"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
