"""GLM-4V's vision graph (backend/families/glm4v/vision.py) against transformers' tower.

A small random Glm4vVisionModel, its weights put into the graph under the checkpoint's names,
run by ONNX Runtime on grids larger and smaller than the learned position table, square and
not: the features must be transformers' pooler_output.
"""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tower(tmp_path_factory):
    import onnx_ir as ir
    import onnxruntime as ort
    import torch
    from transformers import Glm4vConfig
    from transformers.models.glm4v.modeling_glm4v import Glm4vVisionModel

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.glm4v.vision import vision_graph

    torch.manual_seed(0)
    config = Glm4vConfig(
        vision_config={
            "depth": 2, "hidden_size": 32, "num_heads": 2, "out_hidden_size": 48,
            "intermediate_size": 64, "image_size": 56, "patch_size": 14,
        }
    )  # fmt: skip
    model = Glm4vVisionModel(config.vision_config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)  # away from the ones/zeros a norm starts with
    graph = vision_graph(Cfg(config.to_dict()))
    weights = {"model.visual." + k: v.numpy() for k, v in model.state_dict().items()}
    for name, value in graph.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(weights.pop(name).astype(np.float32), name=name)
    assert not weights, sorted(weights)  # every tensor of the tower is in the graph
    path = tmp_path_factory.mktemp("glm4v") / "vision.onnx"
    ir.save(graph, path)
    return model, ort.InferenceSession(str(path))


@pytest.mark.parametrize("grid", [[1, 6, 8], [1, 4, 4], [1, 10, 2], [1, 2, 12]])
def test_vision_graph_is_transformers_tower(tower, grid):
    import torch

    model, session = tower
    pixels = torch.randn(
        grid[1] * grid[2], 3 * 2 * 14 * 14, generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        expected = model(pixels, grid_thw=torch.tensor([grid])).pooler_output.numpy()
    (got,) = session.run(
        None, {"pixel_values": pixels.numpy(), "image_grid_thw": np.array([grid], dtype=np.int64)}
    )
    assert got.shape == expected.shape == (grid[1] * grid[2] // 4, 48)
    assert np.abs(got - expected).max() < 1e-5 * max(1.0, float(np.abs(expected).max()))
