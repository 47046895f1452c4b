"""A family on ONNX Runtime GenAI's `videochat_flash_qwen`: the pieces every one shares.

ONNX Runtime GenAI 0.18 has no pipeline of its own for LLaVA, Idefics2, Idefics3 /
SmolVLM or InternVL. Its `videochat_flash_qwen` pipeline gives every picture a constant
number of ids, `vision.num_visual_tokens` (K), framed by marker text
(videochat_flash_processor.cpp, BuildPromptTokens) that the package's tokenizer reads as
the model's own ids (components/tokens.py), with 1-D positions and a plain causal
decoder. What each hosted family shares:

- `videochat_package`: the PackageSpec fields, precisions and vision inputs;
- `sized_pixels`: the runtime's pixel chain for a picture the intake already sized;
- `features_at_image_ids`: the embedding graph, the picture features written at the
  image ids;
- `from_runtime`: the runtime's pixels as transformers' for verify.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg, PackageSpec, processor_op, rescale_and_normalize
from mmforge.backend.families._hooks import RuntimeArrays
from mmforge.backend.families.components.graph_builder import GraphBuilder


def videochat_package(
    per_picture: Callable[[Cfg], int], token_fields: Callable[[Cfg], dict[str, int]], **spec: Any
) -> PackageSpec:
    """A package on `videochat_flash_qwen` with mmforge's tower and embedding (float32).

    Every family this pipeline hosts (LLaVA, Idefics2, Idefics3 / SmolVLM, InternVL)
    shares these: `vision.num_visual_tokens` = `per_picture` (K ids a picture), the
    picture as `pixel_values`, and the precisions f32, int4 and int8 (mobius's f16 decoder
    would take float16 embeddings, and the tower and embedding are float32). The token
    ids (`token_fields`) are read by verify and chat (which ids are pictures); the runtime
    reads them for Qwen types only, and videochat_flash_qwen is not one (model_type.h,
    IsQwenVLFamily). `spec`: the family's own PackageSpec fields.
    """
    return PackageSpec(
        model_fields=token_fields,
        vision_fields=lambda cfg, pre: {"num_visual_tokens": per_picture(cfg)},
        vision_inputs={"pixel_values": "pixel_values"},
        dtypes=("f32", "int4", "int8"),
        **spec,
    )


def sized_pixels(
    name: str, size: tuple[int, int], pre: Cfg, mean: list[float], std: list[float]
) -> dict[str, Any]:
    """The runtime's pixel chain for a picture the intake sized: Resize, rescale, normalise, CHW.

    The intake already sized the picture as transformers does (the family's
    `picture_sizing`), so `Resize` to that (width, height) leaves it as it is; a program
    that hands the runtime a picture file of another size still gets the model's size.
    """
    width, height = size
    resize = {"interpolation": "CUBIC", "width": width, "height": height, "keep_aspect_ratio": 0}
    return {
        "processor": {
            "name": name,
            "transforms": [
                processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
                processor_op("resize", "Resize", resize),
                *rescale_and_normalize(pre, mean, std),
                processor_op("to_channel_first", "Permute3D", {"dims": [2, 0, 1]}),
            ],
        }
    }


def features_at_image_ids(
    cfg: Cfg, name: str, table: str, token_text: str, field: str = "image_token_index"
) -> Any:
    """Token embeddings with the picture features written, in order, at the image ids.

    The graph of every family on `videochat_flash_qwen`: the package's tokenizer reads
    the runtime's marker text as the model's own ids (its tokenizer.py), so the image
    positions are exactly transformers'. Placeholders keep their text embedding when no
    features come with them (every decode step), as transformers replaces them only
    when pixels are given.

    Args:
        cfg: The checkpoint's config.
        name: The graph's name.
        table: The token table's checkpoint name.
        token_text: The image token's text, for the error message.
        field: The config field that names the image token's id (else image_token_id).

    Raises:
        MmforgeError: config.json does not name the image token's id.
    """
    import onnx_ir as ir

    vocab, hidden = int(cfg.text.get("vocab_size")), int(cfg.text.get("hidden_size"))
    image_token = cfg.first(field, "image_token_id")
    if not isinstance(image_token, int):
        raise MmforgeError(
            f"config.json has no {field}",
            f"Add {field} (the id of {token_text} in the tokenizer) to config.json",
        )
    g = GraphBuilder(name)
    ids = g.input("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"])
    features = g.input("image_features", ir.DataType.FLOAT, ["num_image_tokens", hidden])
    embeds = g.op("Gather", g.weight(table, [vocab, hidden]), ids, axis=0)
    has_features = g.op("Greater", g.op("Size", features), g.const(np.int64(0)))
    slots = g.op("And", g.op("Equal", ids, g.const(np.int64(image_token))), has_features)
    where = g.op("Transpose", g.op("NonZero", slots), perm=[1, 0])  # [M, 2]
    g.output(g.op("ScatterND", embeds, where, features), "inputs_embeds")
    return g.model()


def from_runtime(request: RuntimeArrays) -> None:
    """The runtime's pixels, [1, N, 3, H, W], as HF's [N, 3, H, W]."""
    import torch

    pixels = request.arrays.get("pixel_values")
    if pixels is not None:
        flat = pixels.reshape(-1, *pixels.shape[-3:])
        request.inputs.tensors["pixel_values"] = torch.from_numpy(flat.astype("float32"))
