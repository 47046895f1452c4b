"""GLM-4.1V: all three graphs are ours (vision.py, embedding.py, decoder.py)."""

from __future__ import annotations

from mmforge.backend.families._base import Cfg
from mmforge.backend.families._graphs import BuiltGraphs
from mmforge.backend.families._hooks import BuildRequest
from mmforge.backend.families.glm4v.decoder import decoder_graph
from mmforge.backend.families.glm4v.embedding import embedding_graph
from mmforge.backend.families.glm4v.vision import vision_graph

EMBED = "model.language_model.embed_tokens"
HEAD = "lm_head"
# The graphs' initializers carry the checkpoint's own tensor names: transformers 5 has no
# key mapping for glm4v (conversion_mapping.py), so it loads a release under the names it
# saves (`model.visual.*`, `model.language_model.*`, `lm_head.*`). For glm4v_moe it maps the
# release's per-expert tensors into fused ones on load and back on save
# (conversion_mapping.py, "glm4v_moe" → "qwen2_moe"), so a checkpoint it saves names each
# expert's projections as the release does (`mlp.experts.<e>.gate_proj.weight`), the
# names the GLM-4.5V decoder's weights carry.


def text_width(cfg: Cfg) -> tuple[int, int]:
    """(vocabulary, hidden size) of the text model."""
    text = cfg.text
    return int(text.get("vocab_size")), int(text.get("hidden_size"))


def build(request: BuildRequest) -> BuiltGraphs:
    """GLM-4V's tower with its merger, the embedding and the GLM-4 decoder."""
    checkpoint = request.checkpoint
    cfg = checkpoint.cfg
    vocab, hidden = text_width(cfg)
    models = {
        "vision_encoder": vision_graph(cfg),
        "embedding": embedding_graph(
            vocab, hidden, int(cfg.get("image_token_id")), EMBED + ".weight"
        ),
        "decoder": decoder_graph(cfg, head=EMBED if checkpoint.output_tied else HEAD),
    }
    return BuiltGraphs(models=models, work=request.work)


def build_moe(request: BuildRequest) -> BuiltGraphs:
    """GLM-4.5V: GLM-4.1V's tower and embedding, the GLM-4.5 mixture-of-experts decoder."""
    from mmforge.backend.families.glm4v.decoder_moe import moe_decoder_graph

    checkpoint = request.checkpoint
    cfg = checkpoint.cfg
    vocab, hidden = text_width(cfg)
    models = {
        "vision_encoder": vision_graph(cfg),
        "embedding": embedding_graph(
            vocab, hidden, int(cfg.get("image_token_id")), EMBED + ".weight"
        ),
        "decoder": moe_decoder_graph(cfg, head=EMBED if checkpoint.output_tied else HEAD),
    }
    return BuiltGraphs(models=models, work=request.work)
