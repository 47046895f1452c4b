"""The installer recipe does not rot: what the spec names resolves, the scripts parse.

CI does not build the installer (minutes and a GB); packaging/test_linux.sh does, on a
clean Debian. These checks are cheap and catch a renamed module or a missing file.
"""

from __future__ import annotations

import importlib.util
import re
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
    assert len(_named(r'collect_submodules\("([\w.]+)"')) >= 15  # the regexes still match
    for family in ("qwen2_5_vl", "gemma3", "gemma4", "mistral3", "phi4_multimodal", "lfm2_vl"):
        assert f'"transformers.models.{family}"' in SPEC


def test_the_files_the_recipe_uses_exist():
    for path in (
        "packaging/mmforge_entry.py",
        "packaging/licenses/NOTICE.txt",
        "packaging/linux/mmforge.desktop",
        "packaging/linux/control.in",
        "packaging/windows/mmforge.iss",
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
    "script", ["build_linux.sh", "test_linux.sh", "macos/build_macos.sh"], ids=str
)
def test_the_build_scripts_parse(script):
    subprocess.run(["bash", "-n", str(PACKAGING / script)], check=True)


def test_the_third_party_list_names_the_bundled_libraries(tmp_path):
    out = tmp_path / "THIRD-PARTY.txt"
    subprocess.run(["python", str(PACKAGING / "third_party.py"), str(out)], check=True, cwd=ROOT)
    text = out.read_text()
    for name in ("torch", "onnxruntime-genai", "PySide6", "transformers"):
        assert re.search(rf"^{re.escape(name)}[ _-]?\S* \S+: \S", text, re.I | re.M), name
