"""The one check of a conversion's OUT path, made before any heavy work.

A conversion builds its package in a staging folder beside OUT, named after it, and
renames it into place at the end. An OUT whose nearest existing folder cannot be
written (a non-root user's 0555 folder, a read-only disk), or whose name leaves no room
for the staging name, failed only then, after the download and the inspect work, with
an internal error from `mkdtemp`. An OUT inside the model folder would be read back as
part of the checkpoint by the next conversion.

On Windows a path over MAX_PATH fails in most file functions unless the system has long
paths enabled; `check_path_lengths` refuses such a conversion before anything is written.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from mmforge.backend.download import PARTIAL, default_cache, repo_folder
from mmforge.backend.errors import MmforgeError
from mmforge.backend.source import ADAPTER_FILES, METADATA_PATTERNS, hub_cache_dir

# The most characters the conversion adds to OUT's name for its staging and backup
# folders: ".{name}.mmforge-old-{pid}-{8 hex}" (a pid has at most 7 digits).
NAME_EXTRA = len(".") + len(".mmforge-old-") + 7 + len("-") + 8
_NAME_MAX = 255  # where the system cannot say (Windows, most Linux file systems)

# Windows' MAX_PATH counts the terminating NUL: a path of at most 259 characters (UTF-16
# units) unless long paths are enabled. (A folder is held to 247; each folder written
# here holds a file whose path is longer, so checking the files covers the folders.)
WINDOWS_MAX_PATH = 260
LONG_PATHS_KEY = r"SYSTEM\CurrentControlSet\Control\FileSystem"
# The longest path a conversion writes in its working folder, measured on the tiny
# checkpoints: LFM2-VL's decoder from the ONNX Runtime GenAI builder. (In a finished
# package it is audio_processor_config.json, 27, for the families with audio.)
DEEPEST_IN_PACKAGE = len(r".build\decoder\tokenizer_config.json")
# ... and in the hub cache below a model's folder: a download in progress
# (blobs/<sha-256>.mmforge-partial) or a snapshot entry (snapshots/<commit>/<name>, the
# longest name fetched by name being Phi-4-multimodal's speech-lora/adapter_model.safetensors;
# weight shards are named like model-00001-of-00004.safetensors, shorter).
DEEPEST_IN_CACHE = max(
    len("blobs/") + 64 + len(PARTIAL),
    len("snapshots/") + 40 + 1 + max(len(name) for name in (*ADAPTER_FILES, *METADATA_PATTERNS)),
)
# The way out that needs no shorter folder; short enough for the app's error dialog.
_ENABLE_LONG_PATHS = (
    f"or enable long paths (registry value LongPathsEnabled = 1 in HKLM\\{LONG_PATHS_KEY}, "
    'or Group Policy "Enable Win32 long paths") and start mmforge again'
)


def check_out_path(out: Path, source: Path | None = None) -> None:
    """Refuse an OUT that the conversion could not write, before any work is done.

    Args:
        out: The package folder, resolved (it may not exist yet).
        source: The local model folder converted, resolved (None for a hub id).

    Raises:
        MmforgeError: OUT's name is too long for the file system, its nearest existing
            folder is not writable, or OUT lies inside the model folder.
    """
    existing = next((p for p in [out.parent, *out.parents] if p.exists()), None)
    if existing is None or not existing.is_dir():
        return  # check_output names the file in the way
    limit = _name_max(existing)
    size = len(os.fsencode(out.name))
    if size + NAME_EXTRA > limit:
        raise MmforgeError(
            f"The package folder name is too long ({size} bytes; this file system takes "
            f"{limit}, and mmforge needs {NAME_EXTRA} of them for its working folder)",
            f"Choose a name of at most {limit - NAME_EXTRA} bytes",
        )
    if not os.access(existing, os.W_OK | os.X_OK) or _read_only(existing):
        raise MmforgeError(
            f"Cannot write the package under {existing}: the folder is not writable",
            "Choose a folder you can write to (for example one in your home folder)",
        )
    if source is not None and (out == source or out.is_relative_to(source)):
        raise MmforgeError(
            f"The package folder {out} is inside the model folder {source}",
            "Choose a folder outside the model folder",
        )


def _name_max(folder: Path) -> int:
    pathconf = getattr(os, "pathconf", None)  # not on Windows
    if pathconf is None:
        return _NAME_MAX
    try:
        return int(pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return _NAME_MAX


def _read_only(folder: Path) -> bool:
    """Whether `folder` is on a read-only file system (root passes `os.access` there)."""
    statvfs = getattr(os, "statvfs", None)
    if statvfs is None:
        return False
    try:
        return bool(statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def staging_error(out: Path, e: OSError) -> MmforgeError:
    """The user's error for a staging folder that could not be made beside OUT."""
    if e.errno == errno.ENAMETOOLONG:
        return MmforgeError(
            f"The package folder name {out.name[:40]}… is too long for the file system",
            "Choose a shorter name",
        )
    return MmforgeError(
        f"Cannot write the package under {out.parent}: {e.strerror or e}",
        "Choose a folder you can write to",
    )


def long_paths_enabled() -> bool:
    """Whether Windows takes paths over MAX_PATH from programs that declare it.

    python.exe declares it in its manifest (CPython 3.6 and later), so the registry value
    decides; a missing key or value, or one that cannot be read, means disabled.
    """
    if sys.platform != "win32":
        return False
    try:
        import winreg
    except ImportError:
        return False
    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, LONG_PATHS_KEY) as key:
            value, _ = winreg.QueryValueEx(key, "LongPathsEnabled")
    except OSError:
        return False
    return bool(value == 1)


def check_path_lengths(out: Path, repo_id: str | None) -> None:
    """On Windows with long paths off, refuse a conversion that would pass MAX_PATH.

    Made before anything is written. It measures the deepest path in the working folder
    beside OUT (`NAME_EXTRA` more characters than OUT's name) and, for a hub model, the
    deepest the download writes in the Hugging Face cache. Elsewhere it does nothing.

    Args:
        out: The package folder, resolved.
        repo_id: The hub repository converted (None for a local folder: nothing goes to
            the cache).

    Raises:
        MmforgeError: A path would be longer than Windows takes.
    """
    if sys.platform != "win32" or long_paths_enabled():
        return
    limit = WINDOWS_MAX_PATH - 1
    deepest = _length(out) + NAME_EXTRA + 1 + DEEPEST_IN_PACKAGE
    if deepest > limit:
        raise MmforgeError(
            f"A path in the package would be {deepest} characters long, and with long paths "
            f"disabled Windows takes at most {limit} (MAX_PATH); the package folder: {out}",
            f"Use a package folder of at most {_length(out) + limit - deepest} characters "
            f"(-o OUT), {_ENABLE_LONG_PATHS}",
        )
    if repo_id is None:
        return
    root = hub_cache_dir() or default_cache()
    cache = repo_folder(root, repo_id)
    deepest = _length(cache) + 1 + DEEPEST_IN_CACHE
    if deepest > limit:
        raise MmforgeError(
            f"A path in the Hugging Face cache would be {deepest} characters long, and with "
            f"long paths disabled Windows takes at most {limit} (MAX_PATH); the model's "
            f"cache folder: {cache}",
            f"Set HF_HUB_CACHE to a folder of at most {_length(root) + limit - deepest} "
            f"characters (such as C:\\hf), {_ENABLE_LONG_PATHS}",
        )


def _length(path: Path) -> int:
    """A path's length as Windows counts it: UTF-16 code units."""
    return len(os.fspath(path).encode("utf-16-le")) // 2
