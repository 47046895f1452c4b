"""Phi-3.5-Vision's graphs: mobius's three, from the remote layout read as data.

mobius 0.1 knows `phi3_v`, but reads it through a transformers config (there is none for
remote code here) and fixes the CLIP tower at ViT-L/14-336's sizes whatever the weights
say. This builder gives it a Phi-3 config made from config.json (`layout.text_config`)
with the tower sizes read from the weights, then completes the vision graph with the HD
transform and projector (`hd_graph.py`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._graphs import BuiltGraphs, quiet_library
from mmforge.backend.families._hooks import BuildRequest
from mmforge.backend.families.phi3v import hd_graph, layout

if TYPE_CHECKING:
    from mmforge.backend.checkpoint import Checkpoint


class _Renames:
    """mobius's weight renames plus the HD transform's tensors (which mobius drops)."""

    def __init__(self, module: Any):
        self.module = module

    def preprocess_weights(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        renamed = dict(self.module.preprocess_weights(dict(state_dict)))
        for name, value in state_dict.items():
            part = layout.tensor_part(name)
            if part is not None and part[0] == "projector":
                renamed[hd_graph.PREFIX + part[1]] = value
        return renamed


def mobius_config(checkpoint: Checkpoint) -> Any:
    """The Phi-3 config mobius builds `phi3_v` from, with the tower's real sizes."""
    from transformers import Phi3Config

    written = checkpoint.written
    hf_config = Phi3Config.from_dict(layout.text_config(written))
    # mobius picks its vision hook by model_type and reads img_processor from the config.
    hf_config.model_type = "phi3_v"
    hf_config.img_processor = dict(written.get("img_processor") or {})
    hf_config.embd_layer = dict(written.get("embd_layer") or {})
    hf_config.tie_word_embeddings = checkpoint.output_tied
    return hf_config


def build(request: BuildRequest) -> BuiltGraphs:
    """Mobius's phi3_v graphs in float32, the vision graph completed for the runtime."""
    checkpoint = request.checkpoint
    with quiet_library():
        from mobius._builder import build_from_module, resolve_dtype
        from mobius._config_resolver import _config_from_hf, _default_task_for_model
        from mobius._registry import registry

    hf_config = mobius_config(checkpoint)
    shapes = {t.name: list(t.shape) for t in checkpoint.tensors or ()}
    tower = layout.vision_config(checkpoint.written, shapes)
    module_class = registry.get("phi3_v")
    try:
        with quiet_library():
            config = _config_from_hf(hf_config, parent_config=hf_config, module_class=module_class)
            assert config.vision is not None
            # mobius's hook fixes ViT-L/14-336 (24 layers, 4096 wide, 16 heads).
            vision = dataclasses.replace(
                config.vision,
                hidden_size=tower["hidden_size"],
                intermediate_size=tower["intermediate_size"],
                num_hidden_layers=tower["num_hidden_layers"],
                num_attention_heads=tower["num_attention_heads"],
                image_size=tower["image_size"],
                patch_size=tower["patch_size"],
                norm_eps=tower["layer_norm_eps"],
                hidden_act=tower["hidden_act"],
            )
            config = dataclasses.replace(config, vision=vision, dtype=resolve_dtype("f32"))
            module = module_class(config)
            package = build_from_module(
                module, config, _default_task_for_model("phi3_v"), execution_provider="default"
            )
    except Exception as e:
        raise MmforgeError(
            f"Building the Phi-3.5-Vision graphs failed: {type(e).__name__}: {e}",
            "This checkpoint's configuration is not supported yet",
        ) from e
    models = {name: package[name] for name in package}  # f32 throughout: inputs too
    note = hd_graph.complete_vision_graph(
        models["vision_encoder"], checkpoint.written, tower, int(checkpoint.cfg.get("hidden_size"))
    )
    return BuiltGraphs(models=models, module=_Renames(module), notes=[note])
