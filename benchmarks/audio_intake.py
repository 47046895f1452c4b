"""Audio intake parity: the runtime's features from a prepared clip against transformers'.

For each clip format chat accepts (WAV 8/16/24/32-bit integer, 32/64-bit float, FLAC,
OGG Vorbis; mono and stereo; 16, 22.05, 44.1 and 48 kHz) a synthetic two-second clip is
written, then:
  - runtime: `attachments.prepare` makes the copy chat and verify hand ONNX Runtime GenAI,
    and the package's own processor (its speech processor JSON) computes the features;
  - transformers: `transformers.audio_utils.load_audio(path, 16000, backend="soundfile")`
    loads the *original* file (what a processor's chat template does with a path when
    torchcodec is not installed: soundfile decoding, channel mean, soxr "HQ" resampling),
    and the checkpoint's feature extractor computes the features.
It prints max and mean abs diff of the features per format and family, and with
`--variants` also what the runtime computes from transformers' samples written as 16-bit
PCM and as 32-bit float WAV (the re-quantisation alone).

    python benchmarks/audio_intake.py [--work /tmp/mmforge-audio-bench] [--json FILE]
                                      [--families gemma4 phi4mm] [--variants]

Tiny random-weight checkpoints are built and converted once in `--work` (offline); the
features do not depend on the weights.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

FORMATS: list[tuple[str, str, str]] = [
    # (name, soundfile format, subtype)
    ("wav-u8", "WAV", "PCM_U8"),
    ("wav-s16", "WAV", "PCM_16"),
    ("wav-s24", "WAV", "PCM_24"),
    ("wav-s32", "WAV", "PCM_32"),
    ("wav-f32", "WAV", "FLOAT"),
    ("wav-f64", "WAV", "DOUBLE"),
    ("flac-16", "FLAC", "PCM_16"),
    ("flac-24", "FLAC", "PCM_24"),
    ("ogg", "OGG", "VORBIS"),
]
RATES = [16000, 22050, 44100, 48000]
SUFFIX = {"WAV": ".wav", "FLAC": ".flac", "OGG": ".ogg"}


def clip(rate: int, channels: int, seconds: float = 2.0) -> Any:
    """A deterministic speech-like clip: gliding harmonics, an envelope and some noise."""
    t = np.arange(int(rate * seconds)) / rate
    rng = np.random.default_rng(rate + channels)
    out = []
    for c in range(channels):
        f0 = 140.0 + 60.0 * np.sin(2 * np.pi * 0.7 * t + c)
        phase = 2 * np.pi * np.cumsum(f0) / rate
        voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
        envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3.0 * t + c) ** 2
        noise = 0.05 * rng.standard_normal(len(t))
        out.append(0.25 * envelope * voiced + noise)
    return np.clip(np.stack(out, axis=1), -0.99, 0.99)


def write_clip(folder: Path, name: str, fmt: str, subtype: str, rate: int, ch: int) -> Path:
    """Write the clip in one format; returns the path."""
    import soundfile as sf

    path = folder / f"{name}-{rate}-{ch}ch{SUFFIX[fmt]}"
    sf.write(str(path), clip(rate, ch), rate, format=fmt, subtype=subtype)
    return path


def reference_samples(path: Path) -> Any:
    """The clip as a transformers user loads it (soundfile backend, soxr HQ)."""
    from transformers.audio_utils import load_audio

    return load_audio(str(path), sampling_rate=16000, backend="soundfile")


class Side:
    """One family: its package's processor and its checkpoint's feature extractor."""

    def __init__(self, family: str, work: Path):
        from mmforge.backend.checkpoint import Checkpoint
        from mmforge.backend.runtime import Runtime

        package, folder = _package(family, work)
        self.family = family
        self.runtime = Runtime(package)
        self.checkpoint = Checkpoint.read(folder)
        prompts = {"gemma4": "<|audio|>Transcribe.", "phi4mm": "<|audio_1|>Transcribe."}
        self.prompt = self.runtime.prompt([{"role": "user", "content": prompts[family]}])

    def runtime_features(self, path: Path) -> Any:
        """The runtime processor's audio features for one file, [frames, mels]."""
        arrays = self.runtime.process(self.prompt, audios=[path]).arrays
        return np.asarray(arrays["audio_embeds"], dtype=np.float32).reshape(
            -1, arrays["audio_embeds"].shape[-1]
        )

    def reference_features(self, samples: Any) -> Any:
        """The feature extractor's features for 16 kHz samples, [frames, mels]."""
        from mmforge.backend.families import audio_features

        feats = audio_features(self.checkpoint, [(samples, 16000)])
        key = "input_features" if "input_features" in feats else "audio_input_features"
        return feats[key][0].numpy()


def _package(family: str, work: Path) -> tuple[Path, Path]:
    from mmforge.backend.convert import convert
    from mmforge.backend.tiny import build_tiny

    folder = work / "tiny" / family
    package = work / family
    if not (package / "genai_config.json").exists():
        folder = build_tiny(family, folder).folder
        convert(str(folder), package, dtype="f32")
    return package, folder


def compare(a: Any, b: Any) -> dict[str, Any]:
    """Max and mean abs diff over the common frames, and both frame counts."""
    n = min(len(a), len(b))
    d = np.abs(a[:n] - b[:n])
    return {
        "max": float(d.max()),
        "mean": float(d.mean()),
        "frames": [len(a), len(b)],
    }


def main() -> int:
    """Run the comparison and print one line per format, family and path."""
    import soundfile as sf

    from mmforge.backend.attachments import AUDIO, prepare

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-audio-bench"))
    parser.add_argument("--families", nargs="+", default=["gemma4", "phi4mm"])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--variants", action="store_true")
    args = parser.parse_args()
    clips = args.work / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    sides = [Side(f, args.work) for f in args.families]
    rows = []
    for name, fmt, subtype in FORMATS:
        for rate in RATES:
            for ch in (1, 2):
                path = write_clip(clips, name, fmt, subtype, rate, ch)
                ref = reference_samples(path)
                prepared = prepare(path, AUDIO, args.work / "prepared").path
                variants = {"prepared": prepared}
                if args.variants:
                    for sub in ("PCM_16", "FLOAT"):
                        v = args.work / "variants" / f"{path.stem}-{sub}.wav"
                        v.parent.mkdir(exist_ok=True)
                        sf.write(str(v), np.clip(ref, -1, 1), 16000, subtype=sub)
                        variants[sub] = v
                for side in sides:
                    want = side.reference_features(ref)
                    for label, file in variants.items():
                        got = side.runtime_features(file)
                        row = {
                            "format": name,
                            "rate": rate,
                            "channels": ch,
                            "family": side.family,
                            "runtime_input": label,
                            **compare(got, want),
                        }
                        rows.append(row)
                        print(
                            f"{name:8} {rate:5} {ch}ch {side.family:7} {label:8} "
                            f"max {row['max']:.3e} mean {row['mean']:.3e} frames {row['frames']}",
                            flush=True,
                        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
