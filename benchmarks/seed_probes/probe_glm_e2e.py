"""GLM-4.1V end to end on ONNX Runtime GenAI 0.18's qwen2_5_vl pipeline, by hand.

A tiny random Glm4vForConditionalGeneration on the tiny Qwen2.5-VL package's tokenizer (its
marker ids are GLM's image_start/image/image_end ids here), our three graphs
(backend/families/glm4v/) with its weights, genai_config type qwen2_5_vl and the
processor's pixel budget halved: greedy tokens from the runtime against transformers'
generate on the same picture. Needs build.py qwen2_5_vl first (SEED_PROBE_DIR).
Not mmforge's converter: a measurement that the host runs the model exactly.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx_ir as ir
import onnxruntime_genai as og
import torch
from PIL import Image
from transformers import Glm4vConfig, Glm4vForConditionalGeneration, Glm4vImageProcessorPil

from mmforge.backend.families import Cfg
from mmforge.backend.families.glm4v.decoder import decoder_graph
from mmforge.backend.families.glm4v.embedding import embedding_graph
from mmforge.backend.families.glm4v.vision import vision_graph

src = Path(os.environ.get("SEED_PROBE_DIR", "/tmp/seedprobe")) / "pkg-qwen2_5_vl"
out = Path(os.environ.get("GLM_PROBE_DIR", "/tmp/glmprobe")) / "glm-e2e"
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
GLM_MIN, GLM_MAX = 112 * 112, 9633792
H, LAYERS, HEADS, KV = 128, 2, 4, 2

torch.manual_seed(seed)
config = Glm4vConfig(
    text_config={
        "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV, "intermediate_size": 96, "vocab_size": 391,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.5, "mrope_section": [2, 3, 3]},
        "pad_token_id": 384, "eos_token_id": 386,
    },
    vision_config={"depth": 2, "hidden_size": 32, "num_heads": 2, "out_hidden_size": H,
                   "intermediate_size": 64, "image_size": 56, "patch_size": 14},
    image_token_id=389, image_start_token_id=387, image_end_token_id=388,
    video_token_id=390, video_start_token_id=385, video_end_token_id=386,
)  # fmt: skip
model = Glm4vForConditionalGeneration(config).eval()
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0, float(os.environ.get("GLM_STD", "0.3")))
weights = {k: v.numpy() for k, v in model.state_dict().items()}

if out.exists():
    shutil.rmtree(out)
out.mkdir(parents=True)
cfg = Cfg(config.to_dict())
graphs = {
    "vision.onnx": vision_graph(cfg),
    "embedding.onnx": embedding_graph(391, H, 389),
    "decoder.onnx": decoder_graph(cfg),
}
used = set()
for name, graph in graphs.items():
    for key, value in graph.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(weights[key].astype(np.float32), name=key)
            used.add(key)
    ir.save(graph, out / name)
print("weights no graph reads:", sorted(set(weights) - used))

for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(src / name, out / name)
proc = json.loads((src / "processor_config.json").read_text())
for step in proc["processor"]["transforms"]:
    if step["operation"]["type"] == "Resize":
        step["operation"]["attrs"].update(min_pixels=GLM_MIN // 2, max_pixels=GLM_MAX // 2)
(out / "processor_config.json").write_text(json.dumps(proc))
genai = json.loads((src / "genai_config.json").read_text())
m = genai["model"]
m.update(vocab_size=391, eos_token_id=[386], pad_token_id=384, image_token_id=389,
         video_token_id=390, vision_start_token_id=387)  # fmt: skip
m["decoder"].update(head_size=H // HEADS, hidden_size=H, num_attention_heads=HEADS,
                    num_hidden_layers=LAYERS, num_key_value_heads=KV)  # fmt: skip
m["vision"].pop("window_size", None)
if os.environ.get("GLM_CONTROL") == "1d":  # negative control: the runtime's 1-D positions
    m["vision_start_token_id"] = 391
(out / "genai_config.json").write_text(json.dumps(genai, indent=1))

picture = out / "picture.png"
pixels = (np.random.default_rng(seed).random((300, 400, 3)) * 255).astype("uint8")
Image.fromarray(pixels).save(picture)
prompt = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is in it?<|im_end|>\n"
    "<|im_start|>assistant\n"
)

og_model = og.Model(og.Config(str(out)))
named = og_model.create_multimodal_processor()(prompt, images=og.Images.open(str(picture)))
ids = named["input_ids"].as_numpy().reshape(1, -1).astype(np.int64)
new = 16
params = og.GeneratorParams(og_model)
params.set_search_options(max_length=ids.shape[1] + new, do_sample=False)
generator = og.Generator(og_model, params)
generator.set_inputs(named)
while not generator.is_done():
    generator.generate_next_token()
runtime = [int(t) for t in generator.get_sequence(0)][ids.shape[1] :]

hf_pixels = Glm4vImageProcessorPil(size={"shortest_edge": GLM_MIN, "longest_edge": GLM_MAX})(
    images=Image.open(picture).convert("RGB"), return_tensors="pt"
)
ids_t = torch.tensor(ids)
with torch.no_grad():
    hf = model.generate(
        input_ids=ids_t,
        attention_mask=torch.ones_like(ids_t),
        pixel_values=hf_pixels["pixel_values"],
        image_grid_thw=hf_pixels["image_grid_thw"],
        mm_token_type_ids=(ids_t == 389).int(),
        max_new_tokens=new,
        do_sample=False,
        eos_token_id=386,
        pad_token_id=384,
    )[0, ids.shape[1] :].tolist()
print("prompt ids", ids.shape[1], "image ids", int((ids == 389).sum()))
print("runtime     ", runtime)
print("transformers", hf)
print("IDENTICAL" if runtime == hf else "DIFFERENT")
