"""The client side of a chat worker: `ChatClient`, used by the CLI and the GUI.

See `chat.worker` for the commands and events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.worker.client import WorkerJob


class ChatClient:
    """The client side: a chat session in a worker process. Used by the CLI and the GUI.

    Construction starts the worker and waits until the model is loaded; a package that
    cannot be loaded raises `MmforgeError`. Requests yield events until their `turn` or
    `error` event. `stop()` may be called from another thread while a request streams.

    Args:
        package: The package folder.
        ep: "cpu" or "cuda".
        save: Save the conversation in the store.
        store_root: The store's folder (default: the user data folder).
        conversation: A saved conversation id to continue.
        env: Extra environment for the worker.
        started: Called with the worker job as soon as it starts, before the model
            loads (so that another thread can `kill` a worker stuck loading).
    """

    def __init__(
        self,
        package: Path,
        ep: str = "cpu",
        *,
        save: bool = True,
        store_root: Path | None = None,
        conversation: str | None = None,
        env: dict[str, str] | None = None,
        started: Callable[[WorkerJob], None] | None = None,
    ):
        args: dict[str, Any] = {"package": str(package), "ep": ep, "save": save}
        if store_root is not None:
            args["store_root"] = str(store_root)
        if conversation:
            args["conversation"] = conversation
        self._job = WorkerJob("chat", args, env=env)
        if started is not None:
            started(self._job)
        self._seq = 0
        self._current: int | None = None
        event = self._job.read_event()
        if event is None or event.get("event") != "ready":
            self._job.close()
            if event is None:
                raise MmforgeError(
                    "The chat worker stopped before the model loaded",
                    "Load the package again; the details hold the worker's last output",
                    details=self._job.stderr_tail,
                )
            raise MmforgeError(str(event.get("message")), event.get("hint"), event.get("details"))
        self.info: dict[str, Any] = event["value"]

    def _request(self, command: dict[str, Any]) -> Iterator[dict[str, Any]]:
        self._seq += 1
        seq = self._current = self._seq
        if not self._job.command({**command, "seq": seq}):
            raise MmforgeError("The chat worker has stopped", "Load the package again")
        try:
            while True:
                event = self._job.read_event()
                if event is None:
                    raise MmforgeError(
                        "The chat worker stopped unexpectedly",
                        "Load the package again",
                        details=self._job.stderr_tail,
                    )
                if event.get("seq") != seq:
                    continue
                yield event
                if event.get("event") in ("turn", "error"):
                    return
        finally:
            self._current = None

    @staticmethod
    def _files(attachments: Sequence[tuple[Path, str]]) -> list[dict[str, str]]:
        return [{"path": str(p), "kind": kind} for p, kind in attachments]

    def send(
        self,
        text: str,
        attachments: Sequence[tuple[Path, str]] = (),
        options: dict[str, Any] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Send a user message; yields attachment, token and then turn (or error) events."""
        return self._request(
            {
                "cmd": "send",
                "text": text,
                "attachments": self._files(attachments),
                "options": options or {},
            }
        )

    def answer(
        self,
        system: str,
        history: Sequence[tuple[str, str, Sequence[tuple[Path, str]]]],
        text: str,
        attachments: Sequence[tuple[Path, str]] = (),
        options: dict[str, Any] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Answer a conversation given whole (role, text, attachments), as a turn of its own.

        The session's own conversation is replaced by an unsaved one; yields token and
        then turn (or error) events.
        """
        turns = [
            {"role": role, "text": words, "attachments": self._files(files)}
            for role, words, files in history
        ]
        return self._request(
            {
                "cmd": "answer",
                "system": system,
                "history": turns,
                "text": text,
                "attachments": self._files(attachments),
                "options": options or {},
            }
        )

    def regenerate(self, options: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Answer the last message again."""
        return self._request({"cmd": "regenerate", "options": options or {}})

    def edit_last(
        self,
        text: str,
        attachments: Sequence[tuple[Path, str]] | None = None,
        options: dict[str, Any] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Replace the last user message and answer it (None keeps its attachments)."""
        files = None if attachments is None else self._files(attachments)
        return self._request(
            {"cmd": "edit", "text": text, "attachments": files, "options": options or {}}
        )

    def _simple(self, command: dict[str, Any]) -> dict[str, Any]:
        if not self._job.command(command):
            raise MmforgeError("The chat worker has stopped", "Load the package again")
        while (event := self._job.read_event()) is not None:
            if event.get("event") == "conversation":
                return dict(event["value"])
            if event.get("event") == "error":
                raise MmforgeError(str(event.get("message")), event.get("hint"))
        raise MmforgeError("The chat worker stopped unexpectedly", "Load the package again")

    def new_conversation(self) -> dict[str, Any]:
        """Start an empty conversation; returns it."""
        return self._simple({"cmd": "new"})

    def open_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Continue a saved conversation; returns it with its messages."""
        return self._simple({"cmd": "open", "id": conversation_id})

    def delete_conversation(self, conversation_id: str) -> dict[str, Any]:
        """Delete a saved conversation; returns the one the session holds afterwards."""
        return self._simple({"cmd": "delete", "id": conversation_id})

    def rename_conversation(self, conversation_id: str, title: str) -> dict[str, Any]:
        """Retitle a conversation (open or saved); returns the one the session holds."""
        return self._simple({"cmd": "rename", "id": conversation_id, "title": title})

    def set_system(self, text: str) -> dict[str, Any]:
        """Set the open conversation's system prompt; returns the conversation."""
        return self._simple({"cmd": "system", "text": text})

    @property
    def alive(self) -> bool:
        """Whether the worker process is still running (False once it has exited)."""
        return self._job.process.poll() is None

    def stop(self) -> None:
        """Stop the answer being streamed, between two tokens (safe from any thread)."""
        current = self._current
        if current is not None:
            self._job.command({"cmd": "stop", "seq": current})

    def close(self) -> None:
        """End the session and the worker process."""
        if self._job.command({"cmd": "close"}):
            while (event := self._job.read_event()) is not None:
                if event.get("event") == "closed":
                    break
        self._job.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
