"""The one check of a conversion's OUT path, made before any heavy work.

A conversion builds its package in a staging folder beside OUT, named after it, and
renames it into place at the end. An OUT whose nearest existing folder cannot be
written (a non-root user's 0555 folder, a read-only disk), or whose name leaves no room
for the staging name, failed only then, after the download and the inspect work, with
an internal error from `mkdtemp`. An OUT inside the model folder would be read back as
part of the checkpoint by the next conversion.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from mmforge.backend.errors import MmforgeError

# The most characters the conversion adds to OUT's name for its staging and backup
# folders: ".{name}.mmforge-old-{pid}-{8 hex}" (a pid has at most 7 digits).
NAME_EXTRA = len(".") + len(".mmforge-old-") + 7 + len("-") + 8
_NAME_MAX = 255  # where the system cannot say (Windows, most Linux file systems)


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
