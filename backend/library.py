"""What the user has on disk: converted packages and models in the Hugging Face cache.

Listing, sizes, dates, deleting and moving, with the checks that keep a slip from
deleting something that is not ours: only a folder holding an mmforge manifest and a
genai_config.json is a package, and only the hub cache's own API deletes cached models.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.source import hub_cache_dir

log = logging.getLogger(__name__)

MANIFEST = "mmforge_manifest.json"
# A conversion's staging folder beside its OUT: `.OUT.mmforge-PID-random` (never the
# `.OUT.mmforge-old-PID-…` aside folders, which only the publish repair may touch).
_STAGING = re.compile(r"^\..+\.mmforge-(?P<pid>\d+)-[^-]+$")


@dataclass(frozen=True)
class PackageEntry:
    """One converted package.

    Attributes:
        folder: The package folder.
        size_bytes: Everything in it.
        converted: When it was written (seconds since the epoch).
        source: The model it was converted from.
        family: The family's name.
        dtype: Its precision.
        config_digest: Which configuration it was converted from
            (`checkpoint_digest`); "" in a package written before mmforge recorded it.
        weights_digest: Which weights it was converted from; "" where unknown.
    """

    folder: Path
    size_bytes: int
    converted: float
    source: str
    family: str
    dtype: str
    config_digest: str = ""
    weights_digest: str = ""


@dataclass(frozen=True)
class CachedModel:
    """A model repository in the Hugging Face cache.

    Attributes:
        repo_id: org/name.
        size_bytes: What its files take on disk.
        last_used: When a file of it was last read (seconds since the epoch).
        revisions: The commit hashes held.
    """

    repo_id: str
    size_bytes: int
    last_used: float
    revisions: tuple[str, ...]


def folder_size(folder: Path) -> int:
    """Bytes in the files under `folder` (links not followed)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def is_package(folder: Path) -> bool:
    """Whether `folder` is a package mmforge wrote."""
    return (folder / MANIFEST).is_file() and (folder / "genai_config.json").is_file()


def read_manifest(folder: Path) -> dict[str, Any]:
    """A package's manifest; empty when it has none or it is damaged.

    A package folder may come from anyone (copied into the library, named on the command
    line): a manifest that is not a JSON object, or nests without end, reads as none.
    """
    from mmforge.backend.untrusted import read_json_file

    try:
        data = read_json_file(folder / MANIFEST, "package")
    except MmforgeError:
        return {}
    return data if isinstance(data, dict) else {}


def hears(package: str | Path) -> bool:
    """Whether a package takes audio (its genai_config.json names a speech model)."""
    from mmforge.backend.untrusted import read_json_file

    try:
        config = read_json_file(Path(package) / "genai_config.json", "package")
    except MmforgeError:
        return False
    model = config.get("model") if isinstance(config, dict) else None
    speech = model.get("speech") if isinstance(model, dict) else None
    return isinstance(speech, dict) and "filename" in speech


def approximation(package: str | Path, *, short: bool = False) -> str | None:
    """What a package converted as an approximation changes (its manifest), else None.

    `short`: the few words for a status line, where the manifest has them. Words from a
    manifest, which may come from anyone: a string, at most 1,000 characters; callers
    show it as plain text.
    """
    recorded = read_manifest(Path(package)).get("approximation")
    if not recorded:
        return None
    what = recorded.get("what") if isinstance(recorded, dict) else None
    if short and isinstance(recorded, dict) and isinstance(recorded.get("short"), str):
        what = recorded["short"] or what
    if not isinstance(what, str) or not what.strip():
        return "the package's manifest records an approximation without saying what it is"
    return what.strip()[:1000]


def model_name(package: str | Path, pipeline_type: str) -> str:
    """The model a package runs, as a person knows it ("PaliGemma").

    Its manifest's family: a pipeline type can host several families (LLaVA and
    PaliGemma both run on `videochat_flash_qwen`), so the type alone may name the wrong
    one. A package without a manifest is named by its type's first family.
    """
    from mmforge.backend.families import pipeline_name

    family = read_manifest(Path(package)).get("family") if str(package) else None
    if isinstance(family, str) and family.strip():
        return family.strip()[:60]
    return pipeline_name(pipeline_type)


def read_package(folder: Path) -> PackageEntry | None:
    """The entry for one package folder (None when it is not one)."""
    if not is_package(folder):
        return None
    manifest = read_manifest(folder)
    try:
        converted = (folder / MANIFEST).stat().st_mtime
    except OSError:
        return None
    if not manifest:
        return None
    return PackageEntry(
        folder=folder,
        size_bytes=folder_size(folder),
        converted=converted,
        source=str(manifest.get("source", "")),
        family=str(manifest.get("family", "")),
        dtype=str(manifest.get("dtype", "")),
        **_digests(manifest.get("checkpoint_digest")),
    )


def _digests(recorded: object) -> dict[str, str]:
    """The manifest's `checkpoint_digest` as PackageEntry fields (none in older packages)."""
    if not isinstance(recorded, dict):
        return {}
    found = {f"{k}_digest": recorded.get(k) for k in ("config", "weights")}
    return {k: v for k, v in found.items() if isinstance(v, str)}


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (another user's counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_staging(folder: Path) -> list[Path]:
    """Delete the staging folders in `folder` whose conversion process is gone.

    A conversion killed with kill -9, or a crash, leaves its staging folder (gigabytes,
    hidden by its leading dot); one of a live process is left alone. Returns the folders
    removed.
    """
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for path in entries:
        m = _STAGING.match(path.name)
        if m is None or path.is_symlink() or not path.is_dir():
            continue
        if process_alive(int(m["pid"])):
            continue
        shutil.rmtree(path, ignore_errors=True)
        log.info("removed %s, left by a conversion that did not finish", path)
        removed.append(path)
    return removed


def packages(root: Path, extra: Iterable[Path] = ()) -> list[PackageEntry]:
    """The packages directly under `root`, and the `extra` folders, newest first.

    Opening the library is also when staging folders that dead conversions left in
    `root` are removed (`remove_stale_staging`).
    """
    remove_stale_staging(root)
    folders = set(extra)
    if root.is_dir():
        folders |= {p for p in root.iterdir() if p.is_dir()}
    found = [e for f in folders if (e := read_package(f)) is not None]
    return sorted(found, key=lambda e: e.converted, reverse=True)


def delete_package(folder: Path) -> None:
    """Delete a package folder; anything that is not an mmforge package is refused."""
    if not is_package(folder):
        raise MmforgeError(
            f"{folder} is not an mmforge package; nothing was deleted",
            "Delete it yourself if you mean to",
        )
    try:
        shutil.rmtree(folder)
    except OSError as e:
        raise MmforgeError(
            f"Could not delete all of {folder}: {e.strerror}", "Check its permissions"
        ) from None


def move_packages(
    old_root: Path, new_root: Path, on_package: Callable[[Path], None] | None = None
) -> list[Path]:
    """Move every package under `old_root` into `new_root`; returns their new folders.

    A package whose name is taken in `new_root` is refused before anything moves. One
    that fails mid-way stays where it was (a move across disks copies, then deletes).
    """
    moving = [e.folder for e in packages(old_root)]
    if new_root.resolve() == old_root.resolve():
        return []
    taken = [f.name for f in moving if (new_root / f.name).exists()]
    if taken:
        raise MmforgeError(
            f"{new_root} already holds {', '.join(sorted(taken))}; nothing was moved",
            "Choose another folder, or rename those first",
        )
    new_root.mkdir(parents=True, exist_ok=True)
    moved: list[Path] = []
    for folder in moving:
        if on_package is not None:
            on_package(folder)
        target = new_root / folder.name
        try:
            shutil.move(str(folder), str(target))
        except OSError as e:
            shutil.rmtree(target, ignore_errors=True)  # a partial copy; the original stays
            raise MmforgeError(
                f"Could not move {folder.name}: {e.strerror}; {len(moved)} moved before it",
                "Check the space and permissions of the new folder",
            ) from None
        moved.append(target)
    return moved


def cached_models(cache_dir: Path | None = None) -> list[CachedModel]:
    """Model repositories in the Hugging Face cache, most recently used first."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir or hub_cache_dir())
    except (CacheNotFound, OSError):
        return []
    models = [
        CachedModel(
            repo_id=r.repo_id,
            size_bytes=int(r.size_on_disk),
            last_used=float(r.last_accessed),
            revisions=tuple(sorted(rev.commit_hash for rev in r.revisions)),
        )
        for r in info.repos
        if r.repo_type == "model"
    ]
    return sorted(models, key=lambda m: m.last_used, reverse=True)


def delete_cached(model: CachedModel, cache_dir: Path | None = None) -> int:
    """Delete every revision of a cached model; returns the bytes freed."""
    from huggingface_hub import scan_cache_dir

    strategy = scan_cache_dir(cache_dir or hub_cache_dir()).delete_revisions(*model.revisions)
    freed = int(strategy.expected_freed_size)
    try:
        strategy.execute()
    except OSError as e:
        raise MmforgeError(
            f"Could not delete {model.repo_id} from the cache: {e.strerror}",
            "Check the permissions of the Hugging Face cache folder",
        ) from None
    return freed
