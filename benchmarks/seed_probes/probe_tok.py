"""Can a package's own tokenizer.json absorb the marker text a runtime processor inserts?
Added tokens whose content spans a runtime marker plus its neighbour (leftmost-longest)."""

import json
import os
import shutil
import sys
from pathlib import Path

import onnxruntime_genai as og
from PIL import Image

root = Path(os.environ.get("SEED_PROBE_DIR", "/tmp/seedprobe"))
img = root / "img.png"
Image.new("RGB", (40, 30), (200, 10, 10)).save(img)


def variant(src, name, extra, mutate=None):
    dst = root / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir()
    for p in (root / src).iterdir():
        if p.name in ("tokenizer.json", "genai_config.json"):
            continue
        (dst / p.name).symlink_to(p)
    tok = json.loads((root / src / "tokenizer.json").read_text())
    nxt = max(a["id"] for a in tok["added_tokens"]) + 1
    new = {}
    for content in extra:
        tok["added_tokens"].append(
            {
                "id": nxt,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
        new[content] = nxt
        nxt += 1
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    cfg = json.loads((root / src / "genai_config.json").read_text())
    if mutate:
        mutate(cfg)
    (dst / "genai_config.json").write_text(json.dumps(cfg))
    return dst, new


def run(folder, prompt, n_images=1):
    model = og.Model(og.Config(str(folder)))
    tok = og.Tokenizer(model)
    proc = model.create_multimodal_processor()
    images = og.Images.open(*[str(img)] * n_images) if n_images else None
    named = proc(prompt, images=images)
    ids = [int(t) for t in named["input_ids"].as_numpy().reshape(-1)]
    return ids, tok, named


def rle(ids):
    out = []
    for i in ids:
        if out and out[-1][0] == i:
            out[-1][1] += 1
        else:
            out.append([i, 1])
    return " ".join(f"{i}x{n}" if n > 1 else str(i) for i, n in out)


which = sys.argv[1]
if which == "gemma3":
    for name, extra in [
        ("g-plain", []),
        ("g-merge", ["\n\n<start_of_image><image_soft_token>", "<end_of_image>\n\n"]),
    ]:
        folder, new = variant("pkg-gemma3", name, extra)
        ids, tok, named = run(folder, "<start_of_image>abc\n")
        print(name, new, "n=", len(ids), rle(ids))
        print(
            "   num_image_tokens",
            named["num_image_tokens"].as_numpy().tolist(),
            "pixel_values",
            named["pixel_values"].as_numpy().shape,
        )
        print(
            "   encode('x\\n\\n<start_of_image><image_soft_token>y') ->",
            list(tok.encode("x\n\n<start_of_image><image_soft_token>y")),
        )
elif which == "qwen":
    for name, extra in [
        ("q-plain", []),
        ("q-merge", ["<|vision_start|><|image_pad|>", "<|image_pad|><|vision_end|>"]),
    ]:

        def m(cfg):
            cfg["model"]["vision"]["spatial_merge_size"] = 1

        folder, new = variant("pkg-qwen2_5_vl", name, extra, m)
        ids, tok, named = run(folder, "USER: <|vision_start|>\nabc")
        print(name, new, "n=", len(ids), rle(ids))
        print(
            "   num_image_tokens",
            named["num_image_tokens"].as_numpy().tolist(),
            "grid",
            named["image_grid_thw"].as_numpy().tolist(),
            "pv",
            named["pixel_values"].as_numpy().shape,
        )
