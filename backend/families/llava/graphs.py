"""LLaVA-1.5's vision tower and embedding graphs, written here; the decoder is mobius's.

mobius 0.1 builds a `llava` decoder (Llama, inputs_embeds in) that is right, but its
CLIP tower is not what LlavaModel computes (it takes the last layer, keeps the class
token and skips `pre_layrnorm`), and its embedding keys on one image token id. So the
graph fix `own_vision_and_embedding` puts our graphs in their place, op by op with the
checkpoint's own tensor names, and gives the decoder's initializers the checkpoint's
names too, so every weight goes through the common path (convert/weights.py).

The vision graph follows transformers 5's LlavaModel.get_image_features (and
VipLlavaModel's): CLIP embeddings (patch conv, class token, positions), `pre_layrnorm`,
the encoder up to the deepest layer the features are read from, those hidden states
(`vision_feature_layer`, an index into hidden_states where 0 is the embeddings),
the class token dropped under strategy `default`, several layers concatenated along
the width, then the projector (VipLLaVA: a LayerNorm first).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families._graph_edit import name_decoder_weights
from mmforge.backend.families._hooks import FixRequest
from mmforge.backend.families.components.graph_builder import GraphBuilder
from mmforge.backend.families.components.hosts.videochat import features_at_image_ids
from mmforge.backend.families.components.towers.siglip import encoder_states

VISION = "vision_tower."
PROJECTOR = "multi_modal_projector."
TEXT = "language_model.model."
HEAD = "language_model.lm_head.weight"

# transformers' activations the tower and projector may name, as ONNX.
VISION_ACTS = ("quick_gelu", "gelu")
PROJECTOR_ACTS = ("gelu",)


def checkpoint_name(name: str) -> str:
    """A tensor name in the layout the graphs use (transformers 4's LLaVA, flat tower).

    Releases (transformers 4) write `vision_tower.vision_model.*`,
    `language_model.model.*` and `language_model.lm_head.*`; transformers 5 writes
    `model.vision_tower.*`, `model.language_model.*` and `lm_head.*` (or, for LLaVA,
    the old names without `vision_model`).
    """
    for new, old in (
        ("model.language_model.", TEXT),
        ("model.vision_tower.", VISION),
        ("model.multi_modal_projector.", PROJECTOR),
        ("lm_head.", "language_model.lm_head."),
        # Video-LLaVA: the picture tower is `image_tower` (transformers 4 and 5); its
        # `video_tower` keeps its name and no graph reads it (`unused_tensors`).
        ("model.image_tower.", VISION),
        ("image_tower.", VISION),
        ("model.video_tower.", "video_tower."),
        ("model.image_newline", "image_newline"),  # LLaVA-NeXT's
    ):
        if name.startswith(new):
            name = old + name[len(new) :]
            break
    if name.startswith(VISION + "vision_model."):
        name = VISION + name[len(VISION + "vision_model.") :]
    return name


def feature_layers(cfg: Cfg) -> list[int]:
    """The hidden_states indices the features are read from (0: the embeddings)."""
    depth = int(cfg.get("vision_config.num_hidden_layers", 24))
    layers = cfg.first("vision_feature_layers", "vision_feature_layer", default=-2)
    chosen = layers if isinstance(layers, list) else [layers]
    out = []
    for layer in chosen:
        index = int(layer) if int(layer) >= 0 else depth + 1 + int(layer)
        if not 0 <= index <= depth:
            raise MmforgeError(
                f"vision feature layer {layer} is outside the {depth}-layer tower",
                "The config is inconsistent: check vision_feature_layer(s)",
            )
        out.append(index)
    return out


def tower_size(cfg: Cfg) -> int:
    """The CLIP tower's picture side.

    Checkpoint.read hands the config as transformers completes it, so Video-LLaVA's
    release, whose partial vision_config has no image_size, arrives with
    CLIPVisionConfig's 224 (measured). A config read without transformers falls back to
    the class's default here too: 336 for LlavaConfig's tower, 224 for Video-LLaVA's.
    """
    default = 224 if cfg.get("model_type") == "video_llava" else 336
    return int(cfg.get("vision_config.image_size", default))


def keeps_class_token(cfg: Cfg) -> bool:
    """LLaVA's strategy `full` keeps it; `default` (and VipLLaVA, always) drops it."""
    if cfg.get("model_type") == "vipllava":
        return False
    return str(cfg.get("vision_feature_select_strategy", "default")) == "full"


def tokens_per_image(cfg: Cfg) -> int:
    """The features one picture gives: (image_size / patch)², plus the class token if kept."""
    patch = int(cfg.get("vision_config.patch_size", 14))
    return (tower_size(cfg) // patch) ** 2 + (1 if keeps_class_token(cfg) else 0)


def unused_tensors(cfg: Cfg) -> tuple[str, ...]:
    """Tower tensors LlavaModel never computes with.

    The layers past the deepest one read, and the post-layernorm (the features are
    hidden states, not the pooled output); Video-LLaVA's whole video tower, since a
    package takes pictures only.
    """
    deepest = max(feature_layers(cfg))
    depth = int(cfg.get("vision_config.num_hidden_layers", 24))
    tower = r"(vision|image)_tower\.(vision_model\.)?"
    past = [rf"{tower}encoder\.layers\.{i}\." for i in range(deepest, depth)]
    video = (r"(^|\.)video_tower\.",) if cfg.get("model_type") == "video_llava" else ()
    return (rf"{tower}post_layernorm\.", *past, *video)


def _act(g: GraphBuilder, x: Any, name: str) -> Any:
    if name == "quick_gelu":  # x · sigmoid(1.702 x)
        return g.op("Mul", x, g.op("Sigmoid", g.op("Mul", x, g.const(np.float32(1.702)))))
    return g.gelu(x, tanh=False)


def vision_graph(cfg: Cfg) -> Any:
    """The CLIP tower, feature selection and projector, for pictures of the tower's size.

    Input: pixel_values [1, N, 3, S, S] as ONNX Runtime GenAI's videochat_flash_qwen
    processor hands them (videochat_flash_processor.cpp: "[1, num_frames, C, H, W]"),
    or [N, 3, S, S]. Output: image_features [N · K, text hidden], the pictures' features
    one after another.
    """
    import onnx_ir as ir

    size = tower_size(cfg)
    channels = int(cfg.get("vision_config.num_channels", 3))
    g = GraphBuilder("llava_vision")
    pixels = g.input(
        "pixel_values", ir.DataType.FLOAT, ["batch", "num_images", channels, size, size]
    )
    x = g.op("Reshape", pixels, g.const(np.array([-1, channels, size, size])))
    y = tower_features(g, cfg, x)
    text_hidden = int(cfg.text.get("hidden_size"))
    g.output(g.op("Reshape", y, g.const(np.array([-1, text_hidden]))), "image_features")
    return g.model()


def tower_features(g: GraphBuilder, cfg: Cfg, x: Any) -> Any:
    """Pictures [N, 3, S, S] -> their projected features [N, K, text hidden] (CLIP's order)."""
    v = cfg.sub("vision_config")
    width = int(v.get("hidden_size", 1024))
    heads = int(v.get("num_attention_heads", 16))
    ff = int(v.get("intermediate_size", 4096))
    eps = float(v.get("layer_norm_eps", 1e-5))
    patch = int(v.get("patch_size", 14))
    size = tower_size(cfg)
    channels = int(v.get("num_channels", 3))
    act = str(v.get("hidden_act", "quick_gelu"))
    proj_act = str(cfg.get("projector_hidden_act", "gelu"))
    for what, value, allowed in (
        ("vision_config.hidden_act", act, VISION_ACTS),
        ("projector_hidden_act", proj_act, PROJECTOR_ACTS),
    ):
        if value not in allowed:
            raise MmforgeError(
                f"{what} {value!r} is not supported", f"Supported: {', '.join(allowed)}"
            )
    text_hidden = int(cfg.text.get("hidden_size"))
    layers = feature_layers(cfg)
    grid = size // patch

    emb = VISION + "embeddings."
    kernel = g.weight(emb + "patch_embedding.weight", [width, channels, patch, patch])
    x = g.op("Conv", x, kernel, strides=[patch, patch])  # [N, D, g, g], no bias (CLIP)
    x = g.op("Transpose", g.op("Reshape", x, g.const(np.array([0, width, -1]))), perm=[0, 2, 1])
    cls = g.weight(emb + "class_embedding", [width])
    count = g.op("Shape", x, start=0, end=1)
    cls = g.op("Expand", cls, g.op("Concat", count, g.const(np.array([1, width])), axis=0))
    x = g.op("Concat", cls, x, axis=1)  # [N, 1 + g², D]
    x = g.op("Add", x, g.weight(emb + "position_embedding.weight", [grid * grid + 1, width]))
    x = g.layer_norm(x, VISION + "pre_layrnorm", width, eps)

    # CLIP's encoder layers are SigLIP's (the same ops and weight names): the hidden
    # states up to the deepest one read.
    states = encoder_states(
        g, x, VISION, max(layers), width, heads, ff, eps, lambda h: _act(g, h, act)
    )

    first = 0 if keeps_class_token(cfg) else 1
    picked = [g.slice(states[i], first, grid * grid + 1, axis=1) for i in layers]
    features = picked[0] if len(picked) == 1 else g.op("Concat", *picked, axis=-1)
    wide = width * len(layers)
    if cfg.get("model_type") == "vipllava":
        norm_eps = float(cfg.get("projector_layernorm_eps", 1e-5))
        features = g.layer_norm(features, PROJECTOR + "projector_layernorm", wide, norm_eps)
    bias = bool(cfg.get("multimodal_projector_bias", True))
    y = g.linear(features, PROJECTOR + "linear_1", wide, text_hidden, bias)
    return g.linear(_act(g, y, proj_act), PROJECTOR + "linear_2", text_hidden, text_hidden, bias)


def embedding_graph(cfg: Cfg) -> Any:
    """LLaVA's embedding: the features at the `<image>` ids."""
    return features_at_image_ids(cfg, "llava_embedding", TEXT + "embed_tokens.weight", "<image>")


def own_vision_and_embedding(request: FixRequest) -> str | None:
    """Put our vision and embedding graphs in place of mobius's.

    The decoder's initializers take the checkpoint's names (`decoder.model.*` ->
    `language_model.model.*`).
    """
    models, cfg = request.models, request.cfg
    models["vision_encoder"] = vision_graph(cfg)
    models["embedding"] = embedding_graph(cfg)
    renamed = name_decoder_weights(models["decoder"].graph, TEXT, HEAD)
    return (
        f"Graphs: the CLIP tower (hidden states {feature_layers(cfg)}, class token "
        f"{'kept' if keeps_class_token(cfg) else 'dropped'}) and the embedding are mmforge's; "
        f"mobius's decoder ({renamed} weights)"
    )
