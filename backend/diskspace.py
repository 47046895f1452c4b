"""A disk that fills while mmforge writes: told apart from a bug, and said in one line.

Writers report a full disk in several ways: an `OSError` with ENOSPC or EDQUOT, or with
no errno at all (numpy's `tofile`, used when ONNX external data is written, says
"59136 requested and 12288 written"), sometimes as the cause of another exception.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

from mmforge.backend.errors import MmforgeError

_SHORT_WRITE = re.compile(r"\b\d+ requested and \d+ written\b")
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def out_of_space(e: BaseException) -> bool:
    """Whether `e` (or an exception it came from) says the disk or a quota is full."""
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and (
            current.errno in _FULL or _SHORT_WRITE.search(str(current))
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def no_space(what: str, where: Path) -> MmforgeError:
    """The one-line error for a full disk while writing `what` at `where`."""
    return MmforgeError(
        f"The disk filled up (no space left) while writing {what} at {where}",
        "Free some space or choose a folder on another disk; nothing half-written was left",
    )
