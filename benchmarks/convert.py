"""Conversion speed and memory against `mobius build` and a plain copy of the same bytes.

Builds synthetic Qwen2.5-VL checkpoints of increasing size (random weights, offline),
then for each one measures, in fresh processes:
  - copy:    `cp -r` of the checkpoint folder plus `sync` (the floor for moving the bytes);
  - mmforge: `mmforge convert` (f32, CPU), a loadable and validated GenAI package;
  - mobius:  `mobius build --config DIR --runtime ort-genai --ep cpu` (ONNX only).
It prints wall time, peak RSS and the ratio to the copy. Run it by hand:

    python benchmarks/convert.py [--sizes 50M,200M,800M] [--work /tmp/mmforge-bench]
    python benchmarks/convert.py --family lfm2_vl --sizes 400M

(LFM2-VL's decoder comes from ORT GenAI's builder in a child process; its peak is part of
the mmforge row.)

Targets (issue #3): peak memory grows with the largest component, not the whole model;
conversion time within 3x of the copy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _synthetic import build_checkpoint, build_lfm2_checkpoint

_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
    "dt = time.perf_counter() - t\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "open(sys.argv[0] + '.out', 'wb').write(p.stdout)\n"
    "print(p.returncode, dt, rss)\n"
)


def measure(cmd: list[str], work: Path) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (GB) and stdout of one command, in a fresh child process."""
    script = work / "measure.py"
    script.write_text(_MEASURE)
    out = subprocess.run([sys.executable, str(script), *cmd], capture_output=True, text=True)
    rc, seconds, rss_kb = out.stdout.split()
    if rc != "0":
        raise SystemExit(f"failed ({rc}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    stdout = Path(str(script) + ".out").read_text(errors="replace")
    return float(seconds), int(rss_kb) / 1e6, stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50M,200M,800M")
    parser.add_argument(
        "--family",
        choices=("qwen2_5_vl", "lfm2_vl"),
        default="qwen2_5_vl",
        help="lfm2_vl: sizes 50M, 200M, 400M; mobius has no LFM2, so no mobius row",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-bench"))
    parser.add_argument("--rounds", type=int, default=1, help="median over this many runs")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    mmforge = str(Path(sys.executable).with_name("mmforge"))
    mobius = str(Path(sys.executable).with_name("mobius"))
    rows = []
    for name in args.sizes.split(","):
        ck = args.work / f"{args.family}-{name}"
        t = time.perf_counter()
        build = build_lfm2_checkpoint if args.family == "lfm2_vl" else build_checkpoint
        params = build(name, ck)
        print(
            f"[{name}] built {params / 1e6:.0f}M parameters in {time.perf_counter() - t:.0f}s",
            flush=True,
        )
        gb = sum(p.stat().st_size for p in ck.glob("*.safetensors")) / 1e9
        tools = [
            ("copy", ["sh", "-c", f"cp -r {ck} {args.work}/copy && sync"], args.work / "copy"),
            (
                "mmforge",
                [mmforge, "convert", str(ck), "-o", str(args.work / "pkg"), "--json"],
                args.work / "pkg",
            ),
        ]
        if args.family != "lfm2_vl":  # mobius 0.1 has no LFM2
            mob = args.work / "mob"
            tools.append(
                (
                    "mobius",
                    [
                        *(mobius, "build", "--config", str(ck)),
                        *("--runtime", "ort-genai", "--ep", "cpu", str(mob)),
                    ],
                    mob,
                )
            )
        results: dict[str, list[tuple[float, float]]] = {tool: [] for tool, _, _ in tools}
        inner: list[tuple[float, float]] = []  # mmforge without the runtime validation
        for _ in range(args.rounds):
            for tool, cmd, out in tools:
                shutil.rmtree(out, ignore_errors=True)
                subprocess.run(["sync"], check=False)
                seconds, rss, stdout = measure(cmd, args.work)
                results[tool].append((seconds, rss))
                if tool == "mmforge":
                    manifest = json.loads(stdout)
                    inner.append(
                        (
                            seconds - manifest["timings_s"]["validate"],
                            manifest["peak_rss_mb"]["before_validation"] / 1e3,
                        )
                    )
                shutil.rmtree(out, ignore_errors=True)
        results["mmforge w/o validate"] = inner
        med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
        rows.append((name, params, gb, med))
        shutil.rmtree(ck, ignore_errors=True)
    print()
    print(
        f"{'size':>6} {'params':>8} {'GB':>6} | {'tool':>20} {'wall s':>8} {'x copy':>7}"
        f" {'peak RSS GB':>12}"
    )
    for name, params, gb, med in rows:
        base = med["copy"][0]
        for tool in [t for t in ("copy", "mmforge", "mmforge w/o validate", "mobius") if t in med]:
            seconds, rss = med[tool]
            print(
                f"{name:>6} {params / 1e6:>7.0f}M {gb:>6.2f} | {tool:>20} {seconds:>8.1f} "
                f"{seconds / base:>7.1f} {rss:>12.2f}"
            )


if __name__ == "__main__":
    main()
