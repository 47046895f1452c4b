"""locks/: every distribution pinned with hashes, in step with pyproject.toml (issue 45).

The installers, scripts/venv and CI install from these files alone, so a release on the
index changes nothing until `bash scripts/lock` is run on purpose. These checks catch a
lock that no longer satisfies pyproject.toml, a pin without a hash, variants that drifted
apart, and a test environment that is not the lock's; and they hold check_bundle (which
CI runs on the frozen app) to finding a data file the freeze missed.
"""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "locks"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
CUDA_NAMES = {"onnxruntime-genai": "onnxruntime-genai-cuda", "onnxruntime": "onnxruntime-gpu"}
APP_LOCKS = [
    "linux-x86_64-cpu",
    "linux-x86_64-cpu-build",
    "linux-x86_64-cpu-dev",
    "linux-x86_64-cuda",
    "linux-x86_64-cuda-build",
    "windows-x64-cpu",
    "windows-x64-cuda",
    "macos-arm64",
    "macos-arm64-build",
]
# Each lock, and the smaller one whose versions it must keep.
WIDER = {
    "linux-x86_64-cpu-build": "linux-x86_64-cpu",
    "linux-x86_64-cpu-dev": "linux-x86_64-cpu-build",
    "linux-x86_64-cuda-build": "linux-x86_64-cuda",
    "macos-arm64-build": "macos-arm64",
}

sys.path.insert(0, str(ROOT / "packaging"))
import check_bundle  # noqa: E402


def pins(name: str) -> dict[str, tuple[str, int]]:
    """A lock's pins: canonical name -> (version, number of hashes)."""
    found: dict[str, tuple[str, int]] = {}
    current = None
    for line in (LOCKS / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if match:
            current = canonicalize_name(match.group(1))
            found[current] = (match.group(2), 0)
        elif current and line.strip().startswith("--hash=sha256:"):
            version, hashes = found[current]
            found[current] = (version, hashes + 1)
        elif not line.startswith(" "):
            current = None
    return found


def requirements(lock: str) -> list[Requirement]:
    """What pyproject.toml asks of a lock (names swapped for the CUDA variants)."""
    wanted = [Requirement(dep) for dep in PROJECT["dependencies"]]
    if "cuda" in lock:
        for req in wanted:
            req.name = CUDA_NAMES.get(req.name, req.name)
    if lock.endswith("-build") or lock.endswith("-dev"):
        wanted.append(Requirement("pyinstaller==6.22.3"))
    if lock.endswith("-dev"):
        wanted += [Requirement(dep) for dep in PROJECT["optional-dependencies"]["dev"]]
        wanted.append(Requirement("timm==1.0.31"))
    return wanted


@pytest.mark.parametrize("lock", APP_LOCKS)
def test_each_lock_satisfies_pyproject(lock):
    pinned = pins(lock)
    for req in requirements(lock):
        name = canonicalize_name(req.name)
        assert name in pinned, f"{lock}: {req.name} is not locked"
        version = Version(pinned[name][0])
        # torch's CPU build carries a +cpu label; the specifier means the release.
        assert req.specifier.contains(Version(version.public), prereleases=True), (
            f"{lock}: {req.name}=={version} does not satisfy {req}"
        )


@pytest.mark.parametrize("lock", [*APP_LOCKS, "tools", "windows-x64-vcruntime"])
def test_every_pin_has_a_hash_and_no_cuda_torch(lock):
    pinned = pins(lock)
    assert pinned, f"{lock}: no pins"
    unhashed = [name for name, (_, hashes) in pinned.items() if hashes == 0]
    assert not unhashed, f"{lock}: pinned without a hash: {unhashed}"
    # torch's CPU build everywhere: no nvidia wheels, no triton (the CUDA build's).
    assert not [n for n in pinned if n.startswith("nvidia-") or n == "triton"], lock
    if lock.startswith("linux"):
        assert pinned["torch"][0] == "2.13.0+cpu"


@pytest.mark.parametrize(("wide", "narrow"), WIDER.items())
def test_a_wider_lock_keeps_the_versions_of_the_narrower(wide, narrow):
    wider, narrower = pins(wide), pins(narrow)
    assert set(narrower) <= set(wider)
    drifted = {n: (v, wider[n][0]) for n, (v, _) in narrower.items() if wider[n][0] != v}
    assert not drifted, f"{wide} moved versions of {narrow}: {drifted}"


def test_the_variants_ship_the_same_versions():
    """CPU and CUDA, Linux, Windows and macOS: one version of each shared distribution."""
    linux = pins("linux-x86_64-cpu")
    for other in ("linux-x86_64-cuda", "windows-x64-cpu", "windows-x64-cuda", "macos-arm64"):
        theirs = pins(other)
        drifted = {
            n: (v, theirs[n][0])
            for n, (v, _) in linux.items()
            if n in theirs and Version(theirs[n][0]).public != Version(v).public
            # ONNX Runtime's CUDA build follows its own releases
        }
        assert not drifted, f"{other} differs from linux-x86_64-cpu: {drifted}"


def test_the_tests_run_on_the_locked_versions():
    """The environment running this suite is the dev lock's (scripts/venv dev installs it)."""
    if not (sys.version_info[:2] == (3, 11) and sys.platform == "linux"):
        pytest.skip("the lock is for CPython 3.11 on Linux; elsewhere it is a constraint")
    off = {}
    for name, (version, _) in pins("linux-x86_64-cpu-dev").items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        if installed != version:
            off[name] = (version, installed)
    assert not off, f"installed versions differ from the lock (run scripts/venv dev): {off}"


def test_the_bundle_check_finds_a_data_file_the_freeze_missed(tmp_path):
    """kernels opens python_depends.json at import: a bundle without it fails the check."""
    lock = tmp_path / "lock.txt"
    lock.write_text(f"kernels=={metadata.version('kernels')} \\\n    --hash=sha256:00\n")
    app = tmp_path / "mmforge"
    (app / "_internal").mkdir(parents=True)
    assert check_bundle.missing(app, lock) == ["kernels: kernels/_internals/python_depends.json"]
    assert check_bundle.main([str(app), str(lock)]) == 1
    # The spec's data list names that file, so a freeze carries it.
    datas = check_bundle.spec_datas(lock)
    assert [dest for _, dest in datas] == ["kernels/_internals"]
    source = Path(datas[0][0])
    (app / "_internal" / "kernels" / "_internals").mkdir(parents=True)
    shutil.copy(source, app / "_internal" / "kernels" / "_internals" / source.name)
    assert check_bundle.missing(app, lock) == []
    assert check_bundle.main([str(app), str(lock)]) == 0


def test_what_the_bundle_leaves_out_is_said_and_narrow():
    """Left-out patterns each give a reason, and none drops a package's own data wholesale
    except the Qt bindings (PyInstaller's hook collects what the app's Qt modules need)."""
    for pattern, why in check_bundle.LEFT_OUT:
        assert why.strip(), pattern
    assert check_bundle.left_out("kernels/_internals/python_depends.json") is None
    assert check_bundle.left_out("transformers/models/auto/config.json") is None
    assert check_bundle.left_out("torch/include/ATen/ATen.h")
    assert check_bundle.left_out("numpy/py.typed")
    assert set(check_bundle.NOT_SHIPPED) <= set(pins("linux-x86_64-cpu"))


@pytest.mark.parametrize(
    "script",
    [
        "scripts/venv",
        "packaging/build_linux.sh",
        "packaging/build_windows.sh",
        "packaging/macos/build_macos.sh",
    ],
)
def test_every_install_goes_through_a_lock_with_hashes(script):
    """No build or venv resolves afresh: each pip/uv install names a lock and checks hashes,
    or installs mmforge itself without its dependencies."""
    text = (ROOT / script).read_text(encoding="utf-8")
    joined = re.sub(r"\\\n\s*", " ", text)  # continued lines as one
    installs = [
        line
        for line in joined.splitlines()
        if re.search(r"(pip|\"\$uv\" pip) install", line) and not line.lstrip().startswith("#")
    ]
    assert installs, script
    for line in installs:
        locked = "--require-hashes" in line or "${locked[@]}" in line  # scripts/venv's
        itself = line.rstrip().rstrip(")").endswith((" .", "mmforge-*.whl"))
        assert locked or itself, f"{script} installs without a lock: {line.strip()}"
        assert "--no-deps" in line, f"{script} resolves dependencies: {line.strip()}"
    assert "locks/" in text, script
