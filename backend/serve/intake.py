"""A request's pictures and clips as files, for the chat intake (`prepare_attachments`).

The server decodes nothing itself: each part's bytes become a private temporary file
named with the part's format, and the session checks and prepares it exactly as a file
attached in chat (`mmforge.backend.attachments`). A picture behind an http(s) URL is
fetched only when the user allowed it, bounded in size and time.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from mmforge.backend.serve.protocol import IMAGE_TYPES, ApiError, Part
from mmforge.backend.untrusted import escape

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 10.0


class RequestFiles:
    """The files of one request, in a private folder removed by `cleanup`."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mmforge-serve-"))
        self.files: list[tuple[Path, str]] = []

    def add(self, data: bytes, suffix: str, kind: str) -> None:
        """Write one part."""
        path = self.folder / f"part-{len(self.files) + 1}{suffix}"
        with path.open("xb") as f:
            f.write(data)
        path.chmod(0o600)
        self.files.append((path, kind))

    def cleanup(self) -> None:
        """Remove the folder (idempotent)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def write_parts(parts: list[Part], *, allow_fetch: bool, max_bytes: int) -> RequestFiles:
    """Every part as a file; `ApiError` (400, or 413 for a fetched file too large)."""
    files = RequestFiles()
    try:
        for part in parts:
            if part.url:
                data, suffix = _fetch(part.url, allow_fetch=allow_fetch, max_bytes=max_bytes)
                files.add(data, suffix, part.kind)
            else:
                files.add(part.data, part.suffix, part.kind)
    except BaseException:
        files.cleanup()
        raise
    return files


def _fetch(url: str, *, allow_fetch: bool, max_bytes: int) -> tuple[bytes, str]:
    """The picture at an http(s) URL, at most `max_bytes`, within `FETCH_TIMEOUT_S`."""
    if not allow_fetch:
        raise ApiError(
            400,
            "This server does not fetch pictures from the web; send the picture as a "
            "data: URL (or start the server with --allow-fetch)",
            param="image_url.url",
            code="fetch_not_allowed",
        )
    request = urllib.request.Request(url, headers={"User-Agent": "mmforge-serve"})
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as response:
            mime = response.headers.get_content_type()
            data = response.read(max_bytes + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        log.info("fetch failed: %s: %s", escape(url[:200]), escape(str(e)))
        raise ApiError(
            400, f"The picture could not be fetched ({e})", param="image_url.url"
        ) from None
    if len(data) > max_bytes:
        raise ApiError(
            413, f"The picture at the URL is over {max_bytes} bytes", param="image_url.url"
        )
    return data, IMAGE_TYPES.get(mime, ".img")
