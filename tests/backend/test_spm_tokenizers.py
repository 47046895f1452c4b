"""Release-shaped SentencePiece tokenizers: the runtime's ids against transformers'.

LLaVA-1.5 / VipLLaVA / Video-LLaVA / Idefics2 / Phi-3.5-Vision ship a Llama-style
SentencePiece BPE (LlamaTokenizer, legacy false), PaliGemma and Gemma 3/4 Gemma's
(backend/tiny/spm.py builds both offline). The package's tokenizer files are written by
`write_tokenizer` (and LLaVA's `adapt`), as conversion writes them, into a converted tiny
package whose tokenizer is swapped; ONNX Runtime GenAI 0.18 then tokenizes them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmforge.backend.convert.package import write_tokenizer
from mmforge.backend.families import Cfg
from mmforge.backend.families.llava.tiny import RELEASE_TEMPLATE
from mmforge.backend.families.llava.tokenizer import adapt
from mmforge.backend.tiny.spm import FORMS, build_spm

ADDED = ["<image>", "<pad>", "<end_of_utterance>", "<start_of_turn>", "<end_of_turn>"]
ADDED += ["<start_of_image>", "[INST]", "[/INST]"]

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


@pytest.mark.parametrize("form", FORMS)
def test_the_runtime_reads_text_after_special_tokens_as_transformers(package, tmp_path, form):
    """Every prompt that starts with a special token: the runtime's ids are transformers'
    (AutoTokenizer of the checkpoint's files, no special tokens added), token for token."""
    from transformers import AutoTokenizer

    src, out, _ = _packaged(package, tmp_path, form)
    hf = AutoTokenizer.from_pretrained(src)
    runtime = _runtime(out)
    bos, eos = hf.bos_token, hf.eos_token
    for prompt in (p.format(bos=bos, eos=eos) for p in PROMPTS):
        expected = hf(prompt, add_special_tokens=False)["input_ids"]
        assert list(runtime.encode(prompt)) == expected, prompt
    # The text really goes through SentencePiece pieces and byte fallback.
    pieces = hf.convert_ids_to_tokens(hf(PROMPTS[3].format(bos=bos))["input_ids"])
    assert any(p.startswith("\u2581") for p in pieces) and "<0xF0>" in pieces


@pytest.mark.parametrize("form", ["llama_legacy", "llama_metaspace"])
@pytest.mark.parametrize("messages", CONVERSATIONS, ids=["one picture", "three turns"])
def test_llava_chat_prompts_get_llava_processors_ids(package, tmp_path, form, messages):
    """The package's template (the BOS and the space before the first text) rendered and
    tokenized by the runtime gives what LlavaProcessor's tokenizer gives for the release's
    template: [BOS] + the prompt with `▁` before its first text; one image id a picture."""
    from transformers import AutoTokenizer

    src, out, spm = _packaged(package, tmp_path, form)
    tokenizer = json.loads((out / "tokenizer.json").read_text())
    config = json.loads((out / "tokenizer_config.json").read_text())
    image = spm.ids["<image>"]
    adapt(tokenizer, config, Cfg({"image_token_index": image}), src)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False))
    hf = AutoTokenizer.from_pretrained(src)
    prompt = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = hf(prompt)["input_ids"]  # LlavaProcessor: special tokens added (the BOS)
    runtime = _runtime(out)
    text = runtime.apply_chat_template(
        json.dumps(messages), template_str=config["chat_template"], add_generation_prompt=True
    )
    ids = list(runtime.encode(text))
    assert ids == expected, (hf.convert_ids_to_tokens(ids), hf.convert_ids_to_tokens(expected))
    assert ids[0] == spm.ids["<s>"] and ids.count(image) == prompt.count("<image>") > 0


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


@pytest.mark.parametrize(
    ("form", "config"),
    [("gemma", {}), ("llama_legacy", {"legacy": True})],
    ids=["gemma", "llama legacy true"],
)
def test_other_sentencepiece_forms_are_copied_as_released(package, tmp_path, form, config):
    """Gemma's (already read like transformers) and a legacy Llama (prepend_scheme
    "always", not rewritten) keep the released tokenizer.json and class."""
    src, out, spm = _packaged(package, tmp_path, form, **config)
    assert json.loads((out / "tokenizer.json").read_text()) == spm.tokenizer
    released = json.loads((src / "tokenizer_config.json").read_text())["tokenizer_class"]
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == released


def test_a_byte_level_tokenizer_is_copied_unchanged(tiny, tmp_path):
    """The tiny checkpoints' byte-level BPE: the package's tokenizer.json is the file."""
    src = tiny("llava")
    write_tokenizer(src, tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
