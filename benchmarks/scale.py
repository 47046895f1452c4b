"""A real model size on an ordinary machine: Qwen2.5-VL-3B shapes in bfloat16, converted.

Builds, offline, a checkpoint with the released shapes of Qwen/Qwen2.5-VL-3B-Instruct
(36 decoder layers of width 2048, the 32-block vision tower, a 151,936-token vocabulary,
tied embeddings) in bfloat16, in two shards under the release's names and with its
config.json text; random weights, written one tensor at a time. Then, each in a fresh
process, it measures:
  - copy:     `cp -r` of the checkpoint plus `sync` (the floor for moving the bytes);
  - mmforge int4 and mmforge f16 (--dtypes): `mmforge convert`, a validated
    package; its peak RSS before the runtime check, and the whole run's;
  - builder int4: ONNX Runtime GenAI's model builder making the int4 text decoder alone
    from the same folder (the anchor).
It prints wall time, peak RSS, package size and the ratios, and inspect's predictions of
package size and conversion peak beside what was measured.

    python benchmarks/scale.py [--work /tmp/mmforge-scale] [--dtypes int4,f16] [--skip-builder]
    python benchmarks/scale.py --chat   # time to first token and decode speed, int4 vs HF

With --chat it converts to int4 (once) and answers a prompt of about 1,000 tokens with
one image, greedy, in ONNX Runtime GenAI and in transformers (float32; bfloat16 matmuls
are slower on this CPU), each in a fresh process: time to first token and decode tokens/s.

Takes about half an hour on a 2-core machine and needs about 25 GB of disk.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from convert import measure

VOCAB = 151936


def released_config(s: dict[str, int]) -> dict[str, Any]:
    """Qwen/Qwen2.5-VL-3B-Instruct's config.json text at its released sizes."""
    from mmforge.backend.families.qwen.tiny import RELEASED_3B, qwen2_5_vl_3b_release

    return qwen2_5_vl_3b_release(s, VOCAB, RELEASED_3B)


def build(folder: Path) -> tuple[int, int]:
    """Write the checkpoint; returns (parameters, largest tensor in bytes as bfloat16)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from mmforge.backend.families.qwen.tiny import QWEN2_5_VL
    from mmforge.backend.tiny.build import write_side_files
    from mmforge.backend.tiny.tokenizer import train_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(QWEN2_5_VL.specials, pinned=QWEN2_5_VL.pinned)
    text = released_config(tok.special_ids)
    with torch.device("meta"):
        # A deep copy: transformers fills the nested rope_scaling in, and the file must stay
        # the release text.
        config = Qwen2_5_VLConfig.from_dict(json.loads(json.dumps(text)))
        model = Qwen2_5_VLForConditionalGeneration(config)
    shapes = {}
    for name, p in model.named_parameters():  # tied lm_head listed once, as released
        name = name.replace("model.language_model.", "model.", 1)
        name = name.replace("model.visual.", "visual.", 1)
        shapes[name] = tuple(p.shape)
    total = sum(int(torch.Size(s).numel()) for s in shapes.values())
    gen = torch.Generator().manual_seed(0)
    names = sorted(shapes)
    half = total // 2
    groups: list[list[str]] = [[], []]
    running = 0
    for name in names:
        groups[0 if running < half else 1].append(name)
        running += int(torch.Size(shapes[name]).numel())
    weight_map = {}
    for i, group in enumerate(groups):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        tensors = {
            n: (torch.randn(shapes[n], generator=gen) * 0.02).to(torch.bfloat16) for n in group
        }
        save_file(tensors, folder / file, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, file))
        del tensors
    index = {"metadata": {"total_size": total * 2}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (folder / "config.json").write_text(json.dumps(text, indent=2))
    write_side_files(folder, QWEN2_5_VL, tok)
    largest = max(int(torch.Size(s).numel()) for s in shapes.values()) * 2
    return total, largest


def size_of(folder: Path) -> int:
    """Bytes of the files under a folder."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


PROMPT_TOKENS = 1000
DECODE_TOKENS = 16


def _prompt_inputs(package: Path) -> tuple[Any, Any]:
    """The runtime and its inputs for about PROMPT_TOKENS tokens of text and one image."""
    from mmforge import resources
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.verify import hf_reference

    rt = Runtime(package)
    sentence = "Describe the picture and everything you can see in it, one part at a time. "
    text = sentence
    while True:
        messages = hf_reference.messages_for(text, n_images=1)
        inputs = rt.process(rt.prompt(messages), images=[resources.probe_image()])
        if len(inputs.input_ids) >= PROMPT_TOKENS:
            return rt, inputs
        text += sentence


def chat_side(side: str, package: Path, checkpoint: Path) -> dict[str, Any]:
    """One side's time to first token and decode speed (run in a fresh process)."""
    rt, inputs = _prompt_inputs(package)
    if side == "ort":
        og = rt.og
        params = og.GeneratorParams(rt.model)
        params.set_search_options(
            max_length=len(inputs.input_ids) + DECODE_TOKENS + 1, do_sample=False, top_k=1
        )
        start = time.perf_counter()
        generator = og.Generator(rt.model, params)
        generator.set_inputs(inputs.named)
        generator.generate_next_token()
        first = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(DECODE_TOKENS):
            generator.generate_next_token()
        decode = time.perf_counter() - start
    else:
        import torch
        import transformers

        from mmforge.backend.verify import hf_reference

        model = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
            checkpoint, dtype="float32"
        ).eval()
        ref = hf_reference.from_runtime(checkpoint, inputs.prompt, inputs.arrays)
        with torch.no_grad():
            start = time.perf_counter()
            out = model(**ref.tensors, use_cache=True)
            first = time.perf_counter() - start
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            start = time.perf_counter()
            for _ in range(DECODE_TOKENS):
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            decode = time.perf_counter() - start
    return {
        "prompt_tokens": len(inputs.input_ids),
        "ttft_s": first,
        "decode_tok_s": DECODE_TOKENS / decode,
    }


def chat(args: Any, ck: Path) -> None:
    """Convert to int4 once, then time each side in a fresh process."""
    package = args.work / "pkg-int4-chat"
    if not (package / "genai_config.json").is_file():
        mmforge = str(Path(sys.executable).parent / "mmforge")
        subprocess.run(
            [mmforge, "convert", str(ck), "-o", str(package), "--dtype", "int4"], check=True
        )
    results = {}
    for side in ("ort", "hf"):
        out = subprocess.run(
            [sys.executable, __file__, "--chat-side", side, "--work", str(args.work)],
            capture_output=True,
            text=True,
            check=True,
        )
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
        print(side, results[side], flush=True)
    ort, hf = results["ort"], results["hf"]
    print(f"prompt: {ort['prompt_tokens']} tokens with one image; {DECODE_TOKENS} decode steps")
    print(f"{'side':<28} {'first token s':>14} {'decode tok/s':>13}")
    print(f"{'ONNX Runtime GenAI, int4':<28} {ort['ttft_s']:>14.1f} {ort['decode_tok_s']:>13.2f}")
    print(f"{'transformers, float32':<28} {hf['ttft_s']:>14.1f} {hf['decode_tok_s']:>13.2f}")
    print(
        f"ratios: first token {hf['ttft_s'] / ort['ttft_s']:.1f}x sooner, "
        f"decode {ort['decode_tok_s'] / hf['decode_tok_s']:.1f}x faster"
    )


def main() -> None:
    """Build the checkpoint (once), run each tool in a fresh process, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-scale"))
    parser.add_argument("--dtypes", default="int4,f16", help="f32 too needs 15 GB more disk")
    parser.add_argument("--skip-builder", action="store_true")
    parser.add_argument("--chat", action="store_true")
    parser.add_argument("--chat-side", choices=("ort", "hf"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    ck = args.work / "Qwen2.5-VL-3B-shapes"
    if args.chat_side:
        result = chat_side(args.chat_side, args.work / "pkg-int4-chat", ck)
        print(json.dumps(result))
        return
    if not (ck / "config.json").is_file():
        started = time.perf_counter()
        params, largest = build(ck)
        print(
            f"built {params / 1e9:.2f}B parameters ({size_of(ck) / 1e9:.1f} GB bfloat16, "
            f"largest tensor {largest / 1e9:.2f} GB) in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
    if args.chat:
        chat(args, ck)
        return
    bin_dir = Path(sys.executable).parent
    mmforge = str(bin_dir / "mmforge")
    _, _, inspected = measure([mmforge, "inspect", str(ck), "--json"], args.work)
    sizes = json.loads(inspected)["sizes"]
    tools: list[tuple[str, list[str], Path]] = [
        ("copy", ["sh", "-c", f"cp -r {ck} {args.work}/copy && sync"], args.work / "copy")
    ]
    for dtype in args.dtypes.split(","):
        out = args.work / f"pkg-{dtype}"
        cmd = [mmforge, "convert", str(ck), "-o", str(out), "--dtype", dtype, "--json"]
        tools.append((f"mmforge {dtype}", cmd, out))
    if not args.skip_builder:
        out = args.work / "builder-int4"
        cmd = [
            *(sys.executable, "-m", "onnxruntime_genai.models.builder"),
            *("-i", str(ck), "-o", str(out), "-p", "int4", "-e", "cpu"),
            *("-c", str(args.work / "builder-cache"), "--extra_options", "hf_token=false"),
        ]
        tools.append(("builder int4 (decoder)", cmd, out))
    rows = []
    for name, cmd, out in tools:
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(["sync"], check=False)
        try:
            seconds, rss, stdout = measure(cmd, args.work)
        except SystemExit as e:  # a tool that cannot finish here is a result too
            rows.append((name, None, None, None, None, str(e).splitlines()[0][:120]))
            print(f"{name}: failed: {str(e)[:300]}", flush=True)
            continue
        size = size_of(out) if out.exists() else 0
        check_rss = None
        if name.startswith("mmforge"):
            manifest = json.loads(stdout)
            check_rss = manifest["peak_rss_mb"]["before_validation"] / 1e3
        rows.append((name, seconds, rss, check_rss, size, ""))
        print(f"{name}: {seconds:.0f} s, peak {rss:.2f} GB, {size / 1e9:.2f} GB", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    copy_s = rows[0][1] or 1.0
    print()
    print(
        f"{'tool':<24} {'wall s':>8} {'x copy':>7} {'peak RSS GB':>12} "
        f"{'conv. GB':>9} {'package GB':>11}"
    )
    for name, seconds, rss, check_rss, size, failure in rows:
        if seconds is None:
            print(f"{name:<24} failed: {failure}")
            continue
        conv = f"{check_rss:.2f}" if check_rss is not None else "-"
        print(
            f"{name:<24} {seconds:>8.0f} {seconds / copy_s:>7.1f} {rss:>12.2f} "
            f"{conv:>9} {(size or 0) / 1e9:>11.2f}"
        )
    print()
    print("inspect's predictions against the measurements:")
    for name, seconds, rss, check_rss, size, _ in rows:
        if not name.startswith("mmforge") or seconds is None:
            continue
        dtype = name.split()[1]
        predicted = sizes["package_bytes"][dtype]
        peak = sizes["convert_peak_by_dtype"][dtype] / 1e9
        print(
            f"  {dtype}: package {predicted / 1e9:.2f} GB predicted, {size / 1e9:.2f} GB "
            f"measured ({(predicted - size) / size:+.0%}); conversion peak {peak:.2f} GB "
            f"predicted, {check_rss:.2f} GB measured ({(peak - check_rss) / check_rss:+.0%}); "
            f"runtime check {sizes['memory_bytes'][dtype] / 1e9:.2f} GB predicted, whole-run "
            f"peak {rss:.2f} GB ({(sizes['memory_bytes'][dtype] / 1e9 - rss) / rss:+.0%})"
        )


if __name__ == "__main__":
    main()
