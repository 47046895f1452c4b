"""Measure whether LightOnOCR could run on ORT GenAI 0.18's `mistral3` pipeline.

Two measurements, both printed:
1. The installed wheel's mistral3 processor, on a mistral3-typed package (the tiny
   Pixtral-12B one, built here): how many [IMG_BREAK] / [IMG_END] it lays out per picture.
   Its source says one per row, always (src/models/mistral3_image_processor.cpp,
   `BuildImageTokenSequence`).
2. A tiny random LightOnOcrForConditionalGeneration in transformers: its processor puts
   only [IMG] x rows*cols (`LightOnOcrProcessor.replace_image_token`); what the model
   computes when the runtime's row markers are in the prompt instead.

Usage: .venv/bin/python scripts/lightonocr_on_mistral3.py WORKDIR
"""

from __future__ import annotations

import sys
from pathlib import Path


def runtime_markers(work: Path) -> tuple[list[list[int]], dict[str, int]]:
    """The runtime's image block for resources/probe.png on a mistral3 package."""
    import onnxruntime_genai as og

    from mmforge.backend.convert import convert
    from mmforge.backend.tiny import build_tiny

    tiny = build_tiny("pixtral", work / "tiny").folder
    package = work / "pkg"
    if not package.exists():
        convert(str(tiny), package)
    model = og.Model(str(package))
    processor = model.create_multimodal_processor()
    tok = og.Tokenizer(model)
    probe = str(Path(__file__).parents[1] / "resources" / "probe.png")
    out = processor("<s>[INST][IMG]Hi[/INST]", images=og.Images.open(probe))
    ids = out["input_ids"].as_numpy().ravel().tolist()
    sizes = out["image_sizes"].as_numpy().tolist()
    names = ("[IMG]", "[IMG_BREAK]", "[IMG_END]")
    counts = {n: ids.count(int(tok.encode(n)[0])) for n in names}
    return sizes, counts


def lightonocr_with_markers() -> dict[str, float]:
    """A tiny LightOnOCR: logits for HF's prompt against the prompt with row markers."""
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.LightOnOcrConfig(
        vision_config={
            "model_type": "pixtral",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "head_dim": 16,
            "image_size": 112,
            "patch_size": 14,
        },
        text_config={
            "model_type": "qwen3",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "vocab_size": 300,
        },
        image_token_id=290,
        spatial_merge_size=2,
    )
    model = T.LightOnOcrForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.08)
    rows, cols = 2, 3  # a 56 x 84 picture: 2 x 3 merged blocks of 28 px
    pixels = torch.randn(1, 3, rows * 28, cols * 28)
    sizes = torch.tensor([[rows * 28, cols * 28]])
    img, brk, end, bos, text = 290, 291, 292, 1, [5, 6, 7]
    hf = [bos, *[img] * (rows * cols), *text]
    rt = [bos]
    for r in range(rows):
        rt += [img] * cols + [brk if r < rows - 1 else end]
    rt += text

    def last_logits(ids: list[int]) -> torch.Tensor:
        t = torch.tensor([ids])
        with torch.no_grad():
            out = model(input_ids=t, pixel_values=pixels, image_sizes=sizes)
        return out.logits[0, -1]

    a, b = last_logits(hf), last_logits(rt)
    return {
        "hf_prompt_len": len(hf),
        "runtime_prompt_len": len(rt),
        "max_abs_diff": float((a - b).abs().max()),
        "cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0)),
        "argmax_equal": bool(a.argmax() == b.argmax()),
    }


def main() -> None:
    """Print both measurements."""
    work = Path(sys.argv[1])
    sizes, counts = runtime_markers(work)
    rows = sum(h // 8 for h, _ in sizes)  # the tiny package: 8 px patches, no merge
    print(f"runtime (onnxruntime-genai 0.18 wheel): image_sizes {sizes}, {counts}, rows {rows}")
    print(f"LightOnOCR tiny, HF prompt vs the runtime's framing: {lightonocr_with_markers()}")


if __name__ == "__main__":
    main()
