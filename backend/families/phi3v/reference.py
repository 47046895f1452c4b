"""Phi-3.5-Vision's reference for verify, assembled from transformers' native parts.

transformers has no class for the whole model (remote code only). The reference is
transformers' `Phi3ForCausalLM` and `CLIPVisionModel` loaded with the checkpoint's
weights (layout.py names them), with the HD transform and projector written here in torch
after the remote code's description (`Phi3ImageEmbedding.hd_feature_transform`); no code
from the model's repository runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._hooks import (
    LayoutCheck,
    LayoutRequest,
    PixelsRequest,
    ReferenceRequest,
    RuntimeArrays,
)
from mmforge.backend.families._reference import ReferenceInputs, encode
from mmforge.backend.families.phi3v import layout
from mmforge.backend.families.phi3v.preprocess import CROP, phi3v_images, with_hf_global_view

if TYPE_CHECKING:
    from mmforge.backend.checkpoint import Checkpoint

# What verify's report says about the reference a PASS was measured against.
KIND = (
    "transformers' Phi3ForCausalLM + CLIPVisionModel with the checkpoint's weights, the HD "
    "transform and projector restated in torch (the repository's code is not run)"
)
_IMAGE_TAG = r"<\|image_(\d+)\|>"


def load(checkpoint: Checkpoint) -> Any:
    """The assembled reference model, in float32, with every checkpoint tensor placed."""
    import torch
    from transformers import CLIPVisionConfig, CLIPVisionModel, Phi3Config, Phi3ForCausalLM
    from transformers.initialization import no_init_weights

    from mmforge.backend.tensors import checkpoint_refs

    written = checkpoint.written
    shapes = {t.name: list(t.shape) for t in checkpoint.tensors or ()}
    with no_init_weights():
        text = Phi3ForCausalLM(Phi3Config.from_dict(layout.text_config(written))).float()
        tower = CLIPVisionModel(
            CLIPVisionConfig.from_dict(layout.vision_config(written, shapes))
        ).float()
    from mmforge.backend.families.phi3v.model import Phi3VReference

    model = Phi3VReference(text, tower, written)
    parts = {"text": text.state_dict(keep_vars=True), "vision": tower.state_dict(keep_vars=True)}
    parts["projector"] = dict(model.projector.named_parameters())
    loaded: set[tuple[str, str]] = set()
    with torch.no_grad():
        for name, ref in checkpoint_refs(checkpoint.folder).items():
            where = layout.tensor_part(name)
            if where is None:
                continue
            part, native = where
            target = parts[part].get(native.replace(".", "_") if part == "projector" else native)
            if target is None or tuple(target.shape) != tuple(ref.shape):
                raise MmforgeError(
                    f"{name} of {checkpoint.folder} has no place in the reference",
                    "This layout is not one mmforge can map; report the model id",
                )
            target.copy_(ref.read())
            loaded.add((part, native))
    if checkpoint.output_tied:
        text.tie_weights()
    expected = {("text", n) for n in parts["text"]} | {("vision", n) for n in parts["vision"]}
    absent = sorted(n for p, n in expected - loaded if not _derived(p, n, checkpoint))
    if absent:
        raise MmforgeError(
            f"The checkpoint in {checkpoint.folder} has no value for {len(absent)} weight(s) "
            f"of the reference (first: {absent[0]})",
            "Pass the checkpoint the package was converted from; it may be incomplete",
        )
    return model.eval()


def _derived(part: str, name: str, checkpoint: Checkpoint) -> bool:
    """Buffers and a tied output layer, which the checkpoint does not carry."""
    return name.endswith("position_ids") or (
        part == "text" and name == "lm_head.weight" and checkpoint.output_tied
    )


def prepare(request: ReferenceRequest) -> ReferenceInputs:
    """Phi3VProcessor's inputs: HD crops, and each <|image_N|> as N's negative id repeated."""
    checkpoint = request.checkpoint
    tokenizer = request.tokenizer
    prompt = request.prompt
    images = request.images
    import re

    import torch

    tensors: dict[str, Any] = {}
    counts: list[int] = []
    if images:
        out = phi3v_images(images, dict(checkpoint.preprocessor.data))
        counts = out.pop("num_img_tokens")
        tensors.update(out)
    ids: list[int] = []
    pieces = re.split(_IMAGE_TAG, prompt)
    for k, piece in enumerate(pieces):
        if k % 2 == 0:
            ids += encode(tokenizer, piece)
            continue
        n = int(piece)
        if not 1 <= n <= len(counts):
            raise MmforgeError(
                f"The prompt names <|image_{n}|> but {len(counts)} image(s) are attached",
                "Give one attachment per placeholder in the messages",
            )
        ids += [-n] * counts[n - 1]
    tensors["input_ids"] = torch.tensor([ids])
    tensors["attention_mask"] = torch.ones_like(tensors["input_ids"])
    return ReferenceInputs(prompt=prompt, input_ids=ids, tensors=tensors)


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels and image sizes under the reference's names.

    The global view is made from the runtime's crops as HF's processor makes it (see
    `with_hf_global_view`); the package's vision graph does the same.
    """
    arrays = request.arrays
    result = request.inputs
    import torch

    if "pixel_values" in arrays:
        sizes = torch.from_numpy(arrays["image_sizes"].astype("int64"))
        pixels = torch.from_numpy(arrays["pixel_values"].astype("float32"))
        result.tensors["pixel_values"] = with_hf_global_view(pixels, sizes)
        result.tensors["image_sizes"] = sizes


def placeholder_layout(request: LayoutRequest) -> LayoutCheck:
    """Whether image N's placeholders (-N, in one run) follow the runtime's own image sizes.

    The runtime's crop budget is fixed (see `PREPROCESSING_NOTE`), so its placeholders are
    checked against the HD sizes it chose rather than against HF's ids.
    """
    cfg = request.cfg
    ids = request.ids
    arrays = request.arrays
    per_crop = int(cfg.get("img_processor.num_img_tokens", 144))
    sizes = [(int(h), int(w)) for h, w in arrays.get("image_sizes", [])]
    found = []
    for n, (height, width) in enumerate(sizes, start=1):
        want = layout.tokens_per_image(height // CROP, width // CROP, per_crop)
        at = [i for i, t in enumerate(ids) if t == -n]
        got = len(at)
        if got != want or (at and at[-1] - at[0] + 1 != got):
            return LayoutCheck(
                False,
                (
                    f"image token count mismatch: image {n} ({height}×{width}) has {got} "
                    f"placeholders, {want} expected"
                ),
            )
        found.append(want)
    stray = sum(1 for t in ids if t < -len(sizes))
    if stray:
        return LayoutCheck(False, f"{stray} placeholders name an image that is not attached")
    return LayoutCheck(True, f"image tokens {found} laid out for the runtime's HD sizes {sizes}")


def pixels_at_runtime_budget(request: PixelsRequest) -> Any:
    """HF's pixels with the runtime's crop budget (its num_crops is fixed at 16)."""
    checkpoint = request.checkpoint
    images = request.images
    arrays = request.arrays
    budget = int(arrays["pixel_values"].shape[1]) - 1
    out = phi3v_images(images, dict(checkpoint.preprocessor.data), num_crops=budget)
    return out["pixel_values"].float().numpy()


PREPROCESSING_NOTE = (
    "Phi-3.5-Vision: ONNX Runtime GenAI 0.18's Phi3ImageTransform allows 16 crops whatever "
    "num_crops says (measured), so an image takes the tokens of HF's processor at "
    "num_crops=16; preprocessing is compared at that budget. Its global view (crop 0) is "
    "resampled differently from HF's and is not used: the vision graph makes it from the "
    "crops as HF does"
)
