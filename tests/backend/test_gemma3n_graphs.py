"""Gemma 3n's decoder and embedding graphs (backend/families/gemma3n/graphs.py) against
transformers' Gemma3nForCausalLM and Gemma3nModel.

A small random text model with every Gemma 3n mechanism switched on (AltUp with four
streams, Laurel, per-layer inputs, the Gaussian top-k on two layers, KV sharing on the last
two of six layers, a sliding window shorter than the prompt, the logit soft-cap), its
weights put into the graphs under the checkpoint's names and run by ONNX Runtime: the
prefill's logits, then a cached step's, must be transformers'.
"""

from __future__ import annotations

import numpy as np
import pytest

LAYERS = 6
KINDS = ["sliding_attention", "sliding_attention", "full_attention"] * 2
TEXT = {
    "vocab_size": 300, "vocab_size_per_layer_input": 256, "hidden_size": 64,
    "intermediate_size": [96, 96, 128, 128, 96, 96], "num_hidden_layers": LAYERS,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "hidden_size_per_layer_input": 8, "num_kv_shared_layers": 2, "laurel_rank": 8,
    "sliding_window": 5, "layer_types": KINDS,
    "activation_sparsity_pattern": [0.95, 0.9, 0.0, 0.0, 0.0, 0.0],
    "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def text_model():
    import torch
    from transformers import Gemma3nForCausalLM, Gemma3nTextConfig

    torch.manual_seed(0)
    model = Gemma3nForCausalLM(Gemma3nTextConfig(**TEXT)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0, 0.15)
            else:  # norms, AltUp's output scale (zeros at init)
                p.normal_(1.0, 0.3)
    return model


def _session(model, weights, tmp_path, name):
    import onnx_ir as ir
    import onnxruntime as ort

    left = dict(weights)
    for key, value in model.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(left.pop(key).astype(np.float32), name=key)
    path = tmp_path / f"{name}.onnx"
    ir.save(model, path)
    return ort.InferenceSession(str(path)), left


def test_decoder_is_transformers_text_model(text_model, tmp_path):
    import torch
    from transformers import DynamicCache

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.gemma3n.graphs import decoder_graph

    model = text_model
    weights = {k.replace("model.", "model.language_model.", 1): v.numpy()
               for k, v in model.state_dict().items()}  # fmt: skip
    session, left = _session(
        decoder_graph(Cfg({"text_config": TEXT}), tied=True), weights, tmp_path, "decoder"
    )
    # what the embedding graph holds, and the shared layers' unused projections
    assert all(
        "embed_tokens_per_layer" in k
        or "per_layer_model_projection" in k
        or "per_layer_projection_norm" in k
        or k == "lm_head.weight"
        for k in left
    ), sorted(left)

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 300, (1, 9), generator=gen)
    lm = model.model
    with torch.no_grad():
        embeds = lm.embed_tokens(ids)
        tokens = lm.get_per_layer_inputs(ids)
        per_layer = lm.project_per_layer_inputs(embeds, tokens)
        cache = DynamicCache(config=model.config)
        out = model(inputs_embeds=embeds, per_layer_inputs=tokens, cache=cache, use_cache=True)
    feeds = {
        "inputs_embeds": embeds.numpy(),
        "per_layer_inputs": per_layer.reshape(1, 9, -1).numpy(),
        "attention_mask": np.ones((1, 9), dtype=np.int64),
        "position_ids": np.arange(9)[None],
    }
    for i in range(LAYERS - 2):
        feeds[f"past_key_values.{i}.key"] = np.zeros((1, 2, 0, 16), np.float32)
        feeds[f"past_key_values.{i}.value"] = np.zeros((1, 2, 0, 16), np.float32)
    names = [o.name for o in session.get_outputs()]
    assert names[0] == "logits" and len(names) == 1 + 2 * (LAYERS - 2)
    got = dict(zip(names, session.run(None, feeds), strict=True))
    expected = out.logits.numpy()
    assert np.abs(got["logits"] - expected).max() < 1e-4 * max(1.0, float(np.abs(expected).max()))

    # one cached step
    step = torch.tensor([[7]])
    with torch.no_grad():
        e2 = lm.embed_tokens(step)
        t2 = lm.get_per_layer_inputs(step)
        p2 = lm.project_per_layer_inputs(e2, t2)
        out2 = model(inputs_embeds=e2, per_layer_inputs=t2, cache=cache, use_cache=True,
                     position_ids=torch.tensor([[9]]))  # fmt: skip
    feeds = {
        "inputs_embeds": e2.numpy(),
        "per_layer_inputs": p2.reshape(1, 1, -1).numpy(),
        "attention_mask": np.ones((1, 10), dtype=np.int64),
        "position_ids": np.array([[9]]),
    }
    for i in range(LAYERS - 2):
        feeds[f"past_key_values.{i}.key"] = got[f"present.{i}.key"]
        feeds[f"past_key_values.{i}.value"] = got[f"present.{i}.value"]
    step_logits = session.run(["logits"], feeds)[0]
    expected = out2.logits.numpy()
    assert np.abs(step_logits - expected).max() < 1e-4 * max(1.0, float(np.abs(expected).max()))


def test_embedding_is_transformers_gemma3n_model(tmp_path):
    """Text, vision-range and audio-range ids and a picture's rows, as Gemma3nModel embeds them."""
    import torch
    from transformers import Gemma3nConfig, Gemma3nModel
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.gemma3n.graphs import embedding_graph
    from mmforge.backend.families.gemma3n.timm_import import timm_in_transformers

    text = {**TEXT, "vocab_size": 288}  # 256 text ids, 16 vision, 16 audio
    layout = {
        "text_config": text,
        "vision_config": {"vocab_offset": 256, "vocab_size": 16,
                          "model_args": {"channel_multiplier": 0.125}},
        "audio_config": {"vocab_offset": 272, "vocab_size": 16, "hidden_size": 24,
                         "conf_num_hidden_layers": 1, "conf_num_attention_heads": 2},
        "image_token_id": 257, "boi_token_id": 250, "eoi_token_id": 256,
        "audio_token_id": 273, "boa_token_id": 251, "eoa_token_id": 272,
    }  # fmt: skip
    torch.manual_seed(0)
    with timm_in_transformers():
        model = Gemma3nModel(Gemma3nConfig(**layout)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3) if p.ndim >= 2 else p.normal_(1.0, 0.3)
    weights = {"model." + k: v.numpy() for k, v in model.state_dict().items()}
    session, left = _session(embedding_graph(Cfg(layout)), weights, tmp_path, "embedding")
    wanted = ("embed_tokens", "per_layer_model_projection", "per_layer_projection_norm")
    unused = [
        k
        for k in left
        if (
            k.startswith(("model.embed_vision.", "model.embed_audio."))
            and "soft_embedding_norm" not in k
        )  # the vision graph's
        or k.startswith(tuple("model.language_model." + w for w in wanted))
    ]
    assert not unused, unused

    # text, <start_of_image>, 3 soft tokens, <end_of_image>, vision and audio hard ids, text
    ids = torch.tensor([[5, 250, 257, 257, 257, 256, 260, 251, 272, 280, 287, 9, 255]])
    features = torch.randn(1, 3, 64, generator=torch.Generator().manual_seed(2))
    seen = {}

    def capture(module, args, kwargs):
        seen.update(embeds=kwargs["inputs_embeds"], tokens=kwargs["per_layer_inputs"])

    handle = model.language_model.register_forward_pre_hook(capture, with_kwargs=True)
    image = BaseModelOutputWithPooling(pooler_output=features)
    with torch.no_grad():
        model(input_ids=ids, mm_encoder_outputs={"image": image})
        per_layer = model.language_model.project_per_layer_inputs(seen["embeds"], seen["tokens"])
    handle.remove()
    for with_picture in (True, False):
        got_embeds, got_per_layer = session.run(
            None,
            {
                "input_ids": ids.numpy(),
                "image_features": features.numpy()
                if with_picture
                else np.zeros((0, 64), np.float32),
            },
        )
        expected = seen["embeds"].numpy()
        if with_picture:
            assert np.abs(got_embeds - expected).max() < 1e-5 * max(
                1.0, float(np.abs(expected).max())
            )
            expected = per_layer.reshape(1, 13, -1).numpy()
            assert np.abs(got_per_layer - expected).max() < 1e-5 * max(
                1.0, float(np.abs(expected).max())
            )
        else:  # no picture (a decode step): the soft tokens keep their hard embedding
            soft = (ids == 257).numpy()[0]
            assert np.abs(got_embeds[0, ~soft] - expected[0, ~soft]).max() < 1e-5
            assert np.abs(got_embeds[0, soft] - expected[0, soft]).max() > 1e-2
