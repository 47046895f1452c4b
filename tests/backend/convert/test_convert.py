"""Conversion: packages load in ONNX Runtime GenAI and match transformers token for token."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from mmforge import resources
from mmforge.backend.convert import MANIFEST, convert
from mmforge.backend.errors import Cancelled, MmforgeError
from mmforge.backend.families import ALL
from mmforge.backend.jobs import JobContext, Progress
from mmforge.backend.runtime import Runtime
from mmforge.backend.verify import hf_reference
from tests.backend.families import TESTED

_BY_KEY = {f.key: f for f in ALL}


def _dtypes(family_key: str) -> tuple[str, ...]:
    spec = _BY_KEY[family_key].package
    return spec.dtypes if spec is not None else ()


CONVERTIBLE = TESTED  # every family with a tiny checkpoint, from the registry


@pytest.mark.parametrize("family", CONVERTIBLE)
def test_package_generates_the_same_32_greedy_tokens_as_transformers(tiny, package, family):
    ort_tokens, hf_tokens = _greedy_both(package(family), tiny(family))
    assert len(set(hf_tokens)) >= 4, "the reference is degenerate; the test would prove nothing"
    assert ort_tokens == hf_tokens


@pytest.mark.parametrize(
    "family,n_images,n_audios",
    [("gemma4", 0, 1), ("gemma4", 1, 1), ("phi4mm", 0, 1), ("phi4mm", 1, 1)],
)
def test_audio_generation_matches_transformers(tiny, package, family, n_images, n_audios):
    rt = Runtime(package(family))
    messages = hf_reference.messages_for("Describe this.", n_images=n_images, n_audios=n_audios)
    inputs = rt.process(
        rt.prompt(messages),
        images=[resources.probe_image()] * n_images,
        audios=[resources.probe_audio()] * n_audios,
    )
    assert "audio_embeds" in inputs.arrays
    ort_tokens = rt.greedy(inputs, 32)
    ref = hf_reference.from_runtime(tiny(family), inputs.prompt, inputs.arrays)
    hf_tokens = hf_reference.greedy_generate(hf_reference.load_model(tiny(family)), ref, 32)
    assert len(set(hf_tokens)) >= 4
    assert ort_tokens == hf_tokens


@pytest.mark.parametrize("family", CONVERTIBLE)
def test_text_only_generation_matches_transformers(tiny, package, family):
    """The seeds' golden rule: text alone first. Placeholder ids a random model may emit
    must embed as text here, as in HF."""
    import torch

    rt = Runtime(package(family))
    inputs = rt.process(rt.prompt([{"role": "user", "content": "Hello there, how are you?"}]))
    ort_tokens = rt.greedy(inputs, 32)
    ids = torch.tensor([inputs.input_ids])
    ref = hf_reference.ReferenceInputs(
        inputs.prompt, inputs.input_ids, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    )
    hf_tokens = hf_reference.greedy_generate(hf_reference.load_model(tiny(family)), ref, 32)
    assert ort_tokens == hf_tokens


def _as_sent(folder, images, work):
    """The picture files as the runtime gets them: the files themselves, or, for a package
    that takes its pictures only on a canvas (Idefics2's, LLaVA-NeXT's stacked blocks,
    InternVL's stacked views), through chat's intake."""
    from mmforge.backend.attachments import IMAGE, package_intake, prepare
    from mmforge.backend.picture_sizing import ANYRES, CANVAS_RULES, TILED_VIEWS

    intake = package_intake(folder)
    canvas = (*CANVAS_RULES, ANYRES, TILED_VIEWS)
    if intake is None or intake.sizing is None or intake.sizing.rule not in canvas:
        return list(images)
    return [prepare(p, IMAGE, Path(work) / str(i), intake).path for i, p in enumerate(images)]


def _greedy_both(folder, checkpoint, images=None, text="Describe this image."):
    """32 greedy tokens from the package and from transformers on the runtime's own ids
    and pixels (the probe image unless `images` are given)."""
    import tempfile

    images = [resources.probe_image()] if images is None else images
    rt = Runtime(folder)
    messages = hf_reference.messages_for(text, n_images=len(images))
    with tempfile.TemporaryDirectory() as work:
        inputs = rt.process(rt.prompt(messages), images=_as_sent(folder, images, work))
    ref = hf_reference.from_runtime(checkpoint, inputs.prompt, inputs.arrays)
    hf_tokens = hf_reference.greedy_generate(hf_reference.load_model(checkpoint), ref, 32)
    return rt.greedy(inputs, 32), hf_tokens


def _probe():
    from PIL import Image

    return Image.open(resources.probe_image()).convert("RGB")


def _runtime_inputs(folder):
    rt = Runtime(folder)
    messages = hf_reference.messages_for("Describe this image.", n_images=1)
    return messages, rt.process(rt.prompt(messages), images=[resources.probe_image()])


def _assert_same_pixels_and_channel_order(ort_pixels, hf_pixels, channel_axis):
    assert ort_pixels.shape == hf_pixels.shape
    diff = abs(ort_pixels - hf_pixels)
    # The runtime's bicubic resize keeps the overshoot at sharp edges that PIL clamps to
    # uint8 (documented in the family notes): rare edge pixels differ, the rest agree.
    assert diff.mean() < 2e-3
    assert (diff > 0.02).mean() < 0.01
    assert diff.max() < 0.25
    # Channel order: red and blue swapped would differ everywhere the probe is coloured.
    swapped = hf_pixels.take([2, 1, 0], axis=channel_axis)
    assert abs(ort_pixels - swapped).mean() > 0.1


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_qwen_preprocessing_matches_the_hf_processor(tiny, package, family):
    messages, inputs = _runtime_inputs(package(family))
    ref = hf_reference.prepare(tiny(family), messages, [_probe()])
    assert inputs.input_ids == ref.input_ids
    assert (inputs.arrays["image_grid_thw"] == ref.tensors["image_grid_thw"].numpy()).all()
    # Each flattened patch is (channel 3, temporal 2, patch, patch), channel outermost.
    n = ref.tensors["pixel_values"].shape[0]
    _assert_same_pixels_and_channel_order(
        inputs.arrays["pixel_values"].reshape(n, 3, -1),
        ref.tensors["pixel_values"].numpy().reshape(n, 3, -1),
        channel_axis=1,
    )


def test_lfm2_vl_preprocessing_matches_the_hf_processor(tiny, package):
    messages, inputs = _runtime_inputs(package("lfm2_vl"))
    ref = hf_reference.prepare(tiny("lfm2_vl"), messages, [_probe()])
    assert inputs.input_ids == ref.input_ids
    assert (inputs.arrays["image_sizes"] == ref.tensors["spatial_shapes"].numpy()).all()
    assert (
        inputs.arrays["image_attention_mask"] == ref.tensors["pixel_attention_mask"].numpy()
    ).all()
    # Patches are flattened (row, column, channel): channel innermost.
    ort = inputs.arrays["pixel_values"]
    n, p = ort.shape[:2]
    _assert_same_pixels_and_channel_order(
        ort.reshape(n, p, -1, 3),
        ref.tensors["pixel_values"].numpy().reshape(n, p, -1, 3),
        channel_axis=3,
    )


def test_mistral3_preprocessing_matches_hf_at_the_runtime_size(tiny, package):
    from PIL import Image

    messages, inputs = _runtime_inputs(package("mistral3"))
    height, width = (int(v) for v in inputs.arrays["image_sizes"][0])
    # The runtime sizes images by a pixel budget, HF by the longest edge: by design they
    # differ (the probe becomes 144x96 here, 128x96 in HF). Compare the rest of the
    # pipeline at the runtime's size.
    hf_size = hf_reference.prepare(tiny("mistral3"), messages, [_probe()]).tensors["image_sizes"]
    assert [int(v) for v in hf_size[0]] == [96, 128] and (height, width) == (96, 144)
    resized = _probe().resize((width, height), Image.BICUBIC)
    processor = hf_reference.image_processor(tiny("mistral3"))
    hf = processor(images=[resized], do_resize=False, return_tensors="pt")["pixel_values"]
    _assert_same_pixels_and_channel_order(inputs.arrays["pixel_values"], hf.numpy(), channel_axis=1)


def test_gemma3_preprocessing_matches_the_hf_processor(tiny, package):
    messages, inputs = _runtime_inputs(package("gemma3"))
    ref = hf_reference.prepare(tiny("gemma3"), messages, [_probe()])
    assert inputs.input_ids == ref.input_ids  # 256 soft tokens between the markers
    # The image prompt is longer than the sliding window, so the parity tests cross it
    # (HF keeps the window on the bidirectional image block too).
    window = json.loads((tiny("gemma3") / "config.json").read_text())["text_config"][
        "sliding_window"
    ]
    assert len(inputs.input_ids) > 2 * window
    _assert_same_pixels_and_channel_order(
        inputs.arrays["pixel_values"], ref.tensors["pixel_values"].numpy(), channel_axis=1
    )


def test_gemma4_preprocessing_matches_hf(tiny, package):
    import numpy as np
    import soundfile as sf

    rt = Runtime(package("gemma4"))
    messages = hf_reference.messages_for("Describe this.", n_images=1, n_audios=1)
    inputs = rt.process(
        rt.prompt(messages), images=[resources.probe_image()], audios=[resources.probe_audio()]
    )
    samples, rate = sf.read(resources.probe_audio(), dtype="float32")
    ref = hf_reference.prepare(tiny("gemma4"), messages, [_probe()], [(samples, rate)])
    # Same patches at the same positions; HF pads to the maximum patch count.
    positions = ref.tensors["image_position_ids"].numpy()[0]
    valid = int((positions[:, 0] >= 0).sum())
    assert inputs.arrays["pixel_values"].shape[1] == valid
    assert (inputs.arrays["pixel_position_ids"][0] == positions[:valid]).all()
    hf_pixels = ref.tensors["pixel_values"].numpy()[0, :valid]
    diff = abs(inputs.arrays["pixel_values"][0] - hf_pixels)
    # The runtime's resize differs slightly from HF's (documented): bounded, rare.
    assert diff.mean() < 3e-3 and diff.max() < 0.25
    # Each patch is (16, 16, 3) channel-last: red/blue swapped would differ strongly.
    as_rgb = lambda a: a.reshape(-1, 256, 3)  # noqa: E731
    swapped = as_rgb(hf_pixels)[..., ::-1]
    assert abs(as_rgb(inputs.arrays["pixel_values"][0]) - swapped).mean() > 0.05
    # Log-mel features agree on every frame the runtime produced.
    ort_audio = inputs.arrays["audio_embeds"][0]
    hf_audio = ref.tensors["input_features"].numpy()[0, : ort_audio.shape[0]]
    assert np.abs(ort_audio - hf_audio).max() < 1e-4
    assert int(inputs.arrays["audio_attention_mask"].sum()) == int(
        ref.tensors["input_features_mask"].sum()
    )
    # The runtime wraps each image and audio sequence in "\n\n" (HF does not); the
    # placeholder counts agree.
    ids = json.loads((package("gemma4") / "genai_config.json").read_text())["model"]
    for name in ("image_token_id", "audio_token_id"):
        assert inputs.input_ids.count(ids[name]) == ref.input_ids.count(ids[name]) > 0


def test_phi4mm_preprocessing_matches_hf(tiny, package):
    import numpy as np
    import soundfile as sf

    rt = Runtime(package("phi4mm"))
    messages = hf_reference.messages_for("Describe this.", n_images=1, n_audios=1)
    inputs = rt.process(
        rt.prompt(messages), images=[resources.probe_image()], audios=[resources.probe_audio()]
    )
    samples, rate = sf.read(resources.probe_audio(), dtype="float32")
    ref = hf_reference.prepare(tiny("phi4mm"), messages, [_probe()], [(samples, rate)])
    # Same prompt ids: <|image_1|>/<|audio_1|> become as many 200010/200011 tokens as HF.
    assert inputs.input_ids == ref.input_ids
    assert (
        inputs.arrays["image_attention_mask"] == ref.tensors["image_attention_mask"].numpy()
    ).all()
    assert (inputs.arrays["image_sizes"] == ref.tensors["image_sizes"].numpy()).all()
    _assert_same_pixels_and_channel_order(
        inputs.arrays["pixel_values"][0],
        ref.tensors["image_pixel_values"].numpy()[0],
        channel_axis=1,
    )
    # The runtime's log-mel front end differs slightly from HF's (documented, bounded).
    ort_audio = inputs.arrays["audio_embeds"][0]
    hf_audio = ref.tensors["audio_input_features"].numpy()[0]
    assert ort_audio.shape == hf_audio.shape
    diff = np.abs(ort_audio - hf_audio)
    assert diff.mean() < 3e-3 and diff.max() < 0.1


def test_manifest_and_weight_report(package):
    folder = package("qwen2_5_vl")
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["pipeline_type"] == "qwen2_5_vl"
    assert set(manifest["components"]) == {"vision_encoder", "embedding", "decoder"}
    assert manifest["files"]["decoder.onnx.data"] > 0
    report = json.loads((folder / "weights_report.json").read_text())
    assert report["summary"]["missing"] == 0 and report["summary"]["shape_mismatch"] == 0
    assert report["summary"]["mapped"] == 57
    config = json.loads((folder / "genai_config.json").read_text())["model"]
    # The fields mobius forgets: without them the runtime silently uses 1-D positions.
    assert config["vision_start_token_id"] == 387 and config["image_token_id"] == 389
    assert config["type"] == "qwen2_5_vl"
    steps = json.loads((folder / "processor_config.json").read_text())["processor"]["transforms"]
    assert steps[-1]["operation"]["type"] == "PatchImage"


def test_cancel_mid_build_leaves_nothing(tiny, tmp_path):
    out = tmp_path / "pkg"
    ctx = JobContext(min_interval_s=0)

    def cancel_when_writing(e: Progress) -> None:
        if e.stage == "write":
            ctx.cancel.cancel()

    ctx.on_progress = cancel_when_writing
    with pytest.raises(Cancelled):
        convert(str(tiny("qwen2_5_vl")), out, ctx)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_cancel_while_the_lfm2_decoder_builder_runs_stops_it(tiny, tmp_path, monkeypatch):
    import subprocess
    import threading

    children: list[subprocess.Popen] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            children.append(self)
            threading.Timer(0.5, ctx.cancel.cancel).start()  # while the builder runs

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    out = tmp_path / "pkg"
    ctx = JobContext(min_interval_s=0)
    with pytest.raises(Cancelled):
        convert(str(tiny("lfm2_vl")), out, ctx)
    [builder] = children
    assert builder.returncode is not None and builder.returncode < 0  # killed, not finished
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_failure_mid_write_keeps_the_old_package(tiny, package, tmp_path, monkeypatch):
    out = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    from mmforge.backend.convert import package as package_module

    def broken_tokenizer(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(package_module, "write_tokenizer", broken_tokenizer)
    with pytest.raises(MmforgeError, match="The disk filled up"):  # exit 2, not a crash
        convert(str(tiny("qwen2_5_vl")), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]


def test_a_folder_that_is_not_a_package_is_never_replaced(tiny, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.txt").write_text("precious")
    with pytest.raises(MmforgeError, match="not an mmforge package"):
        convert(str(tiny("qwen2_5_vl")), out)
    assert (out / "thesis.txt").read_text() == "precious"


def test_a_folder_made_at_out_while_converting_is_never_deleted(tiny, tmp_path):
    out = tmp_path / "pkg"
    ctx = JobContext(min_interval_s=0)

    def someone_else_writes_out(e: Progress) -> None:
        if e.stage == "package" and not out.exists():
            out.mkdir()
            (out / "notes.txt").write_text("mine")

    ctx.on_progress = someone_else_writes_out
    with pytest.raises(MmforgeError, match="changed while the conversion ran"):
        convert(str(tiny("qwen2_5_vl")), out, ctx)
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]  # no staging left


def test_a_package_replaced_while_converting_is_never_deleted(tiny, package, tmp_path):
    out = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), out)
    ctx = JobContext(min_interval_s=0)

    def replace_it(e: Progress) -> None:
        if e.stage == "package" and not (tmp_path / "moved").exists():
            out.rename(tmp_path / "moved")
            out.mkdir()
            (out / "thesis.txt").write_text("precious")

    ctx.on_progress = replace_it
    with pytest.raises(MmforgeError, match="changed while the conversion ran"):
        convert(str(tiny("qwen2_5_vl")), out, ctx)
    assert (out / "thesis.txt").read_text() == "precious"


def test_a_publish_interrupted_between_its_renames_is_repaired_next_time(tiny, package, tmp_path):
    out = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    dead = 2**22 + 12345  # above any pid this machine hands out
    # Killed after renaming the old package aside, before the new one took its place:
    out.rename(tmp_path / f".pkg.mmforge-old-{dead}-0abc1234")
    with pytest.raises(MmforgeError):  # the next run (failing early here) puts it back
        convert(str(tmp_path / "no-such-model"), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]
    # Killed after the new package took its place: the old one, due for deletion, goes.
    shutil.copytree(out, tmp_path / f".pkg.mmforge-old-{dead}-0def5678")
    with pytest.raises(MmforgeError):
        convert(str(tmp_path / "no-such-model"), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]


def test_missing_parent_folders_of_out_are_created_and_removed_again_on_failure(tiny, tmp_path):
    out = tmp_path / "a" / "b" / "pkg"
    convert(str(tiny("qwen2_5_vl")), out)
    assert (out / "genai_config.json").is_file()
    broken = tmp_path / "c" / "d" / "pkg"
    ctx = JobContext(min_interval_s=0)

    def cancel(e: Progress) -> None:
        if e.stage == "write":
            ctx.cancel.cancel()

    ctx.on_progress = cancel
    with pytest.raises(Cancelled):
        convert(str(tiny("qwen2_5_vl")), broken, ctx)
    assert not (tmp_path / "c").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(MmforgeError, match="is a file"):
        convert(str(tiny("qwen2_5_vl")), tmp_path / "file" / "pkg")


def test_sigterm_to_a_cli_conversion_cleans_its_staging_folder(tiny, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "pkg"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmforge.app", "convert", str(tiny("qwen2_5_vl")), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(p.name.startswith(".pkg.mmforge-") for p in tmp_path.iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, "no staging folder seen"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "cancelled" in err
    assert list(tmp_path.iterdir()) == []


def test_corrupt_safetensors(tiny, tmp_path):
    src = tmp_path / "ck"
    shutil.copytree(tiny("qwen2_5_vl"), src)
    data = (src / "model.safetensors").read_bytes()
    (src / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(MmforgeError, match="not a valid safetensors file"):
        convert(str(src), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_shard(tiny, tmp_path):
    src = tmp_path / "ck"
    shutil.copytree(tiny("qwen2_5_vl"), src)
    (src / "model.safetensors").rename(src / "model-00001-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
    from safetensors import safe_open

    with safe_open(str(src / "model-00001-of-00002.safetensors"), "pt") as f:
        for name in f.keys():  # noqa: SIM118
            index["weight_map"].setdefault(name, "model-00001-of-00002.safetensors")
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(MmforgeError, match=r"model-00002-of-00002\.safetensors"):
        convert(str(src), tmp_path / "out")


def test_unsupported_family_exits_2(tmp_path, capsys, monkeypatch):
    import dataclasses

    import transformers

    from mmforge.app.cli import main
    from mmforge.backend import families

    transformers.Florence2Config().save_pretrained(tmp_path / "florence2")
    assert main(["convert", str(tmp_path / "florence2"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Florence-2 cannot be converted" in err[0]
    assert not (tmp_path / "out").exists()
    # A family a runtime pipeline could host but mmforge does not build: refused, saying
    # which. None ships now (Gemma 3n was the last), so Gemma 3n stands in as it was.
    before = dataclasses.replace(
        families.lookup("gemma3n"),
        package=None,
        exact_host="gemma3",
        no_pipeline_reason="ONNX Runtime GenAI 0.18 could run it exactly through 'gemma3'",
    )
    monkeypatch.setitem(families.REGISTRY.by_type, "gemma3n", before)
    transformers.Gemma3nConfig().save_pretrained(tmp_path / "gemma3n")
    assert main(["convert", str(tmp_path / "gemma3n"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Converting Gemma 3n is not supported yet" in err[0]
    assert "gemma3" in err[0]
    assert not (tmp_path / "out").exists()
    # InternVL, once converted only as an approximation, converts exactly: no consent is
    # asked (tests/app/test_cli.py holds the consent refusal, with Idefics3's splitting);
    # a config alone is refused for what it lacks (memory for its size, or its weights).
    transformers.InternVLConfig().save_pretrained(tmp_path / "internvl")
    assert main(["convert", str(tmp_path / "internvl"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "approximat" not in err[0] and "consent" not in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "family,dtype",
    [(f, d) for d in ("f16", "int4") for f in CONVERTIBLE if d in _dtypes(f)],
)
def test_f16_and_int4_packages_load_and_generate(package, family, dtype, tmp_path):
    import onnx

    folder = package(family, dtype)
    manifest = json.loads((folder / MANIFEST).read_text())
    f32 = json.loads((package(family) / MANIFEST).read_text())
    assert manifest["dtype"] == dtype
    assert manifest["files"]["decoder.onnx.data"] < f32["files"]["decoder.onnx.data"]
    vision = onnx.load(str(folder / "vision.onnx"), load_external_data=False)
    pixel_input = next(i for i in vision.graph.input if i.name == "pixel_values")
    # Encoders take float32 whatever the weights' dtype (the preprocessors produce f32).
    assert pixel_input.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    decoder = onnx.load(str(folder / "decoder.onnx"), load_external_data=False)
    ops = {n.op_type for n in decoder.graph.node}
    assert ("MatMulNBits" in ops) == (dtype == "int4")
    rt = Runtime(folder)
    messages = hf_reference.messages_for("Describe this image.", n_images=1)
    sent = _as_sent(folder, [resources.probe_image()], tmp_path)
    inputs = rt.process(rt.prompt(messages), images=sent)
    tokens = rt.greedy(inputs, 16)
    vocab = json.loads((folder / "genai_config.json").read_text())["model"]["vocab_size"]
    assert len(tokens) >= 1 and all(0 <= t < vocab for t in tokens)


def test_qwen3_deepstack_travels_as_extra_columns(package):
    import onnx

    folder = package("qwen3_vl")
    config = json.loads((folder / "genai_config.json").read_text())["model"]
    # Two DeepStack levels: the decoder takes 3 x 64 columns; the KV cache keeps head 16.
    assert config["decoder"]["hidden_size"] == 192 and config["decoder"]["head_size"] == 16
    vision = onnx.load(str(folder / "vision.onnx"), load_external_data=False)
    assert vision.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 192
    report = json.loads((folder / "weights_report.json").read_text())
    assert report["summary"]["unused"] == 0  # the DeepStack mergers are used
    assert any("deepstack_merger_list" in m["checkpoint"] for m in report["mapped"])


@pytest.mark.parametrize(
    ("family", "dtype"), [("qwen2_5_vl", "int4"), ("lfm2_vl", "f32"), ("gemma4", "int4")]
)
def test_cuda_package_names_its_provider_and_says_when_it_was_not_run(
    tiny, tmp_path, family, dtype
):
    """A CUDA package converts on a machine without CUDA. Its f16 encoder probe cannot run
    here (Qwen's CUDA vision graph holds PackedMultiHeadAttention, a CUDA-only kernel), so
    the encoders stay f32 and the manifest says why; a package without CUDA-only kernels
    still runs on the CPU when asked to."""
    import onnxruntime_genai as og

    from mmforge.backend.runtime import Runtime

    manifest = convert(str(tiny(family)), tmp_path / "cuda", dtype=dtype, ep="cuda")
    config = json.loads((tmp_path / "cuda" / "genai_config.json").read_text())["model"]
    assert config["decoder"]["session_options"]["provider_options"] == [{"cuda": {}}]
    if og.is_cuda_available():
        assert manifest.validation["ep"] == "cuda" and manifest.validation["image_tokens"] > 0
        return
    assert manifest.validation["ep"].startswith("not run")
    if dtype == "int4":
        assert manifest.precisions["vision_encoder"] == "f32"
        assert any("cannot run a CUDA package" in note for note in manifest.notes)
    if family == "gemma4":
        runtime = Runtime(tmp_path / "cuda", "cpu")
        assert len(runtime.greedy(runtime.process("Hello"), 3)) == 3


def test_without_cuda_a_malformed_graph_is_still_caught(package, tmp_path):
    import onnx

    from mmforge.backend.convert.validate import _check_without_cuda

    folder = tmp_path / "pkg"
    shutil.copytree(package("qwen2_5_vl"), folder)
    model = onnx.load(str(folder / "embedding.onnx"), load_external_data=False)
    model.graph.node[0].input[0] = "no_such_value"
    onnx.save(model, str(folder / "embedding.onnx"))
    with pytest.raises(MmforgeError, match="malformed"):
        _check_without_cuda(folder, JobContext())


def test_convert_from_the_hub_downloads_then_converts(hub, tiny, tmp_path):
    hub.state.add_folder("tiny-org/qwen", tiny("qwen2_5_vl"))
    events: list[Progress] = []
    manifest = convert(
        "tiny-org/qwen", tmp_path / "pkg", JobContext(on_progress=events.append, min_interval_s=0)
    )
    assert manifest.commit == hub.state.repos["tiny-org/qwen"].sha
    stages = [e.stage for e in events]
    for stage in ("download", "build", "weights", "write", "package", "validate", "done"):
        assert stage in stages, stage
    assert stages.index("download") < stages.index("build") < stages.index("validate")
    assert (tmp_path / "pkg" / "genai_config.json").is_file()


def test_pickled_weights_convert_only_with_consent(tiny, tmp_path):
    import shutil as sh

    import torch
    from safetensors.torch import load_file

    src = tmp_path / "ck"
    sh.copytree(tiny("qwen2_5_vl"), src)
    state = load_file(src / "model.safetensors")
    (src / "model.safetensors").unlink()
    torch.save(state, src / "pytorch_model.bin")
    with pytest.raises(MmforgeError) as e:
        convert(str(src), tmp_path / "out")
    assert "--allow-pickle" in e.value.one_line()
    assert not (tmp_path / "out").exists()
    manifest = convert(str(src), tmp_path / "out", allow_pickle=True)
    assert manifest.weights["mapped"] == len(state) and manifest.weights["missing"] == 0


def test_a_pickle_with_code_is_refused_even_with_consent(tiny, tmp_path):
    import pickle
    import shutil as sh

    src = tmp_path / "ck"
    sh.copytree(tiny("qwen2_5_vl"), src)
    (src / "model.safetensors").unlink()

    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    (src / "pytorch_model.bin").write_bytes(pickle.dumps({"x": Payload()}))
    with pytest.raises(MmforgeError, match="could not be loaded safely"):
        convert(str(src), tmp_path / "out", allow_pickle=True)


def test_gemma4_with_bidirectional_vision_attention_matches_transformers(tiny, tmp_path):
    """Larger Gemma 4 checkpoints let an image's tokens attend both ways."""
    import shutil as sh

    src = tmp_path / "ck"
    sh.copytree(tiny("gemma4"), src)
    config = json.loads((src / "config.json").read_text())
    config["text_config"]["use_bidirectional_attention"] = "vision"
    (src / "config.json").write_text(json.dumps(config))
    manifest = convert(str(src), tmp_path / "pkg")
    assert any("bidirectionally" in note for note in manifest.notes)
    rt = Runtime(tmp_path / "pkg")
    messages = hf_reference.messages_for("Describe this image.", n_images=1)
    inputs = rt.process(rt.prompt(messages), images=[resources.probe_image()])
    ort_tokens = rt.greedy(inputs, 32)
    model = hf_reference.load_model(src)
    ref = hf_reference.from_runtime(src, inputs.prompt, inputs.arrays)
    hf_tokens = hf_reference.greedy_generate(model, ref, 32)
    assert ort_tokens == hf_tokens
    # The mask matters here: HF without the image blocks answers differently.
    del ref.tensors["mm_token_type_ids"]
    assert hf_reference.greedy_generate(model, ref, 32) != hf_tokens


@pytest.mark.parametrize("family", CONVERTIBLE)
def test_three_images_of_two_sizes_match_transformers(tiny, package, family, tmp_path):
    """The runtime stacks images padded to the largest one; the graphs must not read the
    padding (Qwen) nor drop the image axis (Gemma 3)."""
    small = tmp_path / "small.png"
    _probe().resize((96, 64)).save(small)
    images = [resources.probe_image(), small, resources.probe_image()]
    ort_tokens, hf_tokens = _greedy_both(package(family), tiny(family), images, "Compare these.")
    assert ort_tokens == hf_tokens


def test_byte_level_tokenizer_declared_as_llama_is_relabelled_so_ids_match(tiny, tmp_path):
    import shutil as sh

    from transformers import AutoTokenizer

    src = tmp_path / "ck"
    sh.copytree(tiny("qwen2_5_vl"), src)
    config = json.loads((src / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "LlamaTokenizerFast"
    (src / "tokenizer_config.json").write_text(json.dumps(config))
    convert(str(src), tmp_path / "pkg")
    packaged = json.loads((tmp_path / "pkg" / "tokenizer_config.json").read_text())
    assert packaged["tokenizer_class"] == "PreTrainedTokenizerFast"
    text = "The sky is blue, 12 birds sang 345 songs!"
    hf_ids = AutoTokenizer.from_pretrained(tiny("qwen2_5_vl"))(text, add_special_tokens=False)
    ort_ids = list(Runtime(tmp_path / "pkg").tokenizer.encode(text))
    assert ort_ids == hf_ids["input_ids"]


def test_lfm2_vl_f16_is_refused_with_the_reason(tiny, tmp_path):
    with pytest.raises(MmforgeError) as e:
        convert(str(tiny("lfm2_vl")), tmp_path / "out", dtype="f16")
    assert "f32 or int4" in e.value.one_line()
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.iterdir())  # no staging folder left behind


def test_lfm2_vl_decoder_weights_are_checked_against_the_checkpoint(package):
    report = json.loads((package("lfm2_vl") / "weights_report.json").read_text())
    assert report["summary"]["unused"] == 0 and report["summary"]["missing"] == 0
    targets = {m["checkpoint"]: m["targets"] for m in report["mapped"]}
    q = "model.language_model.layers.1.self_attn.q_proj.weight"
    assert targets[q] == ["decoder/model.layers.1.attn.qkv_proj.MatMul.weight"]
    embed = targets["model.language_model.embed_tokens.weight"]
    assert sorted(embed) == [
        "decoder/lm_head.MatMul.weight",
        "embedding/model.language_model.embed_tokens.weight",
    ]


def test_lfm2_vl_builder_weights_that_differ_from_the_checkpoint_fail(tiny, tmp_path, monkeypatch):
    from mmforge.backend.families.lfm2 import decoder as lfm2_decoder

    real = lfm2_decoder.builder_sources

    def swapped(cfg, tied):  # pretend the builder read w3 where it read w1
        sources = real(cfg, tied)
        gate, up = (
            "model.layers.0.mlp.gate_proj.MatMul.weight",
            "model.layers.0.mlp.up_proj.MatMul.weight",
        )
        sources[gate], sources[up] = sources[up], sources[gate]
        return sources

    monkeypatch.setattr(lfm2_decoder, "builder_sources", swapped)
    with pytest.raises(MmforgeError) as e:
        convert(str(tiny("lfm2_vl")), tmp_path / "out")
    assert "gate_proj.MatMul.weight differs from the checkpoint" in e.value.one_line()
    assert not list(tmp_path.iterdir())


def test_a_remote_code_only_checkpoint_is_refused_saying_why(tmp_path):
    """InternVL's chat checkpoints exist only as remote code, which mmforge does not
    convert: refused up front, naming the native model_type and why InternVL is not
    converted. (Phi-3.5-Vision, remote code too, converts: its layout is read as data,
    tests/backend/test_phi3v.py.)"""
    folder = tmp_path / "remote"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "internvl_chat",
                "auto_map": {"AutoConfig": "configuration_internvl_chat.InternVLChatConfig"},
                "llm_config": {"hidden_size": 64, "num_hidden_layers": 2},
                "vision_config": {"hidden_size": 32, "num_hidden_layers": 2},
            }
        )
    )
    with pytest.raises(MmforgeError) as e:
        convert(str(folder), tmp_path / "out", trust_remote_code=True)
    assert "defined by remote code, which mmforge does not convert" in e.value.one_line()
    assert "model_type internvl" in e.value.one_line()
    assert "-hf" in e.value.one_line()  # InternVL's own reason: convert the -hf release
    assert not (tmp_path / "out").exists()


def test_lfm2_vl_with_image_splitting_on_matches_transformers(tiny, tmp_path):
    """Released LFM2-VL checkpoints split large images, so HF pads every image to a
    tile's 1024 patches; the package must pad the same way for images HF keeps whole."""
    src = tmp_path / "ck"
    shutil.copytree(tiny("lfm2_vl"), src)
    config = json.loads((src / "preprocessor_config.json").read_text())
    config["do_image_splitting"] = True
    (src / "preprocessor_config.json").write_text(json.dumps(config))
    convert(str(src), tmp_path / "pkg")
    genai = json.loads((tmp_path / "pkg" / "genai_config.json").read_text())
    assert genai["model"]["vision"]["max_num_patches"] == 1024
    rt = Runtime(tmp_path / "pkg")
    messages = hf_reference.messages_for("Describe this image.", n_images=1)
    inputs = rt.process(rt.prompt(messages), images=[resources.probe_image()])
    assert inputs.arrays["pixel_values"].shape[1] == 1024
    ref = hf_reference.prepare(src, messages, [_probe()])
    assert inputs.input_ids == ref.input_ids
    assert ref.tensors["pixel_values"].shape[1] == 1024
    ort_tokens = rt.greedy(inputs, 32)
    hf_tokens = hf_reference.greedy_generate(hf_reference.load_model(src), ref, 32)
    assert len(set(hf_tokens)) >= 4 and ort_tokens == hf_tokens


def test_lfm2_layer_kinds_read_older_configs_as_transformers_does():
    from transformers import Lfm2Config

    from mmforge.backend.families import Cfg
    from mmforge.backend.families.lfm2 import layer_kinds

    for text in ({"num_hidden_layers": 4, "full_attn_idxs": [1, 3]}, {"num_hidden_layers": 3}):
        expected = Lfm2Config(**text).layer_types
        assert layer_kinds(Cfg({"text_config": text})) == expected


def _lfm2_variant(tiny, tmp_path, edit_text, edit_weights):
    from safetensors.torch import load_file, save_file

    src = tmp_path / "ck"
    shutil.copytree(tiny("lfm2_vl"), src)
    config = json.loads((src / "config.json").read_text())
    edit_text(config["text_config"])
    (src / "config.json").write_text(json.dumps(config))
    weights = load_file(src / "model.safetensors")
    edit_weights(weights)
    save_file(weights, src / "model.safetensors", metadata={"format": "pt"})
    return src


def test_lfm2_conv_projection_biases_the_builder_drops_are_added(tiny, tmp_path):
    """transformers uses in_proj/out_proj biases when conv_bias is set; ORT GenAI's builder
    leaves them out (measured: the top token then differs at every position)."""
    import torch

    def biases(weights):
        g = torch.Generator().manual_seed(0)
        for part, size in (("in_proj", 192), ("out_proj", 64), ("conv", 64)):
            weights[f"model.language_model.layers.0.conv.{part}.bias"] = (
                torch.randn(size, generator=g) * 0.5
            )

    src = _lfm2_variant(tiny, tmp_path, lambda t: t.update(conv_bias=True), biases)
    manifest = convert(str(src), tmp_path / "pkg")
    assert manifest.weights["unused"] == 0 and manifest.weights["missing"] == 0
    assert any("2 short-convolution projection biases added" in n for n in manifest.notes)
    ort_tokens, hf_tokens = _greedy_both(tmp_path / "pkg", src)
    assert len(set(hf_tokens)) >= 4 and ort_tokens == hf_tokens


def test_an_lfm2_text_weight_no_graph_uses_stops_the_conversion(tiny, tmp_path):
    import torch

    def extra(weights):
        weights["model.language_model.layers.0.feed_forward.w1.bias"] = torch.ones(128)

    src = _lfm2_variant(tiny, tmp_path, lambda t: None, extra)
    with pytest.raises(MmforgeError) as e:
        convert(str(src), tmp_path / "pkg")
    assert "feed_forward.w1.bias" in e.value.one_line()
    assert not (tmp_path / "pkg").exists()


def test_the_lfm2_decoder_builder_reports_its_layers_as_build_progress():
    from mmforge.backend.families.lfm2.decoder import _report_builder

    events: list[Progress] = []
    ctx = JobContext(min_interval_s=0)
    ctx.on_progress = events.append
    _report_builder("Loading weights\nReading layer 0\nReading layer 1\n", 4, 6, ctx)
    _report_builder("Reading layer 3\nReading final norm\nSaving ONNX model in x\n", 4, 6, ctx)
    assert [(e.done, e.total, e.message) for e in events] == [
        (2, 6, "decoder: layer 2/4"),
        (5, 6, "decoder: writing"),
    ]


def test_lfm2_vl_in_the_hub_layout_converts_and_matches_transformers(tiny, tmp_path):
    """Hub checkpoints keep the SigLIP2 tower under vision_tower.vision_model."""

    def hub_layout(weights):
        for name in [n for n in weights if n.startswith("model.vision_tower.")]:
            hub = name.replace("model.vision_tower.", "model.vision_tower.vision_model.")
            weights[hub] = weights.pop(name)

    src = _lfm2_variant(tiny, tmp_path, lambda t: None, hub_layout)
    manifest = convert(str(src), tmp_path / "pkg")
    assert manifest.weights["unused"] == 0 and manifest.weights["missing"] == 0
    ort_tokens, hf_tokens = _greedy_both(tmp_path / "pkg", src)
    assert len(set(hf_tokens)) >= 4 and ort_tokens == hf_tokens


def _rewrite_header(path, change) -> None:
    """Rewrite a safetensors header in place through `change(header)`, data untouched."""
    import struct

    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    change(header)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length :])


def test_a_byte_range_that_does_not_hold_the_shape_is_bad_input(tiny, tmp_path, capsys):
    from mmforge.app.cli import main

    src = tmp_path / "ck"
    shutil.copytree(tiny("qwen2_5_vl"), src)

    def grow(header):
        name = next(k for k, v in header.items() if k != "__metadata__" and len(v["shape"]) == 2)
        header[name]["shape"][0] += 1  # the bytes stay: the range no longer fits the shape

    _rewrite_header(src / "model.safetensors", grow)
    assert main(["convert", str(src), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "not a valid safetensors file" in err and "bytes where its shape" in err
    assert not (tmp_path / "out").exists()


def test_fp8_weights_are_refused_by_name_not_a_crash(tiny, tmp_path):
    src = tmp_path / "ck"
    shutil.copytree(tiny("qwen2_5_vl"), src)

    def to_fp8(header):
        name = next(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")
        header[name]["shape"] = [4 * math.prod(header[name]["shape"])]
        header[name]["dtype"] = "F8_E4M3"

    _rewrite_header(src / "model.safetensors", to_fp8)
    with pytest.raises(MmforgeError, match="stored as F8_E4M3, which mmforge cannot convert"):
        convert(str(src), tmp_path / "out")


def test_a_package_that_cannot_fit_on_the_disk_is_refused_before_any_work(
    tiny, tmp_path, monkeypatch
):
    from collections import namedtuple

    from mmforge.backend.convert import job

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(job.shutil, "disk_usage", lambda path: usage(10**9, 10**9, 50_000_000))
    built = []
    monkeypatch.setattr(job, "_build_into", lambda *a, **k: built.append(1))
    with pytest.raises(MmforgeError, match="Not enough free disk space") as e:
        convert(str(tiny("qwen2_5_vl")), tmp_path / "out")
    assert "int4" in (e.value.hint or "")
    assert built == [] and list(tmp_path.iterdir()) == []


def test_a_conversion_that_would_not_fit_in_memory_is_refused_up_front(tiny, tmp_path, monkeypatch):
    """By inspect's estimate, before any work, naming a dtype that fits."""
    from mmforge.backend.convert import job
    from mmforge.backend.inspect import Sizes

    gb = 10**9
    sizes = Sizes(
        source="test",
        memory_bytes={"f32": 10 * gb, "f16": 5 * gb, "int4": 2 * gb},
        convert_peak_bytes=1 * gb,
    )
    profile = type("P", (), {"sizes": sizes})()
    monkeypatch.setattr(job, "available_bytes", lambda: 4 * gb)
    with pytest.raises(MmforgeError) as e:
        job._check_memory(profile, "f32")
    from mmforge.backend.units import human_bytes

    assert f"needs about {human_bytes(10 * gb)}" in e.value.user_message
    assert e.value.hint == f"Use --dtype int4, which needs about {human_bytes(2 * gb)}"
    job._check_memory(profile, "int4")  # fits: no error
    monkeypatch.setattr(job, "available_bytes", lambda: 300 * 2**20)  # tools alone need more
    with pytest.raises(MmforgeError) as e:
        convert(str(tiny("qwen2_5_vl")), tmp_path / "out")
    assert e.value.hint.startswith("No dtype fits")
    assert not (tmp_path / "out").exists()


def test_streaming_int4_is_bit_for_bit_onnxruntimes_quantizer(package):
    """Each weight is quantized as it is written (peak memory: one weight), with the same
    kernel and layout onnxruntime's MatMulNBitsQuantizer gives the whole graph."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    reference = MatMulNBitsQuantizer(
        onnx.load(str(package("qwen2_5_vl") / "decoder.onnx")),
        block_size=32,
        is_symmetric=True,
        accuracy_level=4,
    )
    reference.process()
    ours = onnx.load(str(package("qwen2_5_vl", "int4") / "decoder.onnx"))

    def quantized(model):
        return {
            i.name: numpy_helper.to_array(i)
            for i in model.graph.initializer
            if i.name.endswith(("_Q4", "_scales"))
        }

    def nodes(model):
        return sorted(
            (n.input[1], sorted((a.name, onnx.helper.get_attribute_value(a)) for a in n.attribute))
            for n in model.graph.node
            if n.op_type == "MatMulNBits"
        )

    expected, got = quantized(reference.model.model), quantized(ours)
    assert set(got) == set(expected) and len(got) >= 10
    for name, array in expected.items():
        assert got[name].shape == array.shape and np.array_equal(got[name], array), name
    assert nodes(ours) == nodes(reference.model.model)
    assert not [n for n in ours.graph.node if n.op_type == "MatMul" and "weight" in n.input[1]]


def test_int4_quantizes_each_weight_once_as_it_is_written(tmp_path):
    """The quantizer never holds the decoder: weights stay lazy until the writer reads
    them, and each is read once (the 3B benchmark's peak fell from 16 GB to 2.9 GB)."""
    import numpy as np
    import onnx_ir as ir

    from mmforge.backend.convert.quantize import quantize_decoder

    reads: list[str] = []
    rng = np.random.default_rng(0)
    arrays = {f"w{i}": rng.standard_normal((64, 48)).astype(np.float32) for i in range(3)}

    def lazy(name: str):
        def load():
            reads.append(name)
            return ir.tensor(arrays[name], name=name)

        return ir.LazyTensor(load, dtype=ir.DataType.FLOAT, shape=ir.Shape([64, 48]), name=name)

    x = ir.Value(name="x", shape=ir.Shape([1, 64]), type=ir.TensorType(ir.DataType.FLOAT))
    graph = ir.Graph([x], [], nodes=[], name="g", opset_imports={"": 17})
    current = x
    for name in arrays:
        weight = ir.Value(name=name, shape=ir.Shape([64, 48]), const_value=lazy(name))
        weight.type = ir.TensorType(ir.DataType.FLOAT)
        graph.register_initializer(weight)
        node = ir.node("MatMul", inputs=[x, weight])
        graph.append(node)
        current = node.outputs[0]
    graph.outputs.append(current)
    model = ir.Model(graph, ir_version=10)
    quantize_decoder(model, JobContext())
    assert reads == []  # nothing read yet
    assert [n.op_type for n in model.graph] == ["MatMulNBits"] * 3
    ir.save(model, tmp_path / "m.onnx", external_data="m.onnx.data")
    assert sorted(reads) == sorted(arrays)  # each weight read once, for both its tensors


def test_int4_in_column_blocks_is_the_same_as_whole(tiny, package, tmp_path, monkeypatch):
    """Quantizing a weight a few output columns at a time (so a transposed 248k-token
    output layer is never copied whole) writes the very same blocks and scales."""
    from mmforge.backend.convert import quantize

    monkeypatch.setattr(quantize, "_COLUMN_BLOCK", 200)  # a few columns per block
    convert(str(tiny("qwen2_5_vl")), tmp_path / "blocks", dtype="int4")
    whole = package("qwen2_5_vl", "int4") / "decoder.onnx.data"
    assert (tmp_path / "blocks" / "decoder.onnx.data").read_bytes() == whole.read_bytes()
