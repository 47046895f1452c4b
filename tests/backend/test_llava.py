"""LLaVA-1.5 on videochat_flash_qwen: what the package's tokenizer, template and intake do.

The registry-wide tests convert, verify and chat with the tiny LLaVA and VipLLaVA; these
hold the pieces the package is made of against transformers and the installed runtime.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.families import Cfg
from mmforge.backend.families.llava.tiny import RELEASE_TEMPLATE
from mmforge.backend.families.llava.tokenizer import ABSORBED, adapt
from mmforge.backend.families.llava.video_llava import RELEASE_TEMPLATE as VIDEO_LLAVA_TEMPLATE
from mmforge.backend.picture_sizing import centre_crop_box, shortest_edge_size

CONVERSATIONS = [
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
    [
        {"role": "user", "content": [{"type": "text", "text": "Hi."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And these?"},
                {"type": "image"},
                {"type": "image"},
            ],
        },
    ],
]


def _hf_render(template: str, messages: list, bos: str) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[messages], chat_template=template, add_generation_prompt=True, bos_token=bos
    )
    return rendered[0]


@pytest.mark.parametrize("messages", CONVERSATIONS, ids=["one picture", "three turns"])
@pytest.mark.parametrize(
    ("family", "template"),
    [("llava", RELEASE_TEMPLATE), ("video_llava", VIDEO_LLAVA_TEMPLATE)],
    ids=["llava", "video_llava"],
)
def test_the_package_template_is_the_releases_with_markers_and_bos(
    package, tmp_path, messages, family, template
):
    """The runtime renders the adapted release template as transformers renders the
    release's, `<image>` written `<|vision_start|>` and the BOS the tokenizer would add."""
    import onnxruntime_genai as og

    folder = package(family)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    config = {"chat_template": template}
    cfg = Cfg(json.loads((folder / "genai_config.json").read_text())["model"])
    image_id = cfg.get("image_token_id")
    source = Path(json.loads((folder / "mmforge_manifest.json").read_text())["source"])
    adapt(tokenizer, config, Cfg({"image_token_index": image_id}), source)
    runtime = og.Tokenizer(og.Model(og.Config(str(folder))))
    got = runtime.apply_chat_template(
        json.dumps(messages), template_str=config["chat_template"], add_generation_prompt=True
    )
    # The tiny tokenizer adds no BOS (its template writes it): none is added here.
    expected = _hf_render(template, messages, "<s>").replace("<image>", "<|vision_start|>")
    assert got == expected
    assert "upper" not in config["chat_template"] and config["add_bos_token"] is False


def test_the_marker_pieces_are_image_ids_and_the_runtime_makes_llava_processors_ids(
    package, tmp_path
):
    """Every piece the runtime's marker text is read as has <image>'s id, and the runtime's
    ids for two pictures are LlavaProcessor's (transformers' processor, its tokenizer)."""
    from PIL import Image
    from transformers import AutoTokenizer, CLIPImageProcessor, LlavaProcessor

    from mmforge.backend.runtime import Runtime

    folder = package("llava")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    cfg = json.loads((folder / "genai_config.json").read_text())["model"]
    image_id = cfg["image_token_id"]
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    assert all(added[piece] == image_id for piece in ABSORBED)
    assert max(t["id"] for t in tokenizer["added_tokens"]) < cfg["vocab_size"]

    source = Path(json.loads((folder / "mmforge_manifest.json").read_text())["source"])
    hf_tokenizer = AutoTokenizer.from_pretrained(source)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor.from_pretrained(source),
        tokenizer=hf_tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=hf_tokenizer.chat_template,
    )
    runtime = Runtime(folder)
    messages = CONVERSATIONS[1]
    hf_prompt = hf_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    pixels = (np.random.default_rng(1).random((70, 90, 3)) * 255).astype("uint8")
    picture = Image.fromarray(pixels)
    path = tmp_path / "picture.png"
    picture.resize((56, 56)).save(path)
    expected = processor(text=hf_prompt, images=[picture.resize((56, 56))] * 2)["input_ids"]
    ids = runtime.process(runtime.prompt(messages), [path, path]).arrays["input_ids"]
    assert ids.reshape(-1).tolist() == np.asarray(expected).reshape(-1).tolist()
    assert int((ids == image_id).sum()) == 2 * cfg["vision"]["num_visual_tokens"]


@pytest.mark.parametrize("size", [(400, 300), (300, 400), (337, 336), (336, 336), (99, 1000)])
def test_shortest_edge_and_centre_crop_are_clip_image_processors(size):
    """The intake's rule against transformers' own functions (CLIPImageProcessor's)."""
    from transformers.image_transforms import center_crop, get_resize_output_image_size

    width, height = size
    image = np.zeros((height, width, 3), dtype=np.uint8)
    resized = get_resize_output_image_size(image, size=336, default_to_square=False)
    assert shortest_edge_size(height, width, 336) == tuple(resized)
    marked = np.arange(resized[0] * resized[1]).reshape(resized[0], resized[1], 1)
    cropped = center_crop(marked, (336, 336), input_data_format="channels_last")
    left, top, right, bottom = centre_crop_box(resized[0], resized[1], 336, 336)
    assert np.array_equal(marked[top:bottom, left:right], cropped)


def test_a_tokenizer_that_adds_the_bos_gets_it_from_the_package_template(tiny, tmp_path):
    """LLaVA-1.5's released tokenizer adds the BOS itself (a TemplateProcessing
    post-processor) and its template writes none; ONNX Runtime GenAI 0.18 adds none from
    the post-processor, so the package's template writes it: the same ids as
    transformers' (verify's preprocessing), not two BOS and not none."""
    import shutil

    from transformers import AutoTokenizer

    from mmforge.backend.convert import convert
    from mmforge.backend.verify import verify

    folder = tmp_path / "llava-bos"
    shutil.copytree(tiny("llava"), folder)
    data = json.loads((folder / "tokenizer.json").read_text())
    bos = next(t["id"] for t in data["added_tokens"] if t["content"] == "<s>")
    first = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [first, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [first, {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}},
    }
    (folder / "tokenizer.json").write_text(json.dumps(data))
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["chat_template"] = RELEASE_TEMPLATE  # the release's: no BOS of its own
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    assert AutoTokenizer.from_pretrained(folder)("USER:")["input_ids"][0] == bos

    convert(str(folder), tmp_path / "pkg")
    written = json.loads((tmp_path / "pkg" / "tokenizer_config.json").read_text())
    assert written["chat_template"].startswith("{{ bos_token }}")
    report = verify(tmp_path / "pkg", str(folder), tokens=8)
    stages = {c.name: c for c in report.components}
    assert stages["preprocessing"].verdict == "PASS", stages["preprocessing"].reason
    assert report.tokens["matched"] == report.tokens["total"] == 8


def test_video_llava_pictures_get_video_llava_processors_ids_from_the_runtime(package, tmp_path):
    """A Video-LLaVA package's ids for two pictures are transformers': its tokenizer and
    chat template, VideoLlavaImageProcessor's pixels, and VideoLlavaProcessor's own
    `replace_image_token` rule (the processor itself cannot be built without torchvision,
    which its video processor needs)."""
    from types import SimpleNamespace

    from PIL import Image
    from transformers import AutoTokenizer, VideoLlavaImageProcessor, VideoLlavaProcessor

    from mmforge.backend.runtime import Runtime

    folder = package("video_llava")
    cfg = json.loads((folder / "genai_config.json").read_text())["model"]
    source = Path(json.loads((folder / "mmforge_manifest.json").read_text())["source"])
    config = json.loads((source / "config.json").read_text())
    hf_tokenizer = AutoTokenizer.from_pretrained(source)
    messages = CONVERSATIONS[1]
    hf_prompt = hf_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    pixels = (np.random.default_rng(2).random((70, 90, 3)) * 255).astype("uint8")
    picture = Image.fromarray(pixels)
    path = tmp_path / "picture.png"
    picture.save(path)
    images = VideoLlavaImageProcessor.from_pretrained(source)(
        images=[picture, picture], return_tensors="np"
    )
    rule = SimpleNamespace(  # VideoLlavaProcessor's settings, as its release writes them
        patch_size=config["vision_config"]["patch_size"],
        num_additional_image_tokens=1,
        vision_feature_select_strategy=config["vision_feature_select_strategy"],
        image_token="<image>",
    )
    pieces = hf_prompt.split("<image>")
    expanded = pieces[0]
    for i, rest in enumerate(pieces[1:]):
        expanded += VideoLlavaProcessor.replace_image_token(rule, dict(images), i) + rest
    expected = hf_tokenizer(expanded)["input_ids"]

    runtime = Runtime(folder)
    ids = runtime.process(runtime.prompt(messages), [path, path]).arrays["input_ids"]
    assert ids.reshape(-1).tolist() == list(expected)
    image_id = config["image_token_index"]
    assert cfg["vision"]["num_visual_tokens"] == 16  # (56 / 14)², the class token dropped
    assert int((ids == image_id).sum()) == 2 * 16
    assert config["video_token_index"] not in ids.reshape(-1).tolist()


def test_video_llava_says_pictures_only_and_chat_refuses_a_video(tiny, package, tmp_path):
    """The Model card's notes say a package takes pictures only, and chat refuses a video
    file before anything is loaded, naming the runtime's lack of video input."""
    from mmforge.backend.attachments import IMAGE, AttachmentError
    from mmforge.backend.chat import ChatSession
    from mmforge.backend.inspect import inspect_source

    profile = inspect_source(str(tiny("video_llava")))
    assert profile.family == "Video-LLaVA" and profile.converts == "converts exactly"
    assert any(n.startswith("Pictures only") for n in profile.notes)
    session = ChatSession(package("video_llava"))
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    with pytest.raises(AttachmentError, match="takes no video"):
        session.prepare_attachments([(clip, IMAGE)])
    assert session.messages == []
