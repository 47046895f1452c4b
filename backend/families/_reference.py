"""The Hugging Face side of verify, shared by the families: model inputs and their helpers.

Each family's reference.py builds HF inputs from the checkpoint's own tokenizer, chat
template and processors. The placeholder expansion (one image token per feature) is
written out per family, because several transformers processors cannot be constructed
without torchvision, which cannot be installed beside the pinned CPU torch. Each
expansion follows the family's HF processor exactly; tests compare the result with the
model's own feature count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg

if TYPE_CHECKING:
    from mmforge.backend.checkpoint import Checkpoint


@dataclass
class ReferenceInputs:
    """Model inputs for the HF reference.

    Attributes:
        prompt: The chat-template text before placeholder expansion.
        input_ids: Token ids after expansion.
        tensors: Keyword arguments for the HF model (torch tensors).
    """

    prompt: str
    input_ids: list[int]
    tensors: dict[str, Any] = field(default_factory=dict)


def image_processor(checkpoint: Checkpoint) -> Any:
    """The checkpoint's HF image processor (the PIL implementation without torchvision).

    Named by its settings file, so transformers does not open config.json again (it
    would, to look for a timm checkpoint). An approximation the user accepted sets its
    overrides over the file's settings, as the package was built for them.
    """
    from transformers import AutoImageProcessor

    name = (
        "preprocessor_config.json"
        if (checkpoint.folder / "preprocessor_config.json").is_file()
        else "processor_config.json"
    )
    return AutoImageProcessor.from_pretrained(
        checkpoint.folder, image_processor_filename=name, **checkpoint.image_processor_overrides
    )


# The clip as transformers loads it from a file: `load_audio` with its soundfile backend
# (soundfile, channel mean, soxr "HQ"). It is the backend transformers picks when
# torchcodec is not installed (mmforge installs none), and the one chat's intake
# reproduces sample for sample (mmforge.backend.audio); torchcodec would resample with
# FFmpeg instead. Pinned, so an installed torchcodec cannot change what verify compares.
AUDIO_BACKEND = "soundfile"


def load_clip(path: Path, sampling_rate: int) -> Any:
    """A clip file's samples at `sampling_rate`, as transformers' `load_audio` gives them."""
    from transformers.audio_utils import load_audio

    return load_audio(str(path), sampling_rate=sampling_rate, backend=AUDIO_BACKEND)


def audio_features(checkpoint: Checkpoint, audios: list[Any]) -> Any:
    """Run the checkpoint's HF audio feature extractor on clips.

    Args:
        checkpoint: The reference checkpoint.
        audios: Clip files, each loaded as a transformers user loads it (`load_clip`, at
            the extractor's rate), or (samples, rate) pairs at the extractor's rate.

    Raises:
        MmforgeError: No feature extractor is named, or samples come at another rate.
    """
    import transformers

    settings = dict(checkpoint.audio_preprocessor.data)
    reference = checkpoint.family.reference
    # A checkpoint without processor_config.json: transformers builds the family's feature
    # extractor with its defaults, and so does the conversion's audio processor JSON.
    default = reference.audio_extractor if reference is not None else None
    name = settings.pop("feature_extractor_type", default)
    if name is None:
        raise MmforgeError(
            f"{checkpoint.folder} names no audio feature extractor",
            "Add processor_config.json (its feature_extractor) from the model's release",
        )
    extractor = getattr(transformers, name)(**settings)
    rate = extractor.sampling_rate
    clips = [(load_clip(a, rate), rate) if isinstance(a, Path) else a for a in audios]
    for _, sr in clips:
        if sr != rate:
            raise MmforgeError(
                f"Audio must be {rate} Hz for this model, got {sr} Hz",
                f"Resample the clip to {rate} Hz",
            )
    return extractor([a for a, _ in clips], sampling_rate=rate, return_tensors="pt")


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text`, without special tokens added."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def finish(tokenizer: Any, prompt: str, expanded: str, tensors: dict[str, Any]) -> ReferenceInputs:
    """The inputs for an expanded prompt: its ids, an all-ones mask and `tensors`."""
    import torch

    ids = encode(tokenizer, expanded)
    tensors["input_ids"] = torch.tensor([ids])
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ReferenceInputs(prompt=prompt, input_ids=ids, tensors=tensors)


def replace_each(text: str, placeholder: str, replacements: list[str]) -> str:
    """Replace the k-th `placeholder` in `text` by replacements[k] (HF processor style)."""
    pieces = text.split(placeholder)
    if len(pieces) - 1 != len(replacements):
        raise MmforgeError(
            f"The prompt has {len(pieces) - 1} placeholders {placeholder} for "
            f"{len(replacements)} attachments",
            "Give one attachment per placeholder in the messages",
        )
    out = pieces[0]
    for rep, rest in zip(replacements, pieces[1:], strict=True):
        out += rep + rest
    return out


def token_types(result: ReferenceInputs, cfg: Cfg) -> Any:
    """HF's mm_token_type_ids: 0 text, 1 image, 2 video, 3 audio."""
    ids = result.tensors["input_ids"]
    types = ids.new_zeros(ids.shape)
    for key, kind in (("image_token_id", 1), ("video_token_id", 2), ("audio_token_id", 3)):
        token = cfg.get(key)
        if isinstance(token, int):
            types[ids == token] = kind
    return types
