"""Gemma 3n's vision graph (backend/families/gemma3n/vision.py) against timm and transformers.

A random MobileNetV5 made by timm itself (`mobilenetv5_300m_enc` at a quarter of its
channels), its weights put into the graph under the checkpoint's names, run by ONNX Runtime
at sizes that take each of the adapter's paths: upsampled and resized bilinearly (odd sizes,
where "same" padding is uneven), exactly 16×16, and average-pooled as at the release's 768.
The soft tokens then go through transformers' Gemma3nMultimodalEmbedder.
"""

from __future__ import annotations

import numpy as np
import pytest

MULTIPLIER = 0.25
TEXT_HIDDEN = 48


@pytest.fixture(scope="module")
def reference():
    import torch
    from transformers.models.gemma3n.configuration_gemma3n import (
        Gemma3nTextConfig,
        Gemma3nVisionConfig,
    )
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nMultimodalEmbedder

    from mmforge.backend.families.gemma3n.timm_import import import_timm

    timm = import_timm()
    torch.manual_seed(0)
    tower = timm.create_model(
        "mobilenetv5_300m_enc", pretrained=False, channel_multiplier=MULTIPLIER
    ).eval()
    embedder = Gemma3nMultimodalEmbedder(
        Gemma3nVisionConfig(), Gemma3nTextConfig(hidden_size=TEXT_HIDDEN)
    ).eval()
    with torch.no_grad():
        for name, p in [*tower.named_parameters(), *embedder.named_parameters()]:
            if name.endswith("gamma"):  # layer scale, 1e-5 at init: the blocks would vanish
                p.uniform_(0.2, 1.0)
            elif p.ndim == 1:  # norms start at ones, the stem's bias at zeros
                p.normal_(1.0, 0.2)
    weights = {"model.vision_tower.timm_model." + k: v for k, v in tower.state_dict().items()}
    weights |= {"model.embed_vision." + k: v for k, v in embedder.state_dict().items()}
    return tower, embedder, {k: v.numpy() for k, v in weights.items()}


def _session(weights, size, tmp_path):
    import onnx_ir as ir
    import onnxruntime as ort

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.gemma3n.vision import vision_graph

    cfg = Cfg(
        {
            "vision_config": {"model_args": {"channel_multiplier": MULTIPLIER}},
            "text_config": {"hidden_size": TEXT_HIDDEN},
        }
    )
    model = vision_graph(cfg, size)
    left = dict(weights)
    for name, value in model.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(left.pop(name).astype(np.float32), name=name)
    hard = ("model.embed_vision.embedding.", "model.embed_vision.hard_embedding_norm.")
    unused = sorted(k for k in left if not k.startswith(hard))  # those embed token ids
    assert not unused, unused[:5]  # every tensor of the tower and the soft path is in it
    path = tmp_path / "vision.onnx"
    ir.save(model, path)
    return ort.InferenceSession(str(path))


@pytest.mark.parametrize("size", [200, 256, 768])
def test_vision_graph_is_timm_tower_and_transformers_embedder(reference, size, tmp_path):
    import torch

    tower, embedder, weights = reference
    session = _session(weights, size, tmp_path)
    pixels = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(size))
    with torch.no_grad():
        features = tower.forward_features(pixels)
        assert features.shape == (2, 2048, 16, 16)
        soft = features.reshape(2, 2048, 256).permute(0, 2, 1) * 2048**0.5
        expected = embedder(inputs_embeds=soft).numpy()
    (got,) = session.run(None, {"pixel_values": pixels.numpy()})
    assert got.shape == expected.shape == (2, 256, TEXT_HIDDEN)
    assert np.abs(got - expected).max() < 1e-4 * max(1.0, float(np.abs(expected).max()))
    # the two pictures are told apart (nothing mixes across the batch)
    assert np.abs(got[0] - got[1]).max() > 1e-2


def test_tower_blocks_are_timms(reference):
    from mmforge.backend.families.gemma3n.vision import blocks

    tower = reference[0]
    ours = blocks(MULTIPLIER)
    assert [len(s) for s in ours] == [len(s) for s in tower.blocks] == [3, 5, 37, 39]
    kinds = {"EdgeResidual": "er", "UniversalInvertedResidual": "uir", "MobileAttention": "mqa"}
    for stage, theirs in zip(ours, tower.blocks, strict=True):
        for b, block in zip(stage, theirs, strict=True):
            assert b.kind == kinds[type(block).__name__]
            if b.kind == "er":
                out, stride = block.conv_pwl.out_channels, block.conv_exp.stride[0]
            elif b.kind == "uir":
                out = block.pw_proj.conv.out_channels
                convs = [m for m in (block.dw_start, block.dw_mid) if hasattr(m, "conv")]
                stride = max([1] + [m.conv.stride[0] for m in convs])
            else:  # a stride only decides the skip
                out, stride = block.attn.output.proj.out_channels, b.stride
                assert block.has_skip == (b.stride == 1 and b.cin == b.cout)
                assert (b.heads, b.dim, b.kv_stride) == (
                    block.attn.num_heads, block.attn.key_dim, block.attn.kv_stride
                )  # fmt: skip
            assert (b.cout, b.stride) == (out, stride)
            first = {
                "er": lambda m: m.conv_exp,
                "uir": lambda m: m.pw_exp.conv,
                "mqa": lambda m: m.attn.query.proj,
            }[b.kind](block)
            assert b.cin == first.in_channels


@pytest.mark.parametrize(
    ("vision", "message"),
    [
        ({"architecture": "mobilenetv5_base"}, "mobilenetv5_300m_enc"),
        ({"model_args": {"pad_type": ""}}, "'pad_type'"),
        ({"model_args": {"channel_multiplier": "half"}}, "not usable"),
        ({"model_args": ["channel_multiplier"]}, "not a mapping"),
        ({"hidden_size": 1024}, "gives 2048"),
    ],
)
def test_a_tower_it_does_not_build_is_refused(vision, message):
    from mmforge.backend.errors import MmforgeError
    from mmforge.backend.families import Cfg
    from mmforge.backend.families.gemma3n.vision import vision_graph

    cfg = Cfg({"vision_config": vision, "text_config": {"hidden_size": 8}})
    with pytest.raises(MmforgeError, match=message) as refused:
        vision_graph(cfg, 64)
    assert refused.value.hint  # says what to do next
