"""Gemma 4 unified: the encoder-free Gemma 4 (patches and audio frames straight in)."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from mmforge.backend.families import Cfg, lookup
from mmforge.backend.families.gemma.unified.preprocess import preprocess, target_size
from mmforge.backend.inspect import inspect_source
from mmforge.backend.verify import verify


def test_inspect_names_the_pipeline_and_the_embedders(tiny):
    profile = inspect_source(str(tiny("gemma4_unified")))
    assert profile.family_key == "gemma4_unified"
    assert profile.pipeline_type == "gemma4_unified"
    assert profile.components == ("vision_encoder", "audio_encoder", "embedding", "decoder")
    assert (
        lookup("gemma4_unified").profile.projector(Cfg({})).variant == "Gemma4UnifiedVisionEmbedder"
    )


def _merged_like_hf(x, patch: int, k: int):
    """HF's two steps: patch_size patches, then each k×k group laid out (k·p, k·p, 3)."""
    _, h, w = x.shape
    rows, cols = h // (patch * k), w // (patch * k)
    small = x.reshape(3, h // patch, patch, w // patch, patch).transpose(1, 3, 2, 4, 0)
    out = []
    for r in range(rows):
        for c in range(cols):
            group = small[r * k : (r + 1) * k, c * k : (c + 1) * k]  # [k, k, p, p, 3]
            out.append(group.transpose(0, 2, 1, 3, 4).reshape(-1))
    return np.stack(out)


def test_patches_cut_at_the_merged_size_equal_hfs_merged_patches():
    pre = Cfg({"patch_size": 4, "pooling_kernel_size": 2, "max_soft_tokens": 70})
    rng = np.random.default_rng(0)
    image = Image.fromarray((rng.random((48, 64, 3)) * 255).astype("uint8"))
    h, w = target_size(48, 64, 4, 2, 70)
    assert h % 8 == 0 and w % 8 == 0 and h * w <= 70 * 64
    out = preprocess(pre, [image])
    n = out["num_soft_tokens_per_image"][0]
    assert n == (h // 8) * (w // 8)
    # The layout itself, on an image already at the target size (no resize involved).
    exact = Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8"))
    got = preprocess(pre, [exact])["pixel_values"][0, :n].numpy()
    x = np.asarray(exact, dtype=np.float32).transpose(2, 0, 1) / 255
    np.testing.assert_allclose(got, _merged_like_hf(x, 4, 2), atol=1e-6)
    positions = out["image_position_ids"][0].numpy()
    assert (positions[n:] == -1).all() and positions[:n].max(axis=0).tolist() == [
        w // 8 - 1,
        h // 8 - 1,
    ]


def test_the_package_has_the_processor_json_the_runtime_accepts(package):
    folder = package("gemma4_unified")
    config = json.loads((folder / "genai_config.json").read_text())
    assert config["model"]["type"] == "gemma4_unified"
    image = json.dumps(
        json.loads((folder / config["model"]["vision"]["config_filename"]).read_text())
    )
    assert '"Gemma4ImageTransform"' in image and '"pooling_kernel_size": 1' in image
    assert '"patch_size": 8' in image  # patch_size 4 × pooling_kernel_size 2
    speech = json.loads((folder / config["model"]["speech"]["config_filename"]).read_text())
    steps = [s["operation"] for s in speech["feature_extraction"]["sequence"]]
    assert steps[-1]["type"] == "Gemma4Audio"
    assert steps[-1]["attrs"]["type"] == "raw_frames"


def test_image_and_audio_match_transformers_over_32_tokens(package, tiny):
    report = verify(package("gemma4_unified"), str(tiny("gemma4_unified")), tokens=32)
    verdicts = {c.name: c.verdict for c in report.components}
    # Every stage, preprocessing included: the runtime's ids are Gemma4Processor's (the
    # package's tokenizer reads the runtime's blank lines with the block markers).
    assert verdicts == dict.fromkeys(verdicts, "PASS")
    assert {"vision_encoder", "audio_encoder", "decoder_prefill"} <= set(verdicts)
    assert report.tokens["matched"] == report.tokens["total"] > 0
