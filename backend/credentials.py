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


def _checked(token: str) -> str:
    """The token without surrounding blanks; one with blanks inside is refused."""
    token = token.strip()
    if not token or any(c.isspace() for c in token):
        raise MmforgeError(
            "That is not a Hugging Face token", "Paste the token as the hub shows it"
        )
    return token


def save_token(token: str) -> Path:
    """Store a token (0600 from creation: it is never readable by others, even briefly).

    Raises:
        MmforgeError: An empty token, or the store cannot be written.
    """
    token = _checked(token)
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


def stored_token() -> str | None:
    """The token in the standard store (not HF_TOKEN), or None."""
    try:
        token = token_path().read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return token or None


def environment_token() -> bool:
    """Whether HF_TOKEN is set (it takes precedence over the store, and cannot be signed out)."""
    return bool(os.environ.get("HF_TOKEN", "").strip())


def whoami(token: str) -> str:
    """The hub account a token belongs to; the token goes to the hub endpoint only.

    Raises:
        MmforgeError: The hub refused the token, or could not be reached.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    from mmforge.backend.hubcall import hub_call
    from mmforge.backend.source import hub_endpoint

    api = HfApi(endpoint=hub_endpoint())
    try:
        info = hub_call("who the token belongs to", lambda: api.whoami(token=token.strip()))
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        if status == 401:
            raise MmforgeError(
                "The hub refused this token", "Copy a token again from your hub settings"
            ) from None
        raise MmforgeError(
            f"The hub could not check the token (HTTP {status})", "Try again later"
        ) from None
    except MmforgeError:
        raise
    except Exception as e:  # noqa: BLE001 - httpx's connection errors are not OSErrors
        raise MmforgeError(
            "Cannot reach the hub to check the token",
            "Check the network connection",
            details=f"{type(e).__name__}: {e}",
        ) from None
    return str(info.get("name") or "an unnamed account")


def sign_in(token: str) -> tuple[str, Path]:
    """Check a token with the hub, then store it; returns (account name, store file)."""
    token = _checked(token)
    name = whoami(token)
    return name, save_token(token)


def sign_out() -> bool:
    """Remove the stored token; returns whether there was one."""
    path = token_path()
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as e:
        raise MmforgeError(
            f"Cannot remove the token from {path}: {e.strerror or e}",
            "Check the permissions of the Hugging Face folder",
        ) from None
    return True
