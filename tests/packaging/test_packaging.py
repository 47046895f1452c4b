"""The installer recipe does not rot: what the spec names resolves, the scripts parse.

CI does not build the installer (minutes and a GB); packaging/test_linux.sh does, on a
clean Debian. These checks are cheap and catch a renamed module or a missing file.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
SPEC = (PACKAGING / "mmforge.spec").read_text(encoding="utf-8")


def _named(pattern: str) -> list[str]:
    return re.findall(pattern, SPEC)


@pytest.mark.parametrize(
    "module",
    sorted(
        set(
            _named(r'collect_submodules\("([\w.]+)"')
            + _named(r'folder_of\("([\w.]+)"\)')
            + _named(r'collect_dynamic_libs\("([\w.]+)"\)')
            + _named(r'^\s+"(\w+)": "pyz\+py"')
        )
    ),
)
def test_every_module_the_spec_collects_exists(module):
    assert importlib.util.find_spec(module) is not None, module


def test_the_spec_names_enough_to_collect():
    assert len(_named(r'collect_submodules\("([\w.]+)"')) >= 6  # the regexes still match
    assert "transformers_models()" in SPEC and '"*.jinja"' in SPEC


def _family_models() -> list[str]:
    spec = importlib.util.spec_from_file_location("family_models", PACKAGING / "family_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.transformers_models()


def test_the_spec_collects_every_familys_transformers_models():
    """Read from the registry; each tiny checkpoint's model types (sub-models included,
    those picked through AutoConfig too) are collected, and each exists."""
    from mmforge.backend.families import ALL
    from mmforge.backend.tiny.tokenizer import train_tokenizer

    models = _family_models()
    for name in models:
        assert importlib.util.find_spec(f"transformers.models.{name}") is not None, name
    for family in ALL:
        if family.package is None or family.fixtures.tiny is None:
            continue
        tok = train_tokenizer(family.fixtures.tiny.specials, pinned=family.fixtures.tiny.pinned)
        config = family.fixtures.tiny.make_config(tok.special_ids, tok.vocab_size).to_dict()
        types = {config["model_type"]} | {
            v["model_type"] for v in config.values() if isinstance(v, dict) and "model_type" in v
        }
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        for model_type in types:
            package = CONFIG_MAPPING[model_type].__module__.split(".")[2]
            assert package in models, (family.key, model_type)


def _package_folders() -> set[str]:
    """Every Python package in the source folders, under its import name."""
    found = set()
    for name, folder in (("app", "app"), ("backend", "backend"), ("gui", "gui")):
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join(("mmforge", name, *parts)))
    return found | {"mmforge.resources"}


def test_every_package_folder_is_packaged_without_a_list():
    """setup.py finds the packages (setuptools' `find` cannot map top-level folders to
    mmforge.*): a family folder is packaged without being listed in pyproject.toml."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tool = data["tool"]["setuptools"]
    assert "packages" not in tool
    spec = importlib.util.spec_from_file_location("mmforge_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # not __main__: defines, does not build
    assert sorted(setup.mmforge_packages()) == sorted(_package_folders())
    assert set(tool["package-dir"]) == {*setup.ROOTS.values(), "mmforge.resources"}


def test_the_files_the_recipe_uses_exist():
    for path in (
        "packaging/mmforge_entry.py",
        "packaging/licenses/NOTICE.txt",
        "packaging/linux/mmforge.desktop",
        "packaging/linux/control.in",
        "packaging/windows/mmforge.nsi",
        "packaging/windows/launcher.c",
        "resources/mmforge.png",
        "resources/DejaVuSans-LICENSE.txt",
    ):
        assert (ROOT / path).is_file(), path
    entry = (PACKAGING / "mmforge_entry.py").read_text()
    assert "from mmforge.app.cli import main" in entry
    desktop = (PACKAGING / "linux" / "mmforge.desktop").read_text()
    assert "Exec=mmforge gui" in desktop and "Icon=mmforge" in desktop
    control = (PACKAGING / "linux" / "control.in").read_text()
    assert "@VERSION@" in control and "Depends:" in control and "Architecture: amd64" in control


@pytest.mark.parametrize(
    "script",
    [
        "build_linux.sh",
        "test_linux.sh",
        "macos/build_macos.sh",
        "build_windows.sh",
        "test_windows.sh",
        "windows/wine/build_stubs.sh",
    ],
    ids=str,
)
def test_the_build_scripts_parse(script):
    subprocess.run(["bash", "-n", str(PACKAGING / script)], check=True)


def test_the_third_party_list_names_the_bundled_libraries(tmp_path):
    out = tmp_path / "THIRD-PARTY.txt"
    subprocess.run(["python", str(PACKAGING / "third_party.py"), str(out)], check=True, cwd=ROOT)
    text = out.read_text()
    for name in ("torch", "onnxruntime-genai", "PySide6", "transformers"):
        assert re.search(rf"^{re.escape(name)}[ _-]?\S* \S+: \S", text, re.I | re.M), name


def test_the_wine_stand_ins_never_reach_the_installer():
    """What stands in for Wine's missing functions is the test's, not the product's."""
    build = (PACKAGING / "build_windows.sh").read_text()
    nsi = (PACKAGING / "windows" / "mmforge.nsi").read_text()
    for name in ("wine/", "ucrtbase", "ucrtwine", "bcryptprimitives", "icuuc"):
        assert name not in build and name not in nsi, name
    test = (PACKAGING / "test_windows.sh").read_text()
    assert "build_stubs.sh" in test and "a test-only stand-in is in the install" in test


@pytest.mark.skipif(shutil.which("x86_64-w64-mingw32-gcc") is None, reason="no mingw-w64")
@pytest.mark.parametrize("flags", [[], ["-mwindows", "-DGUI"]], ids=["console", "gui"])
def test_the_launcher_builds(tmp_path, flags):
    out = tmp_path / "launcher.exe"
    subprocess.run(
        ["x86_64-w64-mingw32-gcc", "-municode", "-O2", "-Wall", "-Werror", *flags,
         "-o", str(out), str(PACKAGING / "windows" / "launcher.c")],
        check=True,
    )  # fmt: skip
    assert out.read_bytes()[:2] == b"MZ"


def test_qt_settings_reach_the_program_under_wine():
    """Wine drops Unix variables named QT_*; a Windows program gets them as WINEQT_*.

    The GUI self-test "offscreen" once ran Qt's Windows platform on Wine's null display
    driver instead, where the window's close() returns with no close event.
    """
    test = (PACKAGING / "test_windows.sh").read_text()
    code = "\n".join(line for line in test.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"(?<!WINE)\bQT_[A-Z_]+=", code)
    assert "WINEQT_QPA_PLATFORM=offscreen" in code
