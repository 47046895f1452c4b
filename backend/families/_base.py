"""What a family entry holds, and small helpers for reading configs.

One `Family` per Hugging Face model family. Everything a stage needs to know about a
family sits in its entry, so adding a family means adding one entry (and its tiny test
checkpoint), not editing every stage.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmforge.backend.families._hooks import (
    BuildGraphs,
    FromRuntime,
    GraphFix,
    HfPixels,
    KnownLimit,
    PlaceholderLayout,
    PrepareReference,
    PrepareWeights,
    Variant,
    no_variant,
)
from mmforge.backend.picture_sizing import Sizing

if TYPE_CHECKING:
    from mmforge.backend.families._fields import Rule
    from mmforge.backend.tiny.build import TinySpec
    from mmforge.backend.tiny.release import ReleaseSpec


class Cfg:
    """Read-only access to a config dict with dotted paths and defaults.

    `Cfg(d).get("vision_config.patch_size", 14)` returns the nested value, or the default
    when any part of the path is missing or None.
    """

    def __init__(self, data: Mapping[str, Any]):
        self.data = data

    def get(self, path: str, default: Any = None) -> Any:
        """The value at a dotted path, or `default`."""
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, Mapping) or node.get(part) is None:
                return default
            node = node[part]
        return node

    def first(self, *paths: str, default: Any = None) -> Any:
        """The value at the first of `paths` that is set."""
        for p in paths:
            value = self.get(p)
            if value is not None:
                return value
        return default

    def sub(self, path: str) -> Cfg:
        """The nested config at `path` (empty when missing)."""
        value = self.get(path)
        return Cfg(value if isinstance(value, Mapping) else {})

    def has(self, path: str) -> bool:
        """Whether a non-null value exists at `path`."""
        return self.get(path) is not None

    @property
    def text(self) -> Cfg:
        """The language-model part: `text_config` (or `llm_config`), else the top level."""
        for key in ("text_config", "llm_config"):
            if isinstance(self.data.get(key), Mapping):
                return Cfg(self.data[key])
        return self


@dataclass(frozen=True)
class Projector:
    """The projector variant from the seed table, and why it was chosen.

    Attributes:
        variant: Seed-table name, e.g. "MLPMultiModalProjector".
        architecture: The layers, e.g. "Linear → GELU → Linear".
        reason: One sentence naming the config fields that decided it.
        fields: Those fields and their values.
    """

    variant: str
    architecture: str
    reason: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImageTokens:
    """How many placeholder tokens one image becomes.

    Attributes:
        fixed: The count when every image gives the same number.
        minimum: The smallest count the processor settings allow (dynamic families).
        maximum: The largest count the processor settings allow (dynamic families).
        rule: How the count is computed, in words.
    """

    fixed: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    rule: str = ""


@dataclass(frozen=True)
class PackageSpec:
    """How a family's ONNX Runtime GenAI package differs from the common layout.

    Attributes:
        model_fields: Extra `model.*` keys of genai_config (token ids the runtime needs).
        vision_fields: Extra `model.vision.*` keys (patch and merge sizes, ...).
        vision_inputs: `model.vision.inputs` (runtime name to graph input name).
        processor_json: The image processor JSON from config and preprocessor config.
        speech_inputs: `model.speech.inputs` (runtime name to graph input name), for
            families with an audio encoder.
        audio_processor_json: The audio feature extraction JSON, for those families.
        graph_fixes: Surgery applied to the built graphs, in order (each family folder's
            graph_fixes.py); each takes a `FixRequest` (the component models and the
            config) and returns a line for the manifest, or None when it did nothing.
        rename_checkpoint: Maps a checkpoint tensor name to the layout the graph builder
            expects (transformers 5 saves some towers in a newer layout than the hub's).
        config_patch: Adapts (a private copy of) the transformers config before mobius
            reads it.
        module_patch: Adapts mobius's module before it builds the graphs (the module and
            the transformers config it was made from).
        build: The family's own graph builder, for families mobius does not build
            (`BuildRequest` -> `BuiltGraphs`); None: mobius.
        builder_holds_model: Whether that builder loads the whole model at once (the
            conversion peak is then the model in f32, not the largest tensor).
        hidden_multiple: The decoder takes inputs_embeds this many times the hidden size
            wide (Qwen3-VL carries DeepStack levels as extra columns).
        fused_attention: Whether the graph builder's EP-specific attention fusion
            (GroupQueryAttention with built-in rotary) is right for this config; when not,
            the portable Attention + RotaryEmbedding graph is built instead.
        decoder_fields: Extra `model.decoder.*` keys (LFM2's layer types and conv cache).
        dtypes: The package dtypes this family converts to.
        prepare_weights: Adapts the checkpoint's tensors before they are mapped
            (`WeightsRequest` -> `PreparedWeights`): Phi-4's vision LoRA merged into its
            base weights.
        unused_ok: Patterns (regular expressions) of checkpoint tensors transformers holds
            but never computes with for this config (a pooling head, layers past the
            feature layer); any other tensor no graph uses stops the conversion.
        builder_type: The graph builder's (mobius's) name for this config's model, when
            it differs from config.json's model_type (Qwen3.6 MoE: "qwen3_5_moe_vl").
        notes: What this family's packaging fixes or cannot express, for the manifest.
        picture_sizing: How transformers sizes a picture for this config (its processor's
            rule, target size and filter), recorded in the manifest so that chat and
            verify hand the runtime pictures already at transformers' size; None when
            the runtime's own resize is left to do it.
        adapt_tokenizer: Changes the package's tokenizer.json and tokenizer_config.json
            (parsed, in place; the config, the checkpoint folder) where the runtime's
            processor splices text the model's tokenizer must read as its own ids
            (LLaVA on videochat_flash_qwen); returns a line for the manifest.
        chat_template: The package's chat template, written in place of the checkpoint's,
            where transformers' processor defines the prompt and the releases ship no
            template (PaliGemma); a checkpoint without one then converts.
    """

    model_fields: Callable[[Cfg], dict[str, Any]]
    vision_fields: Callable[[Cfg, Cfg], dict[str, Any]]
    vision_inputs: dict[str, str]
    processor_json: Callable[[Cfg, Cfg], dict[str, Any]]
    speech_inputs: dict[str, str] = field(default_factory=dict)
    audio_processor_json: Callable[[Cfg, Cfg], dict[str, Any]] | None = None
    graph_fixes: tuple[GraphFix, ...] = ()
    rename_checkpoint: Callable[[str], str] | None = None
    fused_attention: Callable[[Cfg], bool] = lambda cfg: True
    config_patch: Callable[[Any], None] | None = None
    module_patch: Callable[[Any, Any], None] | None = None
    build: BuildGraphs | None = None
    builder_holds_model: bool = False
    hidden_multiple: Callable[[Cfg], int] = lambda cfg: 1
    decoder_fields: Callable[[Cfg], dict[str, Any]] = lambda cfg: {}
    dtypes: tuple[str, ...] = ("f32", "f16", "int4", "int8")
    prepare_weights: PrepareWeights | None = None
    unused_ok: Callable[[Cfg], tuple[str, ...]] = lambda cfg: ()
    builder_type: Callable[[Cfg], str | None] = lambda cfg: None
    notes: tuple[str, ...] = ()
    picture_sizing: Callable[[Cfg, Cfg], Sizing | None] = lambda cfg, pre: None
    adapt_tokenizer: Callable[[dict[str, Any], dict[str, Any], Cfg, Path], str] | None = None
    chat_template: str | None = None


def channels_first(pixels: Any) -> Any:
    """[3, everything else] for pixels laid out [..., 3, H, W]."""
    import numpy as np

    axis = pixels.ndim - 3
    return np.moveaxis(pixels, axis, 0).reshape(3, -1)


@dataclass(frozen=True)
class RemoteLayout:
    """How a family's remote-code layout maps onto transformers' native classes.

    Read as data (JSON and safetensors headers), so no code from the repository runs.

    Attributes:
        config: The native config dict from the config as written and the checkpoint's
            tensor shapes (None when the weights are not at hand).
        tensor_name: A tensor's native name (None: not part of the native model).
        processor_classes: Processor class names the layout uses, and the native ones.
    """

    config: Callable[[dict[str, Any], dict[str, list[int]] | None], dict[str, Any]]
    tensor_name: Callable[[str], str | None]
    processor_classes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Reference:
    """How verify builds the Hugging Face side of a family and compares preprocessing.

    Attributes:
        prepare: HF model inputs from the checkpoint's own processors
            (`ReferenceRequest` -> `ReferenceInputs`).
        from_runtime: Puts the runtime processor's arrays into HF inputs under HF's names
            (`RuntimeArrays`: its inputs, holding the runtime's ids, filled in place).
        pixel_key: HF's name for the pixels.
        audio_key: HF's name for the audio features.
        channels_first: The pixels as [3, everything else], in HF's layout.
        pixel_outliers: The share of pixels that may differ by more than 0.02 (None:
            verify's documented bound).
        hf_pixels: HF's pixels to compare with the runtime's (`PixelsRequest` -> array);
            None: HF's as they are.
        placeholder_layout: Checks the runtime's placeholder layout against its own image
            sizes instead of against HF's ids (`LayoutRequest` -> `LayoutCheck`).
        preprocessing_note: A documented preprocessing difference, for the report.
        config_tokens: genai_config token fields verify checks against the checkpoint,
            beyond the image (and audio) token.
        audio_extractor: The transformers feature extractor a checkpoint without audio
            settings gets (with its defaults), for families with audio.
        adapt: Readies the loaded HF model as the released model runs (model,
            checkpoint): Phi-4's LoRAs loaded with PEFT, each active for its prompts.
        known_limit: A difference the package has from the released model by design, for
            a prompt of this many images and audio clips (`LimitRequest` -> the sentence
            that names it, or None); verify puts it first in the cause of a
            verdict other than PASS (Phi-4's speech LoRA for audio-only prompts, no
            LoRA for text-only ones).
        load: Builds the reference model itself (checkpoint -> model in eval mode), for a
            family transformers has no class for (Phi-3.5-Vision, assembled from its
            native parts); None: `Family.hf_class` loaded with the checkpoint's weights.
        kind: What the reference is, for the report, when it is not transformers' class.
        feature_rows: Which of the vision graph's rows are features, as a boolean mask
            over their count (None: all): rows the embedding graph fills itself are
            left out of the vision comparison (Idefics2's split pictures).
        model_context: What transformers needs around reading the config and building
            the model (Gemma 3n: its timm tower, `timm_in_transformers`).
        untemplated: HF model inputs for a checkpoint that ships no chat template, from
            transformers' processor itself, which writes the prompt (PaliGemma's
            releases); the request's prompt is "" and its messages are the conversation.
            None: such a checkpoint has no reference prompt and is refused.
    """

    prepare: PrepareReference
    from_runtime: FromRuntime
    pixel_key: str = "pixel_values"
    audio_key: str = "input_features"
    channels_first: Callable[[Any], Any] = channels_first
    pixel_outliers: float | None = None
    hf_pixels: HfPixels | None = None
    placeholder_layout: PlaceholderLayout | None = None
    preprocessing_note: str | None = None
    config_tokens: tuple[str, ...] = ()
    audio_extractor: str | None = None
    adapt: Callable[[Any, Any], None] | None = None
    known_limit: KnownLimit | None = None
    load: Callable[[Any], Any] | None = None
    kind: str | None = None
    feature_rows: Callable[[Cfg, int], Any] | None = None
    model_context: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    untemplated: PrepareReference | None = None


@dataclass(frozen=True)
class Recognition:
    """How a checkpoint is recognised as this family.

    Attributes:
        model_types: Hugging Face `model_type` values of this family.
        remote_code_types: `model_type` values that exist only as remote code.
        variant: Another entry for a checkpoint of this model_type that the runtime runs
            under its own pipeline type, or None (Fara: a Qwen2.5-VL fine-tune the
            runtime names `fara`).
        remote_layout: How its remote-code layout is read without running the code.
        claims: For a model_type a later entry shares, which configs (config.json as
            written) are this entry's; the registry hands the others to that entry, so
            neither names the other (Pixtral-12B's `llava` with a Pixtral tower, beside
            LLaVA-1.5's). None: every config of its model types.
    """

    model_types: tuple[str, ...]
    remote_code_types: tuple[str, ...] = ()
    variant: Variant = no_variant
    remote_layout: RemoteLayout | None = None
    claims: Callable[[dict[str, Any]], bool] | None = None


@dataclass(frozen=True)
class Profile:
    """What inspect and the Model card say of a config of this family.

    Attributes:
        projector: Picks the projector variant from the config.
        token_ids: Image, audio and boundary token ids from the config.
        image_tokens: Placeholder tokens per image from config and processor config.
        hf_class: transformers class for building the model (None: remote code only).
        has_vision: Whether this config has a vision encoder.
        has_audio: Whether this config has an audio encoder.
        runtime_token_strings: Exact strings the runtime's processor looks for.
        fields: Every config field of the family, honoured, checked or inert (fields.py
            in its folder); checked fields with other values are refused.
        architecture: What sets this config's architecture apart, in words (Qwen3.5's
            layer pattern and experts).
        text_placeholder: What a user writes into a message's text for its n-th image or
            audio (kind, n from 1), as the runtime's processor expects it, for chat
            templates that take text only (Phi-4-multimodal's `<|image_1|>`); None: such
            a template cannot take attachments.
        old_package_max_images: Images a package of this family takes per conversation,
            for packages written before the manifest's `max_images` field, from their
            manifest notes (None: no limit known).
        notes: Known limitations and fixes, shown to the user.
    """

    projector: Callable[[Cfg], Projector]
    token_ids: Callable[[Cfg], dict[str, int]]
    image_tokens: Callable[[Cfg, Cfg], ImageTokens]
    hf_class: str | None = None
    has_vision: Callable[[Cfg], bool] = lambda cfg: True
    has_audio: Callable[[Cfg], bool] = lambda cfg: False
    runtime_token_strings: tuple[str, ...] = ()
    fields: tuple[Rule, ...] = ()
    architecture: Callable[[Cfg], tuple[str, ...]] = lambda cfg: ()
    text_placeholder: Callable[[str, int], str] | None = None
    old_package_max_images: Callable[[list[str]], int | None] = lambda notes: None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DefaultConfig:
    """What inspect must report for transformers' default (full-size) config of a family.

    Attributes:
        config_class: The transformers config class, built with no arguments.
        projector: The projector variant inspect names.
        token_ids: Token ids inspect reads from it.
        components: The components inspect lists.
        config_kwargs: Arguments the config class is built with, where transformers'
            default contradicts itself (GLM-4.5V: 4096 wide over 96 heads, no head_dim).
    """

    config_class: str
    projector: str
    token_ids: dict[str, int]
    components: tuple[str, ...] = ("vision_encoder", "embedding", "decoder")
    config_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Expectations:
    """What the test suite expects of a family, kept beside the family.

    Attributes:
        default_config: inspect on transformers' default config (None: transformers has
            no config class for it).
        tiny_components: The components inspect lists for the tiny checkpoint.
        tiny_tokens: Token fields inspect must resolve to these strings on the tiny
            checkpoint's tokenizer.
        verdict: A good package's verify verdict where it is not PASS, and why.
        verdict_reason: Why the verdict is not PASS (required when it is not).
        honoured: Honoured config fields set away from the tiny values, together: each
            changes transformers' output, and the package must still match it.
        quantized: Precisions verify checks on the tiny checkpoint against the
            package's own rounded weights.
        released_rounded: (release-shaped checkpoint key, precision) pairs checked the
            same way on a release-shaped checkpoint.
        held_out: Config fields (dotted paths) of a tiny checkpoint the suite never builds,
            at other sizes, for benchmarks/heldout.py (built with another seed).
        one_message: The package's template takes one user message and refuses a second
            turn or a system prompt (PaliGemma's prompt has no turns).
    """

    default_config: DefaultConfig | None = None
    tiny_components: tuple[str, ...] = ("vision_encoder", "embedding", "decoder")
    tiny_tokens: dict[str, str] = field(default_factory=dict)
    verdict: str = "PASS"
    verdict_reason: str = ""
    honoured: dict[str, Any] = field(default_factory=dict)
    quantized: tuple[str, ...] = ()
    released_rounded: tuple[tuple[str, str], ...] = ()
    held_out: dict[str, Any] = field(default_factory=dict)
    one_message: bool = False


@dataclass(frozen=True)
class Fixtures:
    """A family's test checkpoints and what the tests expect of them.

    Attributes:
        tiny: The spec of its tiny random-weight test checkpoint (tiny.py in its folder).
        released: Test checkpoints shaped like the family's hub releases (tiny.py).
        remote_release: Writes a release-shaped test checkpoint of a remote-code-only
            family (no transformers class builds it, so no `ReleaseSpec` can): folder in,
            the checkpoint out.
        expect: What the tests expect (expect.py in its folder).
    """

    tiny: TinySpec | None = None
    released: tuple[ReleaseSpec, ...] = ()
    remote_release: Callable[[Any], Any] | None = None
    expect: Expectations = field(default_factory=Expectations)


@dataclass(frozen=True)
class Approximation:
    """How a family converts only approximately, and only when the user opts in.

    No runtime pipeline gives the released processor's layout (InternVL's tiles,
    Idefics3's image splitting), but the model runs exactly on a simpler setting of its
    own image processor. With the user's consent (`convert --approximate`, the app's
    question) the package is built for that setting, the Model card and inspect say what
    differs, and verify compares against transformers run with the same setting and
    reports APPROXIMATE, never PASS.

    Attributes:
        what: What differs from the model as released, in plain words (one or two
            sentences, no settings' names): the card, the question, verify's verdict.
        short: The same in a few words, where space is short (Chat's package line).
        overrides: The image processor settings the package is built for; the checkpoint's
            processor settings and verify's HF processor both take them.
        why: Why no package is exact, naming the runtime code (docs/families.md, inspect).
    """

    what: str
    short: str
    overrides: Mapping[str, Any]
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The manifest's record of it."""
        return {"what": self.what, "short": self.short, "overrides": dict(self.overrides)}


@dataclass(frozen=True)
class Family:
    """One model family, in its parts: recognition, profile, package, reference, fixtures.

    A variant (Gemma 4 unified, Qwen3.5 MoE, Fara) is another entry made from its base
    with `dataclasses.replace`, so it states only what differs.

    Attributes:
        key: Stable identifier, e.g. "qwen2_5_vl".
        name: Human name, e.g. "Qwen2.5-VL".
        pipeline_type: The ORT GenAI `model.type`, or None when the runtime has none.
        recognition: Which checkpoints are this family.
        profile: What inspect and the Model card say of a config.
        package: How to package it for the runtime (None: conversion not supported yet).
        reference: How verify builds its HF side (None: no parity checks yet).
        fixtures: Its test checkpoints and the tests' expectations.
        no_pipeline_reason: Why the runtime cannot run it, when `pipeline_type` is None.
        not_converted: Why this version does not convert the family although the runtime
            runs it, measured (inspect warns with it; convert refuses with it).
        exact_host: The runtime pipeline that could run this family exactly although the
            runtime has no type of its name, where mmforge does not build its graphs yet
            (`no_pipeline_reason` says how, measured); None: no pipeline can.
        approximation: Set where the package can only approximate the released model:
            convert refuses without the user's consent, and verify reports APPROXIMATE.
        earlier: The family as earlier versions converted it, as an approximation, where
            it converts exactly now (InternVL: one view a picture, on another pipeline):
            verify compares a package whose manifest records that approximation with it
            (APPROXIMATE, as then); convert and inspect never use it.
        variant_note: What a variant (`Recognition.variant`) converts otherwise, for the
            family table (Idefics3's releases that split their pictures).
    """

    key: str
    name: str
    pipeline_type: str | None
    recognition: Recognition
    profile: Profile
    package: PackageSpec | None = None
    reference: Reference | None = None
    fixtures: Fixtures = field(default_factory=Fixtures)
    no_pipeline_reason: str | None = None
    not_converted: str | None = None
    exact_host: str | None = None
    approximation: Approximation | None = None
    earlier: Family | None = None
    variant_note: str = ""

    @property
    def converts(self) -> bool:
        """Whether this version converts the family."""
        return self.package is not None and not self.not_converted

    def components(self, cfg: Cfg) -> tuple[str, ...]:
        """The ONNX models to build, in the seeds' I/O contract names."""
        parts = []
        if self.profile.has_vision(cfg):
            parts.append("vision_encoder")
        if self.profile.has_audio(cfg):
            parts.append("audio_encoder")
        return (*parts, "embedding", "decoder")


def ids(cfg: Cfg, **paths: str | tuple[str, ...]) -> dict[str, int]:
    """Collect token ids: each keyword names a token, its value the config path(s)."""
    out: dict[str, int] = {}
    for name, where in paths.items():
        candidates = (where,) if isinstance(where, str) else where
        value = cfg.first(*candidates)
        if isinstance(value, int):
            out[name] = value
    return out


def as_int(value: Any) -> int:
    """A config size that may be given as an int or an [h, w] pair (the first is used)."""
    if isinstance(value, list | tuple):
        return int(value[0])
    return int(value)


def dynamic_tokens(factor: int, min_pixels: int, max_pixels: int, rule: str) -> ImageTokens:
    """Token counts for a Qwen-style resize to multiples of `factor` within a pixel budget."""
    per_token = factor * factor
    return ImageTokens(
        minimum=max(1, math.ceil(min_pixels / per_token)),
        maximum=max(1, max_pixels // per_token),
        rule=rule,
    )


# OpenAI CLIP normalisation, the default of many HF image processors.
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# PIL resample codes in preprocessor configs -> ort-extensions Resize interpolation.
RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "LINEAR", 3: "CUBIC"}


def processor_op(name: str, kind: str, attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One step of an ort-extensions processor pipeline."""
    op: dict[str, Any] = {"name": name, "type": kind}
    if attrs:
        op["attrs"] = attrs
    return {"operation": op}


def rescale_and_normalize(
    pre: Cfg, mean: list[float], std: list[float], *, qwen: bool = False
) -> list[dict[str, Any]]:
    """Rescale and Normalize steps with the checkpoint's values (defaults as given).

    A step the processor switches off (`do_rescale` / `do_normalize` false, as Gemma 3n's
    `do_normalize`) is left out, as transformers' processors skip it.
    """
    normalize: dict[str, Any] = {
        "mean": list(pre.get("image_mean", mean)),
        "std": list(pre.get("image_std", std)),
    }
    if qwen:
        normalize["qwen2_5_vl"] = 1
    steps = []
    if pre.get("do_rescale") is not False:
        steps.append(
            processor_op(
                "rescale", "Rescale", {"rescale_factor": float(pre.get("rescale_factor", 1 / 255))}
            )
        )
    if pre.get("do_normalize") is not False:
        steps.append(processor_op("normalize", "Normalize", normalize))
    return steps


def square_processor(name: str, size: int, pre: Cfg, resample: int) -> dict[str, Any]:
    """A fixed square resize, the processor's rescale and normalisation, channels first.

    The SigLIP-style chain of Gemma 3, Gemma 3n and PaliGemma: DecodeImage (which already
    yields RGB: a ConvertRGB after it would swap red and blue), Resize to size × size with
    the processor's filter (`resample`, PIL's code, when it names none), then
    `rescale_and_normalize` with SigLIP's 0.5 mean and deviation as defaults.
    """
    code = int(pre.get("resample", resample))
    return {
        "processor": {
            "name": name,
            "transforms": [
                processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
                processor_op(
                    "resize",
                    "Resize",
                    {
                        "interpolation": RESAMPLE.get(code, RESAMPLE[resample]),
                        "width": size,
                        "height": size,
                        "keep_aspect_ratio": 0,
                    },
                ),
                *rescale_and_normalize(pre, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
                processor_op("to_channel_first", "Permute3D", {"dims": [2, 0, 1]}),
            ],
        }
    }


def image_sizes_pipeline(
    name: str,
    *,
    min_pixels: int,
    max_pixels: int,
    patch: int,
    merge: int,
    interpolation: str,
    normalize: list[dict[str, Any]],
) -> dict[str, Any]:
    """A processor pipeline ending in CHW pixels plus their sizes.

    It resizes Qwen-style within a pixel budget; the Pixtral and LFM2-VL processors of
    ORT GenAI require the Permute3D + PixtralImageSizes end. DecodeImage already yields
    RGB: a ConvertRGB after it would swap red and blue.
    """
    return {
        "processor": {
            "name": name,
            "transforms": [
                processor_op("decode_image", "DecodeImage", {"color_space": "RGB"}),
                processor_op(
                    "resize",
                    "Resize",
                    {
                        "smart_resize": 1,
                        "min_pixels": min_pixels,
                        "max_pixels": max_pixels,
                        "patch_size": patch,
                        "merge_size": merge,
                        "interpolation": interpolation,
                    },
                ),
                *normalize,
                processor_op("to_chw", "Permute3D", {"dims": [2, 0, 1]}),
                processor_op("image_sizes", "PixtralImageSizes"),
            ],
        }
    }
