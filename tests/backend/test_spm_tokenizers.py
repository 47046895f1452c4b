"""Release-shaped SentencePiece tokenizers: the runtime's ids against transformers'.

LLaVA-1.5 / VipLLaVA / Video-LLaVA / Idefics2 / Phi-3.5-Vision ship a Llama-style
SentencePiece BPE (LlamaTokenizer, legacy false), PaliGemma and Gemma 3/4 Gemma's
(backend/tiny/spm.py builds both offline). The package's tokenizer files are written by
`write_tokenizer` (and LLaVA's `adapt`), as conversion writes them, into a converted tiny
package whose tokenizer is swapped; ONNX Runtime GenAI 0.18 then tokenizes them.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from mmforge.backend.convert.package import write_tokenizer
from mmforge.backend.families import Cfg
from mmforge.backend.families.llava.tiny import RELEASE_TEMPLATE
from mmforge.backend.tiny.spm import FORMS, build_spm

ADDED = ["<image>", "<pad>", "<end_of_utterance>", "<start_of_turn>", "<end_of_turn>"]
ADDED += ["<start_of_image>", "[INST]", "[/INST]"]
FAMILY_ADDED = {
    "llava": ["<image>", "<pad>"],
    "idefics2": ["<fake_token_around_image>", "<image>", "<end_of_utterance>"],
}

# Prompts that start with a special token, as every chat prompt the packages write does
# (the template writes the BOS, or a turn marker, first).
PROMPTS = [
    "{bos}USER: <image>\nWhat is in the picture? ASSISTANT:",
    "{bos}USER: <image>\nWhat is it? ASSISTANT: A cat. {eos}USER: And 12 birds? ASSISTANT:",
    "{bos} leading space and  two\n\nnewlines\tand a tab ",
    "{bos}numbers 2024 3.14 007 and Voilà, déjà l'été à Zürich 日本語 🙂",
    "<image>text right after a special token",
    "<image> a space after it<image><image>\nand a newline",
    "{bos}[INST] <image>\nDescribe. [/INST]",
    "{bos}User:<image><image>Describe<end_of_utterance>\nAssistant:",
    "<start_of_turn>user\n<start_of_image>Describe this.<end_of_turn>\n<start_of_turn>model\n",
    "<image><image>{bos}caption en\n",
]
CONVERSATIONS = [
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
    [
        {"role": "user", "content": [{"type": "text", "text": " Hi, 12 birds?\n"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Voilà: déjà 3.14 🙂"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And these?"},
                {"type": "image"},
                {"type": "image"},
                {"type": "text", "text": "<b> and \nmore"},
            ],
        },
    ],
]


def _packaged(package, tmp_path: Path, form: str, **config: object) -> tuple[Path, Path, object]:
    """(checkpoint folder, package folder, spm) with the form's files written as converting
    writes them, into a copy of the converted tiny LLaVA package."""
    spm = build_spm(form, ADDED)
    src = tmp_path / "src"
    src.mkdir()
    spm.write(src, RELEASE_TEMPLATE)
    if config:
        settings = json.loads((src / "tokenizer_config.json").read_text())
        (src / "tokenizer_config.json").write_text(json.dumps({**settings, **config}))
    out = tmp_path / "pkg"
    shutil.copytree(package("llava"), out)
    write_tokenizer(src, out)
    return src, out, spm


def _runtime(folder: Path):
    import onnxruntime_genai as og

    return og.Tokenizer(og.Model(og.Config(str(folder))))


@pytest.mark.parametrize(
    ("form", "config"),
    [(form, {}) for form in FORMS] + [("llama_legacy", {"legacy": True})],
    ids=[*FORMS, "llama legacy true"],
)
def test_the_runtime_reads_text_after_special_tokens_as_transformers(
    package, tmp_path, form, config
):
    """Every prompt that starts with a special token: the runtime's ids are transformers'
    (AutoTokenizer of the tokenizer files alone, no special tokens added), token for token.
    `legacy: true` makes transformers' LlamaTokenizer prepend `▁` to every text (not to
    text that starts with a space, which the runtime does)."""
    from transformers import AutoTokenizer

    src, out, _ = _packaged(package, tmp_path, form, **config)
    hf = AutoTokenizer.from_pretrained(src)
    runtime = _runtime(out)
    bos, eos = hf.bos_token, hf.eos_token
    special = "|".join(re.escape(t) for t in hf.all_special_tokens + ADDED)
    for prompt in (p.format(bos=bos, eos=eos) for p in PROMPTS):
        expected = hf(prompt, add_special_tokens=False)["input_ids"]
        got = list(runtime.encode(prompt))
        if config.get("legacy") and re.search(f"({special}) ", prompt):
            # Metaspace "always" puts no `▁` before text that starts with a space; the
            # runtime's per-text prefix, SentencePiece's, puts a second one (a known
            # difference, docs/chat-engine.md).
            assert len(got) > len(expected), prompt
            continue
        assert got == expected, prompt
    # The text really goes through SentencePiece pieces and byte fallback.
    pieces = hf.convert_ids_to_tokens(hf(PROMPTS[3].format(bos=bos))["input_ids"])
    assert any(p.startswith("\u2581") for p in pieces) and "<0xF0>" in pieces


def _family_package(tiny, package, tmp_path: Path, family: str, form: str):
    """The tiny checkpoint of `family` with a release-shaped tokenizer of `form`, and its
    package's tokenizer files written as conversion writes them (write_tokenizer, then the
    family's adapt), in a copy of the converted tiny package.

    The weights stay the tiny ones: only the ids and the processor's input are compared,
    so the vocabulary size and image ids are set to the new tokenizer's on both sides.
    """
    tokenizer_module = importlib.import_module(f"mmforge.backend.families.{family}.tokenizer")
    template = importlib.import_module(f"mmforge.backend.families.{family}.tiny").RELEASE_TEMPLATE
    src, out = tmp_path / "src", tmp_path / "pkg"
    shutil.copytree(tiny(family), src)
    shutil.copytree(package(family), out)
    added = FAMILY_ADDED[family]
    spm = build_spm(form, added)
    spm.write(src, template)
    image = spm.ids["<image>"]
    key = "image_token_index" if family == "llava" else "image_token_id"
    config = json.loads((src / "config.json").read_text())
    config[key] = image
    config["text_config"]["vocab_size"] = spm.vocab_size
    (src / "config.json").write_text(json.dumps(config))
    write_tokenizer(src, out)
    tokenizer = json.loads((out / "tokenizer.json").read_text())
    settings = json.loads((out / "tokenizer_config.json").read_text())
    tokenizer_module.adapt(tokenizer, settings, Cfg({key: image}), src)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(settings, ensure_ascii=False))
    genai = json.loads((out / "genai_config.json").read_text())
    genai["model"].update(vocab_size=spm.vocab_size, image_token_id=image)
    (out / "genai_config.json").write_text(json.dumps(genai))
    return src, out, spm


def _hf_processor(family: str, source: Path):
    from transformers import AutoProcessor, AutoTokenizer, CLIPImageProcessor, LlavaProcessor

    if family == "idefics2":
        return AutoProcessor.from_pretrained(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    return LlavaProcessor(
        image_processor=CLIPImageProcessor.from_pretrained(source),
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=tokenizer.chat_template,
    )


@pytest.mark.parametrize("form", ["llama_legacy", "llama_metaspace"])
@pytest.mark.parametrize("family", ["llava", "idefics2"])
def test_chat_prompts_get_the_hf_processors_ids(tiny, package, tmp_path, family, form):
    """Through chat's intake and the runtime's processor, the ids are LlavaProcessor's /
    Idefics2Processor's with the release's template and tokenizer (which transformers
    reads as written for llava, and rebuilds as a first-text-only Metaspace for
    idefics2): two conversations, pictures, leading spaces, digits, non-ASCII."""
    from PIL import Image

    from mmforge.backend.attachments import IMAGE, package_intake, prepare
    from mmforge.backend.runtime import Runtime

    src, out, spm = _family_package(tiny, package, tmp_path, family, form)
    processor = _hf_processor(family, src)
    rng = np.random.default_rng(0)
    picture = tmp_path / "p.png"
    Image.fromarray((rng.random((56, 56, 3)) * 255).astype("uint8")).save(picture)
    runtime = Runtime(out)
    intake = package_intake(out)
    for messages in CONVERSATIONS:
        n = sum(part["type"] == "image" for m in messages for part in m["content"])
        sent = [prepare(picture, IMAGE, tmp_path / f"in{i}", intake).path for i in range(n)]
        ids = runtime.process(runtime.prompt(messages), sent).arrays["input_ids"]
        prompt = processor.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        expected = processor(text=prompt, images=[Image.open(picture)] * n)["input_ids"]
        expected_ids = np.asarray(expected).reshape(-1).tolist()
        got = ids.reshape(-1).tolist()
        tokens = processor.tokenizer.convert_ids_to_tokens
        assert got == expected_ids, (tokens(got), tokens(expected_ids))
        assert got[0] == spm.ids["<s>"] and spm.ids["<image>"] in got
        assert any(str(t).startswith("\u2581") for t in tokens(got))


def test_a_llama_sentencepiece_tokenizer_is_rewritten_in_the_form_the_runtime_reads(
    package, tmp_path
):
    """What the package holds: Replace(" ", "▁"), no pre-tokenizer, no Strip decoder,
    GemmaTokenizer; the
    vocabulary, merges and added tokens as released."""
    _, out, spm = _packaged(package, tmp_path, "llama_metaspace")
    written = json.loads((out / "tokenizer.json").read_text())
    assert written["normalizer"] == {
        "type": "Replace",
        "pattern": {"String": " "},
        "content": "\u2581",
    }
    assert written["pre_tokenizer"] is None
    assert "Strip" not in json.dumps(written["decoder"]) and "Strip" in json.dumps(
        spm.tokenizer["decoder"]
    )
    assert written["model"] == spm.tokenizer["model"]
    assert written["added_tokens"] == spm.tokenizer["added_tokens"]
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "GemmaTokenizer"
    )


def test_gemmas_tokenizer_is_copied_as_released(package, tmp_path):
    """Gemma's form, which the runtime already reads like transformers, is the file."""
    _, out, spm = _packaged(package, tmp_path, "gemma")
    assert json.loads((out / "tokenizer.json").read_text()) == spm.tokenizer
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "GemmaTokenizer"
    )


def test_a_tokenizer_transformers_prefixes_every_text_keeps_its_file(package, tmp_path):
    """`legacy: true`: transformers prepends `▁` to every text, as the runtime does for a
    file whose decoder strips a space: the file is kept, only the class is Gemma's (no
    regex split of digits and punctuation)."""
    _, out, spm = _packaged(package, tmp_path, "llama_legacy", legacy=True)
    assert json.loads((out / "tokenizer.json").read_text()) == spm.tokenizer
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "GemmaTokenizer"
    )


def test_a_byte_level_tokenizer_is_copied_unchanged(tiny, tmp_path):
    """The tiny checkpoints' byte-level BPE: the package's tokenizer.json is the file."""
    src = tiny("llava")
    write_tokenizer(src, tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()


PHI3V_PROMPTS = [
    "<|user|>\n<|image_1|>\nDescribe this.<|end|>\n<|assistant|>\n",
    "<|system|>\nBe brief.<|end|>\n<|user|>\n<|image_1|>\n<|image_2|>\nCompare 12 and 3.14 "
    "déjà 🙂<|end|>\n<|assistant|>\nOk.<|end|>\n<|user|>\n And?<|end|>\n<|assistant|>\n",
]


@pytest.fixture(scope="module")
def phi3v(tmp_path_factory):
    """(checkpoint, package) of the tiny Phi-3.5-Vision."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families.phi3v.tiny import write_phi3v

    root = tmp_path_factory.mktemp("phi3v")
    folder = write_phi3v(root / "tiny").folder
    convert(str(folder), root / "pkg", trust_remote_code=True)
    return folder, root / "pkg"


def test_phi3v_prompt_pieces_get_the_references_ids(phi3v, tmp_path):
    """Phi-3.5-Vision's tokenizer (Llama form, `Prepend` normalizer; transformers reads
    phi3_v's file as written): the runtime's processor tokenizes the text between image
    tags piece by piece (phi_image_processor.cpp ProcessImagePrompt), as the reference
    does (phi3v/reference.py): every piece's ids are transformers'."""
    from transformers import AutoTokenizer

    from mmforge.backend.families.phi3v.reference import _IMAGE_TAG

    checkpoint, converted = phi3v
    src, out = tmp_path / "src", tmp_path / "pkg"
    shutil.copytree(checkpoint, src)
    shutil.copytree(converted, out)
    template = json.loads((src / "tokenizer_config.json").read_text())["chat_template"]
    specials = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
    build_spm("llama_legacy", specials).write(src, template)
    write_tokenizer(src, out)
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "GemmaTokenizer"
    )
    hf = AutoTokenizer.from_pretrained(src, trust_remote_code=False)
    runtime = _runtime(out)
    for prompt in PHI3V_PROMPTS:
        for piece in re.split(_IMAGE_TAG, prompt)[::2]:
            expected = hf(piece, add_special_tokens=False)["input_ids"]
            assert list(runtime.encode(piece)) == expected, piece


@pytest.mark.parametrize("form", ["llama_legacy", "llama_metaspace"])
def test_a_llava_checkpoint_with_a_release_tokenizer_converts_and_verifies(tiny, tmp_path, form):
    """The whole path: the tiny LLaVA with a release-shaped tokenizer on its own ids
    (<s> 1, </s> 2, <pad> and <image> where the tiny weights have them) converts, and
    verify passes every stage: the runtime's prompt ids are transformers' (with the
    released files unchanged, the Metaspace one is AMBIGUOUS at preprocessing)."""
    from mmforge.backend.convert import convert
    from mmforge.backend.verify import verify

    src = tmp_path / "src"
    shutil.copytree(tiny("llava"), src)
    config = json.loads((src / "config.json").read_text())
    text = config["text_config"]
    pad, image = text["pad_token_id"], config["image_token_index"]
    assert image == pad + 1
    spm = build_spm(form, ["<pad>", "<image>"], trained=100, first_added=pad)
    assert spm.ids["<image>"] == image and spm.vocab_size == text["vocab_size"]
    spm.write(src, RELEASE_TEMPLATE)
    for name in ("config.json", "generation_config.json"):
        data = json.loads((src / name).read_text())
        ids = {"bos_token_id": spm.ids["<s>"], "eos_token_id": spm.ids["</s>"]}
        (data["text_config"] if name == "config.json" else data).update(ids)
        (src / name).write_text(json.dumps(data))
    convert(str(src), tmp_path / "pkg")
    report = verify(tmp_path / "pkg", str(src), tokens=8)
    stages = {c.name: c for c in report.components}
    assert all(c.verdict == "PASS" for c in stages.values()), {
        n: (c.verdict, c.reason) for n, c in stages.items()
    }
    assert "the same" in stages["preprocessing"].reason
    assert report.tokens["matched"] == report.tokens["total"] == 8
    # Chat streams an answer as transformers decodes it: no leading space of its own (the
    # package's tokenizer.json lost the Strip decoder the runtime must not see).
    from transformers import AutoTokenizer

    from mmforge.backend.chat.generation import _answer_decoder, _IncrementalText

    hf = AutoTokenizer.from_pretrained(src)
    ids = hf("The cat sat on the mat. It is 12 o'clock.", add_special_tokens=False)["input_ids"]
    decode = _answer_decoder(tmp_path / "pkg")
    assert decode is not None
    stream = _IncrementalText(decode)
    streamed = "".join(stream.decode(token) for token in ids)
    assert streamed == decode(ids) == hf.decode(ids, skip_special_tokens=True)
