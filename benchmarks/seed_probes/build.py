"""Build the tiny packages the seed probes use: build.py gemma3 qwen2_5_vl gemma4.

The probes (probe_tok.py, probe_vc.py, probe_hf.py, probe_audio.py) then swap a package's
genai_config.json, tokenizer.json and processor JSON; docs/seed-families.md reports them.
SEED_PROBE_DIR chooses the folder (default /tmp/seedprobe).
"""

import os
import sys
from pathlib import Path

from mmforge.backend.convert import convert
from mmforge.backend.tiny import build_tiny

root = Path(os.environ.get("SEED_PROBE_DIR", "/tmp/seedprobe"))
for fam in sys.argv[1:]:
    t = build_tiny(fam, root / f"tiny-{fam}").folder
    convert(str(t), root / f"pkg-{fam}", dtype="f32")
    print("built", fam, flush=True)
