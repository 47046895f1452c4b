"""The context policy: what a chat does when the conversation outgrows the context.

By default the oldest turns leave the model's view (`GenerationOptions.context_full`):
whole exchanges, from the first, never the system prompt nor the message being answered,
until the prompt and room for an answer fit. The other choices: refuse the turn ("stop"),
or answer it in a new conversation that continues the old one, with its last turns
("carry") or the model's summary of it ("summary"; `chat.carry`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mmforge.backend.chat import carry
from mmforge.backend.chat.conversations import Message
from mmforge.backend.chat.generation import GeneratorDriver, StopCheck, _ContextFull
from mmforge.backend.chat.transcript import Transcript
from mmforge.backend.chat.values import (
    CONTEXT_CARRY,
    CONTEXT_DROP,
    CONTEXT_STOP,
    CONTEXT_SUMMARY,
    STOP_STOPPED,
    GenerationOptions,
    PackageInfo,
)
from mmforge.backend.errors import MmforgeError

if TYPE_CHECKING:
    from mmforge.backend.chat.session import ChatSession

log = logging.getLogger(__name__)

NoteCallback = Callable[[str], None]


def _ignore(text: str, token: int) -> None:
    return None


class ContextPolicy:
    """Feeds a turn, making room in the context as its options say.

    It works on the session's transcript and generator driver, and asks the session to
    open another conversation (`switch`) when the turn goes on in a new one.
    """

    def __init__(self, session: ChatSession):
        self.session = session

    @property
    def info(self) -> PackageInfo:
        """The package's facts (its context length)."""
        return self.session.info

    @property
    def transcript(self) -> Transcript:
        """The session's conversation and ids."""
        return self.session.transcript

    @property
    def driver(self) -> GeneratorDriver:
        """The session's generator."""
        return self.session.driver

    def fit(
        self, options: GenerationOptions, should_stop: StopCheck, on_note: NoteCallback
    ) -> tuple[str, int]:
        """`GeneratorDriver.feed`, making room as `options.context_full` says when needed.

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
                return self.feed_within(
                    options, room, drop=mode == CONTEXT_DROP, shorten=not carrying
                )
            except _ContextFull:
                if not carrying:
                    raise
            if (
                self.transcript.first() >= len(self.transcript.messages) - 1
            ):  # nothing earlier to carry on from
                return self.feed_within(options, room, drop=False, shorten=True)
            return self.carry_on(options, room, should_stop, on_note)
        except _ContextFull as full:
            raise self.error(full.tokens) from None

    def feed_within(
        self, options: GenerationOptions, room: int, *, drop: bool, shorten: bool
    ) -> tuple[str, int]:
        """`GeneratorDriver.feed` leaving `room` tokens for the answer.

        While the prompt does not fit: drop the oldest turns (`drop`), then give up the
        room (`shorten`); then `_ContextFull` goes on to the caller.
        """
        context = self.info.context_length
        self.driver.limit = context - room
        try:
            while True:
                try:
                    return self.driver.feed(options)
                except _ContextFull as full:
                    if drop and self.session.drop_oldest():
                        continue
                    if shorten and self.driver.limit < context and full.tokens < context:
                        self.driver.limit = context  # nothing left to drop: a shorter answer
                        continue
                    raise
        finally:
            self.driver.limit = context

    def carry_on(
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
        old = self.transcript.conversation
        new = carry.begin_continuation(old, self.session.new_conversation_record())
        if options.context_full == CONTEXT_SUMMARY:
            on_note(carry.SUMMARISING)
            new.summary = self.summarise(should_stop)
            new.messages = carry.copies(old.messages[-1:])
        else:
            new.messages = carry.copies(old.messages[self.transcript.first() :])
        self.session.switch(new)
        try:
            fed = self.feed_within(options, room, drop=True, shorten=True)
        except BaseException:
            self.session.switch(old)
            raise
        # The carried turns the model no longer sees are not carried at all.
        cut, new.forgotten = new.forgotten, 0
        self.transcript.cut(cut)
        store = self.transcript.store
        if store is not None:
            dest = store.attachments_folder(new.id)
            for word in carry.adopt_attachments(new.messages, dest, store.copy_folders(old)):
                on_note(word)
        old.messages.pop()
        if self.transcript.store is not None and self.transcript.store.saved(old.id):
            self.transcript.store.save(old, touch=False)
        log.info("context full: %s continues in %s", old.id, new.id)
        return fed

    def summarise(self, should_stop: StopCheck) -> str:
        """The model's summary of the conversation before the message being answered.

        One greedy answer of at most `carry.SUMMARY_TOKENS`, to a request put after the
        turns that fit; the conversation itself is not changed.
        """
        old = self.transcript.conversation
        request = Message("user", carry.SUMMARY_REQUEST)
        earlier = carry.copies(old.messages[self.transcript.first() : -1])
        asking = dataclasses.replace(old, messages=[*earlier, request], forgotten=0)
        tokens = min(carry.SUMMARY_TOKENS, self.info.context_length // 4)
        options = GenerationOptions(max_new_tokens=tokens)
        self.session.switch(asking)
        try:
            mode, fed = self.feed_within(options, tokens, drop=True, shorten=True)
            start = time.perf_counter()
            result = self.driver.generate(options, _ignore, should_stop, start, mode, fed)
        finally:
            self.session.switch(old)
        if result.stop_reason == STOP_STOPPED:
            raise MmforgeError(
                "Stopped while the model was summarising the conversation",
                "Send the message again to start the new conversation",
            )
        return result.text.strip() or "(The model wrote nothing.)"

    def error(self, n: int) -> MmforgeError:
        """The error for a conversation of `n` tokens that cannot be made to fit."""
        return MmforgeError(
            f"The conversation ({n} tokens) does not fit the model's context "
            f"({self.info.context_length} tokens)",
            "Start a new conversation, or edit the last message to be shorter",
            kind="context_full",
        )
