"""Qwen2-Audio's clip token count against the gemma4 pipeline's (the only 0.18 pipeline whose
audio count follows the clip's length and whose audio frame is text the tokenizer can absorb)."""

import os
from pathlib import Path

import numpy as np
import onnxruntime_genai as og
import soundfile as sf
from transformers import WhisperFeatureExtractor

root = Path(os.environ.get("SEED_PROBE_DIR", "/tmp/seedprobe"))
pkg = root / "pkg-gemma4"
model = og.Model(og.Config(str(pkg)))
proc = model.create_multimodal_processor()
fe = WhisperFeatureExtractor(feature_size=128)  # Qwen2-Audio's: 128 mel bins, 16 kHz, hop 160, 30 s
rng = np.random.default_rng(0)
rows, differ = [], 0
for seconds in (1.0, 1.01, 1.02, 1.03, 2.0, 2.5, 3.33, 5.0, 7.77, 10.0):
    n = int(seconds * 16000)
    wav = (rng.standard_normal(n) * 0.1).astype("float32")
    path = root / f"clip{seconds}.wav"
    sf.write(path, wav, 16000)
    named = proc("<|audio|>x", audios=og.Audios.open(str(path)))
    t = {k: named[k].as_numpy().shape for k in named.keys() if "audio" in k or "feature" in k}  # noqa: SIM118 (og.NamedTensors: keys() only)
    rt = int(named["audio_sizes"].as_numpy().reshape(-1)[0])
    feats = fe(wav, sampling_rate=16000, padding="max_length", return_attention_mask=True)
    L = int(feats["attention_mask"].sum())
    hf = (((L - 1) // 2 + 1) - 2) // 2 + 1
    differ += rt != hf
    print(
        f"{seconds:6.2f} s: runtime features {t}, runtime tokens {rt}; "
        f"Qwen2-Audio frames {L} -> tokens {hf}"
    )
print("clips whose counts differ:", differ)
