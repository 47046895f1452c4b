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
"""

from __future__ import annotations

import dataclasses
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
from mmforge.backend.chat import carry
from mmforge.backend.chat.conversations import (
    Conversation,
    ConversationStore,
    Message,
    clean_title,
)
from mmforge.backend.chat.values import (
    CONTEXT_CARRY,
    CONTEXT_DROP,
    CONTEXT_STOP,
    CONTEXT_SUMMARY,
    STOP_EOS,
    STOP_LENGTH,
    STOP_STOPPED,
    GenerationOptions,
    PackageInfo,
    TurnResult,
    TurnStats,
    available_eps,
)
from mmforge.backend.errors import MmforgeError
from mmforge.backend.memory import current_rss_bytes

log = logging.getLogger(__name__)


def _attachment_failure(message: str) -> MmforgeError:
    """The error for attachments the runtime's processor refused, naming whose fault."""
    if "processor json" in message or "processor configuration" in message:
        # The package's own processor settings, not the attachment (a damaged or
        # hand-edited processor_config.json).
        return MmforgeError(
            f"The package's processor settings cannot be read ({message})",
            "Convert the model again; the attachment is not at fault",
        )
    if "tokens but received" in message:
        # The prompt and the attachments disagree on how many there are: the prompt, not
        # the attachment, went wrong.
        return MmforgeError(
            f"The prompt lost the places of its attachments ({message})",
            "Start a new conversation to send this attachment; the attachment is not at "
            "fault. Please report it with the log",
        )
    return MmforgeError(
        f"The runtime could not prepare the attachments ({message})", _refusal_hint(message)
    )


def _refusal_hint(message: str) -> str:
    """What to do when the runtime's processor refuses a conversation's attachments."""
    if "padded into" in message or "out of valid range" in message:
        # ORT GenAI 0.18 (LFM2-VL, Mistral 3) pads every image of a prompt into a batch
        # the size of one of them, which cannot hold a wider or taller one.
        return (
            "This runtime cannot batch images of different shapes here: keep to images of "
            "one size and shape, or start a new conversation for this image"
        )
    return (
        "Check the attachment; very wide or very tall images fail in this runtime's resize, "
        "so crop such an image closer to square, or remove it"
    )


def _answer_decoder(package: Path) -> Callable[[list[int]], str] | None:
    """The package tokenizer's decode of a whole answer; None without a tokenizer.json.

    Special tokens are skipped, as the runtime's stream skips them.
    """
    path = package / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    return lambda ids: str(tokenizer.decode(ids, skip_special_tokens=True))


class _IncrementalText:
    """Streams an answer's text so that the pieces add up to the decode of its ids.

    Each new token's piece is what it adds to the decode of the last two steps' tokens
    (that context keeps leading spaces right); a piece ending in an incomplete character
    (U+FFFD) is held back until the next token completes it or the answer ends.
    """

    def __init__(self, decode: Callable[[list[int]], str]):
        self._decode = decode
        self._ids: list[int] = []
        self._prefix = 0  # the context's start
        self._read = 0  # what was shown ends here

    def decode(self, token: int) -> str:
        """The text this token adds ("" while it is held back)."""
        self._ids.append(token)
        shown = self._decode(self._ids[self._prefix : self._read])
        now = self._decode(self._ids[self._prefix :])
        if len(now) <= len(shown) or now.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return now[len(shown) :]


class _ContextFull(Exception):
    """The prompt (`tokens` long) leaves no room in the context; caught in `_fit`."""

    def __init__(self, tokens: int):
        super().__init__(tokens)
        self.tokens = tokens


TokenCallback = Callable[[str, int], None]
NoteCallback = Callable[[str], None]
StopCheck = Callable[[], bool]


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
        self.info = PackageInfo.read(package)
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
        self.store = store
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self.conversation = conversation or self._new_conversation()
        self._limit = self.info.context_length  # prompts must stay below it (see `_fit`)
        self._reset_state()

    # -- public API ---------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """The conversation's messages (read only by callers)."""
        return self.conversation.messages

    def new_conversation(self) -> None:
        """Start an empty conversation (the old one stays saved)."""
        self.conversation = self._new_conversation()
        self._reset_state()

    def open_conversation(self, conversation: Conversation) -> None:
        """Continue a saved conversation; its history is prefilled on the next turn."""
        self.conversation = conversation
        self._reset_state()

    def _switch(self, conversation: Conversation) -> None:
        self.open_conversation(conversation)

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
        dest = self._attachment_folder()
        try:
            return [prepare(path, kind, dest, self._intake) for path, kind in files]
        except BaseException:
            if self.store is not None and not self.messages:  # never saved: leave no folder
                self.store.discard_unsaved(self.conversation.id)
            raise

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
        self.messages.append(Message("user", text, list(attachments)))
        self._segments.append(None)
        self._end_texts.append(None)
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
        n = len(self.messages) if messages is None else messages
        segments = self._segments[self._first() : n]
        if any(s is None for s in segments):
            return None
        return [t for s in segments for t in (s or [])]

    def prompt_text(self, messages: int | None = None) -> str:
        """The chat-template text of the first `messages` messages (generation prompt last)."""
        n = len(self.messages) if messages is None else messages
        return self.runtime.prompt(self._template_messages(n))

    # -- internals ----------------------------------------------------------------------

    def _new_conversation(self) -> Conversation:
        if self.store is not None:
            return self.store.new(self.info.folder)
        return Conversation(id="unsaved", package=str(self.info.folder))

    def _reset_state(self) -> None:
        """Forget the generator; the next turn prefills the history afresh."""
        self._gen: Any = None
        self._gen_options: GenerationOptions | None = None
        self._gen_messages = -1  # messages fully held by the generator (-1: none)
        self._pending = False  # the last sampled token was not processed yet
        n = len(self.messages)
        # Exact ids each message added, and the template text up to its end (None: unknown).
        self._segments: list[list[int] | None] = [None] * n
        self._end_texts: list[str | None] = [None] * n

    def _attachment_folder(self) -> Path:
        if self.store is not None:
            return self.store.attachments_folder(self.conversation.id)
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="mmforge-chat-")
        return Path(self._scratch.name)

    def _attachments(self) -> list[Attachment]:
        """The attachments the model sees (those of dropped turns are out of its view)."""
        return [a for m in self.messages[self._first() :] for a in m.attachments]

    def _first(self) -> int:
        """The first message the model sees (those before it were dropped)."""
        return min(self.conversation.forgotten, len(self.messages))

    def _drop_oldest(self) -> bool:
        """Take the oldest exchange out of the model's view; False when none can go.

        The last user message (the one being answered) always stays.
        """
        first = self._first()
        users = [i for i, m in enumerate(self.messages) if m.role == "user" and i > first]
        if not users or not any(m.role == "user" for m in self.messages[users[0] :]):
            return False
        self.conversation.forgotten = users[0]
        log.info("context full: the model no longer sees the first %d messages", users[0])
        self._reset_state()  # the generator holds the dropped turns: prefill afresh
        return True

    def _pop(self) -> Message:
        message = self.messages.pop()
        self._segments.pop()
        self._end_texts.pop()
        if self.conversation.forgotten >= len(self.messages):
            # Editing the first message still seen: it comes back into view when resent.
            self.conversation.forgotten = len(self.messages)
        if self._gen_messages > len(self.messages):
            self._gen_messages = -1  # the generator holds more than the history now
        return message

    def _restore(self, messages: list[Message]) -> None:
        for m in messages:
            self.messages.append(m)
            self._segments.append(None)
            self._end_texts.append(None)
        self._save()

    def _save(self) -> None:
        if self.store is None:
            return
        if not self.messages and not self.store.saved(self.conversation.id):
            return  # nothing to keep: a first message that failed leaves no conversation
        self.store.save(self.conversation)

    def _template_messages(self, n: int | None = None) -> list[dict[str, Any]]:
        """The first `n` messages (all by default) in the chat template's form.

        The system prompt, when there is one, comes first.
        """
        out: list[dict[str, Any]] = []
        system = carry.model_system_text(self.conversation)
        if system:
            out.append({"role": "system", "content": [{"type": "text", "text": system}]})
        for m in self.messages[self._first() : n]:
            parts: list[dict[str, Any]] = [{"type": a.kind} for a in m.attachments]
            parts.append({"type": "text", "text": m.text})
            out.append({"role": m.role, "content": parts})
        return out

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
            prefill, prefill_tokens = self._fit(options, should_stop, on_note)
            result = self._generate(options, on_token, should_stop, start, prefill, prefill_tokens)
        except RuntimeError as e:
            self._gen, self._gen_messages = None, -1
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
        self.messages.append(message)
        self._segments.append(list(result.token_ids))
        prev = self._end_texts[-1]
        self._end_texts.append(None if prev is None else prev + result.text)
        if self._gen is not None:
            self._gen_messages = len(self.messages)
        self._save()
        return result

    def _fit(
        self, options: GenerationOptions, should_stop: StopCheck, on_note: NoteCallback
    ) -> tuple[str, int]:
        """`_feed`, making room as `options.context_full` says when the prompt does not fit.

        Dropping and going on in a new conversation leave room for an answer (its cap, at
        most a quarter of the context); when only the message being answered is left, it
        may take all but the last token.
        """
        context = self.info.context_length
        mode = options.context_full
        room = 0 if mode == CONTEXT_STOP else min(options.max_new_tokens, context // 4)
        carrying = mode in (CONTEXT_CARRY, CONTEXT_SUMMARY)
        try:
            try:
                return self._feed_within(
                    options, room, drop=mode == CONTEXT_DROP, shorten=not carrying
                )
            except _ContextFull:
                if not carrying:
                    raise
            if self._first() >= len(self.messages) - 1:  # nothing earlier to carry on from
                return self._feed_within(options, room, drop=False, shorten=True)
            return self._carry_on(options, room, should_stop, on_note)
        except _ContextFull as full:
            raise self._context_error(full.tokens) from None

    def _feed_within(
        self, options: GenerationOptions, room: int, *, drop: bool, shorten: bool
    ) -> tuple[str, int]:
        """`_feed` leaving `room` tokens for the answer.

        While the prompt does not fit: drop the oldest turns (`drop`), then give up the
        room (`shorten`); then `_ContextFull` goes on to the caller.
        """
        context = self.info.context_length
        self._limit = context - room
        try:
            while True:
                try:
                    return self._feed(options)
                except _ContextFull as full:
                    if drop and self._drop_oldest():
                        continue
                    if shorten and self._limit < context and full.tokens < context:
                        self._limit = context  # nothing left to drop: a shorter answer
                        continue
                    raise
        finally:
            self._limit = context

    def _carry_on(
        self,
        options: GenerationOptions,
        room: int,
        should_stop: StopCheck,
        on_note: NoteCallback,
    ) -> tuple[str, int]:
        """Answer the last message in a new conversation that continues this one.

        It opens with the last whole exchanges that fit ("carry") or with the model's
        summary of this one ("summary"). This conversation goes back to what it held before
        the message; on any failure nothing changes.
        """
        old = self.conversation
        new = carry.begin_continuation(old, self._new_conversation())
        if options.context_full == CONTEXT_SUMMARY:
            on_note(carry.SUMMARISING)
            new.summary = self._summarise(should_stop)
            new.messages = carry.copies(old.messages[-1:])
        else:
            new.messages = carry.copies(old.messages[self._first() :])
        self._switch(new)
        try:
            fed = self._feed_within(options, room, drop=True, shorten=True)
        except BaseException:
            self._switch(old)
            raise
        # The carried turns the model no longer sees are not carried at all.
        cut, new.forgotten = new.forgotten, 0
        del new.messages[:cut], self._segments[:cut], self._end_texts[:cut]
        if self.store is not None:
            carry.adopt_attachments(new.messages, self.store.attachments_folder(new.id))
        old.messages.pop()
        if self.store is not None and self.store.saved(old.id):
            self.store.save(old, touch=False)
        log.info("context full: %s continues in %s", old.id, new.id)
        return fed

    def _summarise(self, should_stop: StopCheck) -> str:
        """The model's summary of the conversation before the message being answered.

        One greedy answer of at most `carry.SUMMARY_TOKENS`, to a request put after the
        turns that fit; the conversation itself is not changed.
        """
        old = self.conversation
        request = Message("user", carry.SUMMARY_REQUEST)
        earlier = carry.copies(old.messages[self._first() : -1])
        asking = dataclasses.replace(old, messages=[*earlier, request], forgotten=0)
        tokens = min(carry.SUMMARY_TOKENS, self.info.context_length // 4)
        options = GenerationOptions(max_new_tokens=tokens)
        self._switch(asking)
        try:
            mode, fed = self._feed_within(options, tokens, drop=True, shorten=True)
            start = time.perf_counter()
            result = self._generate(options, _ignore, should_stop, start, mode, fed)
        finally:
            self._switch(old)
        if result.stop_reason == STOP_STOPPED:
            raise MmforgeError(
                "Stopped while the model was summarising the conversation",
                "Send the message again to start the new conversation",
            )
        return result.text.strip() or "(The model wrote nothing.)"

    def _feed(self, options: GenerationOptions) -> tuple[str, int]:
        """Bring the generator to the state after the prompt; returns (mode, tokens fed)."""
        prompt = self.runtime.prompt(self._template_messages())
        last = self.messages[-1]
        exact: list[int] | None = None
        if self._segments[-1] is not None and self._end_texts[-1] == prompt:
            exact = [t for s in self._segments for t in (s or [])]  # regenerate
        elif not last.attachments and all(s is not None for s in self._segments[:-1]):
            base = self._end_texts[-2] if len(self.messages) > self._first() + 1 else ""
            if base is not None and prompt.startswith(base):
                delta = self._encode(prompt[len(base) :])
                continuing = (
                    self._gen is not None
                    and (self.info.can_rewind or not self._pending)
                    and self._gen_messages == len(self.messages) - 1
                    and self._gen_options is not None
                    and self._gen_options.search_options(0) == options.search_options(0)
                )
                self._segments[-1], self._end_texts[-1] = delta, prompt
                if continuing:
                    return "continued", self._append(delta)
                exact = [t for s in self._segments for t in (s or [])]
        return "fresh", self._prefill(prompt, exact, options)

    def _encode(self, text: str) -> list[int]:
        return [int(t) for t in self.runtime.tokenizer.encode(text)]

    def _check_room(self, n: int) -> None:
        if n >= self._limit:
            raise _ContextFull(n)

    def _context_error(self, n: int) -> MmforgeError:
        return MmforgeError(
            f"The conversation ({n} tokens) does not fit the model's context "
            f"({self.info.context_length} tokens)",
            "Start a new conversation, or edit the last message to be shorter",
            kind="context_full",
        )

    def _append(self, delta: list[int]) -> int:
        import numpy as np

        gen = self._gen
        held = int(gen.token_count())
        self._check_room(held + len(delta))
        if self._pending:
            last = int(gen.get_sequence(0)[-1])
            gen.rewind_to(held - 1)
            delta = [last, *delta]
        gen.append_tokens(np.asarray(delta, dtype=np.int32))
        return len(delta)

    def _prefill(self, prompt: str, exact: list[int] | None, options: GenerationOptions) -> int:
        """A new generator holding the whole history; `exact` ids when known."""
        import numpy as np

        og = self.runtime.og
        params = og.GeneratorParams(self.runtime.model)
        params.set_search_options(**options.search_options(self.info.context_length))
        self._gen, self._gen_options, self._pending = None, None, False
        gen = og.Generator(self.runtime.model, params)
        attachments = self._attachments()
        images = [a.path for a in attachments if a.kind == IMAGE]
        audios = [a.path for a in attachments if a.kind == AUDIO]
        if images or audios:
            try:
                inputs = self.runtime.process(prompt, images, audios)
            except RuntimeError as e:
                raise _attachment_failure(str(e)) from None
            ids = inputs.input_ids
            if exact is not None and self._same_specials(exact, ids):
                dtype = inputs.arrays["input_ids"].dtype
                inputs.named["input_ids"] = og.Tensor(np.asarray([exact], dtype=dtype))
                ids = exact
            else:
                self._forget_segments(ids, prompt)
            self._check_room(len(ids))
            gen.set_inputs(inputs.named)
        else:
            if exact is None:
                exact = self._encode(prompt)
                self._forget_segments(exact, prompt)
            ids = exact
            self._check_room(len(ids))
            gen.append_tokens(np.asarray(ids, dtype=np.int32))
        self._gen, self._gen_options = gen, options
        return len(ids)

    def _same_specials(self, a: list[int], b: list[int]) -> bool:
        """Whether two id lists hold the same number of each placeholder token."""
        specials = self.info.special_ids
        return bool(specials) and all(a.count(t) == b.count(t) for t in specials)

    def _forget_segments(self, ids: list[int], prompt: str) -> None:
        """The history was re-tokenized from text: only the whole is known now."""
        n = len(self.messages)
        # The dropped messages add nothing; the others are known only as a whole.
        self._segments = [[] for _ in range(n - 1)] + [list(ids)]
        self._end_texts = [None] * (n - 1) + [prompt]

    def _generate(
        self,
        options: GenerationOptions,
        on_token: TokenCallback,
        should_stop: StopCheck,
        start: float,
        prefill: str,
        prefill_tokens: int,
    ) -> TurnResult:
        gen = self._gen
        stream = (
            _IncrementalText(self._text)
            if self._text is not None
            else self.runtime.tokenizer.create_stream()
        )
        eos = set(self.info.eos_token_ids)
        context = int(gen.token_count()) if prefill == "continued" else prefill_tokens
        tokens: list[int] = []
        pieces: list[str] = []
        first_at: float | None = None
        reason = STOP_LENGTH
        while len(tokens) < options.max_new_tokens:
            if should_stop():
                reason = STOP_STOPPED
                break
            if gen.is_done():
                break
            gen.generate_next_token()
            token = int(gen.get_next_tokens()[0])
            if first_at is None:
                first_at = time.perf_counter()
            if token in eos and gen.is_done():
                reason = STOP_EOS
                break
            tokens.append(token)
            piece = stream.decode(token)
            pieces.append(piece)
            on_token(piece, token)
        end = time.perf_counter()
        if first_at is None:
            # Nothing was generated: the prompt may not even have been processed.
            self._gen, self._gen_messages = None, -1
        self._pending = reason != STOP_EOS and bool(tokens)
        decode_s = end - first_at if first_at is not None else 0.0
        stats = TurnStats(
            prompt_tokens=context,
            prefill_tokens=prefill_tokens,
            new_tokens=len(tokens),
            time_to_first_token_s=round((first_at or end) - start, 6),
            decode_tokens_per_s=round((len(tokens) - 1) / decode_s, 2) if decode_s > 0 else 0.0,
            total_s=round(end - start, 6),
            prefill=prefill,
        )
        # The answer's text is its ids decoded as transformers and `tokenizers` decode them
        # (ORT GenAI 0.18's stream drops bytes that form no character, which a random model
        # emits, and its Tokenizer.decode stops at the first; here they become U+FFFD).
        text = self._text(tokens) if self._text is not None else "".join(pieces)
        return TurnResult(text, tokens, reason, stats)

    def close(self) -> None:
        """Release the model and any scratch files."""
        self._gen = None
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None
