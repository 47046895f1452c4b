"""Idefics3 / SmolVLM's vision tower and connector, written here; the decoder is mobius's.

mobius 0.1 registers `idefics3` and `smolvlm` with its LLaVA model: its Llama decoder
(inputs_embeds in; SmolLM2 and Llama 3 text configs are Llama's) is right, but its vision
graph is a fixed-size SigLIP with an MLP projector. So the graph fix
`own_vision_and_embedding` puts ours in place of mobius's vision and embedding and gives
the decoder's initializers the checkpoint's names (`model.text_model.*`,
`lm_head.weight`), as Idefics2's does.

The vision graph follows transformers 5.25's Idefics3Model.get_image_features for the
picture the image processor makes without splitting (one square of
`max_image_size.longest_edge`, the tower's `image_size`: every patch attended):

- Idefics3VisionTransformer, which is Idefics2's NaViT SigLIP tower
  (components/towers/navit.py, `navit_tower`: bucketed positions, the encoder,
  `post_layernorm`);
- Idefics3Connector: the pixel shuffle by `scale_factor` (each s × s block of patches
  one row, s² · width wide, in transformers' order), then `modality_projection.proj`,
  one Linear without bias, to the text width: (side / s)² features a picture.

The embedding writes the features at the `<image>` ids in order
(components/hosts/videochat.py, `features_at_image_ids`, the graph of every family on
this pipeline).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg, as_int
from mmforge.backend.families._graph_edit import name_decoder_weights
from mmforge.backend.families._hooks import FixRequest
from mmforge.backend.families.components.graph_builder import GraphBuilder
from mmforge.backend.families.components.hosts.videochat import features_at_image_ids
from mmforge.backend.families.components.towers.navit import navit_tower

VISION = "model.vision_model."
CONNECTOR = "model.connector."
TEXT = "model.text_model."
HEAD = "lm_head.weight"


def checkpoint_name(name: str) -> str:
    """A tensor name in transformers 5's layout (the releases'); a base model's gets `model.`."""
    for part in ("vision_model.", "connector.", "text_model."):
        if name.startswith(part):
            return "model." + name
    return name


def grid_side(cfg: Cfg) -> int:
    """Patches along a side of the tower's square picture, `image_size / patch_size`."""
    v = cfg.sub("vision_config")
    return as_int(v.get("image_size", 224)) // as_int(v.get("patch_size", 32))


def scale(cfg: Cfg) -> int:
    """The connector's pixel-shuffle factor, scale_factor."""
    return int(cfg.get("scale_factor", 2))


def tokens_per_image(cfg: Cfg) -> int:
    """The features one picture gives, Idefics3Model.image_seq_len: (side / s)².

    Raises:
        MmforgeError: The patch grid does not divide by scale_factor (transformers'
            pixel shuffle would fail on it).
    """
    side, s = grid_side(cfg), scale(cfg)
    if s < 1 or side % s:
        raise MmforgeError(
            f"The vision tower's {side} × {side} patch grid does not divide by scale_factor {s}",
            "Use the release's config.json (image_size / patch_size a multiple of scale_factor)",
        )
    return (side // s) ** 2


def pixel_shuffle(g: GraphBuilder, x: Any, side: int, width: int, s: int) -> Any:
    """Idefics3Connector.pixel_shuffle on [N, side², width]: [N, (side/s)², width·s²]."""
    x = g.op("Reshape", x, g.const(np.array([-1, side, side // s, width * s])))
    x = g.op("Transpose", x, perm=[0, 2, 1, 3])
    x = g.op("Reshape", x, g.const(np.array([-1, side // s, side // s, width * s * s])))
    x = g.op("Transpose", x, perm=[0, 2, 1, 3])
    return g.op("Reshape", x, g.const(np.array([-1, (side // s) ** 2, width * s * s])))


def vision_graph(cfg: Cfg) -> Any:
    """The NaViT SigLIP tower and the connector: pixel_values -> image_features [N·K, H]."""
    width = int(cfg.sub("vision_config").get("hidden_size", 768))
    hidden = int(cfg.text.get("hidden_size"))
    side, s = grid_side(cfg), scale(cfg)
    tokens_per_image(cfg)  # refuses a grid the shuffle cannot cut
    g = GraphBuilder("idefics3_vision")
    x = pixel_shuffle(g, navit_tower(g, cfg, VISION), side, width, s)
    x = g.linear(x, CONNECTOR + "modality_projection.proj", width * s * s, hidden, False)
    g.output(g.op("Reshape", x, g.const(np.array([-1, hidden]))), "image_features")
    return g.model()


def own_vision_and_embedding(request: FixRequest) -> str | None:
    """Put our vision and embedding graphs in place of mobius's; name the decoder's weights."""
    models, cfg = request.models, request.cfg
    models["vision_encoder"] = vision_graph(cfg)
    table = TEXT + "embed_tokens.weight"
    models["embedding"] = features_at_image_ids(
        cfg, "idefics3_embedding", table, "<image>", field="image_token_id"
    )
    renamed = name_decoder_weights(models["decoder"].graph, TEXT, HEAD)
    return (
        "Graphs: the NaViT SigLIP tower, the connector (pixel shuffle by "
        f"{scale(cfg)}, modality projection: {tokens_per_image(cfg)} features a picture) and "
        f"the embedding are mmforge's; mobius's Llama decoder ({renamed} weights)"
    )
