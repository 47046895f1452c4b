"""Gemma 4 through chat asks the model transformers' own prompt, and answers as it does.

The reference is transformers' Gemma4Processor itself (its PIL image processor and its
audio feature extractor), on the checkpoint's own chat template, then `generate`: chat's
ids must be the processor's token for token (the runtime's blank lines around each
block read with the markers by the package's tokenizer), and its greedy answer the
model's. Checkpoints: the tiny one (with audio, E2B-like), the E2B release's shape and
the 26B-A4B and 31B releases' shapes (their config.json text and Google's template).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mmforge.backend import pictures
from mmforge.backend.attachments import AUDIO, IMAGE, AttachmentError
from mmforge.backend.chat import ChatSession, GenerationOptions
from mmforge.backend.convert import convert
from mmforge.backend.families import ALL
from mmforge.backend.families._reference import load_clip
from mmforge.backend.tiny.release import write_release
from mmforge.backend.verify import hf_reference
from tests.images import user_pictures

TOKENS = 8
RELEASED = {r.key: r for f in ALL for r in f.fixtures.released}


def _processor(folder: Path) -> Any:
    """transformers' Gemma4Processor for `folder`, without its video processor.

    Its video processor needs torchvision, which the CPU install leaves out; pictures and
    clips never reach it.
    """
    from transformers import AutoTokenizer
    from transformers.models.gemma4.feature_extraction_gemma4 import (
        Gemma4AudioFeatureExtractor,
    )
    from transformers.models.gemma4.image_processing_pil_gemma4 import (
        Gemma4ImageProcessorPil,
    )
    from transformers.models.gemma4.processing_gemma4 import Gemma4Processor

    class WithoutVideo(Gemma4Processor):
        def check_argument_for_proper_class(self, name: str, argument: Any) -> Any:
            if argument is None:
                return None
            return super().check_argument_for_proper_class(name, argument)

    tokenizer = AutoTokenizer.from_pretrained(folder)
    return WithoutVideo(
        feature_extractor=Gemma4AudioFeatureExtractor.from_pretrained(folder),
        image_processor=Gemma4ImageProcessorPil.from_pretrained(folder),
        tokenizer=tokenizer,
        video_processor=None,
        chat_template=tokenizer.chat_template,
    )


@pytest.fixture(scope="module")
def checkpoints(tiny, package, tmp_path_factory):
    """key -> (checkpoint folder, f32 package folder), built once."""
    built: dict[str, tuple[Path, Path]] = {}

    def get(key: str) -> tuple[Path, Path]:
        if key not in built:
            if key == "tiny":
                built[key] = (tiny("gemma4"), package("gemma4"))
            else:
                root = tmp_path_factory.mktemp(key)
                folder = write_release(RELEASED[key], root / "checkpoint").folder
                convert(str(folder), root / "package")
                built[key] = (folder, root / "package")
        return built[key]

    return get


@pytest.fixture(scope="module")
def attachments(tmp_path_factory):
    """A JPEG photo, an EXIF-rotated phone photo, a tall and a square picture, two clips."""
    import soundfile

    folder = tmp_path_factory.mktemp("sent")
    sent: dict[str, Path] = {k: Path(v) for k, v in user_pictures(folder, big=(1600, 1200)).items()}
    sent["tall"] = _picture(folder / "tall.png", 480, 800, seed=3)
    sent["square"] = _picture(folder / "square.jpg", 500, 500, seed=4)
    for name, rate, seconds in (("stereo44", 44100, 1.3), ("stereo48", 48000, 0.9)):
        t = np.arange(int(rate * seconds)) / rate
        left = 0.3 * np.sin(2 * np.pi * 330 * t) * np.linspace(1, 0.2, t.size)
        right = 0.2 * np.sin(2 * np.pi * 523 * t + 0.5)
        sent[name] = folder / f"{name}.wav"
        soundfile.write(sent[name], np.stack([left, right], axis=1), rate, subtype="PCM_16")
    return sent


def _picture(path: Path, width: int, height: int, seed: int) -> Path:
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // width, y * 255 // height, (x ^ y) & 255], axis=-1)
    rgb = np.clip(rgb + rng.normal(0, 8, rgb.shape), 0, 255).astype(np.uint8)
    Image.fromarray(rgb).save(path, quality=92)
    return path


# (turns: each a text and the attachments sent with it); audio cases need a model that hears.
CASES = {
    "photo": [("Describe this.", ["jpeg"])],
    "phone photo": [("What is it?", ["exif"])],
    "two sizes": [("Compare them.", ["jpeg", "tall"])],
    "three turns": [("Describe this.", ["square"]), ("And now?", []), ("These?", ["tall", "jpeg"])],
    "clip": [("Transcribe.", ["stereo44"])],
    "picture and clip": [("Both, please.", ["tall", "stereo48"])],
    "clip then picture": [("Listen.", ["stereo48"]), ("Now look.", ["jpeg"])],
}
HEARS = {"tiny", "gemma4"}


def _runs() -> list[tuple[str, str]]:
    runs = []
    for key in ("tiny", "gemma4", "gemma4-26b-a4b", "gemma4-31b"):
        for case, turns in CASES.items():
            clips = any(name.startswith("stereo") for _, sent in turns for name in sent)
            if clips and key not in HEARS:
                continue
            runs.append((key, case))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize(("key", "case"), _runs())
def test_chat_asks_gemma4_processors_prompt_and_answers_with_its_tokens(
    checkpoints, attachments, key, case
):
    import torch

    folder, package = checkpoints(key)
    processor = _processor(folder)
    model = hf_reference.load_model(folder)
    session = ChatSession(package)
    eos = set(session.info.eos_token_ids)
    messages: list[dict[str, Any]] = []
    images: list[Any] = []
    clips: list[Any] = []
    rate = processor.feature_extractor.sampling_rate
    before: tuple[list[int], list[int]] | None = None  # the last turn's prompt and answer
    for text, names in CASES[case]:
        files = [(attachments[n], AUDIO if n.startswith("stereo") else IMAGE) for n in names]
        turn = session.send(
            text, session.prepare_attachments(files), GenerationOptions(max_new_tokens=TOKENS)
        )
        parts: list[dict[str, Any]] = [
            {"type": "audio" if kind == AUDIO else "image"} for _, kind in files
        ]
        messages.append({"role": "user", "content": [*parts, {"type": "text", "text": text}]})
        images += [pictures.load(p) for p, kind in files if kind == IMAGE]
        clips += [load_clip(p, rate) for p, kind in files if kind == AUDIO]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(
            text=prompt, images=images or None, audio=clips or None, return_tensors="pt"
        )
        theirs = [int(t) for t in inputs["input_ids"][0]]
        ours = session.context_ids(len(session.messages) - 1)
        assert ours is not None
        kept = before is not None and ours[: sum(map(len, before))] == before[0] + before[1]
        if not kept:  # the runtime's processor read the whole conversation from its text
            assert ours == theirs, f"{case}: {text}"
        else:  # the model's own answer ids, then the new turn's text (the cache went on)
            assert before is not None and not files
            prompt, answer = before
            assert theirs[: len(prompt)] == prompt
            assert (
                theirs[len(theirs) - len(ours) + len(prompt) + len(answer) :]
                == ours[len(prompt) + len(answer) :]
            ), f"{case}: {text}"
            # transformers reads the answer again from its text: feed it ours, as chat did
            inputs["input_ids"] = torch.tensor([ours])
            inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
            ids, types = inputs["input_ids"], torch.zeros_like(inputs["input_ids"])
            for token, kind in ((processor.image_token_id, 1), (processor.audio_token_id, 3)):
                types[ids == token] = kind  # Gemma4Processor's mm_token_type_ids
            inputs["mm_token_type_ids"] = types
        generated = _generate(model, inputs)
        assert [t for t in turn.token_ids if t not in eos] == [t for t in generated if t not in eos]
        before = (ours, list(turn.token_ids))
        # A random model's answer may hold byte 0, which chat hands the runtime as U+FFFD
        # (a C string ends at NUL: runtime.py); a real answer has none.
        answer_text = turn.text.replace("\x00", "\ufffd")
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer_text}]})


def _generate(model: Any, inputs: Any) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=TOKENS, do_sample=False, num_beams=1)
    return [int(t) for t in out[0, inputs["input_ids"].shape[1] :]]


def test_a_second_clip_is_refused_before_the_runtime_sees_it(checkpoints, attachments):
    """The runtime takes one clip per prompt (Gemma4MultiModalProcessor::Process); a
    conversation re-sends its history, so it holds one clip. Refused at attaching, with
    the message kept (nothing sent, nothing lost)."""
    _, package = checkpoints("tiny")
    session = ChatSession(package)
    with pytest.raises(AttachmentError, match="one audio clip per conversation"):
        session.prepare_attachments(
            [(attachments["stereo44"], AUDIO), (attachments["stereo48"], AUDIO)]
        )
    assert session.messages == []
    clip = session.prepare_attachments([(attachments["stereo44"], AUDIO)])
    session.send("Listen.", clip, GenerationOptions(max_new_tokens=2))
    with pytest.raises(AttachmentError, match="one audio clip per conversation"):
        session.prepare_attachments([(attachments["stereo48"], AUDIO)])
    assert len(session.messages) == 2
