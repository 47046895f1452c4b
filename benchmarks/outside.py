"""What a package does outside mmforge: the user's own file handed to ONNX Runtime GenAI.

Another ONNX Runtime GenAI application hands the runtime the file the user picked,
`og.Images.open(path)`, so the runtime's own decoder (onnxruntime-extensions'
DecodeImage) and resize see it, and no EXIF orientation is applied. mmforge's intake
(`backend/pictures.py`) instead hands it transformers' pixels. For each family and each
picture people send, this prints how far the outside way lands from transformers:

  - outside: og.Model, og.Tokenizer, `model.create_multimodal_processor()`, the prompt
    from the package's chat template (`tokenizer.apply_chat_template`, one picture and
    "Describe this."), `og.Images.open(original file)`, greedy tokens with og.Generator;
  - transformers: the checkpoint's processor on the picture as `load_image` gives it
    (`pictures.load`), then `generate` (`verify/hf_reference.py`);
  - intake (unless --no-intake): mmforge's ChatSession on the same file, for contrast.

Columns: whether the prompt ids are equal and the image tokens on each side (runtime/HF);
the runtime's pixel values against transformers' in HF's layout (mean and max absolute
difference after normalisation; "shape" where the sizes differ); which reading of the
file the runtime's pixels are closest to, where the kind has more than one (EXIF ignored,
transparency on black or white, 16-bit as its high byte); how many greedy tokens agree,
position by position (EOS left out on both sides); the same two for the intake.

    python benchmarks/outside.py [--families qwen2_5_vl,gemma3] [--work /tmp/mmforge-outside]
                                 [--tokens 8] [--no-intake] [--json FILE]

Tiny random-weight checkpoints are built and converted (f32) once in --work, offline.
Exit status: 0 when every family ran (whatever it measured), 1 when a family could not
be built or run (named on stderr), 2 for an unknown family.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

PROMPT = "Describe this."
# tests/images.py user_pictures, then a wide and a tall picture and an RGBA PNG.
KINDS = ["jpeg", "exif", "tie", "large", "palette", "png16", "cmyk", "wide", "tall", "rgba"]
# Gemma 4's tokenizer is being changed to write transformers' prompt ids: run it last.
LAST = ("gemma4", "gemma4_unified")


@dataclasses.dataclass
class Row:
    """One family × picture measurement (None: not measured)."""

    family: str
    kind: str
    error: str | None = None  # the runtime's processor refused the file (its message)
    failed: str | None = None  # the runtime's graphs refused the processor's output
    ids_equal: bool | None = None
    image_tokens: tuple[int, int] | None = None  # (runtime, HF)
    pixels: str = "-"
    closest: str = "-"
    agree: tuple[int, int] | None = None  # (equal positions, longest answer)
    intake_ids_equal: bool | None = None
    intake_agree: tuple[int, int] | None = None
    intake_error: str | None = None


# -- pictures ---------------------------------------------------------------------------


def _gradient(width: int, height: int, seed: int) -> Any:
    """A photo-like RGB picture (smooth ramps, a checker, grain), uint8 HWC."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 128 + 100 * np.sin(x / width * 5.0 + y / height * 3.0)
    g = 255 * (x / max(width - 1, 1))
    b = np.where((x // 23 + y // 31) % 2 == 0, 210.0, 30.0)
    rgb = np.stack([r, g, b], axis=-1) + rng.normal(0, 5, (height, width, 3))
    return np.clip(rgb, 0, 255).astype(np.uint8)


def make_pictures(folder: Path) -> dict[str, Path]:
    """Every kind of KINDS written into `folder`: name -> path."""
    from PIL import Image

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.images import user_pictures

    out = {k: Path(str(v)) for k, v in user_pictures(folder).items()}
    out["wide"] = folder / "wide.jpg"
    Image.fromarray(_gradient(640, 160, 7)).save(out["wide"], quality=90)
    out["tall"] = folder / "tall.png"
    Image.fromarray(_gradient(120, 480, 8)).save(out["tall"])
    # Half of it fully transparent over bright red, the rest opaque: which colour the
    # runtime's decoder leaves there (red under it, black or white) is plain to see.
    rgba = np.dstack([_gradient(160, 120, 9), np.full((120, 160), 255, np.uint8)])
    rgba[:, 80:] = (255, 0, 0, 0)
    out["rgba"] = folder / "alpha.png"
    Image.fromarray(rgba, "RGBA").save(out["rgba"])
    return out


def readings(kind: str, path: Path) -> dict[str, Any]:
    """Other ways a decoder may read this file than load_image's, as RGB PIL pictures."""
    from PIL import Image

    with Image.open(path) as image:
        image.load()
        if kind == "exif":
            return {"EXIF ignored": image.convert("RGB")}
        if kind in ("palette", "rgba"):
            rgba = image.convert("RGBA")
            colour = rgba.convert("RGB")  # the colour under the alpha, alpha dropped
            colour.info.pop("transparency", None)
            black = Image.new("RGBA", image.size, (0, 0, 0, 255))
            white = Image.new("RGBA", image.size, (255, 255, 255, 255))
            return {
                "colour under alpha": colour,
                "on black": Image.alpha_composite(black, rgba).convert("RGB"),
                "on white": Image.alpha_composite(white, rgba).convert("RGB"),
            }
        if kind == "png16":
            high = (np.asarray(image, dtype=np.uint32) >> 8).astype(np.uint8)
            return {"16-bit as high byte": Image.fromarray(high).convert("RGB")}
    return {}


# -- the three ways ---------------------------------------------------------------------


class Outside:
    """A package used as another ONNX Runtime GenAI application uses it."""

    def __init__(self, package: Path):
        import onnxruntime_genai as og

        from mmforge.backend.runtime import package_messages
        from mmforge.backend.templates import check_folder_template
        from mmforge.backend.verify.hf_reference import messages_for

        self.og = og
        self.model = og.Model(str(package))
        self.tokenizer = og.Tokenizer(self.model)
        self.processor = self.model.create_multimodal_processor()
        # The messages in the form the package's template takes (parts, or text with the
        # family's placeholders, as its model card tells a user to write them).
        self.form = check_folder_template(package)
        messages = package_messages(package, messages_for(PROMPT, 1, 0), self.form)
        self.prompt = str(
            self.tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
        )

    def process(self, path: Path) -> tuple[Any, dict[str, Any]]:
        """The processor's output on the file itself, and its tensors as numpy arrays."""
        named = self.processor(self.prompt, images=self.og.Images.open(str(path)))
        return named, {k: named[k].as_numpy() for k in named.keys()}  # noqa: SIM118

    def greedy(self, named: Any, n_prompt: int, tokens: int) -> list[int]:
        """Greedy tokens after the prompt, as og.Generator gives them."""
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(max_length=n_prompt + tokens, do_sample=False, top_k=1)
        generator = self.og.Generator(self.model, params)
        generator.set_inputs(named)
        out: list[int] = []
        while not generator.is_done() and len(out) < tokens:
            generator.generate_next_token()
            out.append(int(generator.get_next_tokens()[0]))
        return out


def agreement(a: list[int], b: list[int], eos: set[int]) -> tuple[int, int]:
    """(positions where both answers hold the same token, the longer answer's length)."""
    a, b = [t for t in a if t not in eos], [t for t in b if t not in eos]
    return sum(x == y for x, y in zip(a, b, strict=False)), max(len(a), len(b))


def pixel_gap(
    checkpoint: Any, prompt: str, arrays: dict[str, Any], hf_inputs: Any, images: list[Any]
) -> Any:
    """(mean, max) |runtime - HF| in HF's layout, or a word on why there is none."""
    from mmforge.backend.families import PixelsRequest
    from mmforge.backend.verify import hf_reference

    reference = checkpoint.family.reference
    key = reference.pixel_key
    try:
        runtime = hf_reference.from_runtime(checkpoint, prompt, arrays).tensors
    except Exception as e:  # noqa: BLE001 - the family's mapping refuses these arrays
        return f"n/a ({type(e).__name__}: {' '.join(str(e).split())[:60]})"
    if key not in runtime or key not in hf_inputs.tensors:
        return "n/a (no pixels)"
    rt = runtime[key].float().numpy()
    hf = hf_inputs.tensors[key].float().numpy()
    if reference.hf_pixels is not None:
        try:
            hf = reference.hf_pixels(PixelsRequest(checkpoint, images, arrays, hf, rt))
        except Exception as e:  # noqa: BLE001 - sizes the family's hook cannot pair
            return f"n/a ({type(e).__name__})"
    if rt.shape != hf.shape:
        return "shape"
    diff = np.abs(reference.channels_first(rt) - reference.channels_first(hf))
    return float(diff.mean()), float(diff.max())


class Reference:
    """transformers' side of one family: model, tokenizer, inputs and answers."""

    def __init__(self, checkpoint: Any):
        from mmforge.backend.verify import hf_reference

        self.hf = hf_reference
        self.checkpoint = checkpoint
        self.model = hf_reference.load_model(checkpoint)
        self.tokenizer = hf_reference.load_tokenizer(checkpoint)
        self.messages = hf_reference.messages_for(PROMPT, 1, 0)

    def inputs(self, image: Any) -> Any:
        """HF model inputs for the prompt with this (RGB PIL) picture."""
        return self.hf.prepare(
            self.checkpoint, self.messages, [image], [], tokenizer=self.tokenizer
        )

    def answer(self, inputs: Any, tokens: int) -> list[int]:
        """transformers' greedy tokens."""
        return self.hf.greedy_generate(self.model, inputs, tokens)


# -- one family -------------------------------------------------------------------------


def build(family: str, work: Path) -> tuple[Path, Path]:
    """(tiny checkpoint folder, f32 package folder), built once in `work`."""
    from mmforge.backend.convert import convert
    from mmforge.backend.families import ALL
    from mmforge.backend.tiny import build_tiny

    folder = work / "tiny" / family
    package = work / "packages" / family
    if not (package / "genai_config.json").exists():
        folder = build_tiny(family, folder).folder
        approximate = any(f.key == family and f.approximation is not None for f in ALL)
        convert(str(folder), package, dtype="f32", approximate=approximate)
    return folder, package


def measure(
    family: str, args: argparse.Namespace, pictures: dict[str, Path]
) -> tuple[list[Row], dict[str, Any]]:
    """Every picture kind through the three ways; the rows and the family's notes."""
    from mmforge.backend import pictures as intake_pictures
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.families import ALL

    entry = next(f for f in ALL if f.key == family)
    folder, package = build(family, args.work)
    checkpoint = Checkpoint.read(folder, approximate=entry.approximation is not None)
    outside = Outside(package)
    reference = Reference(checkpoint)
    config = json.loads((package / "genai_config.json").read_text())["model"]
    token = config.get("image_token_id")
    eos_cfg = config.get("eos_token_id", [])
    eos = {int(t) for t in (eos_cfg if isinstance(eos_cfg, list) else [eos_cfg])}
    session = _session(package) if args.intake else None
    hf_prompt = reference.inputs(intake_pictures.load(pictures["jpeg"])).prompt
    notes = {
        "template form": outside.form,
        "prompt text equal": outside.prompt == hf_prompt,
        "approximated": entry.approximation is not None,
    }
    if outside.prompt != hf_prompt:
        notes["runtime prompt"], notes["HF prompt"] = outside.prompt, hf_prompt
    rows = []
    for kind in KINDS:
        row = Row(family, kind)
        path = pictures[kind]
        image = intake_pictures.load(path)
        own = reference.inputs(image)
        theirs = reference.answer(own, args.tokens)
        try:
            named, arrays = outside.process(path)
        except Exception as e:  # noqa: BLE001 - what the runtime says of this file is the finding
            row.error = " ".join(str(e).split())[:160]
        else:
            ids = [int(t) for t in arrays["input_ids"].reshape(-1)]
            row.ids_equal = ids == list(own.input_ids)
            if token is not None:
                row.image_tokens = (ids.count(token), list(own.input_ids).count(token))
            gap = pixel_gap(checkpoint, outside.prompt, arrays, own, [image])
            row.pixels = f"{gap[0]:.3f}/{gap[1]:.2f}" if isinstance(gap, tuple) else gap
            row.closest = _closest(kind, path, checkpoint, reference, outside.prompt, arrays, gap)
            try:
                row.agree = agreement(outside.greedy(named, len(ids), args.tokens), theirs, eos)
            except Exception as e:  # noqa: BLE001 - the graphs refusing these inputs is a finding
                row.failed = " ".join(str(e).split())[:300]
        if session is not None:
            _intake(row, session, path, own, theirs, eos, args.tokens)
        rows.append(row)
        print(f"  {family} {kind}: done", file=sys.stderr, flush=True)
    if session is not None:
        session.close()
    return rows, notes


def _closest(
    kind: str,
    path: Path,
    checkpoint: Any,
    reference: Reference,
    prompt: str,
    arrays: dict[str, Any],
    gap: Any,
) -> str:
    """Which reading of the file the runtime's pixels are nearest to (by mean difference)."""
    others = readings(kind, path)
    if not others:
        return "-"
    scores = {"load_image": gap[0]} if isinstance(gap, tuple) else {}
    for name, image in others.items():
        found = pixel_gap(checkpoint, prompt, arrays, reference.inputs(image), [image])
        if isinstance(found, tuple):
            scores[name] = found[0]
    if not scores:
        return "n/a"
    low = min(scores.values())
    # Readings within rounding of the best are named together (an RGBA picture's colour
    # under its alpha is what load_image gives too).
    near = [n for n, v in scores.items() if v <= low + max(0.002, 0.1 * low)]
    return f"{' = '.join(near)} ({low:.3f})"


def _session(package: Path) -> Any:
    from mmforge.backend.chat import ChatSession

    return ChatSession(package)


def _intake(
    row: Row, session: Any, path: Path, own: Any, theirs: list[int], eos: set[int], tokens: int
) -> None:
    from mmforge.backend.attachments import IMAGE
    from mmforge.backend.chat import GenerationOptions
    from mmforge.backend.errors import MmforgeError

    session.new_conversation()
    try:
        attachments = session.prepare_attachments([(path, IMAGE)])
        turn = session.send(PROMPT, attachments, GenerationOptions(max_new_tokens=tokens))
    except MmforgeError as e:
        row.intake_error = e.user_message[:120]
        return
    except Exception as e:  # noqa: BLE001 - reported in its row, the other kinds still run
        row.intake_error = f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"
        return
    row.intake_ids_equal = session.context_ids(1) == list(own.input_ids)
    row.intake_agree = agreement(list(turn.token_ids), theirs, eos)


# -- output -----------------------------------------------------------------------------


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _ratio(value: tuple[int, int] | None) -> str:
    return "-" if value is None else f"{value[0]}/{value[1]}"


def table(rows: list[Row], intake: bool) -> list[str]:
    """The rows as a Markdown table."""
    head = [
        "family",
        "picture",
        "ids equal",
        "image tokens rt/HF",
        "pixels mean/max",
        "closest reading",
        "tokens agree",
    ]
    if intake:
        head += ["intake ids", "intake tokens"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.error is not None:
            cells = [r.family, r.kind, f"refused: {r.error.split('. ')[0][:70]}", "", "", "", ""]
        else:
            tokens = "-" if r.image_tokens is None else f"{r.image_tokens[0]}/{r.image_tokens[1]}"
            cells = [
                r.family,
                r.kind,
                _yes(r.ids_equal),
                tokens,
                r.pixels,
                r.closest,
                "generation failed" if r.failed else _ratio(r.agree),
            ]
        if intake:
            if r.intake_error is not None:
                cells += [f"error: {r.intake_error}", ""]
            else:
                cells += [_yes(r.intake_ids_equal), _ratio(r.intake_agree)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary(family: str, rows: list[Row], intake: bool) -> str:
    """One line: the kinds whose prompt ids differ, refused files, answers that differ."""

    def kinds(test: Any) -> str:
        return ",".join(r.kind for r in rows if test(r)) or "none"

    def differs(agree: tuple[int, int] | None) -> bool:
        return agree is not None and agree[0] < agree[1]

    through_intake = (
        kinds(lambda r: r.intake_error or r.intake_ids_equal is False or differs(r.intake_agree))
        if intake
        else "not run"
    )
    return (
        f"| {family} | {kinds(lambda r: r.ids_equal is False)} | "
        f"{kinds(lambda r: r.error or r.failed)} | {kinds(lambda r: differs(r.agree))} | "
        f"{through_intake} |"
    )


def _print_family(
    family: str, seconds: float, notes: dict[str, Any], rows: list[Row], intake: bool
) -> None:
    said = ", ".join(f"{k} {v!r}" for k, v in notes.items() if not k.endswith(" prompt"))
    print(f"\n{family} ({seconds:.0f} s): {said}")
    if "runtime prompt" in notes:
        print(f"  runtime prompt: {notes['runtime prompt']!r}")
        print(f"  HF prompt:      {notes['HF prompt']!r}")
    print("\n".join(table(rows, intake)), flush=True)
    for message in sorted({r.error or r.failed for r in rows if r.error or r.failed}):
        print(f"  runtime said: {message}")


def main() -> int:
    """Run every family asked for and print its table; the exit status says what ran."""
    import onnxruntime_genai as og

    from mmforge.backend.families import ALL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="", help="comma-separated keys (default: tested)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/mmforge-outside"))
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--no-intake", dest="intake", action="store_false")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.backend.families import TESTED

    asked = [f for f in args.families.split(",") if f] or list(TESTED)
    unknown = [f for f in asked if f not in {e.key for e in ALL}]
    if unknown:
        print(f"unknown family: {', '.join(unknown)} (known: {', '.join(TESTED)})", file=sys.stderr)
        return 2
    families = [f for f in asked if f not in LAST] + [f for f in LAST if f in asked]
    args.work.mkdir(parents=True, exist_ok=True)
    pictures = make_pictures(args.work / "pictures")
    day = time.strftime("%Y-%m-%d")
    print(f"onnxruntime_genai {og.__version__}; {day}; {args.tokens} greedy tokens")
    found: dict[str, Any] = {}
    lines = []
    failed = []
    for family in families:
        start = time.perf_counter()
        try:
            rows, notes = measure(family, args, pictures)
        except Exception as e:  # noqa: BLE001 - one family's failure must not hide the others'
            failed.append(family)
            print(f"{family}: could not be measured: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        _print_family(family, time.perf_counter() - start, notes, rows, args.intake)
        lines.append(summary(family, rows, args.intake))
        found[family] = {"notes": notes, "rows": [dataclasses.asdict(r) for r in rows]}
        if args.json:  # written after each family, so a long run keeps what it measured
            record = {"version": og.__version__, "date": day, "families": found}
            args.json.write_text(json.dumps(record, indent=1))
    head = ["family", "prompt ids differ", "runtime refuses or fails", "answer differs"]
    print("\n| " + " | ".join([*head, "intake differs"]) + " |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))
    if failed:
        print(f"not measured: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
