"""The Hugging Face side of every comparison: load the model and build its inputs.

Inputs are built from the checkpoint's own tokenizer, chat template and image processor.
The placeholder expansion (one image token per feature) is written out per family here,
because several transformers processors cannot be constructed without torchvision, which
cannot be installed beside the pinned CPU torch. Each expansion follows the family's HF
processor exactly; tests compare the result with the model's own feature count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend import families
from mmforge.backend.errors import MmforgeError
from mmforge.backend.source import read_json

log = logging.getLogger(__name__)


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


def load_model(folder: Path) -> Any:
    """Load the HF model of a checkpoint in float32, eval mode, safetensors only."""
    import transformers

    family = families.lookup(read_json(folder / "config.json", "model").get("model_type"))
    if family.hf_class is None:
        raise MmforgeError(
            f"{family.name} has no transformers class to compare against",
            "Parity checks need a family that transformers implements natively",
        )
    cls = getattr(transformers, family.hf_class)
    transformers.utils.logging.disable_progress_bar()  # progress is ours to report
    return cls.from_pretrained(folder, dtype="float32", use_safetensors=True).eval()


def load_tokenizer(folder: Path) -> Any:
    """The checkpoint's tokenizer (fast, from tokenizer.json)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def messages_for(text: str, n_images: int = 0, n_audios: int = 0) -> list[dict[str, Any]]:
    """One user message with the attachments first, then the text."""
    parts: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_images)]
    parts += [{"type": "audio"} for _ in range(n_audios)]
    parts.append({"type": "text", "text": text})
    return [{"role": "user", "content": parts}]


def prepare(
    folder: Path,
    messages: list[dict[str, Any]],
    images: Sequence[Any] = (),
    audios: Sequence[Any] = (),
) -> ReferenceInputs:
    """Build HF model inputs for a conversation with attachments.

    Args:
        folder: The checkpoint folder.
        messages: Chat messages; image/audio parts in the order of `images`/`audios`.
        images: PIL images.
        audios: (samples, sample_rate) pairs.
    """
    config = read_json(folder / "config.json", "model")
    family = families.lookup(config.get("model_type"))
    prep = _PREPARERS.get(family.key)
    if prep is None:
        raise MmforgeError(
            f"No HF reference inputs for {family.name} yet",
            "Parity checks are not available for this family yet",
        )
    tokenizer = load_tokenizer(folder)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return prep(folder, families.Cfg(config), tokenizer, prompt, list(images), list(audios))


def image_processor(folder: Path) -> Any:
    """The checkpoint's HF image processor (the PIL implementation without torchvision)."""
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(folder)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _finish(tokenizer: Any, prompt: str, expanded: str, tensors: dict[str, Any]) -> ReferenceInputs:
    import torch

    ids = _encode(tokenizer, expanded)
    tensors["input_ids"] = torch.tensor([ids])
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ReferenceInputs(prompt=prompt, input_ids=ids, tensors=tensors)


def _replace_each(text: str, placeholder: str, replacements: list[str]) -> str:
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


def _qwen(
    folder: Path,
    cfg: families.Cfg,
    tokenizer: Any,
    prompt: str,
    images: list[Any],
    audios: list[Any],
) -> ReferenceInputs:
    pad = "<|image_pad|>"
    tensors: dict[str, Any] = {}
    counts: list[int] = []
    if images:
        out = image_processor(folder)(images=images, return_tensors="pt")
        merge = int(cfg.get("vision_config.spatial_merge_size", 2))
        counts = [int(g.prod()) // (merge * merge) for g in out["image_grid_thw"]]
        tensors = {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
    expanded = _replace_each(prompt, pad, [pad * n for n in counts])
    result = _finish(tokenizer, prompt, expanded, tensors)
    # transformers 5 builds 3-D M-RoPE positions only when mm_token_type_ids marks the
    # image tokens (its processor returns it); without it HF silently uses 1-D positions.
    result.tensors["mm_token_type_ids"] = _token_types(result, cfg)
    return result


def _token_types(result: ReferenceInputs, cfg: families.Cfg) -> Any:
    """HF's mm_token_type_ids: 0 text, 1 image, 2 video, 3 audio."""
    ids = result.tensors["input_ids"]
    types = ids.new_zeros(ids.shape)
    for key, kind in (("image_token_id", 1), ("video_token_id", 2), ("audio_token_id", 3)):
        token = cfg.get(key)
        if isinstance(token, int):
            types[ids == token] = kind
    return types


def _gemma3(
    folder: Path,
    cfg: families.Cfg,
    tokenizer: Any,
    prompt: str,
    images: list[Any],
    audios: list[Any],
) -> ReferenceInputs:
    boi, eoi, soft = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
    tensors: dict[str, Any] = {}
    if images:
        out = image_processor(folder)(images=images, return_tensors="pt")
        tensors["pixel_values"] = out["pixel_values"]
    per_image = int(cfg.get("mm_tokens_per_image", 256))
    full = f"\n\n{boi}{soft * per_image}{eoi}\n\n"
    expanded = _replace_each(prompt, boi, [full] * len(images))
    result = _finish(tokenizer, prompt, expanded, tensors)
    # token_type_ids mark image tokens: HF Gemma 3 lets them attend bidirectionally.
    image_id = int(cfg.get("image_token_index"))
    result.tensors["token_type_ids"] = (result.tensors["input_ids"] == image_id).long()
    return result


def _mistral3(
    folder: Path,
    cfg: families.Cfg,
    tokenizer: Any,
    prompt: str,
    images: list[Any],
    audios: list[Any],
) -> ReferenceInputs:
    tensors: dict[str, Any] = {}
    reps: list[str] = []
    if images:
        block = int(cfg.get("vision_config.patch_size", 14)) * int(cfg.get("spatial_merge_size", 2))
        out = image_processor(folder)(
            images=images, patch_size={"height": block, "width": block}, return_tensors="pt"
        )
        tensors = {"pixel_values": out["pixel_values"], "image_sizes": out["image_sizes"]}
        for height, width in out["image_sizes"].tolist():
            rows = ["[IMG]" * (width // block) + "[IMG_BREAK]"] * (height // block)
            reps.append("".join(rows)[: -len("[IMG_BREAK]")] + "[IMG_END]")
    expanded = _replace_each(prompt, "[IMG]", reps)
    return _finish(tokenizer, prompt, expanded, tensors)


def _audio_features(folder: Path, audios: list[Any]) -> Any:
    """Run the checkpoint's HF audio feature extractor on (samples, rate) pairs."""
    import transformers

    settings = dict(read_json(folder / "processor_config.json", "model")["feature_extractor"])
    cls = getattr(transformers, settings.pop("feature_extractor_type"))
    extractor = cls(**settings)
    rate = extractor.sampling_rate
    for _, sr in audios:
        if sr != rate:
            raise MmforgeError(
                f"Audio must be {rate} Hz for this model, got {sr} Hz",
                f"Resample the clip to {rate} Hz",
            )
    return extractor([a for a, _ in audios], sampling_rate=rate, return_tensors="pt")


def _gemma4(
    folder: Path,
    cfg: families.Cfg,
    tokenizer: Any,
    prompt: str,
    images: list[Any],
    audios: list[Any],
) -> ReferenceInputs:
    tensors: dict[str, Any] = {}
    image_reps: list[str] = []
    audio_reps: list[str] = []
    if images:
        out = image_processor(folder)(images=images, return_tensors="pt")
        tensors["pixel_values"] = out["pixel_values"]
        tensors["image_position_ids"] = out["image_position_ids"]
        image_reps = [
            f"<|image>{'<|image|>' * int(n)}<image|>" for n in out["num_soft_tokens_per_image"]
        ]
    if audios:
        feats = _audio_features(folder, audios)
        tensors["input_features"] = feats["input_features"]
        tensors["input_features_mask"] = feats["input_features_mask"]
        for mask in feats["input_features_mask"]:
            # Two stride-2 convolutions shorten the frames, as in the HF processor.
            m = mask
            for _ in range(2):
                keep = (len(m) + 2 - 3) // 2 + 1
                m = m[::2][:keep]
            audio_reps.append(f"<|audio>{'<|audio|>' * int(m.sum())}<audio|>")
    expanded = _replace_each(prompt, "<|image|>", image_reps)
    expanded = _replace_each(expanded, "<|audio|>", audio_reps)
    result = _finish(tokenizer, prompt, expanded, tensors)
    result.tensors["mm_token_type_ids"] = _token_types(result, cfg)
    return result


def _phi4mm(
    folder: Path,
    cfg: families.Cfg,
    tokenizer: Any,
    prompt: str,
    images: list[Any],
    audios: list[Any],
) -> ReferenceInputs:
    import re

    from mmforge.backend.hf_preprocess import phi4mm_images

    tensors: dict[str, Any] = {}
    image_reps: list[str] = []
    audio_reps: list[str] = []
    image_token = tokenizer.convert_ids_to_tokens(int(cfg.get("vision_config.image_token_id")))
    audio_token = tokenizer.convert_ids_to_tokens(int(cfg.get("audio_config.audio_token_id")))
    if images:
        out = phi4mm_images(images, read_json(folder / "preprocessor_config.json", "model"))
        image_reps = [image_token * n for n in out.pop("num_img_tokens")]
        tensors.update(out)
    if audios:
        feats = _audio_features(folder, audios)
        audio_reps = [audio_token * int(n) for n in feats["audio_embed_sizes"]]
        tensors["audio_input_features"] = feats["audio_input_features"]
        tensors["audio_embed_sizes"] = feats["audio_embed_sizes"]
        if "audio_attention_mask" in feats:
            tensors["audio_attention_mask"] = feats["audio_attention_mask"]
    # The prompt numbers attachments (<|image_1|>, ...); each stands for one expansion.
    expanded = re.sub(r"<\|image_\d+\|>", "<|image|>", prompt)
    expanded = re.sub(r"<\|audio_\d+\|>", "<|audio|>", expanded)
    expanded = _replace_each(expanded, "<|image|>", image_reps)
    expanded = _replace_each(expanded, "<|audio|>", audio_reps)
    return _finish(tokenizer, prompt, expanded, tensors)


def _lfm2_vl(
    folder: Path,
    cfg: families.Cfg,
    tokenizer: Any,
    prompt: str,
    images: list[Any],
    audios: list[Any],
) -> ReferenceInputs:
    from mmforge.backend.hf_preprocess import lfm2_vl_images

    tensors: dict[str, Any] = {}
    reps: list[str] = []
    if images:
        try:
            out = lfm2_vl_images(images, read_json(folder / "preprocessor_config.json", "model"))
        except ValueError as e:
            raise MmforgeError(
                str(e), "The runtime never tiles, so such images differ from HF by design"
            ) from None
        reps = [f"<|image_start|>{'<image>' * n}<|image_end|>" for n in out.pop("num_tokens")]
        tensors.update(out)
    expanded = _replace_each(prompt, "<image>", reps)
    return _finish(tokenizer, prompt, expanded, tensors)


# folder, config, tokenizer, templated prompt, images, audios -> the model's inputs
_Preparer = Callable[[Path, families.Cfg, Any, str, list[Any], list[Any]], ReferenceInputs]
_PREPARERS: dict[str, _Preparer] = {
    "qwen2_5_vl": _qwen,
    "qwen3_vl": _qwen,
    "gemma3": _gemma3,
    "mistral3": _mistral3,
    "gemma4": _gemma4,
    "phi4mm": _phi4mm,
    "lfm2_vl": _lfm2_vl,
}


def from_runtime(folder: Path, prompt: str, arrays: dict[str, Any]) -> ReferenceInputs:
    """HF inputs holding exactly the runtime processor's token ids and pixel values.

    End-to-end parity feeds both sides the same ids and pixels, so a token mismatch means
    the models differ, not the preprocessing (which parity compares on its own).
    """
    import torch

    config = read_json(folder / "config.json", "model")
    family = families.lookup(config.get("model_type"))
    convert = _FROM_RUNTIME.get(family.key)
    if convert is None:
        raise MmforgeError(
            f"No runtime-to-HF input mapping for {family.name} yet",
            "Parity checks are not available for this family yet",
        )
    ids = torch.from_numpy(arrays["input_ids"].astype("int64")).reshape(1, -1)
    result = ReferenceInputs(
        prompt=prompt,
        input_ids=[int(t) for t in ids[0]],
        tensors={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
    )
    convert(families.Cfg(config), arrays, result)
    return result


def _qwen_from_runtime(cfg: families.Cfg, arrays: dict[str, Any], result: ReferenceInputs) -> None:
    import numpy as np
    import torch

    if "pixel_values" in arrays:
        grid = arrays["image_grid_thw"].astype("int64")
        pixels = arrays["pixel_values"].astype("float32")
        # The runtime pads each image's patches to the largest image; HF concatenates.
        longest = pixels.shape[0] // grid.shape[0]
        rows = [pixels[i * longest : i * longest + int(g.prod())] for i, g in enumerate(grid)]
        result.tensors["pixel_values"] = torch.from_numpy(np.concatenate(rows))
        result.tensors["image_grid_thw"] = torch.from_numpy(grid)
    result.tensors["mm_token_type_ids"] = _token_types(result, cfg)


def _pixtral_from_runtime(
    cfg: families.Cfg, arrays: dict[str, Any], result: ReferenceInputs
) -> None:
    import torch

    if "pixel_values" in arrays:
        pixels = torch.from_numpy(arrays["pixel_values"].astype("float32"))
        result.tensors["pixel_values"] = pixels
        sizes = arrays.get("image_sizes")
        if sizes is None:
            sizes = [list(pixels.shape[-2:])] * pixels.shape[0]
        result.tensors["image_sizes"] = torch.as_tensor(sizes, dtype=torch.int64).reshape(-1, 2)


def _gemma3_from_runtime(
    cfg: families.Cfg, arrays: dict[str, Any], result: ReferenceInputs
) -> None:
    import torch

    if "pixel_values" in arrays:
        result.tensors["pixel_values"] = torch.from_numpy(arrays["pixel_values"].astype("float32"))
    ids = result.tensors["input_ids"]
    # HF lets image tokens attend to each other bidirectionally (token_type_ids == 1).
    result.tensors["token_type_ids"] = (ids == int(cfg.get("image_token_index"))).long()


def _gemma4_from_runtime(
    cfg: families.Cfg, arrays: dict[str, Any], result: ReferenceInputs
) -> None:
    import torch

    if "pixel_values" in arrays:
        result.tensors["pixel_values"] = torch.from_numpy(arrays["pixel_values"].astype("float32"))
        result.tensors["image_position_ids"] = torch.from_numpy(
            arrays["pixel_position_ids"].astype("int64")
        )
    if "audio_embeds" in arrays:
        result.tensors["input_features"] = torch.from_numpy(
            arrays["audio_embeds"].astype("float32")
        )
        result.tensors["input_features_mask"] = torch.from_numpy(
            arrays["audio_attention_mask"].astype(bool)
        )
    result.tensors["mm_token_type_ids"] = _token_types(result, cfg)


def _phi4mm_from_runtime(
    cfg: families.Cfg, arrays: dict[str, Any], result: ReferenceInputs
) -> None:
    import torch

    if "pixel_values" in arrays:
        result.tensors["image_pixel_values"] = torch.from_numpy(
            arrays["pixel_values"].astype("float32")
        )
        result.tensors["image_sizes"] = torch.from_numpy(arrays["image_sizes"].astype("int64"))
        result.tensors["image_attention_mask"] = torch.from_numpy(
            arrays["image_attention_mask"].astype("float32")
        )
    if "audio_embeds" in arrays:
        result.tensors["audio_input_features"] = torch.from_numpy(
            arrays["audio_embeds"].astype("float32")
        )
        result.tensors["audio_embed_sizes"] = torch.from_numpy(
            arrays["audio_sizes"].astype("int64")
        )
        result.tensors["audio_attention_mask"] = torch.from_numpy(
            arrays["audio_attention_mask"].astype(bool)
        )


def _lfm2_vl_from_runtime(
    cfg: families.Cfg, arrays: dict[str, Any], result: ReferenceInputs
) -> None:
    import torch

    if "pixel_values" in arrays:
        result.tensors["pixel_values"] = torch.from_numpy(arrays["pixel_values"].astype("float32"))
        result.tensors["pixel_attention_mask"] = torch.from_numpy(
            arrays["image_attention_mask"].astype("int64")
        )
        result.tensors["spatial_shapes"] = torch.from_numpy(arrays["image_sizes"].astype("int64"))


_FROM_RUNTIME: dict[str, Callable[[families.Cfg, dict[str, Any], ReferenceInputs], None]] = {
    "qwen2_5_vl": _qwen_from_runtime,
    "qwen3_vl": _qwen_from_runtime,
    "mistral3": _pixtral_from_runtime,
    "gemma3": _gemma3_from_runtime,
    "gemma4": _gemma4_from_runtime,
    "phi4mm": _phi4mm_from_runtime,
    "lfm2_vl": _lfm2_vl_from_runtime,
}


def greedy_generate(model: Any, inputs: ReferenceInputs, max_new_tokens: int) -> list[int]:
    """HF greedy generation; returns only the new token ids."""
    import torch

    with torch.no_grad():
        out = model.generate(
            **inputs.tensors, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1
        )
    return [int(t) for t in out[0, len(inputs.input_ids) :]]
