"""LFM2-VL's graphs: ours for the vision tower and embedding, the GenAI builder's decoder."""

from __future__ import annotations

from mmforge.backend.families._graphs import BuiltGraphs
from mmforge.backend.families._hooks import BuildRequest
from mmforge.backend.families.lfm2 import decoder
from mmforge.backend.families.lfm2.vision import embedding_graph, vision_graph


def build(request: BuildRequest) -> BuiltGraphs:
    """LFM2-VL: our vision and embedding graphs, the ORT GenAI builder's decoder."""
    checkpoint = request.checkpoint
    work = request.work
    ctx = request.ctx
    import onnx_ir as ir

    cfg, folder = checkpoint.cfg, checkpoint.folder
    models = {
        "vision_encoder": vision_graph(cfg),
        "embedding": embedding_graph(cfg),
    }
    # The builder's CPU flavour for every target: its CUDA flavour fuses the Q/K norms into
    # GroupQueryAttention under other weight names, which could not be checked here
    # without a GPU. The CUDA provider runs the portable graph too.
    layers = int(cfg.text.get("num_hidden_layers"))
    built = decoder.builder_decoder(folder, work, "cpu", ctx, layers)
    models["decoder"] = ir.load(built / "model.onnx")
    fixed = decoder.add_conv_biases(models["decoder"], cfg, folder)
    return BuiltGraphs(
        models=models,
        baked={"decoder": decoder.builder_sources(cfg, checkpoint.output_tied)},
        work=work,
        notes=[fixed] if fixed else [],
    )
