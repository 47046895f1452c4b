"""Qwen3-VL: what mobius's module is told before the build."""

from __future__ import annotations

from typing import Any


def deepstack_vision_output(module: Any, hf_config: Any) -> None:
    """Qwen3-VL: the vision graph outputs [merged ‖ DeepStack level 1 ‖ … ‖ level K].

    mobius computes the DeepStack mergers but its 3-model vision encoder returns only
    the merged features. The runtime has one image_features tensor, so the K levels
    travel as extra columns (see graph_fixes.qwen3_deepstack for the other ends).
    """
    from mobius.models.qwen_vl import Qwen3VLVisionEncoderModel

    class DeepStackVisionEncoder(Qwen3VLVisionEncoderModel):  # type: ignore[misc]
        def forward(self, op: Any, pixel_values: Any, image_grid_thw: Any) -> Any:
            outputs = self.visual(op, hidden_states=pixel_values, grid_thw=image_grid_thw)
            if isinstance(outputs, tuple) and len(outputs) > 1:
                return op.Concat(*outputs, axis=-1)
            return outputs[0] if isinstance(outputs, tuple) else outputs

    module.vision_encoder.__class__ = DeepStackVisionEncoder
