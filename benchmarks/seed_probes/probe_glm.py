"""GLM-4.1V's picture sizing and layout against the runtime's qwen2_5_vl processor (0.18 wheel).

For each picture size: Glm4vImageProcessor (transformers, the release's min/max pixels) against
Qwen2VLImageProcessor with min/max halved (GLM's smart_resize counts t_bar = 2 frames per picture)
and against ONNX Runtime GenAI's qwen2_5_vl processor with the same halved values, reading
image_grid_thw and pixel_values. Needs a tiny Qwen2.5-VL package (build.py qwen2_5_vl) in
SEED_PROBE_DIR; writes its variant under GLM_PROBE_DIR.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime_genai as og
from PIL import Image
from transformers import Glm4vImageProcessor, Qwen2VLImageProcessor

src = Path(os.environ.get("SEED_PROBE_DIR", "/tmp/seedprobe")) / "pkg-qwen2_5_vl"
root = Path(os.environ.get("GLM_PROBE_DIR", "/tmp/glmprobe"))
GLM_MIN, GLM_MAX = 112 * 112, 9633792  # the GLM-4V releases' preprocessor_config.json size


def package(name, low, high):
    dst = root / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for p in src.iterdir():
        if p.name != "processor_config.json":
            (dst / p.name).symlink_to(p)
    proc = json.loads((src / "processor_config.json").read_text())
    for t in proc["processor"]["transforms"]:
        if t["operation"]["type"] == "Resize":
            t["operation"]["attrs"].update(min_pixels=low, max_pixels=high)
    (dst / "processor_config.json").write_text(json.dumps(proc))
    model = og.Model(og.Config(str(dst)))
    return model.create_multimodal_processor()


def runtime(proc, path):
    named = proc("<|vision_start|><|vision_end|>hi", images=og.Images.open(str(path)))
    return named["image_grid_thw"].as_numpy().reshape(-1).tolist(), named["pixel_values"].as_numpy()


glm = Glm4vImageProcessor(size={"shortest_edge": GLM_MIN, "longest_edge": GLM_MAX})
qwen = Qwen2VLImageProcessor(min_pixels=GLM_MIN // 2, max_pixels=GLM_MAX // 2)
half = package("q-glm-half", GLM_MIN // 2, GLM_MAX // 2)
same = package("q-glm-same", GLM_MIN, GLM_MAX)
sizes = [
    (300, 400),
    (224, 224),
    (20, 30),
    (27, 300),
    (50, 50),
    (70, 126),
    (812, 1134),
    (1080, 1920),
    (3000, 4000),
    (33, 2000),
    (480, 640),
    (57, 85),
]
if len(sys.argv) > 1:
    sizes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1:]]
rng = np.random.default_rng(0)
for h, w in sizes:
    path = root / f"img_{h}x{w}.png"
    Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8")).save(path)
    pic = Image.open(path).convert("RGB")
    g = glm(images=pic, return_tensors="pt")
    try:
        q = qwen(images=pic, return_tensors="pt")
        q_grid = q["image_grid_thw"].reshape(-1).tolist()
        q_diff = (
            float((g["pixel_values"] - q["pixel_values"]).abs().max())
            if q["pixel_values"].shape == g["pixel_values"].shape
            else "shape"
        )
    except ValueError as e:
        q_grid, q_diff = f"error: {e}", "-"
    g_grid = g["image_grid_thw"].reshape(-1).tolist()
    r_grid, r_px = runtime(half, path)
    s_grid, _ = runtime(same, path)
    r_diff = (
        float(np.abs(g["pixel_values"].numpy() - r_px.reshape(g["pixel_values"].shape)).max())
        if r_px.size == g["pixel_values"].numel()
        else "shape"
    )
    print(
        f"{h}x{w}: glm {g_grid} | qwen-hf/2 {q_grid} px diff {q_diff} | "
        f"runtime/2 {r_grid} px diff {r_diff} | runtime same-values {s_grid}",
        flush=True,
    )
