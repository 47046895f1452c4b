"""Packaging for ONNX Runtime GenAI: everything a package holds is written here.

The ONNX files, genai_config.json, the image and audio processor JSON, the tokenizer files
and chat template, and the weight report. The common layout lives here; what differs per
family (token ids the runtime needs, vision fields, the processor pipelines) comes from
the family's `PackageSpec`, built in the family's folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmforge.backend.errors import LayoutError, MmforgeError
from mmforge.backend.families import Cfg, Family, PackageSpec
from mmforge.backend.jobs import JobContext
from mmforge.backend.source import read_json
from mmforge.backend.spm_form import DECODING_FILE, hf_strips_answer_space, spm_runtime_form
from mmforge.backend.templates import template_of

if TYPE_CHECKING:
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.convert.weights import WeightReport

log = logging.getLogger(__name__)

# Component name (seeds' contract) -> file name in the package.
ONNX_FILES = {
    "vision_encoder": "vision.onnx",
    "audio_encoder": "speech.onnx",
    "embedding": "embedding.onnx",
    "decoder": "decoder.onnx",
}
PROCESSOR_FILE = "processor_config.json"
AUDIO_PROCESSOR_FILE = "audio_processor_config.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
# tokenizer_config classes that ORT GenAI 0.18 reads with the wrong algorithm for a
# byte-level BPE tokenizer.json (it then produces different ids from HF).
_BAD_BPE_CLASSES = {"LlamaTokenizer", "LlamaTokenizerFast", "CLIPTokenizer", "CLIPTokenizerFast"}


WRITE_WORKERS = max(2, min(4, os.cpu_count() or 1))
WRITE_BUDGET_BYTES = 512 * 2**20  # tensors held at once while writing (one may be larger)


@dataclass(frozen=True)
class GraphIO:
    """The input and output names of a component graph (all packaging needs of it)."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, model: Any) -> GraphIO:
        """Read the names off an onnx_ir model."""
        return cls(
            tuple(v.name for v in model.graph.inputs), tuple(v.name for v in model.graph.outputs)
        )


def save_component(model: Any, component: str, out: Path, ctx: JobContext) -> dict[str, int]:
    """Write one component as `<name>.onnx` + `<name>.onnx.data`; returns the file sizes."""
    import onnx_ir as ir

    filename = ONNX_FILES[component]
    total = len(model.graph.initializers)

    def progress(tensor: Any, info: Any) -> None:
        ctx.report("write", info.index + 1, total, unit="tensors", message=filename)

    # Tensors are read (and transposed) and written on a thread per core, within a byte
    # budget: reading, transposing and writing release the GIL, so they overlap.
    ir.save(
        model,
        out / filename,
        external_data=filename + ".data",
        callback=progress,
        max_workers=WRITE_WORKERS,
        max_in_flight_bytes=WRITE_BUDGET_BYTES,
    )
    return {
        path.name: path.stat().st_size
        for path in (out / filename, out / (filename + ".data"))
        if path.exists()
    }


def write_package(
    out: Path,
    checkpoint: Checkpoint,
    graphs: dict[str, GraphIO],
    report: WeightReport,
    ep: str = "cpu",
) -> dict[str, Any]:
    """Write everything beside the ONNX files; returns the genai_config written.

    genai_config.json, the image (and audio) processor JSON, the tokenizer files with the
    chat template, and the weight report.
    """
    spec = _spec(checkpoint.family)
    config = genai_config(checkpoint, graphs, ep)
    write_json(out / "genai_config.json", config)
    write_json(out / PROCESSOR_FILE, spec.processor_json(checkpoint.cfg, checkpoint.preprocessor))
    if "audio_encoder" in graphs and spec.audio_processor_json is not None:
        audio = spec.audio_processor_json(checkpoint.cfg, checkpoint.audio_preprocessor)
        write_json(out / AUDIO_PROCESSOR_FILE, audio)
    write_tokenizer(checkpoint.folder, out, spec.chat_template)
    if spec.adapt_tokenizer is not None:
        tokenizer = read_json(out / "tokenizer.json", "tokenizer")
        tok_config = read_json(out / "tokenizer_config.json", "tokenizer")
        spec.adapt_tokenizer(tokenizer, tok_config, checkpoint.cfg, checkpoint.folder)
        write_json(out / "tokenizer.json", tokenizer)
        write_json(out / "tokenizer_config.json", tok_config)
    write_json(out / "weights_report.json", report.to_dict())
    return config


def _spec(family: Family) -> PackageSpec:
    if family.package is None or family.pipeline_type is None:
        raise MmforgeError(
            f"Packaging {family.name} for ONNX Runtime GenAI is not supported yet",
            "See `mmforge inspect` for the families that convert",
        )
    return family.package


def genai_config(
    checkpoint: Checkpoint, graphs: dict[str, GraphIO], ep: str = "cpu"
) -> dict[str, Any]:
    """The genai_config.json of a package.

    Raises:
        MmforgeError: The family cannot be packaged, or a field the runtime needs is absent.
    """
    family, cfg, generation = checkpoint.family, checkpoint.cfg, checkpoint.generation
    spec = _spec(family)
    text = cfg.text
    eos = generation.get("eos_token_id", text.get("eos_token_id"))
    eos_list = [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None]
    if not eos_list:
        raise MmforgeError(
            "Neither generation_config.json nor config.json names an eos_token_id",
            "Add eos_token_id to generation_config.json",
        )
    bos = generation.get("bos_token_id", text.get("bos_token_id"))
    pad = generation.get("pad_token_id", text.get("pad_token_id"))
    context = int(text.get("max_position_embeddings", 4096))
    try:
        model_fields = spec.model_fields(cfg)
    except ValueError as e:
        raise MmforgeError(str(e), "The checkpoint's config.json is incomplete") from e
    model: dict[str, Any] = {
        "type": family.pipeline_type,
        "vocab_size": int(text.get("vocab_size")),
        "context_length": context,
        "eos_token_id": eos_list,
        "pad_token_id": int(pad if pad is not None else eos_list[0]),
        **model_fields,
    }
    if bos is not None:
        model["bos_token_id"] = int(bos)
    model["decoder"] = _decoder_section(spec, cfg, graphs["decoder"])
    model["embedding"] = {
        "filename": ONNX_FILES["embedding"],
        "inputs": _pick(
            graphs["embedding"].inputs, ("input_ids", "image_features", "audio_features")
        ),
        "outputs": _pick(graphs["embedding"].outputs, ("inputs_embeds", "per_layer_inputs")),
    }
    if "audio_encoder" in graphs:
        model["speech"] = _speech_section(spec, graphs["audio_encoder"])
    elif family.pipeline_type == "gemma4":
        # ORT GenAI 0.18 defaults speech.config_filename to audio_processor_config.json
        # and refuses a gemma4 config that names no speech model beside it (model.cpp,
        # CreateModel): a package without audio (Gemma 4 26B-A4B, 31B) clears it.
        model["speech"] = {"config_filename": ""}
    if "vision_encoder" in graphs:
        model["vision"] = _vision_section(spec, checkpoint, graphs["vision_encoder"])
    if ep != "cpu":
        # The package asks for its target; the other sessions inherit the decoder's
        # options. (Validation on a machine without CUDA clears them via og.Config.)
        model["decoder"]["session_options"] = {"provider_options": [{ep: {}}]}
    return {"model": model, "search": _search(generation, context)}


def _decoder_section(spec: PackageSpec, cfg: Cfg, decoder: GraphIO) -> dict[str, Any]:
    text = cfg.text
    heads = int(text.get("num_attention_heads"))
    hidden = int(text.get("hidden_size"))
    return {
        "filename": ONNX_FILES["decoder"],
        "head_size": int(text.get("head_dim") or hidden // heads),
        "hidden_size": hidden * spec.hidden_multiple(cfg),
        "num_attention_heads": heads,
        "num_hidden_layers": int(text.get("num_hidden_layers")),
        "num_key_value_heads": int(text.get("num_key_value_heads", heads)),
        **_decoder_io(decoder),
        **spec.decoder_fields(cfg),
    }


def _speech_section(spec: PackageSpec, audio: GraphIO) -> dict[str, Any]:
    absent = set(spec.speech_inputs.values()) - set(audio.inputs)
    if absent or not spec.speech_inputs:
        raise LayoutError(f"The audio graph lacks the inputs {sorted(absent)}")
    return {
        "filename": ONNX_FILES["audio_encoder"],
        "config_filename": AUDIO_PROCESSOR_FILE,
        "inputs": dict(spec.speech_inputs),
        "outputs": {"audio_features": audio.outputs[0]},
    }


def _vision_section(spec: PackageSpec, checkpoint: Checkpoint, vision: GraphIO) -> dict[str, Any]:
    absent = set(spec.vision_inputs.values()) - set(vision.inputs)
    if absent:
        raise LayoutError(f"The vision graph lacks the inputs {sorted(absent)}")
    return {
        "filename": ONNX_FILES["vision_encoder"],
        "config_filename": PROCESSOR_FILE,
        **spec.vision_fields(checkpoint.cfg, checkpoint.preprocessor),
        "inputs": dict(spec.vision_inputs),
        "outputs": {"image_features": vision.outputs[0]},
    }


def _decoder_io(decoder: GraphIO) -> dict[str, Any]:
    names, outs = decoder.inputs, decoder.outputs
    for needed in ("inputs_embeds", "attention_mask"):
        if needed not in names:
            raise LayoutError(f"The decoder graph has no {needed} input")
    inputs: dict[str, str] = {
        n: n
        for n in (
            "inputs_embeds",
            "attention_mask",
            "position_ids",
            "input_ids",
            "per_layer_inputs",
        )
        if n in names
    }
    inputs["past_key_names"] = "past_key_values.%d.key"
    inputs["past_value_names"] = "past_key_values.%d.value"
    # Hybrid decoders (LFM2) hold a KV cache only on their attention layers.
    if not _has_pattern(names, "past_key_values.{}.key") or not _has_pattern(
        outs, "present.{}.key"
    ):
        raise LayoutError("The decoder graph has no KV cache inputs/outputs in the expected names")
    outputs = {
        "logits": "logits",
        "present_key_names": "present.%d.key",
        "present_value_names": "present.%d.value",
    }
    if _has_pattern(names, "past.{}.conv"):  # LFM2's short-convolution state
        inputs["past_conv_names"] = "past.%d.conv"
        outputs["present_conv_names"] = "present.%d.conv"
    return {"inputs": inputs, "outputs": outputs}


def _has_pattern(names: tuple[str, ...], pattern: str) -> bool:
    """Whether some layer index fills `pattern` ("past.{}.conv") among `names`."""
    head, tail = pattern.split("{}")
    return any(
        n.startswith(head) and n.endswith(tail) and n[len(head) : len(n) - len(tail)].isdigit()
        for n in names
    )


def _pick(names: tuple[str, ...], wanted: tuple[str, ...]) -> dict[str, str]:
    return {n: n for n in wanted if n in names}


def _search(generation: dict[str, Any], context: int) -> dict[str, Any]:
    """Search defaults from generation_config.json (greedy when it says nothing)."""
    return {
        "do_sample": bool(generation.get("do_sample", False)),
        "temperature": float(generation.get("temperature", 1.0)),
        "top_k": int(generation.get("top_k", 50 if generation.get("do_sample") else 1)),
        "top_p": float(generation.get("top_p", 1.0)),
        "repetition_penalty": float(generation.get("repetition_penalty", 1.0)),
        "max_length": context,
        "min_length": 0,
        "num_beams": 1,
        "num_return_sequences": 1,
        "past_present_share_buffer": False,
        "early_stopping": True,
        "length_penalty": 1.0,
        "no_repeat_ngram_size": 0,
        "diversity_penalty": 0.0,
    }


def write_tokenizer(src: Path, out: Path, template: str | None = None) -> list[str]:
    """Copy the tokenizer files, in a form ORT GenAI tokenizes exactly like HF.

    - the chat template moves into tokenizer_config.json when it sits in a separate file;
      a family's own (`template`: `PackageSpec.chat_template`) takes its place;
    - a byte-level BPE declared as LlamaTokenizer/CLIPTokenizer is relabelled
      PreTrainedTokenizerFast (ORT GenAI 0.18 gives wrong ids for it otherwise);
    - a SentencePiece-style LlamaTokenizer gets the form the runtime reads as transformers
      does (`spm_runtime_form`).

    Raises:
        MmforgeError: There is no tokenizer.json or no chat template.
    """
    if not (src / "tokenizer.json").is_file():
        raise MmforgeError(
            f"{src} has no tokenizer.json",
            "ONNX Runtime GenAI needs the fast tokenizer file; download it with the model",
        )
    copied = []
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
            copied.append(name)
    config_path = out / "tokenizer_config.json"
    config = read_json(config_path, "tokenizer") if config_path.is_file() else {}
    written = config.get("chat_template")
    if written is not None and not isinstance(written, str | list):
        raise MmforgeError(
            f"{src / 'tokenizer_config.json'} gives a chat_template that is "
            f"{type(written).__name__}, not template text",
            "Download the model again, or fix the file",
        )
    found = (template, "the family's template") if template is not None else template_of(src)
    if found is None:
        raise MmforgeError(
            "The model has no chat template",
            "Chat needs one: add chat_template to tokenizer_config.json",
        )
    # The runtime reads one template as text: a list of named ones becomes its default,
    # and one from chat_template.jinja/.json moves in (the same pick verify checks).
    config["chat_template"] = found[0]
    tokenizer = read_json(out / "tokenizer.json", "tokenizer")
    if not isinstance(tokenizer.get("model"), dict):
        raise MmforgeError(
            f"{src / 'tokenizer.json'} holds no tokenizer model: it is not a Hugging Face "
            "fast tokenizer file",
            "Download the model again; ONNX Runtime GenAI needs the fast tokenizer file",
        )
    byte_level = "ByteLevel" in json.dumps(tokenizer.get("pre_tokenizer"))
    if byte_level and config.get("tokenizer_class") in _BAD_BPE_CLASSES:
        log.info("relabelling %s as PreTrainedTokenizerFast", config["tokenizer_class"])
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    scheme = spm_runtime_form(tokenizer, config, src)
    if scheme is not None:
        log.info("SentencePiece tokenizer (HF prepends: %s) in the form ORT GenAI reads", scheme)
        write_json(out / "tokenizer.json", tokenizer)
        if hf_strips_answer_space(src, tokenizer):
            write_json(out / DECODING_FILE, {"strip_leading_space": True})
            copied.append(DECODING_FILE)
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    if "tokenizer_config.json" not in copied:
        copied.append("tokenizer_config.json")
    return copied


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write a JSON file the way every package file is written."""
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
