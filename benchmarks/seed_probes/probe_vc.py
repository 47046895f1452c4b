"""videochat_flash_qwen as a host: a config-chosen count per image, markers absorbed by the
package's own tokenizer; what pixel chains hand the vision graph; Resize keep_aspect_ratio."""

import json
import os
import shutil
from pathlib import Path

import onnxruntime_genai as og
from PIL import Image

root = Path(os.environ.get("SEED_PROBE_DIR", "/tmp/seedprobe"))
a = root / "a.png"
b = root / "b.png"
Image.new("RGB", (40, 30), (200, 10, 10)).save(a)
Image.new("RGB", (50, 20), (10, 200, 10)).save(b)


def make(name, k, ops, extra):
    src = root / "pkg-qwen2_5_vl"
    dst = root / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir()
    for p in src.iterdir():
        if p.name not in ("tokenizer.json", "genai_config.json"):
            (dst / p.name).symlink_to(p)
    tok = json.loads((src / "tokenizer.json").read_text())
    nxt = 391
    new = {}
    for c in extra:
        tok["added_tokens"].append(
            {
                "id": nxt,
                "content": c,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
        new[c] = nxt
        nxt += 1
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    cfg = json.loads((src / "genai_config.json").read_text())
    cfg["model"]["type"] = "videochat_flash_qwen"
    cfg["model"]["vision"] = {
        "filename": "vision.onnx",
        "config_filename": "frames.json",
        "num_visual_tokens": k,
        "inputs": {"pixel_values": "pixel_values"},
        "outputs": {"image_features": "image_features"},
    }
    (dst / "genai_config.json").write_text(json.dumps(cfg))
    tr = [{"operation": {"name": n, "type": t, "attrs": at}} for n, t, at in ops]
    (dst / "frames.json").write_text(json.dumps({"processor": {"transforms": tr}}))
    return dst, new


def rle(ids):
    out = []
    for i in ids:
        if out and out[-1][0] == i:
            out[-1][1] += 1
        else:
            out.append([i, 1])
    return " ".join(f"{i}x{n}" if n > 1 else str(i) for i, n in out)


absorb = ["<|vision_start|><|image_pad|>", "<|image_pad|><|vision_end|>"]
dec = ("decode_image", "DecodeImage", {"color_space": "RGB"})
resc = ("rescale", "Rescale", {})
cases = [
    (
        "vc-576",
        576,
        [dec, ("resize", "Resize", {"width": 336, "height": 336, "keep_aspect_ratio": 0}), resc],
        [a],
    ),
    (
        "vc-keepar",
        4,
        [dec, ("resize", "Resize", {"width": 64, "height": 64, "keep_aspect_ratio": 1}), resc],
        [a],
    ),
    ("vc-raw1", 4, [dec, resc], [a]),
    ("vc-raw2same", 4, [dec, resc], [a, a]),
    ("vc-raw2diff", 4, [dec, resc], [a, b]),
]
for name, k, ops, imgs in cases:
    folder, new = make(name, k, ops, absorb)
    try:
        model = og.Model(og.Config(str(folder)))
        named = model.create_multimodal_processor()(
            "USER: " + "<|vision_start|>" * len(imgs) + "\nabc",
            images=og.Images.open(*map(str, imgs)),
        )
        ids = [int(t) for t in named["input_ids"].as_numpy().reshape(-1)]
        print(
            name,
            "ids:",
            len(ids),
            rle(ids),
            "| pixel_values",
            named["pixel_values"].as_numpy().shape,
            "| num_image_tokens",
            named["num_image_tokens"].as_numpy().tolist(),
        )
    except RuntimeError as e:
        print(name, "ERROR", str(e)[:300])
