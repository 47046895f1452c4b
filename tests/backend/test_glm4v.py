"""GLM-4.1V's package recipe: picture sizing, the tokenizer's renames and the template.

The registry's tests convert, verify and chat with the tiny and release-shaped GLM-4.1V
checkpoints; these hold the parts of the recipe they cannot see fail: GLM's sizing on
pictures with a side under 28 px, the refusals of a tokenizer that does not fit, and a
template that renders alike in transformers and in the runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.errors import MmforgeError

# The releases' preprocessor_config.json "size" (see test_glm4v_host.py).
RELEASE_SIZE = {"shortest_edge": 112 * 112, "longest_edge": 9633792}


def _glm_sizing():
    from mmforge.backend.families import Cfg, lookup
    from mmforge.backend.families.glm4v.tiny import PREPROCESSOR

    family = lookup("glm4v")
    assert family.package is not None
    return family.package.picture_sizing(Cfg({}), Cfg({**PREPROCESSOR, "size": RELEASE_SIZE}))


@pytest.mark.parametrize(
    "h,w",
    [(300, 400), (20, 30), (57, 85), (10, 1000), (14, 600), (20, 500), (1000, 9), (3000, 4000)],
)
def test_the_package_sizes_pictures_as_glm_does(tmp_path, h, w):
    """Glm4vImageProcessor's grid; a side under 28 px is scaled up first (Qwen's rule alone
    gives 10×1000 a grid of [1, 2, 58] where GLM's is [1, 2, 200] at the release's budget)."""
    from PIL import Image
    from transformers import Glm4vImageProcessorPil

    glm = Glm4vImageProcessorPil(size=dict(RELEASE_SIZE))
    pixels = (np.random.default_rng(h * w).random((h, w, 3)) * 255).astype("uint8")
    grid = glm(images=Image.fromarray(pixels), return_tensors="np")["image_grid_thw"][0]
    sizing = _glm_sizing()
    assert sizing.target(w, h) == (int(grid[2]) * 14, int(grid[1]) * 14)
    assert sizing.runtime_keeps(*sizing.target(w, h))  # the runtime's Resize leaves it


def test_a_thin_picture_passes_verify(tiny, package, tmp_path):
    """10×300 px: GLM scales it up to 28×840 before its budget; the package hands the
    runtime that size, so ids, grid and pixels are transformers'."""
    from PIL import Image

    from mmforge.backend.verify import verify

    path = tmp_path / "thin.png"
    pixels = (np.random.default_rng(3).random((10, 300, 3)) * 255).astype("uint8")
    Image.fromarray(pixels).save(path)
    report = verify(package("glm4v"), str(tiny("glm4v")), images=[path], tokens=8)
    assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]


def _tokenizer(tiny) -> tuple[dict, dict]:
    folder = Path(tiny("glm4v"))
    return (
        json.loads((folder / "tokenizer.json").read_text()),
        json.loads((folder / "tokenizer_config.json").read_text()),
    )


def test_the_markers_are_renamed_on_their_ids_and_the_template_follows(tiny):
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.families.glm4v.tokens import RENAMES, adapt_tokenizer

    checkpoint = Checkpoint.read(tiny("glm4v"))
    tokenizer, config = _tokenizer(tiny)
    before = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    note = adapt_tokenizer(tokenizer, config, checkpoint.cfg, checkpoint.folder)
    after = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    for glm, runtime in RENAMES.items():
        assert glm not in after and after[runtime] == before[glm]
        assert glm not in config["chat_template"]
    assert after["<|image_pad|>"] == checkpoint.cfg.get("image_token_id")
    assert after["<|vision_start|>"] == checkpoint.cfg.get("image_start_token_id")
    assert "<|vision_start|><|image_pad|><|vision_end|>" in config["chat_template"]
    decoder = {e["content"] for e in config["added_tokens_decoder"].values()}
    assert "<|image_pad|>" in decoder and "<|image|>" not in decoder
    assert "ids" in note


def test_a_tokenizer_whose_marker_ids_disagree_with_the_config_is_refused(tiny):
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.families import Cfg
    from mmforge.backend.families.glm4v.tokens import adapt_tokenizer

    checkpoint = Checkpoint.read(tiny("glm4v"))
    tokenizer, config = _tokenizer(tiny)
    cfg = Cfg({**checkpoint.config, "image_token_id": checkpoint.cfg.get("image_token_id") + 1})
    with pytest.raises(MmforgeError, match="image_token_id"):
        adapt_tokenizer(tokenizer, config, cfg, checkpoint.folder)
    tokenizer, config = _tokenizer(tiny)
    tokenizer["added_tokens"] = [
        t for t in tokenizer["added_tokens"] if t["content"] != "<|begin_of_image|>"
    ]
    with pytest.raises(MmforgeError, match="no <\\|begin_of_image\\|> token"):
        adapt_tokenizer(tokenizer, config, checkpoint.cfg, checkpoint.folder)


CONVERSATIONS = [
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yo"},
        {"role": "user", "content": "And?"},
    ],
    [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "A"},
                {"type": "image"},
                {"type": "image"},
                {"type": "text", "text": "B"},
            ],
        },
        {"role": "assistant", "content": "x y"},
        {"role": "user", "content": [{"type": "text", "text": "more"}]},
    ],
]
# Chat builds every message as parts; the release's template writes a system or assistant
# message's content as is, so the package's writes their text parts: transformers'
# rendering of the same messages given as strings.
AS_PARTS = [
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Yo"}]},
    {"role": "user", "content": [{"type": "text", "text": "And?"}]},
]


def _as_strings(messages: list[dict]) -> list[dict]:
    return [
        m if m["role"] == "user" else {**m, "content": "".join(p["text"] for p in m["content"])}
        for m in messages
    ]


@pytest.mark.parametrize("renders_block_whitespace", [True, False])
def test_the_runtime_renders_the_package_template_as_transformers_renders_glms(
    tiny, package, tmp_path, renders_block_whitespace
):
    """The control keeps the released template as it is (only the markers renamed): the
    0.18 renderer then keeps newlines transformers' Jinja settings drop, and writes the
    parts of a system or assistant message in their Python form."""
    import shutil

    import onnxruntime_genai as og
    from transformers import AutoTokenizer

    from mmforge.backend.families.glm4v.tokens import RENAMES, package_template
    from mmforge.backend.tiny.release import released_template

    folder = package("glm4v")
    if not renders_block_whitespace:
        folder = tmp_path / "pkg"
        shutil.copytree(package("glm4v"), folder)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        template = released_template("glm4v")
        for glm, runtime in RENAMES.items():
            template = template.replace(glm, runtime)
        assert package_template(released_template("glm4v")) != template
        config["chat_template"] = template
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    hf = AutoTokenizer.from_pretrained(tiny("glm4v"))
    runtime = og.Tokenizer(og.Model(og.Config(str(folder))))
    same = []
    for messages, as_hf in [*((c, c) for c in CONVERSATIONS), (AS_PARTS, _as_strings(AS_PARTS))]:
        want = hf.apply_chat_template(as_hf, add_generation_prompt=True, tokenize=False)
        for glm, new in RENAMES.items():
            want = want.replace(glm, new)
        same.append(
            runtime.apply_chat_template(json.dumps(messages), add_generation_prompt=True) == want
        )
    assert all(same) if renders_block_whitespace else not any(same)


def test_tied_embeddings_give_the_output_layer_the_token_table(tmp_path):
    """A GLM-4.1V checkpoint with tied embeddings has no lm_head: the decoder's output layer
    is the token table (build.py), at f32 and int4, and verify PASSes both."""
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.convert import convert
    from mmforge.backend.families import lookup
    from mmforge.backend.tiny.build import with_config, write_tiny
    from mmforge.backend.verify import verify

    spec = with_config(
        lookup("glm4v").fixtures.tiny,
        {"tie_word_embeddings": True, "text_config.tie_word_embeddings": True},
    )
    folder = write_tiny(spec, tmp_path / "tied", seed=3).folder
    assert Checkpoint.read(folder).output_tied
    for dtype in ("f32", "int4"):
        convert(str(folder), tmp_path / dtype, dtype=dtype)
        report = verify(tmp_path / dtype, str(folder), tokens=16)
        assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]
        assert report.tokens["matched"] == report.tokens["total"] == 16
