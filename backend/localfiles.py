"""Local model folders as untrusted content: only the folder's own regular files are read.

`git clone` of a model repository brings whatever links its author committed; a link to
`../secret` or `/dev/zero` must not make mmforge read (and package) a file the user never
chose.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Set
from contextlib import contextmanager
from pathlib import Path

from mmforge.backend.errors import MmforgeError


def check_local_files(folder: Path, subfolders: Set[str] = frozenset()) -> None:
    """Refuse a model folder holding an entry that leaves it or is not a file or folder.

    A link may point inside the folder, and, for a snapshot of the Hugging Face cache, into
    the cache's `blobs/` beside it. Anything else (a link to `../secret`, a dangling link,
    a FIFO or a device, which would block or never end) would have mmforge read what the
    folder's author chose outside it. The top level and `subfolders` are checked:
    nothing deeper is read.

    Args:
        folder: The model folder.
        subfolders: Folders whose files mmforge reads too (the LoRA adapters').

    Raises:
        MmforgeError: Naming the first such entry.
    """
    root = folder.resolve()
    allowed = [root]
    if root.parent.name == "snapshots":
        allowed.append(root.parent.parent / "blobs")
    for path in sorted(root.iterdir()):
        _check_local_entry(path, root, allowed)
        if path.name in subfolders and path.is_dir():
            for inner in sorted(path.iterdir()):
                _check_local_entry(inner, root, allowed)


def _check_local_entry(path: Path, root: Path, allowed: list[Path]) -> None:
    name = path.relative_to(root).as_posix()
    if path.is_symlink():
        real = Path(os.path.realpath(path))
        if not any(real.is_relative_to(a) for a in allowed) or not real.exists():
            raise MmforgeError(
                f"{name} in {root} is a link to {real}, outside the model folder (or missing)",
                "mmforge reads only files inside the model folder: replace the link with the "
                "file itself, or remove it",
            )
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise MmforgeError(f"Cannot read {name} in {root}: {e.strerror}", "Check the folder") from e
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise MmforgeError(
            f"{name} in {root} is not a regular file (a FIFO, socket or device)",
            "Remove it from the model folder",
        )


@contextmanager
def files_kept(folder: Path) -> Iterator[None]:
    """Say so when a model folder disappears while a job reads it.

    The Hugging Face cache is shared: `hf cache delete`, a cleaner or the user may remove
    a snapshot while a conversion reads it, which surfaced as "has no safetensors weights"
    or a missing-file internal error.

    Raises:
        MmforgeError: The job failed and the folder's config.json is gone.
    """
    try:
        yield
    except (MmforgeError, OSError):
        if (folder / "config.json").exists():
            raise
        raise MmforgeError(
            f"The model's files in {folder} disappeared while mmforge was reading them "
            "(was the Hugging Face cache cleaned?)",
            "Run the same command again: the files are downloaded again",
        ) from None
