"""Verify stage 1: the runtime's processor against the HF processor on the same files.

Three parts, one verdict (the worst):
- token ids: the placeholder count per image and audio clip, then the sequence of special
  tokens (boundary markers, turn markers), then every other token must match: any other
  text is another prompt than the one transformers asks the model (FAIL);
- pixels, in HF's layout: within the documented resize bounds (the runtime's bicubic
  resize keeps overshoot at sharp edges that PIL clamps), with red and blue in order, and
  normalised with the checkpoint's mean and std;
- audio features: the same frames within the documented front-end bounds.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families import LayoutRequest, PixelsRequest
from mmforge.backend.verify import hf_reference, intake
from mmforge.backend.verify.evidence import ReferenceEvidence, RuntimeEvidence
from mmforge.backend.verify.parity import AMBIGUOUS, FAIL, PASS, Comparison, cosine
from mmforge.backend.verify.stages import Setup, positions

# Documented bounds of the runtime's preprocessing against HF's (see the conversion tests).
PIXEL_MEAN = 3e-3
PIXEL_OUTLIERS = 0.01  # share of pixels more than 0.02 apart (a family may allow more)
PIXEL_MAX = 0.25
AUDIO_MEAN = 3e-3
AUDIO_MAX = 0.1


def check(
    setup: Setup, rt: RuntimeEvidence, ref: ReferenceEvidence, tokenizer: Any
) -> tuple[Comparison, str | None]:
    """The preprocessing comparison, and the family's documented difference, if any."""
    reference = setup.checkpoint.family.reference
    assert reference is not None
    runtime_inputs = hf_reference.from_runtime(setup.checkpoint, rt.prompt, rt.arrays)
    parts: list[tuple[str, str]] = []
    if reference.placeholder_layout is not None:
        layout = reference.placeholder_layout(
            LayoutRequest(
                setup.checkpoint.cfg, list(rt.ids), rt.arrays, setup.image_token, tokenizer
            )
        )
        parts.append((PASS if layout.holds else FAIL, layout.found))
    else:
        # The runtime's ids as transformers reads them (the family's from_runtime).
        read = runtime_inputs.input_ids
        parts.append(_ids(setup, read, ref, tokenizer))
    runtime = runtime_inputs.tensors
    pixels = _pixels(setup, rt, ref, runtime)
    max_abs: float | None = None
    cos = 1.0
    if pixels is not None:
        verdict, reason, max_abs, cos = pixels
        parts.append((verdict, reason))
    audio = _audio(setup, ref, runtime)
    if audio is not None:
        parts.append(audio)
    worst = FAIL if any(v == FAIL for v, _ in parts) else AMBIGUOUS
    if all(v == PASS for v, _ in parts):
        worst = PASS
    shown = [r for v, r in parts if v == worst] if worst != PASS else [r for _, r in parts]
    if worst == FAIL:
        found = intake.cause(setup)
        shown = [found, *shown] if found else shown
    comparison = Comparison("preprocessing", worst, max_abs, cos, None, "; ".join(shown), [], [])
    return comparison, reference.preprocessing_note


def _special_ids(tokenizer: Any) -> set[int]:
    ids = set(tokenizer.all_special_ids)
    ids.update(i for i, tok in tokenizer.added_tokens_decoder.items() if tok.special)
    return ids


def _ids(
    setup: Setup, runtime: list[int], ref: ReferenceEvidence, tokenizer: Any
) -> tuple[str, str]:
    rt, hf = list(runtime), list(ref.inputs.input_ids)
    for name, token in (("image", setup.image_token), ("audio", setup.audio_token)):
        if token is None:
            continue
        made, wanted = int(positions(rt, token).sum()), int(positions(hf, token).sum())
        if made != wanted:
            return (
                FAIL,
                f"image token count mismatch: the runtime makes {made} {name} "
                f"tokens where HF makes {wanted}",
            )
    specials = _special_ids(tokenizer)
    rt_special = [t for t in rt if t in specials]
    hf_special = [t for t in hf if t in specials]
    if rt_special != hf_special:
        missing = _multiset_difference(hf_special, rt_special)
        extra = _multiset_difference(rt_special, hf_special)
        words = []
        if missing:
            words.append(f"missing {_names(tokenizer, missing)}")
        if extra:
            words.append(f"extra {_names(tokenizer, extra)}")
        detail = ", ".join(words) or "in another order"
        return (
            FAIL,
            f"boundary markers differ from HF's ({detail}): the package's chat template "
            "or processor does not wrap the attachments as the model expects",
        )
    if rt != hf:
        extra, missing = _multiset_difference(rt, hf), _multiset_difference(hf, rt)
        said = [
            f"adds {_tokens(len(extra))} transformers' prompt lacks ({_names(tokenizer, extra)})"
            if extra
            else "",
            f"lacks {_tokens(len(missing))} ({_names(tokenizer, missing)})" if missing else "",
        ]
        return (
            FAIL,
            "the model is asked another prompt than transformers asks it: the pictures' and "
            f"clips' places and markers match, but the runtime's prompt "
            f"{' and '.join(w for w in said if w) or 'has its text tokens in another order'}. "
            "The package's chat template or tokenizer writes it: convert the model again "
            "with this version of mmforge, and report the model if the difference stays",
        )
    return PASS, f"the same {len(rt)} token ids"


def _multiset_difference(a: list[int], b: list[int]) -> list[int]:
    rest = list(b)
    out = []
    for t in a:
        if t in rest:
            rest.remove(t)
        else:
            out.append(t)
    return out


_SPACES = {"\n": "line break", "\n\n": "blank line", " ": "space", "\t": "tab"}


def _tokens(n: int) -> str:
    return f"{n} text token{'s' if n != 1 else ''}"


def _names(tokenizer: Any, ids: list[int]) -> str:
    """The tokens as a person reads them: a line break, not the tokenizer's 'Ċ'."""
    counts: dict[str, int] = {}
    for t in ids:
        text = str(tokenizer.decode([t]))
        name = _SPACES.get(text) or (repr(text) if text.strip() else f"whitespace {text!r}")
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in counts.items())


def _pixels(
    setup: Setup, runtime: RuntimeEvidence, ref: ReferenceEvidence, rt_all: dict[str, Any]
) -> tuple[str, str, float, float] | None:
    """(verdict, reason, max abs diff, cosine) of the pixels in HF's layout."""
    reference = setup.checkpoint.family.reference
    assert reference is not None
    if not setup.n_images:
        return None
    key = reference.pixel_key
    if key not in rt_all:
        return FAIL, "the runtime's processor produced no pixel values", 0.0, 0.0
    rt = rt_all[key].float().numpy()
    hf = ref.inputs.tensors[key].float().numpy()
    if reference.hf_pixels is not None:
        hf = reference.hf_pixels(
            PixelsRequest(setup.checkpoint, ref.images, runtime.arrays, hf, rt)
        )
    if rt.shape != hf.shape:
        return (
            FAIL,
            f"pixel values have shape {list(rt.shape)} where HF has {list(hf.shape)} "
            "(resize or patch settings differ)",
            0.0,
            0.0,
        )
    rt_c, hf_c = reference.channels_first(rt), reference.channels_first(hf)
    allowed = PIXEL_OUTLIERS if reference.pixel_outliers is None else reference.pixel_outliers
    return _pixel_verdict(rt_c, hf_c, allowed, intake.other_pixels(setup))


def _pixel_verdict(
    rt_c: Any, hf_c: Any, allowed: float, why: str = "other pixels than transformers' reached it"
) -> tuple[str, str, float, float]:
    """(verdict, reason, max abs diff, cosine) of two [3, N] pixel arrays."""
    import numpy as np

    diff = np.abs(rt_c - hf_c)
    max_abs, mean = float(diff.max()), float(diff.mean())
    cos = cosine(hf_c, rt_c)
    swapped = float(np.abs(rt_c - hf_c[::-1]).mean())
    if swapped < mean:
        return (
            FAIL,
            f"red and blue are swapped (channel order): mean difference {mean:.3f}, "
            f"{swapped:.3f} with the channels reversed",
            max_abs,
            cos,
        )
    outliers = float((diff > 0.02).mean())
    if mean < PIXEL_MEAN and outliers < allowed and max_abs < PIXEL_MAX:
        return (
            PASS,
            f"pixels within the documented resize bounds (mean {mean:.1e}, max {max_abs:.3f})",
            max_abs,
            cos,
        )
    scale, offset = _fit(rt_c, hf_c)
    # Only a per-channel affine map that explains the difference is a mean/std mismatch:
    # other pixels (a JPEG decoded otherwise, a picture turned or resized otherwise) fit
    # one badly, whatever its coefficients.
    residual = float(np.abs(rt_c - (scale[:, None] * hf_c + offset[:, None])).mean())
    affine = residual < PIXEL_MEAN
    if affine and (np.max(np.abs(scale - 1)) > 0.02 or np.max(np.abs(offset)) > 0.02):
        return (
            FAIL,
            "normalisation differs (mean/std): per channel the runtime's pixels are "
            f"{_fmt(scale)} × HF's + {_fmt(offset)}",
            max_abs,
            cos,
        )
    return (
        FAIL,
        f"pixels differ beyond the documented bounds (mean {mean:.3f}, max {max_abs:.3f}), "
        f"not by another normalisation: {why}",
        max_abs,
        cos,
    )


def _fit(rt: Any, hf: Any) -> tuple[Any, Any]:
    import numpy as np

    scale, offset = np.empty(3), np.empty(3)
    for c in range(3):
        a = np.vstack([hf[c], np.ones_like(hf[c])]).T
        scale[c], offset[c] = np.linalg.lstsq(a, rt[c], rcond=None)[0]
    return scale, offset


def _fmt(values: Any) -> str:
    return "(" + ", ".join(f"{v:.3f}" for v in values) + ")"


def _audio(setup: Setup, ref: ReferenceEvidence, rt_all: dict[str, Any]) -> tuple[str, str] | None:
    import numpy as np

    reference = setup.checkpoint.family.reference
    assert reference is not None
    if not setup.n_audios:
        return None
    key = reference.audio_key
    if key not in rt_all or key not in ref.inputs.tensors:
        return FAIL, "the runtime's processor produced no audio features"
    rt = rt_all[key].float().numpy()[0]
    hf = ref.inputs.tensors[key].float().numpy()[0]
    if rt.shape[-1] != hf.shape[-1] or rt.shape[0] > hf.shape[0]:
        return FAIL, f"audio features have shape {list(rt.shape)} where HF has {list(hf.shape)}"
    diff = np.abs(rt - hf[: rt.shape[0]])
    if float(diff.mean()) < AUDIO_MEAN and float(diff.max()) < AUDIO_MAX:
        return PASS, f"audio features within the documented bounds (max {diff.max():.1e})"
    return (
        FAIL,
        f"audio features differ from HF's (mean {diff.mean():.3g}, max {diff.max():.3g}): "
        "sample rate, mel settings or normalisation",
    )
