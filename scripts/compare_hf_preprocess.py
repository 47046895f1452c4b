r"""Compare the torch-only image processors with the real transformers ones.

transformers 5 implements the Phi-4-multimodal and LFM2-VL image processors with
torchvision, which does not install beside the project's pinned CPU torch, so the HF
reference repeats their steps in plain torch (backend/families/phi/preprocess.py and
backend/families/lfm2/preprocess.py). This script checks that repetition against
the real processors. Run it in a separate environment that has torchvision, e.g.

    python -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 \\
        transformers==5.24.0 pillow
    /tmp/tv/bin/python scripts/compare_hf_preprocess.py CHECKPOINT [CHECKPOINT ...]

with Phi-4-multimodal or LFM2-VL checkpoint folders (`mmforge demo` or the tests' tiny
builders make small ones). It prints, per image size, whether shapes and masks agree and
the largest pixel difference, and exits 1 when anything disagrees beyond 1e-5.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from transformers import AutoImageProcessor

ROOT = Path(__file__).resolve().parent.parent
SIZES = [(160, 120), (200, 100), (300, 123), (40, 40), (700, 500), (97, 333)]
# Ours -> HF output names, per image processor class.
KEYS = {
    "Lfm2VlImageProcessor": (
        "lfm2_vl_images",
        ["pixel_values", "pixel_attention_mask", "spatial_shapes"],
    ),
    "Phi4MultimodalImageProcessor": (
        "phi4mm_images",
        ["image_pixel_values", "image_attention_mask", "image_sizes"],
    ),
}


def _load(name: str, path: Path) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _ours() -> dict[str, object]:
    """Our functions, loaded from their files (this environment has no mmforge installed)."""
    families = ROOT / "backend" / "families"
    _load("mmforge.backend.families._hf_image", families / "_hf_image.py")
    phi = _load("mmforge_phi_preprocess", families / "phi" / "preprocess.py")
    lfm2 = _load("mmforge_lfm2_preprocess", families / "lfm2" / "preprocess.py")
    return {
        "phi4mm_images": phi.phi4mm_images,  # type: ignore[attr-defined]
        "lfm2_vl_images": lfm2.lfm2_vl_images,  # type: ignore[attr-defined]
    }


def main(folders: list[str]) -> int:
    """Compare every checkpoint; 0 when all agree within 1e-5."""
    ours = _ours()
    probe = Image.open(ROOT / "resources" / "probe.png").convert("RGB")
    worst = 0.0
    for folder in map(Path, folders):
        processor = AutoImageProcessor.from_pretrained(folder)
        kind = type(processor).__name__.removesuffix("Fast")
        if kind not in KEYS:
            print(f"{folder}: {kind} is not one of {sorted(KEYS)}")
            return 2
        function, keys = KEYS[kind]
        settings = json.loads((folder / "preprocessor_config.json").read_text())
        for size in SIZES:
            image = probe.resize(size)
            hf = processor(images=[image], return_tensors="pt")
            try:
                mine = ours[function]([image], settings)  # type: ignore[operator]
            except ValueError as e:  # an image HF tiles (LFM2-VL): not comparable
                print(f"{folder.name} {kind} {size}: skipped ({e})")
                continue
            for key in keys:
                a, b = hf[key].numpy().astype(np.float64), mine[key].numpy().astype(np.float64)
                diff = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
                worst = max(worst, diff)
                print(f"{folder.name} {kind} {size}: {key} {list(a.shape)} max diff {diff:.3g}")
    print(f"largest difference: {worst:.3g}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
