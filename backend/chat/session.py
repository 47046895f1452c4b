"""The chat engine: multi-turn, multimodal, streaming chat over ONNX Runtime GenAI.

A `ChatSession` holds one loaded package and one conversation. It keeps the exact token
ids the model has seen, message by message, so that a later turn continues the KV cache
instead of recomputing the history, and gives the same tokens as a fresh prefill of the
same ids would (tests check this against a fresh generator and against transformers).

How each turn is fed (from FINDINGS, each re-measured by the tests):
- the next user turn is appended to the live generator when nothing before it changed
  and it brings no attachment. After an answer that ended on EOS, the generator has
  processed everything, and the new tokens are appended. After an answer that was stopped
  (Stop or the token limit), its last token was sampled but never processed:
  `rewind_to(n - 1)` and then appending `[last, *new]` gives exactly the fresh-prefill
  state. LFM2's convolution state cannot be rewound, so there a stopped answer is
  followed by a fresh prefill;
- a turn that brings an image or audio cannot be appended (the runtime fails with
  "Gather idx=1 must be within…"), so a new generator prefills the whole history with
  every attachment;
- Regenerate and edit-last-message go back in the history. The runtime cannot shrink its
  KV cache here (`past_present_share_buffer` is off in every package), so they prefill a
  new generator from the saved exact ids, with the attachments' pixels and features
  taken from the processor.

Sampling options are fixed per generator; a turn whose options differ starts a new one
from the exact ids.

A conversation that outgrows the model's context drops its oldest turns from the model's
view by default (`GenerationOptions.context_full`): whole exchanges, from the first, never
the system prompt nor the message being answered, until the prompt and room for an answer
fit. The dropped messages stay saved and shown; `Conversation.forgotten` counts them, and
the next turn prefills what is left afresh. The other choices: refuse the turn ("stop"), or
answer it in a new conversation that continues the old one (`chat.carry`).

The session is three parts: the transcript (`transcript.Transcript`: the conversation and
the exact ids of each message), the context policy (`context_policy.ContextPolicy`: what to
do when it outgrows the context) and the generator driver (`generation.GeneratorDriver`:
how a turn is fed, and the streaming).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mmforge.backend.attachments import (
    AUDIO,
    IMAGE,
    Attachment,
    AttachmentError,
    package_intake,
    prepare,
)
from mmforge.backend.chat.context_policy import ContextPolicy
from mmforge.backend.chat.conversations import (
    Conversation,
    ConversationStore,
    Message,
    clean_title,
)
from mmforge.backend.chat.generation import (
    GeneratorDriver,
    StopCheck,
    TokenCallback,
    _answer_decoder,
    _attachment_failure,
)
from mmforge.backend.chat.transcript import Transcript
from mmforge.backend.chat.values import (
    GenerationOptions,
    PackageInfo,
    TurnResult,
    available_eps,
)
from mmforge.backend.errors import MmforgeError
from mmforge.backend.memory import current_rss_bytes
from mmforge.backend.runtime import without_nul

log = logging.getLogger(__name__)

__all__ = ["ChatSession", "_attachment_failure"]

NoteCallback = Callable[[str], None]


def _never() -> bool:
    return False


def _ignore(text: str, token: int) -> None:
    return None


def _quiet(text: str) -> None:
    return None


class ChatSession:
    """One package, loaded once, and one conversation with it.

    Args:
        package: The package folder.
        ep: "cpu" or "cuda".
        store: Where conversations are saved; None keeps this one in memory only.
        conversation: A saved conversation to continue (its history is prefilled afresh
            on the next turn).
    """

    def __init__(
        self,
        package: Path,
        ep: str = "cpu",
        *,
        store: ConversationStore | None = None,
        conversation: Conversation | None = None,
    ):
        self._info = PackageInfo.read(package)
        reason = available_eps().get(ep, f"Unknown execution provider {ep!r}")
        if reason:
            raise MmforgeError(f"Cannot run on {ep.upper()}: {reason}", "Choose CPU")
        from mmforge.backend.runtime import Runtime

        before, start = current_rss_bytes(), time.perf_counter()
        try:
            self.runtime = Runtime(package, ep)
        except RuntimeError as e:
            raise MmforgeError(
                f"ONNX Runtime GenAI could not load {package}",
                "Convert the model again; if it persists, report the message in the details",
                details=str(e),
            ) from None
        self.ep = ep
        # How transformers reads this model's pictures (None: not recorded).
        self._intake = package_intake(package)
        self._text = _answer_decoder(package)
        self.load_s = time.perf_counter() - start
        self.load_memory_bytes = max(0, current_rss_bytes() - before)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self.transcript = Transcript(Conversation(id="unsaved", package=""), store)
        self.transcript.open(conversation or self.new_conversation_record())
        self.driver = GeneratorDriver(self.runtime, self.info, self._text, self.transcript)
        self.policy = ContextPolicy(self)

    # -- public API ---------------------------------------------------------------------

    @property
    def info(self) -> PackageInfo:
        """The package's facts; replacing them (a test's shorter context) reaches the driver."""
        return self._info

    @info.setter
    def info(self, info: PackageInfo) -> None:
        self._info = info
        self.driver.info = info

    @property
    def conversation(self) -> Conversation:
        """The open conversation."""
        return self.transcript.conversation

    @property
    def store(self) -> ConversationStore | None:
        """Where conversations are saved (None: in memory only)."""
        return self.transcript.store

    @property
    def messages(self) -> list[Message]:
        """The conversation's messages (read only by callers)."""
        return self.conversation.messages

    def new_conversation(self) -> None:
        """Start an empty conversation (the old one stays saved)."""
        self.switch(self.new_conversation_record())

    def open_conversation(self, conversation: Conversation) -> None:
        """Continue a saved conversation; its history is prefilled on the next turn."""
        self.switch(conversation)

    def switch(self, conversation: Conversation) -> None:
        """Hold `conversation`; the next turn prefills its history afresh."""
        self.transcript.open(conversation)
        self.driver.reset()

    def set_system(self, text: str) -> None:
        """Set the conversation's system prompt; the next turn prefills the history afresh."""
        if text == self.conversation.system:
            return
        self.conversation.system = text
        self._reset_state()
        if self.messages:
            self._save()

    def rename(self, title: str) -> None:
        """Give the open conversation a title (saved once it has a message)."""
        self.conversation.title = clean_title(title)
        if self.messages and self.store is not None:
            self.store.save(self.conversation, touch=False)

    def prepare_attachments(self, files: Sequence[tuple[Path, str]]) -> list[Attachment]:
        """Check attachments against the package and copy them for the runtime.

        Raises `AttachmentError` (nothing in the conversation changes) for a file the model
        cannot take.
        """
        images = sum(1 for _, kind in files if kind == IMAGE)
        audios = sum(1 for _, kind in files if kind == AUDIO)
        if images and not self.info.vision:
            raise AttachmentError(
                "This model cannot see images (its package has no vision encoder)",
                "Remove the image, or chat with a vision model",
            )
        if audios and not self.info.audio:
            raise AttachmentError(
                "This model cannot hear audio (its package has no audio encoder)",
                "Remove the audio clip, or chat with Gemma 4 or Phi-4-multimodal",
            )
        if self.info.max_images is not None:
            held = sum(1 for a in self._attachments() if a.kind == IMAGE)
            if held + images > self.info.max_images:
                raise AttachmentError(
                    f"A {self.info.pipeline_type} package takes {self.info.max_images} image "
                    f"per conversation, and this one would hold {held + images}",
                    "Start a new conversation for another image",
                )
        if self.info.one_clip:
            held = sum(1 for a in self._attachments() if a.kind == AUDIO)
            if held + audios > 1:
                raise AttachmentError(
                    f"A {self.info.pipeline_type} package takes one audio clip per conversation "
                    f"(ONNX Runtime GenAI hears one per prompt), and this one would hold "
                    f"{held + audios}",
                    "Send one clip, or start a new conversation for another",
                )
        dest = self._attachment_folder()
        try:
            prepared = [prepare(path, kind, dest, self._intake) for path, kind in files]
            self._check_one_size(prepared)
            return prepared
        except BaseException:
            if self.store is not None and not self.messages:  # never saved: leave no folder
                self.store.discard_unsaved(self.conversation.id)
            raise

    def _check_one_size(self, prepared: Sequence[Attachment]) -> None:
        """Refuse pictures of different sizes where the package cannot stack them.

        Raises:
            AttachmentError: The conversation would hold pictures of two sizes (after the
                intake sized them as transformers does) in a package whose pictures must
                share one (`Sizing.one_size`, Idefics2).
        """
        sizing = None if self._intake is None else self._intake.sizing
        if sizing is None or not sizing.one_size:
            return
        pictures = [a for a in (*self._attachments(), *prepared) if a.kind == IMAGE]
        sizes = {(a.width, a.height) for a in pictures}
        if len(sizes) > 1:
            shown = ", ".join(f"{w}×{h}" for w, h in sorted(sizes))
            raise AttachmentError(
                f"This model's pictures in one conversation must share one size after its "
                f"resize, and these would be {shown}: ONNX Runtime GenAI stacks them into "
                "one tensor, which would cut and zero-fill the others",
                "Send pictures of one size and shape, or start a new conversation for this one",
            )

    def send(
        self,
        text: str,
        attachments: Sequence[Attachment] = (),
        options: GenerationOptions | None = None,
        on_token: TokenCallback = _ignore,
        should_stop: StopCheck = _never,
        *,
        on_note: NoteCallback = _quiet,
    ) -> TurnResult:
        """Add a user message and stream the answer.

        `on_note` hears what the session does on its own before answering (summarising a
        full conversation, which takes a while).
        """
        if not text.strip() and not attachments:
            raise MmforgeError("The message is empty", "Type something or attach a file")
        if self.messages and self.messages[-1].role == "user":
            raise MmforgeError(
                "The last message has no answer yet", "Regenerate or edit it instead"
            )
        self.transcript.add(Message("user", text, list(attachments)))
        try:
            return self._answer(options or GenerationOptions(), on_token, should_stop, on_note)
        except MmforgeError:
            # The message goes back to the caller's draft; the saved copy goes too.
            self._pop()
            self._save()
            raise

    def regenerate(
        self,
        options: GenerationOptions | None = None,
        on_token: TokenCallback = _ignore,
        should_stop: StopCheck = _never,
        *,
        on_note: NoteCallback = _quiet,
    ) -> TurnResult:
        """Answer the last user message again (replacing the last answer)."""
        if not self.messages:
            raise MmforgeError("There is nothing to regenerate", "Send a message first")
        if self.messages[-1].role == "assistant":
            self._pop()
        return self._answer(options or GenerationOptions(), on_token, should_stop, on_note)

    def edit_last(
        self,
        text: str,
        attachments: Sequence[Attachment] | None = None,
        options: GenerationOptions | None = None,
        on_token: TokenCallback = _ignore,
        should_stop: StopCheck = _never,
        *,
        on_note: NoteCallback = _quiet,
    ) -> TurnResult:
        """Replace the last user message (and its answer) and answer the new one.

        `attachments=None` keeps the old message's attachments.
        """
        if not any(m.role == "user" for m in self.messages):
            raise MmforgeError("There is no message to edit", "Send a message first")
        popped = [self._pop()]
        if popped[0].role == "assistant":
            popped.insert(0, self._pop())
        keep = popped[0].attachments if attachments is None else list(attachments)
        try:
            return self.send(text, keep, options, on_token, should_stop, on_note=on_note)
        except MmforgeError:
            # Nothing is lost: the old exchange comes back (prefilled afresh next time).
            self._restore(popped)
            raise

    def context_ids(self, messages: int | None = None) -> list[int] | None:
        """The exact token ids the model saw for the first `messages` messages.

        None where the history was re-tokenized from text (after a new attachment).
        """
        return self.transcript.context_ids(messages)

    def prompt_text(self, messages: int | None = None) -> str:
        """The chat-template text of the first `messages` messages (generation prompt last)."""
        n = len(self.messages) if messages is None else messages
        return self.runtime.prompt(self.transcript.template_messages(n))

    # -- internals ----------------------------------------------------------------------

    def new_conversation_record(self) -> Conversation:
        """A new, empty conversation with this package (saved once it has a message)."""
        if self.store is not None:
            return self.store.new(self.info.folder)
        return Conversation(id="unsaved", package=str(self.info.folder))

    def drop_oldest(self) -> bool:
        """Take the oldest exchange out of the model's view; False when none can go."""
        if not self.transcript.drop_oldest():
            return False
        self._reset_state()  # the generator holds the dropped turns: prefill afresh
        return True

    def _reset_state(self) -> None:
        """Forget the generator and the ids; the next turn prefills the history afresh."""
        self.driver.reset()
        self.transcript.forget_ids()

    def _template_messages(self, n: int | None = None) -> list[dict[str, Any]]:
        return self.transcript.template_messages(n)

    def _attachment_folder(self) -> Path:
        if self.store is not None:
            return self.store.attachments_folder(self.conversation.id)
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="mmforge-chat-")
        return Path(self._scratch.name)

    def _attachments(self) -> list[Attachment]:
        """The attachments the model sees (those of dropped turns are out of its view)."""
        return self.transcript.attachments()

    def _pop(self) -> Message:
        message = self.transcript.pop()
        self.driver.held_beyond(len(self.messages))
        return message

    def _restore(self, messages: list[Message]) -> None:
        self.transcript.restore(messages)

    def _save(self) -> None:
        self.transcript.save()

    def _answer(
        self,
        options: GenerationOptions,
        on_token: TokenCallback,
        should_stop: StopCheck,
        on_note: NoteCallback,
    ) -> TurnResult:
        self._save()  # the user's message is on disk before any work starts
        start = time.perf_counter()
        try:
            prefill, prefill_tokens = self.policy.fit(options, should_stop, on_note)
            result = self.driver.generate(
                options, on_token, should_stop, start, prefill, prefill_tokens
            )
        except RuntimeError as e:
            self.driver.failed()
            raise MmforgeError(
                "ONNX Runtime GenAI failed while answering",
                "Try again; if it fails again, start a new conversation",
                details=str(e),
                kind="runtime",
            ) from None
        message = Message(
            "assistant",
            result.text,
            token_ids=result.token_ids,
            stats=asdict(result.stats),
            stop_reason=result.stop_reason,
        )
        prev = self.transcript.end_texts[-1]
        # As the runtime renders the answer in the next prompt (a NUL made U+FFFD), so that
        # the next turn still finds this text at the start of its prompt and continues.
        end_text = None if prev is None else prev + without_nul(result.text)
        self.transcript.add(message, list(result.token_ids), end_text)
        self.driver.answered()
        self._save()
        return result

    def close(self) -> None:
        """Release the model and any scratch files."""
        self.driver.reset()
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None
