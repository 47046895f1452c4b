"""PaliGemma on ONNX Runtime GenAI's videochat_flash_qwen pipeline.

The package's tokenizer makes the runtime's picture markers PaliGemma's own `<image>` ids,
its template writes PaliGemmaProcessor's layout, and its decoder lets the whole prompt
attend both ways at the prefill with 1-based positions. Each test compares with
transformers' own processor or model, and the last ones show that transformers' prefix
mask and positions change the answer, so the comparisons can fail.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mmforge import resources
from mmforge.backend.verify import hf_reference


def _hf_processor(checkpoint: Path):
    from transformers import PaliGemmaProcessor, PreTrainedTokenizerFast, SiglipImageProcessor

    tokenizer = PreTrainedTokenizerFast.from_pretrained(checkpoint)
    image = SiglipImageProcessor.from_pretrained(checkpoint)
    return PaliGemmaProcessor(image_processor=image, tokenizer=tokenizer)


def _runtime(package: Path, pictures: list[Path], text: str) -> dict[str, np.ndarray]:
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(package)))
    tokenizer = og.Tokenizer(model)
    parts = [{"type": "image"} for _ in pictures] + [{"type": "text", "text": text}]
    import json

    prompt = tokenizer.apply_chat_template(
        json.dumps([{"role": "user", "content": parts}]), add_generation_prompt=True
    )
    named = model.create_multimodal_processor()(
        prompt, images=og.Images.open(*[str(p) for p in pictures])
    )
    return {key: named[key].as_numpy() for key in named.keys()}  # noqa: SIM118 - not a dict


def _pictures(tmp_path: Path, n: int) -> list[Path]:
    from PIL import Image

    out = []
    for i in range(n):
        pixels = (np.random.default_rng(i).random((32, 32, 3)) * 255).astype("uint8")
        path = tmp_path / f"p{i}.png"
        Image.fromarray(pixels).save(path)  # already the tiny's 32 px: no resize either side
        out.append(path)
    return out


@pytest.mark.parametrize("n", [1, 2])
def test_the_runtime_gives_paligemma_processors_ids_and_pixels(tiny, package, tmp_path, n):
    from PIL import Image

    pictures = _pictures(tmp_path, n)
    arrays = _runtime(package("paligemma"), pictures, "caption en")
    processor = _hf_processor(tiny("paligemma"))
    expected = processor(
        text="<image>" * n + "caption en", images=[Image.open(p) for p in pictures]
    )
    assert arrays["input_ids"].reshape(-1).tolist() == list(expected["input_ids"][0])
    assert int(arrays["num_image_tokens"].sum()) == 64 * n
    pixels = arrays["pixel_values"].reshape(-1, 3, 32, 32)
    assert np.abs(pixels - np.asarray(expected["pixel_values"])).max() < 1e-5


def _greedy_both(tiny_folder: Path, package_folder: Path, pictures: list[Path], n_tokens: int):
    import onnxruntime_genai as og

    arrays = _runtime(package_folder, pictures, "Describe this.")
    model = og.Model(og.Config(str(package_folder)))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=4096, do_sample=False, top_k=1)
    gen = og.Generator(model, params)
    tokenizer = og.Tokenizer(model)
    import json

    parts = [{"type": "image"} for _ in pictures] + [{"type": "text", "text": "Describe this."}]
    prompt = tokenizer.apply_chat_template(
        json.dumps([{"role": "user", "content": parts}]), add_generation_prompt=True
    )
    gen.set_inputs(
        model.create_multimodal_processor()(
            prompt, images=og.Images.open(*[str(p) for p in pictures])
        )
    )
    ours: list[int] = []
    while len(ours) < n_tokens and not gen.is_done():
        gen.generate_next_token()
        ours.append(int(gen.get_next_tokens()[0]))
    arrays["input_ids"] = arrays["input_ids"].astype(np.int64)
    ref = hf_reference.from_runtime(tiny_folder, prompt, arrays)
    return ours, ref


def test_two_pictures_answer_as_transformers(tiny, package, tmp_path):
    pictures = _pictures(tmp_path, 2)
    ours, ref = _greedy_both(tiny("paligemma"), package("paligemma"), pictures, 16)
    hf = hf_reference.greedy_generate(hf_reference.load_model(tiny("paligemma")), ref, 16)
    assert len(set(hf)) >= 4, "a degenerate reference would prove nothing"
    assert ours == hf[: len(ours)] and len(ours) >= 8


def test_transformers_prefix_mask_and_positions_change_the_answer(tiny, package, tmp_path):
    """A causal decoder answers otherwise than transformers' prefix-LM, so the comparisons
    above would see a decoder that attends causally at the prefill.

    PaliGemma's 1-based positions cannot be seen this way: RoPE depends on position
    differences only, so shifting every position by one changes the logits by rounding
    alone (measured here: ~1e-6). The decoder counts from 1 all the same, as transformers
    does, so both round alike."""
    import torch

    pictures = _pictures(tmp_path, 1)
    _, ref = _greedy_both(tiny("paligemma"), package("paligemma"), pictures, 1)
    model = hf_reference.load_model(tiny("paligemma"))
    with torch.no_grad():
        right = model(**ref.tensors).logits
        seq = ref.tensors["input_ids"].shape[1]
        zero_based = model(**ref.tensors, position_ids=torch.arange(seq)[None]).logits
        # transformers 5.24 gives PaliGemma's Gemma use_bidirectional_attention, so its
        # attention is not causal where no mask is built; a causal decoder is Gemma's own.
        for layer in model.model.language_model.layers:
            layer.self_attn.is_causal = True
        tensors = {k: v for k, v in ref.tensors.items() if k != "token_type_ids"}
        causal = model(**tensors).logits
    assert (right - causal).abs().max() > 1e-2
    assert (right - zero_based).abs().max() < 1e-4


def test_the_probe_picture_is_sized_as_siglip_sizes_it(package):
    """Chat's intake resizes with PIL to the processor's square (bicubic), so the
    runtime's own Resize has nothing left to do."""
    import json

    manifest = json.loads((package("paligemma") / "mmforge_manifest.json").read_text())
    sizing = manifest["pictures"]["sizing"]
    assert (sizing["rule"], sizing["resample"], sizing["width"], sizing["height"]) == (
        "fixed",
        "bicubic",
        32,
        32,
    )
    assert resources.probe_image().is_file()


@pytest.fixture(scope="module")
def paligemma2(tiny_root: Path, tmp_path_factory) -> tuple[Path, Path]:
    """The release-shaped PaliGemma 2 checkpoint (a Gemma 2 decoder) and its package."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families.paligemma.tiny import RELEASED_PALIGEMMA
    from mmforge.backend.tiny.release import write_release

    spec = next(r for r in RELEASED_PALIGEMMA if r.key == "paligemma2-3b-pt-224")
    folder = write_release(spec, tiny_root / "paligemma2-for-chat").folder
    out = tmp_path_factory.mktemp("pg2") / "pkg"
    convert(str(folder), out)
    return folder, out


def test_paligemma2_chat_answers_as_transformers_across_its_window(paligemma2, tmp_path):
    """Chat on PaliGemma 2: 24 greedy tokens after a 264-id prompt, where the sliding
    layers' 32-token window bounds every decode step; and the window matters: transformers
    without it answers otherwise."""
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession, GenerationOptions

    folder, package_folder = paligemma2
    session = ChatSession(package_folder)
    attachments = session.prepare_attachments([(resources.probe_image(), IMAGE)])
    answer = session.send("Describe this.", attachments, GenerationOptions(max_new_tokens=24))
    prompt = session.prompt_text(1)
    arrays = session.runtime.process(prompt, [a.path for a in attachments]).arrays
    arrays["input_ids"] = arrays["input_ids"].astype(np.int64)
    assert arrays["input_ids"].shape[1] > 32 + 200
    ref = hf_reference.from_runtime(folder, prompt, arrays)
    model = hf_reference.load_model(folder)
    hf = hf_reference.greedy_generate(model, ref, 24)
    assert len(set(hf)) >= 4, "a degenerate reference would prove nothing"
    eos = session.info.eos_token_ids
    ours = answer.token_ids
    assert ours == hf[: len(ours)] and (len(ours) == 24 or ours[-1] in eos or hf[len(ours)] in eos)
    model.config.text_config.sliding_window = 10_000
    for layer in model.model.language_model.layers:
        layer.self_attn.sliding_window = None
    assert hf_reference.greedy_generate(model, ref, 24) != hf


def test_a_decoder_that_attends_causally_at_the_prefill_fails_verify(tiny, package, tmp_path):
    """The same package with the prefill's both-ways attention switched off (the prefill
    test made always false): verify names the decoder, and the tokens differ."""
    import shutil

    import onnx_ir as ir

    from mmforge.backend.verify import verify

    folder = tmp_path / "pkg"
    shutil.copytree(package("paligemma"), folder)
    model = ir.load(folder / "decoder.onnx")
    graph = model.graph
    ors = [
        n
        for n in graph
        if n.op_type == "Or"
        and any(
            i is not None and i.producer() is not None and i.producer().op_type == "Equal"
            for i in n.inputs
        )
    ]
    assert len(ors) == 1, "the prefill test: Or(causal, past == 0)"
    causal = next(i for i in ors[0].inputs if i.producer().op_type != "Equal")
    ors[0].outputs[0].replace_all_uses_with(causal)
    ir.save(model, folder / "decoder.onnx", external_data="decoder.onnx.data")
    report = verify(folder, str(tiny("paligemma")), tokens=16)
    assert report.verdict == "FAIL"
    assert report.first_divergent_stage == "decoder_prefill"


# --- A checkpoint without a chat template, as PaliGemma is released -------------------
#
# transformers' PaliGemmaProcessor writes the prompt itself; the package's template is
# derived from it, and chat, serve and verify must give the processor's ids and
# transformers' greedy answer. Before, convert refused such a checkpoint ("The model has no
# chat template").

UNTEMPLATED_TOKENS = 16
PREFIX = "Describe this."


@pytest.fixture(scope="module")
def untemplated(tiny_root: Path, tmp_path_factory) -> tuple[Path, Path, Path]:
    """The tiny PaliGemma with the releases' tokenizer_config (no chat template), its
    package, and a JPEG photo."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families.paligemma.tiny import RELEASED_TOKENIZER
    from mmforge.backend.tiny.build import write_tiny
    from tests.images import user_pictures

    folder = write_tiny(RELEASED_TOKENIZER, tiny_root / "paligemma-no-template").folder
    out = tmp_path_factory.mktemp("pg-untemplated") / "pkg"
    convert(str(folder), out)
    photo = user_pictures(tmp_path_factory.mktemp("pg-photo"))["jpeg"]
    return folder, out, Path(str(photo))


def _processor_answer(folder: Path, photo: Path, n_tokens: int) -> tuple[list[int], list[int]]:
    """transformers' own: PaliGemmaProcessor(images, text) and greedy generate on it."""
    from PIL import Image

    processor = _hf_processor(folder)
    with Image.open(photo) as picture:
        inputs = processor(images=picture.convert("RGB"), text=PREFIX, return_tensors="pt")
    inputs.pop("labels", None)
    ids = [int(t) for t in inputs["input_ids"][0]]
    model = hf_reference.load_model(folder)
    import torch

    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n_tokens, do_sample=False, num_beams=1)
    return ids, [int(t) for t in out[0, len(ids) :]]


def _same_answer(ours: list[int], theirs: list[int], eos: list[int] | tuple[int, ...]) -> bool:
    """Ours is theirs, or theirs cut where ours stopped at an end token."""
    if ours == theirs:
        return True
    return ours == theirs[: len(ours)] and bool(ours) and ours[-1] in eos


def test_a_checkpoint_without_a_template_converts_with_the_processors_format(untemplated):
    import json

    from mmforge.backend.families.paligemma.tokens import PACKAGE_TEMPLATE

    folder, package_folder, _ = untemplated
    assert "chat_template" not in json.loads((folder / "tokenizer_config.json").read_text())
    written = json.loads((package_folder / "tokenizer_config.json").read_text())
    assert written["chat_template"] == PACKAGE_TEMPLATE
    notes = json.loads((package_folder / "mmforge_manifest.json").read_text())["notes"]
    assert any("derived from transformers' PaliGemmaProcessor prompt format" in n for n in notes)


def test_chat_with_a_jpeg_gives_the_processors_ids_and_greedy_answer(untemplated):
    """One JPEG and a prefix: the runtime's prompt ids are PaliGemmaProcessor's for
    (images, text), and chat's greedy answer is transformers' generate on them; a second
    turn is refused in words (PaliGemma's prompt has no turns)."""
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import ChatSession, GenerationOptions
    from mmforge.backend.errors import MmforgeError

    folder, package_folder, photo = untemplated
    session = ChatSession(package_folder)
    attachments = session.prepare_attachments([(photo, IMAGE)])
    options = GenerationOptions(max_new_tokens=UNTEMPLATED_TOKENS)
    answer = session.send(PREFIX, attachments, options)
    runtime_ids = session.runtime.process(session.prompt_text(1), [a.path for a in attachments])
    ids, greedy = _processor_answer(folder, photo, UNTEMPLATED_TOKENS)
    assert runtime_ids.arrays["input_ids"].reshape(-1).tolist() == ids
    assert len(set(greedy)) >= 4, "a degenerate reference would prove nothing"
    assert _same_answer(answer.token_ids, greedy, session.info.eos_token_ids)
    with pytest.raises(MmforgeError, match="one user message"):
        session.send("And now?", [], options)


def test_chat_json_and_serve_answer_as_transformers_on_the_processors_prompt(untemplated, capsys):
    import base64
    import json

    import openai

    from mmforge.app.cli import main
    from mmforge.backend.serve.server import ServeOptions, start

    folder, package_folder, photo = untemplated
    _, greedy = _processor_answer(folder, photo, UNTEMPLATED_TOKENS)
    argv = ["chat", str(package_folder), "--image", str(photo), "--prompt", PREFIX, "--json"]
    assert main([*argv, "--max-new-tokens", str(UNTEMPLATED_TOKENS)]) == 0
    chat = json.loads(capsys.readouterr().out)
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    eos = eos if isinstance(eos, list) else [eos]
    assert _same_answer(chat["token_ids"], greedy, eos)
    url = f"data:image/jpeg;base64,{base64.b64encode(photo.read_bytes()).decode()}"
    picture = {"type": "image_url", "image_url": {"url": url}}
    handle = start(package_folder, ServeOptions(port=0))
    try:
        client = openai.OpenAI(base_url=handle.url, api_key="none", max_retries=0, timeout=120)
        answer = client.chat.completions.create(
            model=handle.model_id,
            messages=[{"role": "user", "content": [picture, {"type": "text", "text": PREFIX}]}],
            max_tokens=UNTEMPLATED_TOKENS,
            temperature=0,
            extra_body={"return_token_ids": True},
        )
    finally:
        handle.stop()
    assert (answer.choices[0].model_extra or {})["token_ids"] == chat["token_ids"]


def test_verify_passes_against_the_processor_itself(untemplated):
    """verify's transformers side runs PaliGemmaProcessor (the checkpoint has no template
    to render), and a prompt without a picture, which the processor refuses, is named."""
    from mmforge.backend.errors import MmforgeError
    from mmforge.backend.verify import verify

    folder, package_folder, photo = untemplated
    report = verify(package_folder, str(folder), images=[photo], tokens=UNTEMPLATED_TOKENS)
    assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]
    assert report.tokens["matched"] == report.tokens["total"] == UNTEMPLATED_TOKENS
    with pytest.raises(MmforgeError, match="without a picture"):
        verify(package_folder, str(folder), tokens=2, text_only=True)
