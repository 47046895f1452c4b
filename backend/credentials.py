"""The Hugging Face token, kept in the standard token store and nowhere else.

huggingface_hub and transformers read the same file (`hf auth login` writes it). The token
is written private to the user from the first byte and never logged; downloads send it
to the hub endpoint only (download.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from mmforge.backend.errors import MmforgeError


def token_path() -> Path:
    """The standard Hugging Face token store file."""
    from huggingface_hub import constants

    return Path(constants.HF_TOKEN_PATH)


def save_token(token: str) -> Path:
    """Store a token (0600 from creation: it is never readable by others, even briefly).

    Raises:
        MmforgeError: An empty token, or the store cannot be written.
    """
    token = token.strip()
    if not token or any(c.isspace() for c in token):
        raise MmforgeError(
            "That is not a Hugging Face token", "Paste the token as the hub shows it"
        )
    path = token_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
            os.write(fd, token.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as e:
        raise MmforgeError(
            f"Cannot save the token in {path}: {e.strerror or e}",
            "Check the permissions of the Hugging Face folder",
        ) from None
    return path
