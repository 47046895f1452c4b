"""The installer recipe does not rot: what the spec names resolves, the scripts parse.

CI does not build the installer (minutes and a GB); packaging/test_linux.sh does, on a
clean Debian. These checks are cheap and catch a renamed module or a missing file.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

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
    subprocess.run(
        [sys.executable, str(PACKAGING / "third_party.py"), str(out)], check=True, cwd=ROOT
    )
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


MINGW = ("x86_64-w64-mingw32-gcc", "x86_64-w64-mingw32-windres")
RT_ICON, RT_MANIFEST = 3, 24
LONG_PATH_AWARE = "{http://schemas.microsoft.com/SMI/2016/WindowsSettings}longPathAware"


@pytest.mark.skipif(any(shutil.which(tool) is None for tool in MINGW), reason="no mingw-w64")
@pytest.mark.parametrize("flags", [[], ["-mwindows", "-DGUI"]], ids=["console", "gui"])
def test_the_launcher_builds_long_path_aware(tmp_path, flags):
    """Built as build_windows.sh builds it: the icon and the manifest linked in as resources,
    and the manifest (resource 24, id 1) declares the launcher long-path aware."""
    from PIL import Image

    build = (PACKAGING / "build_windows.sh").read_text()
    assert '1 24 "%s"' in build and "packaging/windows/launcher.manifest" in build
    assert build.count('launcher.c "$build/launcher-res.o"') == 2  # both launchers
    Image.open(ROOT / "resources" / "mmforge.png").save(tmp_path / "mmforge.ico", sizes=[(32, 32)])
    manifest = PACKAGING / "windows" / "launcher.manifest"
    (tmp_path / "launcher.rc").write_text(
        f'1 ICON "{tmp_path / "mmforge.ico"}"\n1 24 "{manifest}"\n'
    )
    subprocess.run(
        ["x86_64-w64-mingw32-windres", str(tmp_path / "launcher.rc"), "-O", "coff",
         "-o", str(tmp_path / "launcher-res.o")],
        check=True,
    )  # fmt: skip
    out = tmp_path / "launcher.exe"
    subprocess.run(
        ["x86_64-w64-mingw32-gcc", "-municode", "-O2", "-s", "-Wall", "-Werror", *flags,
         "-o", str(out), str(PACKAGING / "windows" / "launcher.c"),
         str(tmp_path / "launcher-res.o")],
        check=True,
    )  # fmt: skip
    exe = out.read_bytes()
    assert exe[:2] == b"MZ"
    assert pe_resource(exe, RT_ICON, None)
    declared = ElementTree.fromstring(pe_resource(exe, RT_MANIFEST, 1))
    assert [e.text for e in declared.iter(LONG_PATH_AWARE)] == ["true"]


def pe_resource(exe: bytes, kind: int, ident: int | None) -> bytes:
    """A resource's bytes in a 64-bit PE file: type `kind`, id `ident` (None: the first),
    its first language."""
    pe = struct.unpack_from("<I", exe, 0x3C)[0]
    assert exe[pe : pe + 4] == b"PE\0\0"
    sections, optional_size = struct.unpack_from("<H12xH", exe, pe + 6)
    optional = pe + 24
    assert struct.unpack_from("<H", exe, optional)[0] == 0x20B  # PE32+
    table = optional + optional_size

    def offset(rva: int) -> int:
        for i in range(sections):
            size, address, raw_size, raw = struct.unpack_from("<IIII", exe, table + 40 * i + 8)
            if address <= rva < address + max(size, raw_size):
                return rva - address + raw
        raise AssertionError(f"no section holds RVA {rva:#x}")

    root = offset(struct.unpack_from("<I", exe, optional + 112 + 2 * 8)[0])  # directory 2

    def entry(directory: int, wanted: int | None) -> int:
        named, ids = struct.unpack_from("<HH", exe, root + directory + 12)
        for i in range(named + ids):
            name, target = struct.unpack_from("<II", exe, root + directory + 16 + 8 * i)
            if wanted is None or name == wanted:  # a named entry has its top bit set
                return int(target)
        raise AssertionError(f"no resource {wanted} (type {kind})")

    names = entry(0, kind) & 0x7FFFFFFF
    languages = entry(names, ident) & 0x7FFFFFFF
    leaf = entry(languages, None)
    rva, size = struct.unpack_from("<II", exe, root + leaf)
    start = offset(rva)
    return exe[start : start + size]


def test_qt_settings_reach_the_program_under_wine():
    """Wine drops Unix variables named QT_*; a Windows program gets them as WINEQT_*.

    The GUI self-test "offscreen" once ran Qt's Windows platform on Wine's null display
    driver instead, where the window's close() returns with no close event.
    """
    test = (PACKAGING / "test_windows.sh").read_text()
    code = "\n".join(line for line in test.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"(?<!WINE)\bQT_[A-Z_]+=", code)
    assert "WINEQT_QPA_PLATFORM=offscreen" in code
