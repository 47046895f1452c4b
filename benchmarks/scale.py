"""A real model size on an ordinary machine: released shapes in bfloat16, converted.

Builds, offline, a checkpoint with the released shapes of one model (--model):
  - qwen2_5_vl-3b: Qwen/Qwen2.5-VL-3B-Instruct (36 decoder layers of width 2048, the
    32-block vision tower, a 151,936-token vocabulary, tied embeddings);
  - qwen3_5-2b: Qwen/Qwen3.5-2B (24 hybrid layers of width 2048, full attention every
    4th, a 24-block tower, a 248,320-token vocabulary, tied embeddings, the mtp.* head);
  - qwen3_5_moe-eN: the Qwen3.6-35B-A3B layout at reduced width (hidden 512, 8 layers)
    with N experts, to show the conversion's memory stays flat as experts grow;
in bfloat16, in two shards under the release's names and with its config.json text;
random weights, written one tensor at a time. Then, each in a fresh process, it measures:
  - copy:     `cp -r` of the checkpoint plus `sync` (the floor for moving the bytes);
  - mmforge int4 and mmforge f16 (--dtypes): `mmforge convert`, a validated
    package; its peak RSS before the runtime check, and the whole run's;
  - builder int4: ONNX Runtime GenAI's model builder making the int4 text decoder alone
    from the same folder (the anchor).
It prints wall time, peak RSS, package size and the ratios, and inspect's predictions of
package size and conversion peak beside what was measured.

    python benchmarks/scale.py [--model qwen3_5-2b] [--work DIR] [--dtypes int4,f16]
                               [--skip-builder]
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

# Qwen/Qwen3.5-2B's sizes as its config.json gives them (text and tower).
QWEN3_5_2B = {
    "hidden": 2048, "intermediate": 6144, "layers": 24, "heads": 8, "kv_heads": 2,
    "head_dim": 256, "linear_heads": 16, "linear_dim": 128, "vocab": 248320,
    "vision_depth": 24, "vision_hidden": 1024, "vision_intermediate": 4096, "vision_heads": 16,
}  # fmt: skip


def _qwen2_5_vl_3b(s: dict[str, int]) -> dict[str, Any]:
    from mmforge.backend.families.qwen.tiny import RELEASED_3B, qwen2_5_vl_3b_release

    return qwen2_5_vl_3b_release(s, 151936, RELEASED_3B)


def _qwen3_5(s: dict[str, int], sizes: dict[str, int], experts: int = 0) -> dict[str, Any]:
    """The released Qwen3.5 / Qwen3.6 config.json text with these sizes."""
    from mmforge.backend.families.qwen import tiny_qwen3_5

    config = tiny_qwen3_5.release_config(s, sizes["vocab"], moe=experts > 0)
    text, vision = config["text_config"], config["vision_config"]
    layers = sizes["layers"]
    text.update(
        hidden_size=sizes["hidden"],
        num_hidden_layers=layers,
        layer_types=[
            "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)
        ],
        num_attention_heads=sizes["heads"],
        num_key_value_heads=sizes["kv_heads"],
        head_dim=sizes["head_dim"],
        linear_num_key_heads=sizes["linear_heads"],
        linear_num_value_heads=sizes["linear_heads"],
        linear_key_head_dim=sizes["linear_dim"],
        linear_value_head_dim=sizes["linear_dim"],
        rope_parameters={**text["rope_parameters"], "mrope_section": [11, 11, 10]},
    )
    if experts:
        text.update(num_experts=experts, num_experts_per_tok=8, moe_intermediate_size=512)
        text["shared_expert_intermediate_size"] = 512
    else:
        text["intermediate_size"] = sizes["intermediate"]
    vision.update(
        depth=sizes["vision_depth"],
        hidden_size=sizes["vision_hidden"],
        intermediate_size=sizes["vision_intermediate"],
        num_heads=sizes["vision_heads"],
        out_hidden_size=sizes["hidden"],
        num_position_embeddings=2304,
    )
    return config


def _moe_sizes(experts: int) -> dict[str, int]:
    return {
        **QWEN3_5_2B, "hidden": 512, "layers": 8, "heads": 4, "kv_heads": 2,
        "head_dim": 128, "linear_heads": 4, "vision_depth": 2, "vision_hidden": 256,
        "vision_intermediate": 512, "vision_heads": 4, "vocab": 32000, "experts": experts,
    }  # fmt: skip


def model_spec(model: str) -> tuple[Any, Any, Any]:
    """(tiny spec, config.json from special ids, checkpoint tensor name from HF's)."""
    from mmforge.backend.families.qwen import tiny, tiny_qwen3_5

    if model == "qwen2_5_vl-3b":

        def rename(name: str) -> str:
            name = name.replace("model.language_model.", "model.", 1)
            return name.replace("model.visual.", "visual.", 1)

        return tiny.QWEN2_5_VL, _qwen2_5_vl_3b, rename
    if model == "qwen3_5-2b":
        return tiny_qwen3_5.QWEN3_5, lambda s: _qwen3_5(s, QWEN3_5_2B), lambda n: n
    if model.startswith("qwen3_5_moe-e"):
        experts = int(model.removeprefix("qwen3_5_moe-e"))
        return (
            tiny_qwen3_5.QWEN3_5_MOE,
            lambda s: _qwen3_5(s, _moe_sizes(experts), experts),
            lambda n: n,
        )
    raise SystemExit(f"unknown --model {model}")


def build(folder: Path, model: str) -> tuple[int, int]:
    """Write the checkpoint; returns (parameters, largest tensor in bytes as bfloat16)."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from mmforge.backend.tiny.build import write_side_files
    from mmforge.backend.tiny.tokenizer import train_tokenizer

    spec, config_json, rename = model_spec(model)
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(spec.specials, pinned=spec.pinned)
    text = config_json(tok.special_ids)
    with torch.device("meta"):
        # A deep copy: transformers fills the nested rope_scaling in, and the file must stay
        # the release text.
        config = CONFIG_MAPPING[text["model_type"]].from_dict(json.loads(json.dumps(text)))
        hf_model = getattr(transformers, spec.hf_class)(config)
    shapes = {}
    for name, p in hf_model.named_parameters():  # tied lm_head listed once, as released
        shapes[rename(name)] = tuple(p.shape)
    if model.startswith("qwen3_5"):  # the multi-token-prediction head the releases ship
        prefix = "model.language_model.layers.3."
        shapes.update(
            {"mtp." + n[len("model.language_model.") :].replace("layers.3.", "layers.0.", 1): s
             for n, s in shapes.items() if n.startswith(prefix)}
        )  # fmt: skip
        hidden = config.text_config.hidden_size
        shapes["mtp.fc.weight"] = (hidden, 2 * hidden)
        for norm in ("norm", "pre_fc_norm_embedding", "pre_fc_norm_hidden"):
            shapes[f"mtp.{norm}.weight"] = (hidden,)
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
    write_side_files(folder, spec, tok)
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

        hf_class = json.loads((checkpoint / "config.json").read_text())["architectures"][0]
        model = getattr(transformers, hf_class).from_pretrained(checkpoint, dtype="float32").eval()
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
            [
                *(sys.executable, __file__, "--chat-side", side),
                *("--work", str(args.work), "--model", args.model),
            ],
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
    parser.add_argument(
        "--model", default="qwen2_5_vl-3b", help="qwen2_5_vl-3b, qwen3_5-2b, qwen3_5_moe-eN"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-scale"))
    parser.add_argument("--dtypes", default="int4,f16", help="f32 too needs 15 GB more disk")
    parser.add_argument("--skip-builder", action="store_true")
    parser.add_argument("--chat", action="store_true")
    parser.add_argument("--chat-side", choices=("ort", "hf"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    ck = args.work / f"{args.model}-shapes"
    if args.chat_side:
        result = chat_side(args.chat_side, args.work / "pkg-int4-chat", ck)
        print(json.dumps(result))
        return
    if not (ck / "config.json").is_file():
        started = time.perf_counter()
        params, largest = build(ck, args.model)
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
