"""Token identity of seed families' transformers processors against ONNX Runtime GenAI 0.18's
processors (gemma3, videochat_flash_qwen), with the package's own tokenizer.json absorbing or
renaming the runtime's marker text and the embedding's id map (ids the graph would map)."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnxruntime_genai as og
from PIL import Image
from transformers import (
    CLIPImageProcessor,
    Gemma3nAudioFeatureExtractor,
    Gemma3nProcessor,
    Idefics2ImageProcessor,
    Idefics2Processor,
    LlavaProcessor,
    PaliGemmaProcessor,
    PreTrainedTokenizerFast,
    SiglipImageProcessor,
)

root = Path(os.environ.get("SEED_PROBE_DIR", "/tmp/seedprobe"))
img = root / "photo.png"
Image.fromarray((np.random.default_rng(0).random((300, 400, 3)) * 255).astype("uint8")).save(img)
pil = Image.open(img).convert("RGB")


def hf_tokenizer(src, **special):
    tok = PreTrainedTokenizerFast(tokenizer_file=str(root / src / "tokenizer.json"), **special)
    return tok


def package(src, name, tok, extra, genai):
    dst = root / name
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir()
    for p in (root / src).iterdir():
        if p.name not in ("tokenizer.json", "genai_config.json", "tokenizer_config.json"):
            (dst / p.name).symlink_to(p)
    j = json.loads(tok.backend_tokenizer.to_str())
    nxt = max(max(a["id"] for a in j["added_tokens"]), len(j["model"]["vocab"])) + 1
    new = {}
    for c in extra:
        j["added_tokens"].append(
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
    (dst / "tokenizer.json").write_text(json.dumps(j))
    (dst / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "add_bos_token": False,
                "add_eos_token": False,
                "tokenizer_class": "PreTrainedTokenizerFast",
            }
        )
    )
    cfg = json.loads((root / src / "genai_config.json").read_text())
    genai(cfg)
    (dst / "genai_config.json").write_text(json.dumps(cfg))
    return dst, new


def videochat(k):
    def f(cfg):
        cfg["model"]["type"] = "videochat_flash_qwen"
        cfg["model"]["vision"] = {
            "filename": "vision.onnx",
            "config_filename": "frames.json",
            "num_visual_tokens": k,
            "inputs": {"pixel_values": "pixel_values"},
            "outputs": {"image_features": "image_features"},
        }

    return f


def frames(dst):
    ops = [("decode_image", "DecodeImage", {"color_space": "RGB"}), ("rescale", "Rescale", {})]
    tr = [{"operation": {"name": n, "type": t, "attrs": a}} for n, t, a in ops]
    (dst / "frames.json").write_text(json.dumps({"processor": {"transforms": tr}}))


def runtime(folder, prompt, n):
    model = og.Model(og.Config(str(folder)))
    named = model.create_multimodal_processor()(prompt, images=og.Images.open(*[str(img)] * n))
    return [int(t) for t in named["input_ids"].as_numpy().reshape(-1)], int(
        named["num_image_tokens"].as_numpy().sum()
    )


def report(name, hf_ids, rt_ids, mapping, n_feat):
    hf_ids = np.asarray(hf_ids).reshape(-1).tolist()
    mapped = [mapping.get(i, i) for i in rt_ids]
    same = mapped == hf_ids
    print(
        f"{name}: transformers {len(hf_ids)} ids, runtime {len(rt_ids)} ids, "
        f"mapped identical: {same}; runtime image features {n_feat}"
    )
    if not same:
        for i, (a, b) in enumerate(zip(hf_ids, mapped, strict=False)):
            if a != b:
                print(
                    "   first difference at",
                    i,
                    hf_ids[max(0, i - 3) : i + 4],
                    mapped[max(0, i - 3) : i + 4],
                )
                break
    return same


Q = "pkg-qwen2_5_vl"
G = "pkg-gemma3"
ok = True

# LLaVA-1.5 (and VipLLaVA, same processor): CLIP 336/14, default strategy -> 576 <image>

tok = hf_tokenizer(Q)
tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
proc = LlavaProcessor(
    image_processor=CLIPImageProcessor(
        size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336}
    ),
    tokenizer=tok,
    patch_size=14,
    vision_feature_select_strategy="default",
    num_additional_image_tokens=1,
)
for n in (1, 2):
    hf = proc(text="USER: " + "<image>" * n + "\nWhat is it? ASSISTANT:", images=[pil] * n)[
        "input_ids"
    ]
    dst, new = package(
        Q,
        f"llava{n}",
        tok,
        ["<|vision_start|><|image_pad|>", "<|image_pad|><|vision_end|>"],
        videochat(576),
    )
    frames(dst)
    rt, nf = runtime(dst, "USER: " + "<|vision_start|>" * n + "\nWhat is it? ASSISTANT:", n)
    image = tok.convert_tokens_to_ids("<image>")
    ok &= report(
        f"llava x{n} on videochat_flash_qwen K=576",
        hf,
        rt,
        {v: image for v in new.values()} | {tok.convert_tokens_to_ids("<|image_pad|>"): image},
        nf,
    )

# PaliGemma 224: <image>x256*n <bos> prompt \n ; on gemma3 (fixed 256) and on videochat (K=256)

tok = hf_tokenizer(G, bos_token="<bos>")
tok.add_special_tokens(
    {"additional_special_tokens": ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]}
)
ip = SiglipImageProcessor(size={"height": 224, "width": 224})
ip.image_seq_length = 256
proc = PaliGemmaProcessor(image_processor=ip, tokenizer=tok)
image, bos = tok.convert_tokens_to_ids("<image>"), tok.convert_tokens_to_ids("<bos>")
soft, pad = (
    tok.convert_tokens_to_ids("<image_soft_token>"),
    tok.convert_tokens_to_ids("<|image_pad|>"),
)
for n in (1, 2):
    hf = proc(text="<image>" * n + "caption en", images=[pil] * n)["input_ids"]
    extra = ["\n\n<start_of_image><image_soft_token>", "<image_soft_token><end_of_image>\n\n"]
    dst, new = package(G, f"pali-g3-{n}", tok, extra, lambda c: None)
    rt, nf = runtime(dst, "<start_of_image>" * n + "<bos>caption en\n", n)
    ok &= report(
        f"paligemma x{n} on gemma3",
        hf,
        rt,
        {new[extra[0]]: image, new[extra[1]]: image, soft: image},
        nf,
    )
    dst, new = package(
        G,
        f"pali-vc-{n}",
        tok,
        ["<|vision_start|><|image_pad|>", "<|image_pad|><|vision_end|>"],
        videochat(256),
    )
    frames(dst)
    rt, nf = runtime(dst, "<|vision_start|>" * n + "<bos>caption en\n", n)
    ok &= report(
        f"paligemma x{n} on videochat_flash_qwen K=256",
        hf,
        rt,
        {v: image for v in new.values()} | {pad: image},
        nf,
    )

# Idefics2: <fake> <image>x64 <fake> (x5 with splitting, shared fakes),
# a space after a closing fake before text

for split in (False, True):
    tok = hf_tokenizer(Q)
    tok.add_special_tokens(
        {
            "additional_special_tokens": [
                "<fake_token_around_image>",
                "<image>",
                "<end_of_utterance>",
            ]
        }
    )
    proc = Idefics2Processor(
        image_processor=Idefics2ImageProcessor(do_image_splitting=split),
        tokenizer=tok,
        image_seq_len=64,
    )
    fake, image = (
        tok.convert_tokens_to_ids("<fake_token_around_image>"),
        tok.convert_tokens_to_ids("<image>"),
    )
    k = 64 * 5 + 4 if split else 64
    for n in (1, 2):
        hf = proc(
            text="User:" + "<image>" * n + "What is it?<end_of_utterance>\nAssistant:",
            images=[[pil] * n],
        )["input_ids"]
        extra = ["<|vision_end|><|vision_start|>"]
        dst, new = package(Q, f"idefics2-{split}-{n}", tok, extra, videochat(k))
        frames(dst)
        rt, nf = runtime(
            dst, "User:" + "<|vision_start|>" * n + " What is it?<end_of_utterance>\nAssistant:", n
        )
        start, end = (
            tok.convert_tokens_to_ids("<|vision_start|>"),
            tok.convert_tokens_to_ids("<|vision_end|>"),
        )
        # the embedding's map: markers -> <fake>;
        # within each image's pad run, every 65th slot is a <fake>
        mapped, run = [], 0
        for i in rt:
            if i == tok.convert_tokens_to_ids("<|image_pad|>"):
                mapped.append(fake if split and run % 65 == 64 else image)
                run += 1
            else:
                run = 0
                mapped.append(fake if i in (start, end, new[extra[0]]) else i)
        ok &= report(
            f"idefics2 split={split} x{n} on videochat_flash_qwen K={k}", hf, mapped, {}, nf
        )

# Gemma 3n pictures on gemma3: the same text, no mapping at all

tok = hf_tokenizer(
    G,
    bos_token="<bos>",
    extra_special_tokens={
        "image_token": "<image_soft_token>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "audio_token": "<audio_soft_token>",
        "boa_token": "<start_of_audio>",
        "eoa_token": "<end_of_audio>",
    },
)
proc = Gemma3nProcessor(
    feature_extractor=Gemma3nAudioFeatureExtractor(),
    image_processor=SiglipImageProcessor(size={"height": 768, "width": 768}),
    tokenizer=tok,
)
for n in (1, 2):
    text = (
        "<start_of_turn>user\n"
        + "<start_of_image>" * n
        + "What is it?<end_of_turn>\n<start_of_turn>model\n"
    )
    hf = proc(
        text=text.replace("<start_of_image>", "<image_soft_token>"),
        images=[pil] * n,
        add_special_tokens=False,
    )["input_ids"]
    dst, new = package(G, f"gemma3n-{n}", tok, [], lambda c: None)
    rt, nf = runtime(dst, text, n)
    ok &= report(f"gemma3n x{n} on gemma3", hf, rt, {}, nf)


def idefics3_without_splitting() -> bool:
    """Idefics3 without image splitting: a constant layout."""
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    good = True
    tok = hf_tokenizer(Q)
    rows = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    tok.add_special_tokens(
        {
            "additional_special_tokens": [
                "<fake_token_around_image>",
                "<image>",
                "<end_of_utterance>",
                "<global-img>",
                *rows,
            ]
        }
    )
    proc = Idefics3Processor(
        image_processor=Idefics3ImageProcessor(do_image_splitting=False),
        tokenizer=tok,
        image_seq_len=169,
    )
    fake, image, glob = (
        tok.convert_tokens_to_ids(t)
        for t in ("<fake_token_around_image>", "<image>", "<global-img>")
    )
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    start, end = (tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    for n in (1, 2):
        text = "User:" + "<image>" * n + "What is it?<end_of_utterance>\nAssistant:"
        hf = proc(text=text, images=[[pil] * n])["input_ids"]
        # unlike Idefics2, adjacent pictures keep both fake tokens: nothing to absorb
        dst, _ = package(Q, f"idefics3-{n}", tok, [], videochat(170))
        frames(dst)
        rt, nf = runtime(dst, text.replace("<image>", "<|vision_start|>"), n)
        mapped, run = [], 0
        for i in rt:
            if i == pad:
                mapped.append(glob if run == 0 else image)
                run += 1
            else:
                run = 0
                mapped.append(fake if i in (start, end) else i)
        good &= report(
            f"idefics3 no splitting x{n} on videochat_flash_qwen K=170", hf, mapped, {}, nf
        )
    return good


try:
    ok &= idefics3_without_splitting()
except (ImportError, ValueError, TypeError, AttributeError) as e:
    print("idefics3 probe could not build transformers' processor:", str(e)[:200])
print("ALL OK" if ok else "DIFFERENCES")
