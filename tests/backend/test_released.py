"""Checkpoints shaped like the hub releases convert and match transformers token for token.

Each is built from its release's config.json text (transformers 4 key names, defaults
left out), in bfloat16 under the release's tensor names, in two shards: see
`backend/tiny/release.py` and each family's `tiny.py`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.convert import convert
from mmforge.backend.families import ALL
from mmforge.backend.tiny.release import write_release
from mmforge.backend.verify import verify
from tests.backend.families import agrees_but_for_decoder_prefill, verdict
from tests.conftest import approximated
from tests.images import user_pictures

RELEASED = {r.key: r for f in ALL for r in f.fixtures.released}
# Which picture of `user_pictures` a checkpoint is verified with (else the probe).
# Random release-shaped Gemma 4 models generate a placeholder of their own on some
# pictures (verify: AMBIGUOUS at end_to_end, since nothing after an imageless placeholder
# means anything) or meet a near-tie: the E2B shape on the probe and on the 300 × 200
# JPEG at step 5, the 31B at int4 on the probe at step 5 (0.0015 apart); the pictures
# named here show all 32 tokens (measured after Gemma 4's prompt became transformers').
# Video-LLaVA's 224 px tower: a 900 × 600 photo takes the shortest-edge resize and crop.
# Idefics2 that splits: the photo's four 450 × 300 quarters raised to 450 × 378, and the whole.
PHOTO = {
    "gemma4": "large",
    "gemma4-26b-a4b": "jpeg",
    "gemma4-31b": "jpeg",
    "video_llava-7b": "jpeg",
    "idefics2-8b-splitting": "jpeg",
}
# The quantized releases verified on a picture for the same reason.
ROUNDED_PHOTO = {"gemma4": "large", "gemma4-31b": "jpeg"}

_built: dict[str, Path] = {}


@pytest.fixture(scope="session")
def released(tiny_root: Path):
    def get(key: str) -> Path:
        if key not in _built:
            _built[key] = write_release(RELEASED[key], tiny_root / f"released-{key}").folder
        return _built[key]

    return get


# Converted families whose released config.json text was not at hand (README says so);
# their tiny checkpoints are built from transformers' config class.
# No copy of these releases' config.json text was found offline: VipLLaVA's
# (llava-hf/vip-llava-7b-hf) is reconstructed nowhere; its tiny checkpoint is all it has.
# No offline copy of the release config: Gemma 4 unified, VipLLaVA, LLaVA-NeXT (llava-v1.6).
NO_RELEASED_CONFIG = {"gemma4_unified", "vipllava", "llava_next"}


def test_every_converted_family_has_a_release_shaped_checkpoint():
    converted = {f.key for f in ALL if f.package is not None and f.fixtures.remote_release is None}
    covered = {r.tiny.family_key for r in RELEASED.values()}
    assert converted - NO_RELEASED_CONFIG <= covered
    assert converted - covered >= NO_RELEASED_CONFIG  # (an entry here that gains one goes)
    assert {"ministral3-3b", "phi4mm-native", "phi4mm-remote"} <= set(RELEASED)


def test_release_shaped_checkpoints_are_shaped_like_releases(released):
    from mmforge.backend.tiny.tokenizer import train_tokenizer

    for key, spec in RELEASED.items():
        folder = released(key)
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        shards = set(index["weight_map"].values())
        assert len(shards) == 2
        for shard in shards:  # bfloat16, as released
            header = _header(folder / shard)
            assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
        tok = train_tokenizer(spec.tiny.specials, pinned=spec.tiny.pinned)
        expected = spec.config_json(tok.special_ids, tok.vocab_size)
        assert json.loads((folder / "config.json").read_text()) == expected  # the text as is


def _header(path: Path) -> dict:
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(size))


@pytest.mark.parametrize("key", list(RELEASED))
def test_a_release_shaped_checkpoint_matches_transformers_over_32_tokens(released, tmp_path, key):
    folder = released(key)
    checkpoint = Checkpoint.read(folder)
    assert checkpoint.field_review.refused == ()
    convert(str(folder), tmp_path / "pkg", approximate=approximated(RELEASED[key].tiny.family_key))
    images = (
        [user_pictures(tmp_path / "pictures", big=(900, 600))[PHOTO[key]]] if key in PHOTO else []
    )
    report = verify(tmp_path / "pkg", str(folder), images=images, tokens=32)
    stages = [(c.name, c.verdict, c.reason) for c in report.components]
    usual = verdict(RELEASED[key].tiny.family_key)  # the family's expect.py
    if usual != "PASS":
        assert report.verdict == usual, stages
        assert all(c.verdict == "PASS" for c in report.components if c.name != "preprocessing")
    else:
        assert agrees_but_for_decoder_prefill(report), stages
    assert report.tokens["matched"] == report.tokens["total"] == 32


# Release-shaped checkpoints checked against their own rounded weights, from each family's
# expect.py: one per way the package's weights are made beyond the graph builder's (LFM2-VL:
# ONNX Runtime GenAI's builder with q/k/v fused under one name; Phi-4: base weights with a
# LoRA merged in, native and remote layout).
ROUNDED = [pair for f in ALL for pair in f.fixtures.expect.released_rounded]


@pytest.mark.parametrize(("key", "dtype"), ROUNDED)
def test_a_quantized_release_is_exact_against_its_own_rounded_weights(
    released, tmp_path, key, dtype
):
    """The rounded reference holds every package weight (none left to the quantized
    bounds, none called a conversion fault), so the package PASSes with the f32 bounds."""
    folder = released(key)
    convert(str(folder), tmp_path / "pkg", dtype=dtype)
    pictures = user_pictures(tmp_path / "pictures", big=(900, 600))
    images = [pictures[ROUNDED_PHOTO[key]]] if key in ROUNDED_PHOTO else []
    report = verify(tmp_path / "pkg", str(folder), images=images, tokens=32)
    assert report.verdict == verdict(RELEASED[key].tiny.family_key), [
        (c.name, c.verdict, c.reason) for c in report.components
    ]
    assert not any("no rounded reference" in n or "not the rounding" in n for n in report.notes)
    stages = {c.name: c for c in report.components}
    assert "rtol 0.02" in stages["decoder_prefill"].reason  # the f32 bound
    assert report.rounding is not None and report.rounding.weights > 0
    assert report.tokens["matched"] == report.tokens["total"]


def test_gemma4_experts_at_int4_are_exact_and_a_f16_encoder_s_flip_is_named(released, tmp_path):
    """Gemma 4 26B-A4B's experts at int4, against their own rounded weights.

    With the default f16 vision encoder (0.0024 from HF's features) the random model's
    routers flip an expert choice at some picture positions, which moves the prompt's
    logits by several units (measured: 4.5 with seed 7, tokens from step 0; 0.045 apart at
    step 28 with this seed's, a near-tie). So the decoder's exactness is checked with
    float32 encoders, and the flip with f16 ones must be a near-tie or a FAIL that names
    the encoders, never a FAIL blamed on nothing."""
    folder = released("gemma4-26b-a4b")
    convert(str(folder), tmp_path / "f32-encoders", dtype="int4", encoders="f32")
    report = verify(tmp_path / "f32-encoders", str(folder), tokens=32)
    assert report.verdict == verdict("gemma4")
    assert all(c.verdict == "PASS" for c in report.components if c.name != "preprocessing")
    assert report.rounding is not None and report.rounding.weights > 0
    assert report.tokens["matched"] == report.tokens["total"] == 32

    convert(str(folder), tmp_path / "f16-encoders", dtype="int4")
    report = verify(tmp_path / "f16-encoders", str(folder), tokens=32)
    stages = {c.name: c for c in report.components}
    assert stages["vision_encoder"].verdict == "PASS"  # within the f16 bounds
    last = stages["end_to_end"]
    assert last.verdict == "PASS" or "near-tie" in last.reason or "--encoders f32" in last.reason


def test_an_f16_decoder_normalises_and_runs_its_deltanet_in_float32(released, tmp_path):
    """With its norms in float16 the release-shaped Qwen3.6 MoE f16 package FAILed at
    decoder_prefill (cosine 0.965, 15 of 32 tokens); torch normalises, and runs the
    DeltaNet recurrence and keeps its state, in float32."""
    import onnx

    folder = released("qwen3_6-35b-a3b")
    convert(str(folder), tmp_path / "pkg", dtype="f16")
    decoder = onnx.load(str(tmp_path / "pkg" / "decoder.onnx"), load_external_data=False)
    norms = [
        n
        for n in decoder.graph.node
        if "Normalization" in n.op_type or n.op_type == "LinearAttention"
    ]
    casts = {o for n in decoder.graph.node if n.op_type == "Cast" for o in n.output}
    carried = {v.name for v in decoder.graph.input if v.name.startswith("past_key_values.")}
    assert norms and all(i in casts or i in carried for n in norms for i in n.input if i)
    # The recurrent state is carried in float32, as transformers' cache holds it; the
    # convolution state and the KV cache stay float16.
    dtypes = {
        v.name: v.type.tensor_type.elem_type
        for v in [*decoder.graph.input, *decoder.graph.output]
        if v.name.startswith(("past_key_values.", "present."))
    }
    states = {n: t for n, t in dtypes.items() if n.endswith(".recurrent_state")}
    assert len(states) >= 2 and set(states.values()) == {onnx.TensorProto.FLOAT}
    assert {t for n, t in dtypes.items() if n not in states} == {onnx.TensorProto.FLOAT16}
    report = verify(tmp_path / "pkg", str(folder), tokens=32)
    prefill = next(c for c in report.components if c.name == "decoder_prefill")
    assert report.verdict != "FAIL" and prefill.cosine > 0.999, prefill.reason


def test_ministral_3_matches_on_both_sides_of_its_original_context(tiny_root, tmp_path):
    """Ministral 3 scales queries past `original_max_position_embeddings` (Llama 4 scaling)
    and its YaRN is built for that length: with it shrunk to 16 positions, the prompt
    and the answer run past it. mobius's fused attention dropped the scaling."""
    spec = RELEASED["ministral3-3b"]

    def config(specials: dict[str, int], vocab: int) -> dict:
        data = spec.config_json(specials, vocab)
        data["text_config"]["rope_parameters"]["original_max_position_embeddings"] = 16
        data["text_config"]["rope_parameters"]["llama_4_scaling_beta"] = 1.0
        return data

    short = dataclasses.replace(spec, key="ministral3-short", config_json=config)
    folder = write_release(short, tiny_root / "released-ministral3-short").folder
    convert(str(folder), tmp_path / "pkg")
    report = verify(tmp_path / "pkg", str(folder), tokens=32)
    assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]

    def unscaled(specials: dict[str, int], vocab: int) -> dict:
        data = config(specials, vocab)
        data["text_config"]["rope_parameters"]["llama_4_scaling_beta"] = 0.0
        return data

    # Not vacuous: past the boundary the scaling changes transformers' answer.
    plain = dataclasses.replace(spec, key="ministral3-unscaled", config_json=unscaled)
    plain_folder = write_release(plain, tiny_root / "released-ministral3-unscaled").folder
    convert(str(plain_folder), tmp_path / "plain")
    assert verify(tmp_path / "plain", str(folder), tokens=32).verdict == "FAIL"


def test_phi4_packages_carry_the_vision_lora_and_it_matters(released, tmp_path):
    """The vision LoRA is merged into the package's decoder; verify compares with HF
    running the adapter (PEFT), so PASS means "as the released model runs". Against the
    base model without it, the same package fails."""
    import shutil

    folder = released("phi4mm-native")
    convert(str(folder), tmp_path / "pkg")
    manifest = json.loads((tmp_path / "pkg" / "mmforge_manifest.json").read_text())
    note = next(n for n in manifest["notes"] if "LoRA" in n)
    assert "vision LoRA (vision-lora/, r=4, alpha=8) merged into 8 decoder weights" in note
    assert "speech LoRA (speech-lora/, r=6) is not in the package" in note
    base = tmp_path / "base"
    shutil.copytree(folder, base)
    shutil.rmtree(base / "vision-lora")
    shutil.rmtree(base / "speech-lora")
    report = verify(tmp_path / "pkg", str(base), tokens=8)
    assert report.verdict == "FAIL" and report.first_divergent_stage == "decoder_prefill"


def test_phi4_remote_code_layout_is_read_without_running_its_code(released, tmp_path):
    folder = released("phi4mm-remote")
    assert json.loads((folder / "config.json").read_text())["model_type"] == "phi4mm"
    checkpoint = Checkpoint.read(folder)  # no trust_remote_code
    assert checkpoint.remote_layout and not checkpoint.remote_code
    assert checkpoint.hf_config.model_type == "phi4_multimodal"
    assert checkpoint.config["audio_config"]["bias_max_distance"] == 500
    # The one released processor file names the remote code's classes: read as native.
    extractor = checkpoint.audio_preprocessor.get("feature_extractor_type")
    assert extractor == "Phi4MultimodalFeatureExtractor"
    from mmforge.backend.inspect import inspect_source

    profile = inspect_source(str(folder))
    assert any("read as data" in w for w in profile.warnings) and not profile.remote_code


def test_phi4_longrope_matches_on_each_side_of_the_original_context(tiny_root, tmp_path):
    """LongRoPE uses its short factors within the original context (4,096 as released;
    the prompt and answer here are shorter) and its long ones past it (the context shrunk
    to 64, below the prompt). Each package matches HF on its own side, and not on the
    other: the factor sets really differ."""
    spec = RELEASED["phi4mm-native"]
    packages = {}
    for original, side in ((4096, "short"), (64, "long")):

        def config(specials: dict[str, int], vocab: int, original: int = original) -> dict:
            data = spec.config_json(specials, vocab)
            data["original_max_position_embeddings"] = original
            return data

        varied = dataclasses.replace(spec, key=f"phi4mm-{side}", config_json=config, lora=())
        folder = write_release(varied, tiny_root / f"released-phi4mm-{side}").folder
        convert(str(folder), tmp_path / side)
        report = verify(tmp_path / side, str(folder), tokens=32)
        assert report.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in report.components]
        assert report.tokens["matched"] == 32
        packages[side] = (tmp_path / side, folder)
    assert verify(packages["short"][0], str(packages["long"][1]), tokens=8).verdict == "FAIL"


def test_phi4_remote_layout_reads_with_a_shard_still_missing(released, tmp_path):
    """A download resumed from the cache can hold some shards and not yet others: the
    layout is still mapped (the tower's sizes from the released defaults) instead of
    the check stopping on the missing shard."""
    import shutil

    folder = tmp_path / "partial"
    shutil.copytree(released("phi4mm-remote"), folder)
    (folder / "model-00002-of-00002.safetensors").unlink()
    checkpoint = Checkpoint.read(folder)
    assert checkpoint.remote_layout
    assert checkpoint.config["vision_config"]["num_hidden_layers"] == 27  # released tower


def test_phi4_released_template_takes_text_in_convert_verify_and_chat(released, tmp_path):
    """Phi-4-multimodal's released template concatenates the content as a string: users
    write <|image_1|> into the text. convert validated it as a list (and called the
    refusal a conversion bug), verify crashed in transformers, and chat sent the list's
    Python form to the model. Each now writes the numbered placeholders (verify runs
    with it in the 32-token test above)."""
    from mmforge import resources
    from mmforge.backend.attachments import AUDIO, IMAGE, prepare
    from mmforge.backend.chat.session import ChatSession
    from mmforge.backend.chat.values import GenerationOptions

    folder = released("phi4mm-native")
    assert (
        "message['content'] + '<|end|>'"
        in json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    )
    convert(str(folder), tmp_path / "pkg")
    session = ChatSession(tmp_path / "pkg")
    options = GenerationOptions(max_new_tokens=4, do_sample=False)
    image = prepare(resources.probe_image(), IMAGE, tmp_path)
    audio = prepare(resources.probe_audio(), AUDIO, tmp_path)
    session.send("What is this?", [image], options=options)
    session.send("And this?", [audio], options=options)
    prompt = session.prompt_text()
    assert prompt.startswith("<|user|><|image_1|>What is this?<|end|><|assistant|>")
    assert "<|user|><|audio_1|>And this?<|end|><|assistant|>" in prompt
    assert "'type'" not in prompt
    # The runtime's processor turns the placeholder into the image's tokens.
    first = session.runtime.process(session.prompt_text(1), images=[image.path])
    assert 200010 in first.input_ids


def test_phi4_audio_only_is_compared_with_the_speech_lora_and_named(released, tmp_path):
    """For audio without an image the released model runs its speech LoRA; the package
    runs the vision one (ONNX Runtime GenAI 0.18 cannot switch adapters). verify used
    to PASS against the vision adapter; it now compares with the speech one and names the
    difference. With an image, the same package still PASSes."""
    from mmforge import resources

    folder = released("phi4mm-native")
    convert(str(folder), tmp_path / "pkg")
    report = verify(tmp_path / "pkg", str(folder), audios=[resources.probe_audio()], tokens=8)
    stages = {c.name: c for c in report.components}
    assert "vision_encoder" not in stages  # audio only
    assert report.verdict == "FAIL", [(c.name, c.verdict, c.reason) for c in report.components]
    assert report.first_divergent_stage == "decoder_prefill"
    assert report.cause is not None and report.cause.startswith("Known limit:")
    assert "speech LoRA" in report.cause
    assert stages["audio_encoder"].verdict == "PASS" and stages["embedding"].verdict == "PASS"
    both = verify(
        tmp_path / "pkg",
        str(folder),
        images=[resources.probe_image()],
        audios=[resources.probe_audio()],
        tokens=8,
    )
    assert both.verdict == "PASS", [(c.name, c.verdict, c.reason) for c in both.components]


@pytest.mark.parametrize("key", ["phi4mm-native", "phi4mm-remote"])
def test_phi4_text_only_is_compared_with_no_lora_and_named(released, tmp_path, key):
    """For a prompt without image or audio the released model runs no LoRA (its remote
    code unsets the adapter for InputMode.LANGUAGE); the package runs the vision one
    merged in. verify used to compare with the vision adapter and PASS; it now compares
    with the base model and names the difference. Measured on the release-shaped tiny
    checkpoints (random weights, r=4, alpha=8): prefill logits cosine 0.36 (native) and
    0.28 (remote layout), no greedy token of 32 equal; on a real checkpoint the size is
    its adapter's own."""
    folder = released(key)
    convert(str(folder), tmp_path / "pkg")
    report = verify(tmp_path / "pkg", str(folder), text_only=True, tokens=8)
    stages = {c.name: c for c in report.components}
    assert "vision_encoder" not in stages and "audio_encoder" not in stages
    assert stages["embedding"].verdict == stages["embedding_text_only"].verdict == "PASS"
    assert report.verdict == "FAIL", [(c.name, c.verdict, c.reason) for c in report.components]
    assert report.first_divergent_stage == "decoder_prefill"
    assert report.cause is not None and report.cause.startswith(
        "Known limit: for a prompt without image or audio the released model runs no LoRA"
    )
    assert stages["decoder_prefill"].cosine < 0.9


def test_inspect_says_native_phi4_checkpoints_carry_their_loras(released):
    """inspect said native transformers checkpoints have no LoRA; the release ships both."""
    from mmforge.backend.inspect import inspect_source

    folder = released("phi4mm-native")
    assert (folder / "vision-lora").is_dir() and (folder / "speech-lora").is_dir()
    notes = " ".join(inspect_source(str(folder)).notes)
    assert "have none" not in notes
    assert "vision-lora/ and speech-lora/" in notes and "speech adapter" in notes


# Releases whose chat template text was found and is stored in mmforge.resources; the
# others keep the family's own template (README, "Chat templates that take text only").
# ministral3-3b carries Ministral-3-14B-Instruct-2512's text (the 3B's own was found only
# modified), which differs in the model's name; gemma4 the later of two revisions of
# Google's Gemma 4 template found (which release it came from is not named);
# mistral3-small-3.1 the text transformers' processor test uses with that release's
# processor; lfm2_vl-450m the first revision's; fara-7b Qwen2.5-VL's, which Fara-7B ships
# unchanged; qwen2_vl-2b the Qwen2-VL Instruct text (each family's tiny.py, or
# qwen/qwen2_vl.py, names the source); glm4v-9b-thinking GLM-4.1V-9B's text from a stored
# renderer record (glm4v/tiny.py).
WITH_RELEASED_TEMPLATE = {
    "phi4mm-native",
    "phi4mm-remote",
    "gemma3-4b",
    "qwen2_5_vl-3b",
    "qwen2_vl-2b",
    "qwen3_vl-2b",
    "qwen3_vl_moe-30b-a3b",
    "qwen3_vl_moe-235b-a22b",  # the Qwen3-VL Instruct template, as the 30B-A3B's
    "ministral3-3b",
    "gemma4",
    "gemma4-26b-a4b",  # the same Gemma 4 template (tiny_large.py)
    "gemma4-31b",
    "qwen3_5-0.8b",
    "qwen3_6-35b-a3b",
    "qwen3_6-35b-a3b-fused",
    "mistral3-small-3.1",
    "lfm2_vl-450m",
    "fara-7b",
    "glm4v-9b-thinking",
}
# Releases whose chat template text was not at hand offline (the README says so): their
# checkpoints carry the family's tiny template. Pixtral-12B's release ships its template in
# tokenizer_config.json, of which no copy was found.
# LLaVA-1.5's template (llava-hf/llava-1.5-7b-hf's chat_template.json) was written from
# its documented form, not from a stored copy (backend/families/llava/tiny.py says so).
# Video-LLaVA's was reconstructed from its author's LLaVA-NeXT-Video template of the same
# month (backend/families/llava/video_llava.py says so).
# GLM-4.5V's template (zai-org/GLM-4.5V's chat_template.jinja) was not found either: its
# checkpoint carries GLM-4.1V's released one (glm4v/tiny_moe.py says so).
NOT_FOUND: set[str] = {
    "glm4v_moe-106b-a12b",
    "pixtral-12b",
    "llava-1.5-7b",
    "video_llava-7b",
    "idefics2-8b",  # the template as transformers' tests and the model card quote it
    "idefics2-8b-splitting",
    # Idefics2's layout with each release's BOS text and capitalisation, reconstructed
    # (backend/families/idefics3/tiny.py says so).
    "idefics3-8b",
    "smolvlm-256m",
    # The template transformers' InternVL converter writes into the -hf repositories
    # (found in its source), not a copy of either release's own file
    # (backend/families/internvl/tiny.py).
    "internvl3-1b",
    "internvl3_5-1b",
    # The template transformers' Gemma 3n converter writes (found in its source), not a
    # copy of the release's own file (backend/families/gemma3n/tiny.py).
    "gemma3n-e2b",
}


# Releases that ship no chat template: PaliGemma's (it is not a chat model; transformers'
# PaliGemmaProcessor writes the prompt, and the package's template is derived from it).
NO_TEMPLATE = {"paligemma-3b-pt-224", "paligemma2-3b-pt-224"}


def test_release_shaped_checkpoints_carry_their_releases_template(released):
    from importlib import resources

    stored = {
        f.read_text(encoding="utf-8")
        for f in resources.files("mmforge.resources").iterdir()
        if f.name.endswith("_chat_template.jinja")
    }
    for key in WITH_RELEASED_TEMPLATE:
        spec = RELEASED[key]
        expected = spec.chat_template or spec.tiny.chat_template
        assert expected in stored, key
        written = json.loads((released(key) / "tokenizer_config.json").read_text())
        assert written["chat_template"] == expected, key
    for key in NO_TEMPLATE:
        written = json.loads((released(key) / "tokenizer_config.json").read_text())
        assert "chat_template" not in written, key
        assert not (released(key) / "chat_template.jinja").exists(), key
    # Every release is in one list or another, so a new one says which it is.
    assert set(RELEASED) == WITH_RELEASED_TEMPLATE | NOT_FOUND | NO_TEMPLATE
    assert not any((RELEASED[key].chat_template or "") in stored for key in NOT_FOUND)


@pytest.mark.parametrize("key", ["mistral3-small-3.1", "lfm2_vl-450m", "fara-7b", "qwen2_vl-2b"])
def test_chat_renders_the_releases_template_as_transformers_does(released, tmp_path, key):
    """The releases whose template text was found last: chat's prompt, system
    prompt and image included, is transformers' rendering of the same messages."""
    from transformers import AutoTokenizer

    from mmforge import resources
    from mmforge.backend.attachments import IMAGE, prepare
    from mmforge.backend.chat.session import ChatSession
    from mmforge.backend.chat.values import GenerationOptions

    folder = released(key)
    convert(str(folder), tmp_path / "pkg")
    session = ChatSession(tmp_path / "pkg")
    session.set_system("Be brief.")
    image = prepare(resources.probe_image(), IMAGE, tmp_path)
    session.send("What is this?", [image], options=GenerationOptions(max_new_tokens=4))
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]},
    ]
    expected = AutoTokenizer.from_pretrained(folder).apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    assert session.prompt_text(1) == expected
    assert "Be brief." in expected
