"""The generator driver: brings ONNX Runtime GenAI's generator to the prompt and streams.

`GeneratorDriver.feed` chooses how a turn is fed (see `session`'s docstring): appended to
the live generator, or a fresh prefill from the transcript's exact ids (or from the
template text, re-tokenized); `generate` streams the answer. It holds the generator, the
options it was made with, how many messages it holds and whether its last sampled token
is still unprocessed; the transcript (`transcript.Transcript`) holds the ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmforge.backend.attachments import AUDIO, IMAGE
from mmforge.backend.chat.transcript import Transcript
from mmforge.backend.chat.values import (
    STOP_EOS,
    STOP_LENGTH,
    STOP_STOPPED,
    GenerationOptions,
    PackageInfo,
    TurnResult,
    TurnStats,
)
from mmforge.backend.errors import MmforgeError

TokenCallback = Callable[[str, int], None]
StopCheck = Callable[[], bool]
_GUIDANCE_WORDS = {"json_schema": "JSON schema", "regex": "expression", "lark_grammar": "grammar"}


def tools_in_system(messages: list[dict[str, Any]], tools: str) -> list[dict[str, Any]]:
    """`messages` with the tools described at the end of the system text (one made if none).

    For a chat template without tool support: the tools, and how a call is written (the
    `<tool_call>` form Qwen's and Hermes' templates teach, which `mmforge serve` reads).
    """
    words = (
        "You may call functions to help with the user's request. The functions, as JSON "
        f"schemas, within <tools></tools>:\n<tools>\n{tools}\n</tools>\n\nTo call one, "
        "answer with a JSON object of its name and arguments within <tool_call></tool_call>:"
        '\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call>"
    )
    out = list(messages)
    if out and out[0].get("role") == "system":
        system = "".join(str(p.get("text", "")) for p in out.pop(0)["content"])
        words = f"{system}\n\n{words}"
    return [{"role": "system", "content": [{"type": "text", "text": words}]}, *out]


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

    Special tokens are skipped, as the runtime's stream skips them. Where the package's
    SentencePiece tokenizer lost the `Strip` decoder the runtime's encoding must not see
    (`backend/spm_form.py`), one leading space is dropped as transformers' decode drops
    it, so the answer, and the history the next turn renders, are transformers' text.
    """
    path = package / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    from mmforge.backend.spm_form import DECODING_FILE
    from mmforge.backend.untrusted import read_json_object

    tokenizer = Tokenizer.from_file(str(path))
    decoding = package / DECODING_FILE
    strip = (
        decoding.is_file()
        and read_json_object(decoding, "package").get("strip_leading_space") is True
    )

    def decode(ids: list[int]) -> str:
        text = str(tokenizer.decode(ids, skip_special_tokens=True))
        return text[1:] if strip and text.startswith(" ") else text

    return decode


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


class GeneratorDriver:
    """One package's generator, fed from a transcript.

    Args:
        runtime: The loaded package (`backend.runtime.Runtime`).
        info: The package's facts (context length, EOS ids, placeholders, rewind).
        text: The package tokenizer's decode of a whole answer (None: the runtime's).
        transcript: The conversation and its ids.
    """

    def __init__(
        self,
        runtime: Any,
        info: PackageInfo,
        text: Callable[[list[int]], str] | None,
        transcript: Transcript,
    ):
        self.runtime = runtime
        self.info = info
        self.text = text
        self.transcript = transcript
        self.limit = info.context_length  # prompts must stay below it (see `room_left`)
        self.reset()

    def reset(self) -> None:
        """Forget the generator; the next turn prefills the history afresh."""
        self.gen: Any = None
        self.gen_options: GenerationOptions | None = None
        self.gen_messages = -1  # messages fully held by the generator (-1: none)
        self.pending = False  # the last sampled token was not processed yet

    def held_beyond(self, n: int) -> None:
        """The history is `n` messages now: a generator holding more must not continue."""
        if self.gen_messages > n:
            self.gen_messages = -1

    def failed(self) -> None:
        """The runtime failed: the generator's state is unknown."""
        self.gen, self.gen_messages = None, -1

    def answered(self) -> None:
        """The answer went into the transcript: the generator holds all of it."""
        if self.gen is not None:
            self.gen_messages = len(self.transcript.messages)

    def feed(self, options: GenerationOptions) -> tuple[str, int]:
        """Bring the generator to the state after the prompt; returns (mode, tokens fed)."""
        t = self.transcript
        prompt = self.render(options)
        last = t.messages[-1]
        exact: list[int] | None = None
        if t.segments[-1] is not None and t.end_texts[-1] == prompt:
            exact = t.all_ids()  # regenerate
        elif not last.attachments and all(s is not None for s in t.segments[:-1]):
            base = t.end_texts[-2] if len(t.messages) > t.first() + 1 else ""
            if base is not None and prompt.startswith(base):
                delta = self.encode(prompt[len(base) :])
                continuing = (
                    self.gen is not None
                    and (self.info.can_rewind or not self.pending)
                    and self.gen_messages == len(t.messages) - 1
                    and self.gen_options is not None
                    and self.gen_options.search_options(0) == options.search_options(0)
                    # a constrained answer needs a generator of its own (and its grammar,
                    # once met, admits nothing more)
                    and not (options.guided or self.gen_options.guided)
                )
                t.segments[-1], t.end_texts[-1] = delta, prompt
                if continuing:
                    return "continued", self.append(delta)
                exact = t.all_ids()
        return "fresh", self.prefill(prompt, exact, options)

    def render(self, options: GenerationOptions) -> str:
        """The prompt: the transcript through the chat template, with `options.tools`.

        A template that ignores `tools` (the prompt is the same without them) gets them
        described at the end of the system text instead (`tools_in_system`).
        """
        messages = self.transcript.template_messages()
        plain = str(self.runtime.prompt(messages))
        if not options.tools:
            return plain
        prompt = str(self.runtime.prompt(messages, options.tools))
        if prompt != plain:
            return prompt
        return str(self.runtime.prompt(tools_in_system(messages, options.tools)))

    def generator(self, model: Any, params: Any, options: GenerationOptions) -> Any:
        """A new generator; with `options.guidance_type`, its answer constrained.

        Raises:
            MmforgeError: Of kind "guidance", when the runtime cannot take the guidance (a
                schema or grammar llguidance refuses, or a package without tokenizer.json).
        """
        og = self.runtime.og
        if not options.guided:
            return og.Generator(model, params)
        params.set_guidance(options.guidance_type, options.guidance_data)
        try:
            return og.Generator(model, params)
        except RuntimeError as e:
            # ORT GenAI 0.18 compiles the guidance here ("Error creating grammar: …").
            said = str(e).strip()
            what = _GUIDANCE_WORDS.get(options.guidance_type, "guidance")
            raise MmforgeError(
                f"The runtime cannot constrain the answer to this {what}: {said[:500]}",
                "Simplify the schema (llguidance's JSON Schema subset) and send it again",
                details=said,
                kind="guidance",
            ) from None

    def encode(self, text: str) -> list[int]:
        """The package tokenizer's ids of `text`."""
        return [int(t) for t in self.runtime.tokenizer.encode(text)]

    def room_left(self, n: int) -> None:
        """Raise `_ContextFull` when a prompt of `n` tokens leaves no room under the limit."""
        if n >= self.limit:
            raise _ContextFull(n)

    def append(self, delta: list[int]) -> int:
        """Continue the live generator with `delta` (after a stop: its last token first)."""
        import numpy as np

        gen = self.gen
        held = int(gen.token_count())
        self.room_left(held + len(delta))
        if self.pending:
            last = int(gen.get_sequence(0)[-1])
            gen.rewind_to(held - 1)
            delta = [last, *delta]
        gen.append_tokens(np.asarray(delta, dtype=np.int32))
        return len(delta)

    def prefill(self, prompt: str, exact: list[int] | None, options: GenerationOptions) -> int:
        """A new generator holding the whole history; `exact` ids when known."""
        import numpy as np

        t = self.transcript
        og = self.runtime.og
        self.gen, self.gen_options, self.pending = None, None, False
        model = self.runtime.model
        params = og.GeneratorParams(model)
        # A top_k above the vocabulary means all of it; the runtime refuses it as written.
        within = options.within_vocabulary(self.info.vocab_size)
        params.set_search_options(**within.search_options(self.info.context_length))
        gen = self.generator(model, params, options)
        attachments = t.attachments()
        images = [a.path for a in attachments if a.kind == IMAGE]
        audios = [a.path for a in attachments if a.kind == AUDIO]
        if images or audios:
            try:
                inputs = self.runtime.process(prompt, images, audios)
            except RuntimeError as e:
                raise _attachment_failure(str(e)) from None
            ids = inputs.input_ids
            if exact is not None and self.same_specials(exact, ids):
                dtype = inputs.arrays["input_ids"].dtype
                inputs.named["input_ids"] = og.Tensor(np.asarray([exact], dtype=dtype))
                ids = exact
            else:
                t.known_whole(ids, prompt)
            self.room_left(len(ids))
            gen.set_inputs(inputs.named)
        else:
            if exact is None:
                exact = self.encode(prompt)
                t.known_whole(exact, prompt)
            ids = exact
            self.room_left(len(ids))
            gen.append_tokens(np.asarray(ids, dtype=np.int32))
        self.gen, self.gen_options = gen, options
        return len(ids)

    def same_specials(self, a: list[int], b: list[int]) -> bool:
        """Whether two id lists hold the same number of each placeholder token."""
        specials = self.info.special_ids
        return bool(specials) and all(a.count(t) == b.count(t) for t in specials)

    def generate(
        self,
        options: GenerationOptions,
        on_token: TokenCallback,
        should_stop: StopCheck,
        start: float,
        prefill: str,
        prefill_tokens: int,
    ) -> TurnResult:
        """Stream the answer from the fed generator."""
        gen = self.gen
        stream = (
            _IncrementalText(self.text)
            if self.text is not None
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
            self.gen, self.gen_messages = None, -1
        self.pending = reason != STOP_EOS and bool(tokens)
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
        text = self.text(tokens) if self.text is not None else "".join(pieces)
        return TurnResult(text, tokens, reason, stats)
