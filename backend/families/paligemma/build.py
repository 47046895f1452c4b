"""PaliGemma: all three graphs are ours (graphs.py)."""

from __future__ import annotations

from mmforge.backend.families._graphs import BuiltGraphs
from mmforge.backend.families._hooks import BuildRequest
from mmforge.backend.families.paligemma.graphs import decoder_graph, embedding_graph, vision_graph


def build(request: BuildRequest) -> BuiltGraphs:
    """The SigLIP tower with its projector, the embedding and the Gemma decoder."""
    checkpoint = request.checkpoint
    cfg = checkpoint.cfg
    models = {
        "vision_encoder": vision_graph(cfg),
        "embedding": embedding_graph(cfg),
        "decoder": decoder_graph(cfg, checkpoint.output_tied),
    }
    return BuiltGraphs(models=models, work=request.work)
