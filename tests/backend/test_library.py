"""The library: packages and cached models listed with sizes and dates, deleted, moved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmforge.backend import library
from mmforge.backend.errors import MmforgeError


def _copy(package: Path, root: Path, name: str) -> Path:
    return Path(shutil.copytree(package, root / name))


def test_packages_are_listed_with_size_date_and_source(package, tmp_path):
    root = tmp_path / "packages"
    first = _copy(package("qwen2_5_vl"), root, "a")
    (root / "not-a-package").mkdir()
    (root / "not-a-package" / "genai_config.json").write_text("{}")
    [entry] = library.packages(root)
    assert entry.folder == first and entry.dtype == "f32" and entry.family == "Qwen2.5-VL"
    on_disk = sum(p.stat().st_size for p in first.rglob("*") if p.is_file())
    assert entry.size_bytes == on_disk > 0 and entry.converted > 0
    manifest = json.loads((first / library.MANIFEST).read_text())
    assert entry.source == manifest["source"]


def test_only_packages_are_deleted(package, tmp_path):
    root = tmp_path / "packages"
    folder = _copy(package("qwen2_5_vl"), root, "a")
    mine = tmp_path / "my-photos"
    mine.mkdir()
    (mine / "genai_config.json").write_text("{}")
    with pytest.raises(MmforgeError, match="not an mmforge package; nothing was deleted"):
        library.delete_package(mine)
    assert (mine / "genai_config.json").is_file()
    library.delete_package(folder)
    assert not folder.exists() and library.packages(root) == []


def test_moving_the_library_moves_every_package_or_none(package, tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for name in ("a", "b"):
        _copy(package("qwen2_5_vl"), old, name)
    (new / "b").mkdir(parents=True)
    with pytest.raises(MmforgeError, match="already holds b; nothing was moved"):
        library.move_packages(old, new)
    assert len(library.packages(old)) == 2
    (new / "b").rmdir()
    seen = []
    moved = library.move_packages(old, new, seen.append)
    assert sorted(p.name for p in moved) == ["a", "b"] and len(seen) == 2
    assert library.packages(old) == [] and len(library.packages(new)) == 2


def test_cached_models_list_sizes_and_delete_through_the_hub_cache(hub, tiny, tmp_path):
    from mmforge.backend.source import resolve

    hub.state.add_folder("org/tiny", tiny("qwen2_5_vl"))
    resolve("org/tiny", purpose="inspect")
    [model] = library.cached_models()
    assert model.repo_id == "org/tiny" and model.size_bytes > 0 and model.last_used > 0
    assert library.delete_cached(model) == model.size_bytes
    assert library.cached_models() == []


def _dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _leftovers(root: Path, pid: int) -> dict[str, Path]:
    import os

    made = {
        "dead": root / f".a.mmforge-{pid}-k9x2",  # a conversion killed with kill -9
        "dead_other_out": root / f".b.mmforge-{pid}-zz",
        "live": root / f".c.mmforge-{os.getpid()}-run",  # a conversion running now
        "backup": root / f".d.mmforge-old-{pid}-1234abcd",  # the publish repair's to handle
        "user": root / ".mine",
    }
    for folder in made.values():
        folder.mkdir(parents=True)
        (folder / "decoder.onnx.data").write_bytes(b"x" * 100)
    return made


def test_opening_the_library_removes_staging_folders_of_dead_processes(package, tmp_path):
    root = tmp_path / "packages"
    _copy(package("qwen2_5_vl"), root, "a")
    made = _leftovers(root, _dead_pid())
    assert [e.folder.name for e in library.packages(root)] == ["a"]
    assert not made["dead"].exists() and not made["dead_other_out"].exists()
    assert made["live"].is_dir() and made["backup"].is_dir() and made["user"].is_dir()


def test_a_conversion_removes_staging_folders_of_dead_processes_beside_its_out(tiny, tmp_path):
    from mmforge.backend.convert import convert

    made = _leftovers(tmp_path, _dead_pid())
    convert(str(tiny("qwen2_5_vl")), tmp_path / "new", dtype="f32")
    assert not made["dead"].exists() and not made["dead_other_out"].exists()
    assert made["live"].is_dir() and made["backup"].is_dir() and made["user"].is_dir()


@pytest.mark.parametrize("manifest", ["[]", "{broken", "[" * 100_000, '"text"'])
def test_a_damaged_manifest_reads_as_none_everywhere(package, tmp_path, manifest):
    """A package folder may come from anyone: a manifest that is a list crashed verify
    (exit 70) and would have crashed the library listing."""
    from mmforge.backend.chat.footprint import package_memory_bytes
    from mmforge.backend.tiny.demo import is_demo_package
    from mmforge.backend.verify.job import _package_dtype

    folder = tmp_path / "library" / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    (folder / library.MANIFEST).write_text(manifest)
    assert library.read_manifest(folder) == {}
    assert library.packages(tmp_path / "library") == []
    assert _package_dtype(folder) == "f32" and not is_demo_package(folder)
    assert package_memory_bytes(folder) is not None  # from the graphs' own files


def test_a_package_is_named_by_its_manifests_family_not_its_pipeline(package, tmp_path):
    """LLaVA and PaliGemma share `videochat_flash_qwen`: the type alone named PaliGemma
    packages "LLaVA" in the app."""
    import json
    import shutil

    from mmforge.backend.library import model_name

    folder = Path(shutil.copytree(package("qwen2_5_vl"), tmp_path / "p"))
    assert model_name(folder, "qwen2_5_vl") == "Qwen2.5-VL"
    manifest = folder / "mmforge_manifest.json"
    data = json.loads(manifest.read_text())
    data["family"] = "PaliGemma"
    manifest.write_text(json.dumps(data))
    assert model_name(folder, "videochat_flash_qwen") == "PaliGemma"
    manifest.unlink()
    assert model_name(folder, "qwen2_5_vl") == "Qwen2.5-VL"  # no manifest: by its type
    assert model_name("", "qwen2_5_vl") == "Qwen2.5-VL"  # no folder: never the cwd's file
