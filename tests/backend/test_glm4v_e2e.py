"""GLM-4.1V end to end on the runtime's qwen2_5_vl pipeline: greedy tokens equal transformers'.

The probe that came before the converter (the registry's tests convert glm4v now): a tiny
random Glm4vForConditionalGeneration on the tiny Qwen2.5-VL package's tokenizer (whose marker ids
serve as GLM's image_start / image / image_end ids), our three graphs
(backend/families/glm4v/) holding its weights, genai_config type qwen2_5_vl, the
processor's pixel budget halved. The control leaves the runtime 1-D positions (no
vision_start_token_id it can find) and must then differ.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

GLM_MIN, GLM_MAX = 112 * 112, 9633792
H, LAYERS, HEADS, KV = 128, 2, 4, 2
IMAGE, START, END, PAD, EOS, VOCAB = 389, 387, 388, 384, 386, 391
NEW = 16


def _model(seed: int):
    import torch
    from transformers import Glm4vConfig, Glm4vForConditionalGeneration

    torch.manual_seed(seed)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
            "mrope_section": [2, 3, 3]}  # fmt: skip
    config = Glm4vConfig(
        text_config={
            "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "intermediate_size": 96, "vocab_size": VOCAB,
            "rope_parameters": rope, "pad_token_id": PAD, "eos_token_id": EOS,
        },
        vision_config={"depth": 2, "hidden_size": 32, "num_heads": 2, "out_hidden_size": H,
                       "intermediate_size": 64, "image_size": 56, "patch_size": 14},
        image_token_id=IMAGE, image_start_token_id=START, image_end_token_id=END,
        video_token_id=390, video_start_token_id=385, video_end_token_id=EOS,
    )  # fmt: skip
    model = Glm4vForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.6)  # varied greedy tokens, not one repeated id
    return config, model


def _package(source: Path, folder: Path, config, model, positions_3d: bool) -> Path:
    import onnx_ir as ir

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.glm4v.decoder import decoder_graph
    from mmforge.backend.families.glm4v.embedding import embedding_graph
    from mmforge.backend.families.glm4v.vision import vision_graph

    folder.mkdir()
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    cfg = Cfg(config.to_dict())
    graphs = {
        "vision.onnx": vision_graph(cfg),
        "embedding.onnx": embedding_graph(VOCAB, H, IMAGE),
        "decoder.onnx": decoder_graph(cfg),
    }
    for name, graph in graphs.items():
        for key, value in graph.graph.initializers.items():
            if value.const_value is None:
                value.const_value = ir.tensor(weights.pop(key).astype(np.float32), name=key)
        ir.save(graph, folder / name)
    assert not weights, sorted(weights)  # every tensor of the model is in a graph
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, folder / name)
    proc = json.loads((source / "processor_config.json").read_text())
    for step in proc["processor"]["transforms"]:
        if step["operation"]["type"] == "Resize":
            step["operation"]["attrs"].update(min_pixels=GLM_MIN // 2, max_pixels=GLM_MAX // 2)
    (folder / "processor_config.json").write_text(json.dumps(proc))
    genai = json.loads((source / "genai_config.json").read_text())
    m = genai["model"]
    start = START if positions_3d else VOCAB  # an id no prompt holds: 1-D positions
    m.update(vocab_size=VOCAB, eos_token_id=[EOS], pad_token_id=PAD, image_token_id=IMAGE,
             video_token_id=390, vision_start_token_id=start)  # fmt: skip
    m["decoder"].update(head_size=H // HEADS, hidden_size=H, num_attention_heads=HEADS,
                        num_hidden_layers=LAYERS, num_key_value_heads=KV)  # fmt: skip
    m["vision"].pop("window_size", None)
    (folder / "genai_config.json").write_text(json.dumps(genai))
    return folder


def _runtime_tokens(
    folder: Path, prompt: str, pictures: list[Path]
) -> tuple[list[int], np.ndarray]:
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(folder)))
    images = og.Images.open(*[str(p) for p in pictures])
    named = model.create_multimodal_processor()(prompt, images=images)
    ids = named["input_ids"].as_numpy().reshape(1, -1).astype(np.int64)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=ids.shape[1] + NEW, do_sample=False)
    generator = og.Generator(model, params)
    generator.set_inputs(named)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)][ids.shape[1] :], ids


def _transformers_tokens(model, ids: np.ndarray, pictures: list[Path]) -> list[int]:
    import torch
    from PIL import Image
    from transformers import Glm4vImageProcessorPil

    pixels = Glm4vImageProcessorPil(size={"shortest_edge": GLM_MIN, "longest_edge": GLM_MAX})(
        images=[Image.open(p).convert("RGB") for p in pictures], return_tensors="pt"
    )
    ids_t = torch.tensor(ids)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids_t, attention_mask=torch.ones_like(ids_t),
            pixel_values=pixels["pixel_values"], image_grid_thw=pixels["image_grid_thw"],
            mm_token_type_ids=(ids_t == IMAGE).int(), max_new_tokens=NEW, do_sample=False,
            eos_token_id=EOS, pad_token_id=PAD,
        )  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize(
    "seed,positions_3d,sizes",
    [
        (0, True, [(300, 400)]),
        (1, True, [(300, 400)]),
        (2, True, [(200, 150), (90, 260)]),  # two pictures of other sizes, held out
        (0, False, [(300, 400)]),
    ],
)
def test_greedy_tokens_equal_transformers(package, tmp_path, seed, positions_3d, sizes):
    from PIL import Image

    config, model = _model(seed)
    folder = _package(package("qwen2_5_vl"), tmp_path / "glm", config, model, positions_3d)
    rng = np.random.default_rng(seed)
    pictures = []
    for i, (h, w) in enumerate(sizes):
        pictures.append(tmp_path / f"picture{i}.png")
        Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8")).save(pictures[-1])
    marker = "<|vision_start|><|image_pad|><|vision_end|>"
    prompt = (
        f"<|im_start|>user\n{marker * len(pictures)}What is in it?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    runtime, ids = _runtime_tokens(folder, prompt, pictures)
    if sizes == [(300, 400)]:
        assert int((ids == IMAGE).sum()) == 154  # GLM's count for 300×400: 22·28 / 2²
    expected = _transformers_tokens(model, ids, pictures)
    assert len(set(expected)) > 4  # varied tokens, so a match means something
    if positions_3d:
        assert runtime == expected
    else:  # the control: 1-D positions are not GLM's, and the tokens show it
        assert runtime != expected
