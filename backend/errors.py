"""The one error type the user sees, and the cancel signal nobody sees."""

from __future__ import annotations


class MmforgeError(Exception):
    """An error with a message for the user and what to do next.

    The CLI prints `user_message` (and `hint`) as one line and exits 2; the GUI shows the
    same in its error dialog with `details` behind a button.

    Args:
        user_message: What went wrong, in words a user can act on.
        hint: What to do next.
        details: Technical detail (an upstream message), shown on demand only.
        kind: What kind of failure it is, for a caller that offers a way out of it (the
            GUI offers its sign-in for "hub_auth" and near names for "hub_not_found");
            None for most errors.
    """

    def __init__(
        self,
        user_message: str,
        hint: str | None = None,
        details: str | None = None,
        *,
        kind: str | None = None,
    ):
        super().__init__(user_message)
        self.user_message = user_message
        self.hint = hint
        self.details = details
        self.kind = kind

    def one_line(self) -> str:
        """The message and hint as a single line."""
        text = _sentence(self.user_message)
        if self.hint:
            text += " " + _sentence(self.hint)
        return " ".join(text.split())


# Error kinds that a consent answers: the command line's flag, or the app's question.
REMOTE_CODE = "remote_code"  # --trust-remote-code
PICKLE = "pickle"  # --allow-pickle
APPROXIMATE = "approximate"  # --approximate


def _sentence(text: str) -> str:
    """The text ending in one stop: its own question or exclamation mark, else a period."""
    text = text.rstrip().rstrip(".")
    return text if text.endswith(("?", "!")) else text + "."


class LayoutError(MmforgeError):
    """A built graph or checkpoint is not shaped the way a conversion step expects."""

    def __init__(self, user_message: str, details: str | None = None):
        super().__init__(
            user_message,
            "This checkpoint's layout is not supported yet, so no package was written; "
            "please report the model id",
            details,
        )


class Cancelled(Exception):
    """Raised inside a job when its cancel token was set. Shown to nobody."""
