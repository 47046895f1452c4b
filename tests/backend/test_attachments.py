"""Attachments: bad files get one clear message; odd ones are made runtime-ready."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
from PIL import Image

from mmforge import resources
from mmforge.backend.attachments import (
    AUDIO,
    AUDIO_SAMPLE_RATE,
    IMAGE,
    NO_VIDEO,
    VIDEO,
    AttachmentError,
    first_look,
    kind_of,
    prepare,
)


def test_a_text_file_named_png_is_not_an_image(tmp_path):
    fake = tmp_path / "notes.png"
    fake.write_text("hello, I am text")
    with pytest.raises(AttachmentError, match=r"notes\.png: it is not an image file"):
        prepare(fake, IMAGE, tmp_path / "out")


def test_a_truncated_image_is_reported_as_damaged(tmp_path):
    whole = tmp_path / "whole.png"
    Image.effect_noise((256, 256), 60).convert("RGB").save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(AttachmentError, match="damaged or truncated"):
        prepare(cut, IMAGE, tmp_path / "out")


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(AttachmentError, match=r"gone\.png: no such file"):
        prepare(tmp_path / "gone.png", IMAGE, tmp_path / "out")


def test_an_ordinary_image_reaches_the_runtime_with_the_same_pixels(tmp_path):
    prepared = prepare(resources.probe_image(), IMAGE, tmp_path)
    assert prepared.path.suffix == ".png"
    with Image.open(prepared.path) as sent, Image.open(resources.probe_image()) as mine:
        assert np.array_equal(np.asarray(sent), np.asarray(mine.convert("RGB")))
    assert (prepared.width, prepared.height, prepared.note) == (160, 120, "")


@pytest.mark.parametrize("fmt,size", [("PNG", (10000, 10000)), ("JPEG", (9000, 6000))])
def test_a_huge_image_is_not_reduced_without_the_models_sizing(tmp_path, fmt, size):
    # A reduction transformers would not make gives the model another picture: without
    # the package's sizing the picture keeps its size and the runtime resizes it.
    path = tmp_path / f"huge.{fmt.lower()}"
    Image.new("RGB", size, (200, 30, 40)).save(path, format=fmt)
    prepared = prepare(path, IMAGE, tmp_path / "out")
    assert (prepared.width, prepared.height, prepared.note) == (*size, "")
    with Image.open(prepared.path) as image:
        assert image.size == size
        red, green, blue = image.getpixel((10, 10))
        assert red > 150 and green < 80 and blue < 90, "channels must survive"


def test_a_palette_image_is_converted_to_rgb(tmp_path):
    path = tmp_path / "palette.gif"
    Image.new("P", (40, 30), 3).save(path)
    prepared = prepare(path, IMAGE, tmp_path / "out")
    assert prepared.path.suffix == ".png"
    assert Image.open(prepared.path).mode == "RGB"


def test_stereo_audio_at_another_rate_becomes_16k_mono(tmp_path):
    rate, seconds = 44100, 1.0
    t = np.arange(int(rate * seconds)) / rate
    left = 0.5 * np.sin(2 * np.pi * 440 * t)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, left], axis=1), rate)
    prepared = prepare(path, AUDIO, tmp_path / "out")
    assert "mixed 2 channels to mono" in prepared.note and "44100 Hz to 16000 Hz" in prepared.note
    data, out_rate = sf.read(prepared.path)
    assert out_rate == AUDIO_SAMPLE_RATE and data.ndim == 1
    assert prepared.seconds == pytest.approx(seconds, abs=1e-3)
    spectrum = np.abs(np.fft.rfft(data))
    assert np.argmax(spectrum) * AUDIO_SAMPLE_RATE / len(data) == pytest.approx(440, abs=2)
    assert np.max(np.abs(data[1000:-1000])) == pytest.approx(0.5, abs=0.02)


def test_files_that_are_not_audio_or_are_empty_are_refused(tmp_path):
    fake = tmp_path / "voice.wav"
    fake.write_text("not audio")
    with pytest.raises(AttachmentError, match="not an audio file"):
        prepare(fake, AUDIO, tmp_path / "out")
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros((0,), dtype=np.float32), 16000)
    with pytest.raises(AttachmentError, match="holds no sound"):
        prepare(empty, AUDIO, tmp_path / "out")


@pytest.mark.parametrize("samples", [1, 160, 1599])
def test_audio_too_short_for_the_runtime_is_refused_with_the_minimum(tmp_path, samples):
    # ORT GenAI 0.18 dies with SIGFPE on 160 samples or fewer; the refusal names the minimum.
    short = tmp_path / "click.wav"
    sf.write(str(short), np.zeros(samples, dtype=np.float32), 16_000, subtype="PCM_16")
    with pytest.raises(AttachmentError, match=r"too short \(the minimum is 0\.1 s\)"):
        prepare(short, AUDIO, tmp_path / "out")
    sf.write(str(short), np.zeros(1600, dtype=np.float32), 16_000, subtype="PCM_16")
    assert prepare(short, AUDIO, tmp_path / "out").seconds == 0.1


def test_kind_follows_the_file_name(tmp_path):
    assert kind_of(tmp_path / "a.WAV") == AUDIO
    assert kind_of(tmp_path / "a.flac") == AUDIO
    assert kind_of(tmp_path / "a.jpg") == IMAGE


@pytest.mark.parametrize("suffix", [".mp4", ".webm", ".mkv", ".MOV", ".avi"])
def test_a_video_is_refused_whatever_kind_it_came_as(tmp_path, suffix):
    clip = tmp_path / f"clip{suffix}"
    clip.write_bytes(b"\x00\x00\x00\x18ftypmp42")  # refused by name: never decoded
    assert kind_of(clip) == VIDEO
    for kind in (IMAGE, AUDIO, VIDEO):
        with pytest.raises(AttachmentError) as e:
            prepare(clip, kind, tmp_path / "out")
        assert e.value.user_message == f"Cannot attach {clip.name}: {NO_VIDEO}"
        assert e.value.hint == "Attach still frames from it as images"
    assert not (tmp_path / "out").exists()  # refused before any copy


def test_the_first_look_refuses_at_once_what_send_would(tmp_path):
    """A text file named .png and an empty clip sat in the draft until Send refused them."""
    import os

    fake = tmp_path / "notes.png"
    fake.write_text("hello, I am text")
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    blank_png = tmp_path / "blank.png"
    blank_png.write_bytes(b"")
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros((0,), dtype=np.float32), 16000)
    click = tmp_path / "click.wav"
    sf.write(str(click), np.zeros(160, dtype=np.float32), 16_000, subtype="PCM_16")
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)  # opened, it would block: it is not opened
    for path, kind, said in (
        (fake, IMAGE, "it is not an image file"),
        (empty, AUDIO, "the file is empty (0 bytes)"),  # issue 31: a WAV, and empty
        (blank_png, IMAGE, "the file is empty (0 bytes)"),
        (silent, AUDIO, "holds no sound"),
        (click, AUDIO, "too short"),
        (fifo, IMAGE, "not a regular file"),
        (tmp_path / "clip.mp4", IMAGE, NO_VIDEO),
    ):
        with pytest.raises(AttachmentError) as e:
            first_look(path, kind)
        assert said in e.value.user_message, path
        if path != fifo:  # Send refuses it too (a FIFO is not opened by either)
            with pytest.raises(AttachmentError):
                prepare(path, kind, tmp_path / "out")
    first_look(resources.probe_image(), IMAGE)
    first_look(resources.probe_audio(), AUDIO)


@pytest.mark.parametrize(
    "rule,shown",
    [("fixed", (900, 600)), ("edge_bounds", (900, 600)), ("shortest_edge_crop", (0, 0))],
)
def test_a_picture_stretched_for_the_model_keeps_its_shape_for_the_transcript(
    tmp_path, rule, shown
):
    """A 900×600 photo sized to InternVL's 448 × 448 was drawn squashed in the transcript:
    the copy keeps the model's size, and the attachment says the shape the user took."""
    from mmforge.backend.picture_sizing import Intake, Sizing

    photo = tmp_path / "photo.jpg"
    Image.effect_noise((900, 600), 60).convert("RGB").save(photo, quality=90)
    sizes = {
        "fixed": Sizing(rule, "bicubic", width=448, height=448),
        "edge_bounds": Sizing(rule, "bilinear", shortest_edge=700, longest_edge=980),
        "shortest_edge_crop": Sizing(rule, "bicubic", shortest_edge=336, width=336, height=336),
    }
    sent = prepare(photo, IMAGE, tmp_path / "out", Intake(on_white=True, sizing=sizes[rule]))
    with Image.open(sent.path) as copy:
        assert copy.size == (sent.width, sent.height) != (900, 600)
    assert (sent.shown_width, sent.shown_height) == shown
