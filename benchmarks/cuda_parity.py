"""CUDA against CPU on the same packages: the last prompt position's logits and greedy tokens.

Two halves, for a GPU machine that has no mmforge install (only onnxruntime-genai-cuda):

    python benchmarks/cuda_parity.py prepare --work W [--families a,b]   # here, on CPU
    python benchmarks/cuda_parity.py run --work W                        # there, on CUDA

`prepare` builds each tested family's tiny checkpoint, converts it at f32, f16 and int4
(and int4 with `--ep cuda`, the package a CUDA user gets), puts a JPEG photo (and a sound
clip where the family hears) through chat's own intake, and records the runtime's prompt,
the CPU's prefill logits at the last position and 16 greedy tokens. `run` loads each
package with the CUDA provider (mmforge's `Runtime`, the class chat uses) on the same
prompt and files and prints, per package, the largest logit difference against the CPU's
(relative to the CPU logits' spread) and how many greedy tokens agree. For int4 a second
pair of columns compares with the CPU computing in float32 (verify's exact form): the
package's CPU kernels quantize activations to 8 bits (accuracy level 4), CUDA's do not.

Random-weight tiny models have near-ties, so a token split after a small logit difference
is arithmetic, not a defect; a split at a large difference is one. W holds about 60 MB.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

TOKENS = 16
DTYPES = ("f32", "f16", "int4")


def _greedy_with_logits(runtime: Any, inputs: Any, n: int) -> tuple[list[float], list[int]]:
    """The prefill's last-position logits and up to n greedy tokens."""
    import numpy as np

    og = runtime.og
    params = og.GeneratorParams(runtime.model)
    params.set_search_options(max_length=len(inputs.input_ids) + n, do_sample=False, top_k=1)
    generator = og.Generator(runtime.model, params)
    if inputs.named is not None:
        generator.set_inputs(inputs.named)
    else:
        generator.append_tokens(inputs.arrays["input_ids"])
    logits: list[float] = []
    out: list[int] = []
    while not generator.is_done() and len(out) < n:
        generator.generate_next_token()
        if not out:
            raw = np.asarray(generator.get_output("logits"), dtype=np.float32)
            logits = raw.reshape(-1, raw.shape[-1])[-1].tolist()
        out.append(int(generator.get_next_tokens()[0]))
    return logits, out


def _case(runtime: Any, case: dict[str, Any], folder: Path) -> tuple[list[float], list[int]]:
    images = [folder / p for p in case["images"]]
    audios = [folder / p for p in case["audios"]]
    inputs = runtime.process(case["prompt"], images, audios)
    return _greedy_with_logits(runtime, inputs, TOKENS)


def prepare(work: Path, keys: list[str]) -> None:
    """Packages, attachments and the CPU's answers, written under `work`."""
    from mmforge.backend.attachments import AUDIO, IMAGE, package_intake, prepare
    from mmforge.backend.convert import convert
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.tiny import build_tiny
    from mmforge.backend.verify import hf_reference
    from mmforge.backend.verify.rounding import exact_arithmetic_copy
    from tests.backend.families import AUDIO as HEARS
    from tests.images import make_tone, user_pictures

    work.mkdir(parents=True, exist_ok=True)
    scratch = work.parent / (work.name + "-scratch")
    photo = user_pictures(scratch / "pictures", big=(900, 600))["jpeg"]
    import soundfile

    clip = scratch / "tone.wav"
    soundfile.write(str(clip), *make_tone(1.5))
    cases = []
    for key in keys:
        checkpoint = build_tiny(key, scratch / "tiny" / key).folder
        for dtype, ep in [*((d, "cpu") for d in DTYPES), ("int4", "cuda")]:
            name = f"{key}-{dtype}" + ("-cuda" if ep == "cuda" else "")
            out = work / name
            shutil.rmtree(out, ignore_errors=True)
            start = time.perf_counter()
            try:
                convert(str(checkpoint), out, dtype=dtype, ep=ep)
            except Exception as e:  # noqa: BLE001 - a refused precision is a row, not the end
                print(f"{name:<28} not converted: {str(e)[:90]}", flush=True)
                shutil.rmtree(out, ignore_errors=True)
                continue
            intake = package_intake(out)
            attach = out / "_attachments"
            images = [prepare(photo, IMAGE, attach / "image", intake).path]
            audios = [prepare(clip, AUDIO, attach / "audio").path] if key in HEARS else []
            case = {
                "package": name,
                "images": [str(p.relative_to(out)) for p in images],
                "audios": [str(p.relative_to(out)) for p in audios],
            }
            if ep == "cpu":
                runtime = Runtime(out)
                messages = hf_reference.messages_for("Describe this.", 1, len(audios))
                case["prompt"] = runtime.prompt(messages)
                logits, tokens = _case(runtime, case, out)
                case["cpu_logits"], case["cpu_tokens"] = logits, tokens
                del runtime
                if dtype == "int4":
                    # The CPU's int4 kernels quantize activations to 8 bits (accuracy
                    # level 4); verify's exact form computes in float32, as CUDA's do.
                    exact = exact_arithmetic_copy(out, scratch / "exact" / name)
                    logits, tokens = _case(Runtime(exact), case, out)
                    case["exact_logits"], case["exact_tokens"] = logits, tokens
            else:  # the CUDA package answers the same prompt as its CPU twin
                twin = next(c for c in cases if c["package"] == f"{key}-{dtype}")
                for field in ("prompt", "cpu_logits", "cpu_tokens", "exact_logits"):
                    case[field] = twin[field]
                case["exact_tokens"] = twin["exact_tokens"]
            cases.append(case)
            print(f"{name:<28} ready  {time.perf_counter() - start:5.1f}s", flush=True)
    (work / "cases.json").write_text(json.dumps(cases))
    shutil.rmtree(scratch, ignore_errors=True)


def run(work: Path) -> int:
    """Each package on CUDA against its recorded CPU answer; one row a package."""
    import numpy as np
    import onnxruntime_genai as og

    from mmforge.backend.runtime import Runtime

    print(f"onnxruntime-genai {og.__version__}, CUDA available: {og.is_cuda_available()}")
    cases = json.loads((work / "cases.json").read_text())
    print(
        f"{'package':<24} {'|Δlogit| vs CPU':>15} {'/ spread':>9} {'tokens':>7}"
        f"  {'vs CPU float32 arithmetic':>25} {'tokens':>7}"
    )
    worst = 0.0
    for case in cases:
        folder = work / case["package"]
        try:
            runtime = Runtime(folder, "cuda")
            logits, tokens = _case(runtime, case, folder)
        except Exception as e:  # noqa: BLE001 - one package's failure is its row
            print(f"{case['package']:<24} FAILED: {type(e).__name__}: {str(e)[:200]}")
            continue
        row = f"{case['package']:<24}"
        for prefix in ("cpu", "exact"):
            if f"{prefix}_logits" not in case:
                continue
            cpu = np.asarray(case[f"{prefix}_logits"], dtype=np.float64)
            diff = float(np.max(np.abs(np.asarray(logits, dtype=np.float64) - cpu)))
            spread = float(cpu.max() - cpu.min()) or 1.0
            if prefix == "cpu" and "exact_logits" not in case:
                worst = max(worst, diff / spread)
            if prefix == "exact":
                worst = max(worst, diff / spread)
            theirs = case[f"{prefix}_tokens"]
            same = sum(1 for a, b in zip(tokens, theirs, strict=False) if a == b)
            width = 15 if prefix == "cpu" else 16
            row += f" {diff:{width}.2e} {diff / spread:9.1e} {same:>3}/{len(theirs):<3}"
        print(row, flush=True)
        del runtime
    print("largest logit difference / spread against the CPU's float32 arithmetic: ", end="")
    print(f"{worst:.1e}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=("prepare", "run"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--families", default="", help="comma-separated family keys")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.*
    if args.mode == "run":
        return run(args.work)
    from tests.backend.families import TESTED

    prepare(args.work, [k for k in args.families.split(",") if k] or TESTED)
    return 0


if __name__ == "__main__":
    sys.exit(main())
