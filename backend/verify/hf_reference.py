"""The Hugging Face side of every comparison: the model, its tokenizer and its inputs.

What differs per family (the placeholder expansion, the runtime's arrays under HF's names)
is in the family's reference.py, reached through `Family.reference`. Each function takes a
`Checkpoint` read once; a folder is read on the spot, for callers that have only that.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.errors import MmforgeError
from mmforge.backend.families import Reference, ReferenceInputs, ReferenceRequest, RuntimeArrays
from mmforge.backend.families import image_processor as family_image_processor

__all__ = [
    "ReferenceInputs",
    "from_runtime",
    "greedy_generate",
    "image_processor",
    "load_model",
    "load_tokenizer",
    "messages_for",
    "prepare",
    "template_messages",
    "template_prompt",
]


def _checkpoint(source: Checkpoint | Path) -> Checkpoint:
    return source if isinstance(source, Checkpoint) else Checkpoint.read(Path(source))


def _reference(checkpoint: Checkpoint) -> Reference:
    family = checkpoint.family
    if family.reference is None:
        raise MmforgeError(
            f"No HF reference inputs for {family.name} yet",
            "Parity checks are not available for this family yet",
        )
    return family.reference


def load_model(source: Checkpoint | Path) -> Any:
    """Load the HF model of a checkpoint in float32, eval mode, safetensors only."""
    checkpoint = _checkpoint(source)
    family = checkpoint.family
    if family.reference is not None:
        with family.reference.model_context():
            return _load_model(checkpoint)
    return _load_model(checkpoint)


def _load_model(checkpoint: Checkpoint) -> Any:
    import transformers

    family = checkpoint.family
    if family.reference is not None and family.reference.load is not None:
        return family.reference.load(checkpoint)
    if family.profile.hf_class is None:
        raise MmforgeError(
            f"{family.name} has no transformers class to compare against",
            "Parity checks need a family that transformers implements natively",
        )
    if checkpoint.tensors is None:  # (checks every header: a corrupt file is named)
        raise MmforgeError(
            f"{checkpoint.folder} has no safetensors weights to compare against",
            "Pass the checkpoint folder the package was converted from",
        )
    cls = getattr(transformers, family.profile.hf_class)
    transformers.utils.logging.disable_progress_bar()  # progress is ours to report
    # Its advice (Qwen3.5's "falling back to its reference PyTorch implementation ...
    # install causal_conv1d") is about training speed, not about this comparison: errors only.
    transformers.utils.logging.set_verbosity_error()
    try:
        if checkpoint.remote_layout:
            model = _from_remote_layout(cls, checkpoint)
        else:
            model, info = cls.from_pretrained(
                checkpoint.folder,
                config=checkpoint.transformers_config(),
                dtype="float32",
                use_safetensors=True,
                output_loading_info=True,
            )
            _all_loaded(info.get("missing_keys") or [], checkpoint)
    except MmforgeError:
        raise
    except Exception as e:  # noqa: BLE001 - weights transformers refuses are the input's fault
        reason = " ".join(f"{type(e).__name__}: {e}".split())
        raise MmforgeError(
            f"transformers cannot load the reference weights in {checkpoint.folder} "
            f"({reason[:300]})",
            "Pass the checkpoint the package was converted from; download it again if it is "
            "damaged",
            details=reason,
        ) from None
    reference = family.reference
    if reference is not None and reference.adapt is not None:
        reference.adapt(model, checkpoint)
    return model.eval()


def _all_loaded(missing: list[str], checkpoint: Checkpoint) -> None:
    """Refuse a reference transformers had to fill with random values.

    A weight the checkpoint lacks (other than a tied output layer) would be initialised at
    random, and every comparison after it would compare against noise.
    """
    missing = [m for m in missing if not (m.endswith("lm_head.weight") and checkpoint.output_tied)]
    if missing:
        raise MmforgeError(
            f"transformers found no value for {len(missing)} weight(s) of the reference "
            f"model in {checkpoint.folder} (first: {missing[0]})",
            "Pass the checkpoint the package was converted from; it may be incomplete",
        )


def _from_remote_layout(cls: Any, checkpoint: Checkpoint) -> Any:
    """The native model with a remote-code layout's weights under their native names."""
    import torch

    from mmforge.backend.tensors import checkpoint_refs

    layout = checkpoint.family.recognition.remote_layout
    assert layout is not None
    from transformers.initialization import no_init_weights

    with no_init_weights():  # every weight is overwritten below; buffers are computed
        model = cls(checkpoint.transformers_config()).float()
    params = model.state_dict(keep_vars=True)  # parameters and persistent buffers
    loaded: set[str] = set()
    with torch.no_grad():
        for name, ref in checkpoint_refs(checkpoint.folder).items():
            native = layout.tensor_name(name)
            if native is None:
                continue
            if native not in params or tuple(params[native].shape) != tuple(ref.shape):
                raise MmforgeError(
                    f"{name} of {checkpoint.folder} has no place in transformers' native "
                    f"model (as {native})",
                    "This layout is not one mmforge can map; report the model id",
                )
            params[native].copy_(ref.read())  # one tensor at a time
            loaded.add(native)
    if checkpoint.output_tied:
        model.tie_weights()
    shared = {id(t) for n, t in params.items() if n in loaded}  # a tied output layer
    _all_loaded(
        [n for n, t in params.items() if n not in loaded and id(t) not in shared], checkpoint
    )
    return model


def load_tokenizer(source: Checkpoint | Path) -> Any:
    """The checkpoint's tokenizer (fast, from tokenizer.json).

    Given the config, so that transformers does not read config.json again to pick the
    class (it still does for vocabularies over 100k, to look for a Mistral tokenizer).
    """
    from transformers import AutoTokenizer

    checkpoint = _checkpoint(source)
    if checkpoint.hf_config is None:
        return AutoTokenizer.from_pretrained(checkpoint.folder)
    return AutoTokenizer.from_pretrained(checkpoint.folder, config=checkpoint.hf_config)


def image_processor(source: Checkpoint | Path) -> Any:
    """The checkpoint's HF image processor (the PIL implementation without torchvision)."""
    return family_image_processor(_checkpoint(source))


def messages_for(text: str, n_images: int = 0, n_audios: int = 0) -> list[dict[str, Any]]:
    """One user message with the attachments first, then the text."""
    parts: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_images)]
    parts += [{"type": "audio"} for _ in range(n_audios)]
    parts.append({"type": "text", "text": text})
    return [{"role": "user", "content": parts}]


def template_messages(
    source: Checkpoint | Path, messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`messages` in the content form the checkpoint's chat template takes.

    A released template may take text only (Phi-4-multimodal's): the attachments are
    then written into the text with the family's placeholders (content_form.py).
    """
    from mmforge.backend.content_form import conform
    from mmforge.backend.templates import check_folder_template

    checkpoint = _checkpoint(source)
    family = checkpoint.family
    form = check_folder_template(checkpoint.folder)
    return conform(messages, form, family.profile.text_placeholder, family.name)


def prepare(
    source: Checkpoint | Path,
    messages: list[dict[str, Any]],
    images: Sequence[Any] = (),
    audios: Sequence[Any] = (),
    tokenizer: Any = None,
) -> ReferenceInputs:
    """Build HF model inputs for a conversation with attachments.

    Args:
        source: The checkpoint (or its folder).
        messages: Chat messages; image/audio parts in the order of `images`/`audios`.
        images: PIL images.
        audios: Clip files (loaded as transformers' `load_audio` loads them) or
            (samples, sample_rate) pairs.
        tokenizer: The checkpoint's tokenizer, when the caller has it loaded already.
    """
    checkpoint = _checkpoint(source)
    reference = _reference(checkpoint)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(checkpoint)
    prompt = template_prompt(checkpoint, messages, tokenizer)
    request = ReferenceRequest(
        checkpoint, tokenizer, prompt or "", list(images), list(audios), list(messages)
    )
    if prompt is not None:
        return reference.prepare(request)
    # No chat template: transformers' own processor writes the prompt, where it does.
    if reference.untemplated is None:
        raise MmforgeError(
            f"{checkpoint.folder} has no chat template to write the reference prompt with",
            "Pass the checkpoint the package was converted from, with its tokenizer files",
        )
    return reference.untemplated(request)


def template_prompt(
    source: Checkpoint | Path, messages: list[dict[str, Any]], tokenizer: Any
) -> str | None:
    """The checkpoint's chat template applied to `messages` (None: it ships none)."""
    from mmforge.backend.templates import template_of

    checkpoint = _checkpoint(source)
    if template_of(checkpoint.folder) is None:
        return None
    conformed = template_messages(checkpoint, messages)
    return str(tokenizer.apply_chat_template(conformed, add_generation_prompt=True, tokenize=False))


def from_runtime(source: Checkpoint | Path, prompt: str, arrays: dict[str, Any]) -> ReferenceInputs:
    """HF inputs holding exactly the runtime processor's token ids and pixel values.

    End-to-end parity feeds both sides the same ids and pixels, so a token mismatch means
    the models differ, not the preprocessing (which parity compares on its own).
    """
    import torch

    checkpoint = _checkpoint(source)
    reference = _reference(checkpoint)
    ids = torch.from_numpy(arrays["input_ids"].astype("int64")).reshape(1, -1)
    result = ReferenceInputs(
        prompt=prompt,
        input_ids=[int(t) for t in ids[0]],
        tensors={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
    )
    reference.from_runtime(RuntimeArrays(checkpoint.cfg, arrays, result))
    return result


def greedy_generate(model: Any, inputs: ReferenceInputs, max_new_tokens: int) -> list[int]:
    """HF greedy generation; returns only the new token ids."""
    import torch

    with torch.no_grad():
        out = model.generate(
            **inputs.tensors, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1
        )
    return [int(t) for t in out[0, len(inputs.input_ids) :]]
