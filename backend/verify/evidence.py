"""Verify's evidence: what the runtime produced and what HF produced, gathered once.

Each side runs once and is released before the other loads, so the peak is about one
copy of the model plus the captured activations. The stages then only compare these
frozen values with the package's graphs (stages.py).
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families import ReferenceInputs
from mmforge.backend.jobs import JobContext
from mmforge.backend.verify import hf_reference

PROMPT = "Describe this."
TEXT_PROMPT = "Hello there, how are you?"
# Decode steps the decoder stage runs through its cache after the prefill.
DECODER_STEPS = 4


@dataclass(frozen=True)
class RuntimeEvidence:
    """What ONNX Runtime GenAI made of the verification prompt.

    Attributes:
        prompt: The package's chat template applied to the messages.
        processor_error: Why the runtime's processor refused the prompt (then nothing
            else is set).
        ids: The processor's token ids.
        arrays: The processor's arrays (pixels, sizes, audio features, ...).
        tokens: The runtime's greedy tokens.
        generation_error: Why generation failed, when it did (the stages still run).
        text_ids: The ids of a prompt without attachments.
    """

    prompt: str
    processor_error: str | None = None
    ids: list[int] = field(default_factory=list)
    arrays: dict[str, Any] = field(default_factory=dict)
    tokens: list[int] = field(default_factory=list)
    generation_error: str | None = None
    text_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Forward:
    """One HF forward pass, as the stages need it (numpy arrays).

    Attributes:
        logits: [S, vocab].
        hidden: The decoder's input embeddings, [1, S, H].
        position_ids: The positions HF used (3-D for Qwen), when it made them.
        deepstack: Qwen3-VL's DeepStack features, one array per level.
        per_layer: Gemma 4's per-layer inputs, [1, S, layers, size].
    """

    logits: Any
    hidden: Any
    position_ids: Any | None
    deepstack: list[Any]
    per_layer: Any | None


@dataclass(frozen=True)
class ReferenceEvidence:
    """What the HF model made of the same prompt.

    Attributes:
        inputs: HF's own preprocessing of the prompt and files.
        images: The images as PIL, as HF saw them.
        error: Why HF could not run on the runtime's processor output (then only
            `inputs` and `images` are set).
        main: The forward pass on the runtime's ids and pixels.
        step: The forward pass longer by `step_tokens` (HF's greedy continuation).
        text: The forward pass on the prompt without attachments.
        step_tokens: The tokens the decoder steps through its cache, one at a time: HF's
            first greedy tokens (several, since a recurrent-state error grows with each
            step and one step can hide it), up to any placeholder token.
        tokens: HF's greedy tokens from the runtime's ids and pixels.
        near_tie: Where the two sides' tokens first differ: (step, HF's logit for its
            token, HF's logit for the runtime's token).
        generated_placeholder: (step, token id) of an image or audio placeholder token the
            model generated before the two sides' tokens differ (random weights do).
        read_ids: The runtime's ids as the reference reads them (the family's
            `from_runtime`: Idefics2's split pictures hold fake ids where the runtime's
            hold image ids); empty: the runtime's own.
    """

    inputs: ReferenceInputs
    images: list[Any]
    error: str | None = None
    main: Forward | None = None
    step: Forward | None = None
    text: Forward | None = None
    step_tokens: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    near_tie: tuple[int, float, float] | None = None
    generated_placeholder: tuple[int, int] | None = None
    read_ids: list[int] = field(default_factory=list)

    def ids(self, runtime: RuntimeEvidence) -> list[int]:
        """The prompt's ids as HF's forward passes read them."""
        return self.read_ids or runtime.ids


def gather_runtime(
    package: Path,
    messages: list[dict[str, Any]],
    images: list[Path],
    audios: list[Path],
    n_tokens: int,
    ctx: JobContext,
) -> RuntimeEvidence:
    """Run the package in ONNX Runtime GenAI: its processor, N greedy tokens, a text prompt.

    Raises:
        MmforgeError: The runtime cannot load the package or fails outright.
    """
    from mmforge.backend.runtime import Runtime

    try:
        rt = Runtime(package)
    except RuntimeError as e:
        raise MmforgeError(
            f"ONNX Runtime GenAI could not load {package}",
            "Convert the model again",
            details=str(e),
        ) from None
    try:
        prompt = rt.prompt(messages)
        try:
            inputs = rt.process(prompt, images, audios)
        except RuntimeError as e:
            return RuntimeEvidence(prompt=prompt, processor_error=str(e))
        arrays = {k: v.copy() for k, v in inputs.arrays.items()}
        tokens: list[int] = []
        generation_error = None
        try:
            tokens = rt.greedy(inputs, n_tokens)
        except RuntimeError as e:  # the stages can still run on the processor output
            generation_error = str(e)
        text = rt.process(rt.prompt([{"role": "user", "content": TEXT_PROMPT}]))
    except RuntimeError as e:
        raise MmforgeError(
            "ONNX Runtime GenAI failed on the verification prompt",
            "The package is broken; convert it again",
            details=str(e),
        ) from None
    finally:
        del rt
        gc.collect()
    ctx.check_cancel()
    return RuntimeEvidence(
        prompt=prompt,
        ids=list(inputs.input_ids),
        arrays=arrays,
        tokens=tokens,
        generation_error=generation_error,
        text_ids=list(text.input_ids),
    )


def gather_reference(
    checkpoint: Checkpoint,
    runtime: RuntimeEvidence,
    messages: list[dict[str, Any]],
    files: tuple[list[Path], list[Path]],
    tokenizer: Any,
    n_tokens: int,
    ctx: JobContext,
    adjust: Callable[[Any], None] | None = None,
) -> ReferenceEvidence:
    """Run the HF model on the runtime's ids and pixels (and its own preprocessing).

    Args:
        checkpoint: The reference checkpoint.
        runtime: The runtime's evidence (its ids and arrays are fed to HF).
        messages: The verification messages.
        files: The images and the audio clips.
        tokenizer: The checkpoint's tokenizer.
        n_tokens: Greedy tokens to generate.
        ctx: Cancel.
        adjust: Changes the loaded model before it runs (an int4 package's rounded
            weights written into it).
    """
    from mmforge.backend.pictures import load

    images, audios = files
    model = hf_reference.load_model(checkpoint)
    if adjust is not None:
        adjust(model)
    pil = [load(p) for p in images]  # as transformers' load_image: EXIF applied, RGB
    # The clips as transformers loads them (families/_reference.load_clip).
    own = hf_reference.prepare(checkpoint, messages, pil, list(audios), tokenizer=tokenizer)
    capture = _Capture(model)
    try:
        try:
            ref = hf_reference.from_runtime(checkpoint, runtime.prompt, runtime.arrays)
            main = _forward(model, capture, ref.tensors)
        except (RuntimeError, ValueError, IndexError) as e:
            # The runtime's processor output is not even self-consistent (e.g. image
            # sizes that do not match the pixels): nothing later can be compared.
            return ReferenceEvidence(inputs=own, images=pil, error=f"{type(e).__name__}: {e}")
        text = _text_forward(model, capture, runtime.text_ids)
        ctx.check_cancel()
        tokens = hf_reference.greedy_generate(model, ref, max(n_tokens, DECODER_STEPS))
        step_tokens = _step_tokens(checkpoint, tokens) or [_plain_top(checkpoint, main.logits[-1])]
        step = _forward(model, capture, longer(checkpoint, runtime, step_tokens).tensors)
        tokens = tokens[:n_tokens]
        placeholder = _generated_placeholder(checkpoint, runtime, tokens)
        near_tie = None if placeholder else _near_tie(model, capture, checkpoint, runtime, tokens)
    finally:
        capture.close()
        del model
        gc.collect()
    ctx.check_cancel()
    return ReferenceEvidence(
        inputs=own,
        images=pil,
        main=main,
        step=step,
        text=text,
        step_tokens=step_tokens,
        tokens=tokens,
        near_tie=near_tie,
        generated_placeholder=placeholder,
        read_ids=list(ref.input_ids),
    )


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (None when they are equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _step_tokens(checkpoint: Checkpoint, tokens: list[int]) -> list[int]:
    """HF's first DECODER_STEPS greedy tokens, cut before any image or audio placeholder."""
    return until_placeholder(checkpoint, tokens[:DECODER_STEPS])


def _plain_top(checkpoint: Checkpoint, logits: Any) -> int:
    """The most likely token that is not an image, audio or video placeholder.

    For the decoder-step check where HF's first greedy token is a placeholder (random
    weights generate them): fed back, a placeholder without features makes HF raise.
    """
    import numpy as np

    scores = np.array(logits, dtype=np.float64, copy=True)
    for token in _placeholders(checkpoint):
        if 0 <= token < scores.shape[-1]:
            scores[token] = -np.inf
    return int(np.argmax(scores))


def _placeholders(checkpoint: Checkpoint) -> set[int]:
    return {
        v
        for name, v in checkpoint.family.profile.token_ids(checkpoint.cfg).items()
        if name in ("image_token_id", "audio_token_id", "video_token_id")
    }


def until_placeholder(checkpoint: Checkpoint, tokens: list[int]) -> list[int]:
    """The tokens before the first image, audio or video placeholder among them.

    A generated placeholder has no features behind it, and HF fed one raises (random
    weights generate them).
    """
    placeholders = _placeholders(checkpoint)
    out: list[int] = []
    for token in tokens:
        if token in placeholders:
            break
        out.append(token)
    return out


def longer(checkpoint: Checkpoint, runtime: RuntimeEvidence, extra: list[int]) -> ReferenceInputs:
    """HF inputs for the runtime's prompt followed by `extra` tokens."""
    import numpy as np

    arrays = dict(runtime.arrays)
    arrays["input_ids"] = np.asarray([[*runtime.ids, *extra]], dtype=np.int64)
    # Where the prompt ends: a prefix-LM (PaliGemma) lets the prompt attend both ways and
    # the tokens after it causally.
    arrays["prompt_length"] = np.asarray(len(runtime.ids), dtype=np.int64)
    return hf_reference.from_runtime(checkpoint, runtime.prompt, arrays)


def _text_forward(model: Any, capture: _Capture, ids: list[int]) -> Forward:
    import torch

    tensor = torch.tensor([ids])
    return _forward(
        model, capture, {"input_ids": tensor, "attention_mask": torch.ones_like(tensor)}
    )


def _generated_placeholder(
    checkpoint: Checkpoint, runtime: RuntimeEvidence, hf_tokens: list[int]
) -> tuple[int, int] | None:
    """The first image/audio placeholder both sides generated before their tokens differ.

    A generated placeholder has no features behind it: HF looks for features it does not
    have (fed back, it raises), the runtime embeds the bare token, and from there the two
    continue differently whatever the graphs compute.
    """
    k = first_difference(hf_tokens, runtime.tokens)
    if k is None:
        return None
    placeholders = _placeholders(checkpoint)
    return next(((i, t) for i, t in enumerate(hf_tokens[:k]) if t in placeholders), None)


def _near_tie(
    model: Any,
    capture: _Capture,
    checkpoint: Checkpoint,
    runtime: RuntimeEvidence,
    hf_tokens: list[int],
) -> tuple[int, float, float] | None:
    """HF's logits for both tokens where the two sides first pick differently."""
    k = first_difference(hf_tokens, runtime.tokens)
    if k is None or k >= len(runtime.tokens) or k >= len(hf_tokens):
        return None
    prefix = longer(checkpoint, runtime, hf_tokens[:k])
    row = _forward(model, capture, prefix.tensors).logits[-1]
    return k, float(row[hf_tokens[k]]), float(row[runtime.tokens[k]])


class _Capture:
    """Hooks on the HF text model: its merged input embeddings, position ids and extras."""

    def __init__(self, model: Any):
        text = next(
            (
                m
                for _, m in model.named_modules()
                if hasattr(m, "embed_tokens") and hasattr(m, "layers")
            ),
            None,
        )
        if text is None:
            raise MmforgeError(
                "Cannot find the text model inside the reference", "Please report the model id"
            )
        self.kwargs: dict[str, Any] = {}
        self.hidden: Any = None
        self.per_layer: list[Any] = []
        self._handles = [
            text.register_forward_pre_hook(self._on_text, with_kwargs=True),
            text.layers[0].register_forward_pre_hook(self._on_layer0, with_kwargs=True),
        ]
        self._handles += [
            layer.register_forward_pre_hook(self._on_layer, with_kwargs=True)
            for layer in text.layers
        ]
        # Where a layer takes its per-layer input positionally (Gemma 4: second, Gemma 3n:
        # third, after its position embeddings).
        params = list(inspect.signature(text.layers[0].forward).parameters)
        self._per_layer_at = params.index("per_layer_input") if "per_layer_input" in params else 1

    def _on_text(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        self.kwargs = dict(kwargs)
        self.per_layer = []

    def _on_layer0(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        if hidden.ndim == 4:  # AltUp's streams (Gemma 3n), [A, B, S, H]: the first is the input
            hidden = hidden[0]
        self.hidden = hidden.detach().float().numpy().copy()

    def _on_layer(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        # Gemma 4 and Gemma 3n hand each layer its slice of the (projected) per-layer inputs.
        at = self._per_layer_at
        value = kwargs.get("per_layer_input", args[at] if len(args) > at else None)
        if value is not None and hasattr(value, "detach"):
            self.per_layer.append(value.detach().float().numpy())

    def close(self) -> None:
        for h in self._handles:
            h.remove()


def _forward(model: Any, capture: _Capture, tensors: dict[str, Any]) -> Forward:
    import numpy as np
    import torch

    with torch.no_grad():
        out = model(**tensors)
    kw = capture.kwargs
    pos = kw.get("position_ids")
    deepstack = [d.detach().float().numpy() for d in (kw.get("deepstack_visual_embeds") or [])]
    per_layer = None
    if capture.per_layer:  # [1, S, layers, size], as the decoder graph takes it
        per_layer = np.stack(capture.per_layer, axis=2)
    return Forward(
        logits=out.logits[0].float().numpy(),
        hidden=capture.hidden,
        position_ids=None if pos is None else pos.detach().numpy(),
        deepstack=deepstack,
        per_layer=per_layer,
    )
