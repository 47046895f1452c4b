"""Gemma 3n: all three graphs are ours (vision.py, graphs.py)."""

from __future__ import annotations

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families._graphs import BuiltGraphs
from mmforge.backend.families._hooks import BuildRequest
from mmforge.backend.families.gemma3n.graphs import decoder_graph, embedding_graph
from mmforge.backend.families.gemma3n.vision import vision_graph


def picture_size(pre: Cfg) -> int:
    """The processor's square size (768 as released); MmforgeError for one not square."""
    height = int(pre.first("size.height", default=768))
    width = int(pre.first("size.width", default=height))
    if width != height:
        raise MmforgeError(
            f"Gemma 3n's image processor resizes to {width}×{height}; mmforge builds its "
            "vision tower for a square picture, as released (768×768)",
            "Use the release's preprocessor_config.json",
        )
    return height


def build(request: BuildRequest) -> BuiltGraphs:
    """MobileNetV5 with the soft-token embedder, the embedding, and the decoder."""
    checkpoint = request.checkpoint
    cfg = checkpoint.cfg
    models = {
        "vision_encoder": vision_graph(cfg, picture_size(checkpoint.preprocessor)),
        "embedding": embedding_graph(cfg),
        "decoder": decoder_graph(cfg, checkpoint.output_tied),
    }
    return BuiltGraphs(models=models, work=request.work)
