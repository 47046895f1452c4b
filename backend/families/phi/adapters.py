"""Phi-4-multimodal's LoRA adapters: where a checkpoint keeps them, and the vision merge.

The released model is a mixture of LoRAs: its decoder runs with the **vision** adapter
for images (and text) and the **speech** adapter for audio. A checkpoint carries them in
one of two ways, both read here without running any of its code:
- transformers' native layout: PEFT folders `vision-lora/` and `speech-lora/`
  (`adapter_config.json` with `r` and `lora_alpha`, `adapter_model.safetensors` with
  `base_model.model.<module>.lora_A.weight` / `lora_B.weight`);
- the remote-code layout of the released main revision: inline, beside the base weight
  (`<module>.base_layer.weight`, `<module>.lora_A.vision.weight`, ...), with `r` and
  `lora_alpha` in config.json's `vision_lora` / `speech_lora`.

The package's decoder gets the vision adapter merged into its base weights, as ONNX
Runtime GenAI's own Phi-4-MM builder bakes it in: W + (alpha / r) · B·A. Merged, the
decoder costs nothing extra per token; a separate LoRA path would add two MatMuls to
each of the 4 projections of every layer.
"""

from __future__ import annotations

import functools
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._hooks import LimitRequest, PreparedWeights, WeightsRequest
from mmforge.backend.tensors import TensorRef, checkpoint_refs

if TYPE_CHECKING:
    from mmforge.backend.checkpoint import Checkpoint

# The decoder projections both adapters wrap, in every layer.
TARGETS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
ADAPTERS = ("vision", "speech")
_PEFT_NAME = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<ab>[AB])\.weight$")
_INLINE_NAME = re.compile(
    r"^(?P<module>.+)\.lora_(?P<ab>[AB])\.(?P<adapter>vision|speech)\.weight$"
)


@dataclass(frozen=True)
class Adapter:
    """One LoRA adapter of a checkpoint.

    Attributes:
        name: "vision" or "speech".
        rank: r.
        alpha: lora_alpha (the delta is scaled by alpha / r).
        pairs: Wrapped module ("model.layers.0.self_attn.qkv_proj") to the names of its
            A and B tensors.
        folder: The PEFT folder, for the native layout (None: inline in the checkpoint).
    """

    name: str
    rank: int
    alpha: float
    pairs: dict[str, tuple[str, str]]
    folder: Path | None = None

    @property
    def scale(self) -> float:
        """Alpha / r."""
        return self.alpha / self.rank


def find_adapters(
    folder: Path, config: dict[str, Any], names: list[str], *, inline_first: bool = False
) -> dict[str, Adapter]:
    """The vision and speech adapters a Phi-4-multimodal checkpoint carries.

    Args:
        folder: The checkpoint folder.
        config: config.json as parsed.
        names: The checkpoint's tensor names.
        inline_first: Take an inline adapter over its PEFT folder (the remote-code
            layout runs the inline one; the released repository has both).

    Raises:
        MmforgeError: An adapter folder or an inline adapter that is incomplete.
    """
    found: dict[str, Adapter] = {}
    inline: dict[str, dict[str, dict[str, str]]] = {}
    for tensor in names:
        match = _INLINE_NAME.match(tensor)
        if match:
            pairs = inline.setdefault(match["adapter"], {})
            pairs.setdefault(match["module"], {})[match["ab"]] = tensor
    for name in ADAPTERS:
        peft = folder / f"{name}-lora"
        if (peft / "adapter_config.json").is_file() and not (inline_first and name in inline):
            found[name] = _peft_adapter(name, peft)
    for name, pairs in inline.items():
        if name in found:
            continue  # the PEFT folder is what transformers loads
        settings = config.get(f"{name}_lora") or {}
        if "r" not in settings or "lora_alpha" not in settings:
            raise MmforgeError(
                f"The checkpoint holds {name} LoRA tensors but config.json has no "
                f"{name}_lora with r and lora_alpha",
                "The checkpoint is incomplete; download it again",
            )
        found[name] = Adapter(
            name, int(settings["r"]), float(settings["lora_alpha"]), _complete(name, pairs)
        )
    return found


def _peft_adapter(name: str, folder: Path) -> Adapter:
    from mmforge.backend.source import read_json
    from mmforge.backend.tensors import safetensors_headers

    settings = read_json(folder / "adapter_config.json", "adapter")
    headers = safetensors_headers(folder) or {}
    pairs: dict[str, dict[str, str]] = {}
    for header in headers.values():
        for tensor in header:
            match = _PEFT_NAME.match(tensor)
            if match:
                pairs.setdefault(match["module"], {})[match["ab"]] = tensor
    if not pairs or "r" not in settings or "lora_alpha" not in settings:
        raise MmforgeError(
            f"{folder.name}/ is not a LoRA adapter mmforge can read (it needs r, lora_alpha "
            "and lora_A/lora_B tensors)",
            "Download the checkpoint again",
        )
    return Adapter(
        name, int(settings["r"]), float(settings["lora_alpha"]), _complete(name, pairs), folder
    )


def _complete(name: str, pairs: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise MmforgeError(
                f"The {name} LoRA has lora_{'B' if 'A' in ab else 'A'} missing for {module}",
                "The checkpoint is incomplete; download it again",
            )
        if not module.endswith(TARGETS):
            raise MmforgeError(
                f"The {name} LoRA wraps {module}, which is not one of the projections "
                "Phi-4-multimodal's adapters wrap",
                "This adapter layout is not supported",
            )
        out[module] = (ab["A"], ab["B"])
    return out


def merge_vision_lora(request: WeightsRequest) -> PreparedWeights:
    """The checkpoint's tensors with the vision adapter merged into its base weights.

    The merged base keeps its name (`<module>.weight`, or `<module>.base_layer.weight` in
    the remote-code layout) and becomes W + (alpha / r) · B·A, computed when it is read.
    The adapters' own tensors leave the list: the vision one is merged, and the package
    has no speech adapter (the manifest says so).

    Returns:
        The tensors, and a line for the manifest (empty when there is no vision adapter).
    """
    checkpoint = request.checkpoint
    refs = request.tensors
    adapters = find_adapters(
        checkpoint.folder, checkpoint.written, list(refs), inline_first=checkpoint.remote_layout
    )
    vision = adapters.get("vision")
    if vision is None:
        return PreparedWeights(refs)
    sources = _adapter_refs(vision, refs)
    out = dict(refs)
    for module, (a_name, b_name) in vision.pairs.items():
        base_name = next(
            (n for n in (f"{module}.weight", f"{module}.base_layer.weight") if n in refs), None
        )
        if base_name is None:
            raise MmforgeError(
                f"The vision LoRA wraps {module}, which the checkpoint does not have",
                "The adapter belongs to another model: download the checkpoint again",
            )
        base, a, b = refs[base_name], sources[a_name], sources[b_name]
        if (b.shape[0], a.shape[1]) != tuple(base.shape) or a.shape[0] != b.shape[1]:
            raise MmforgeError(
                f"The vision LoRA for {module} does not fit its weight "
                f"(A {list(a.shape)}, B {list(b.shape)}, weight {list(base.shape)})",
                "The adapter belongs to another model: download the checkpoint again",
            )
        out[base_name] = TensorRef(
            base_name,
            tuple(base.shape),
            "F32",
            base.file,
            loader=functools.partial(_merged, base, a, b, vision.scale),
        )
        out.pop(a_name, None)
        out.pop(b_name, None)
    line = (
        f"vision LoRA ({_where(vision)}, r={vision.rank}, alpha={vision.alpha:g}) merged "
        f"into {len(vision.pairs)} decoder weights"
    )
    out = {k: v for k, v in out.items() if not _INLINE_NAME.match(k)}  # both, inline
    speech = adapters.get("speech")
    if speech is not None:
        line += (
            f"; the speech LoRA ({_where(speech)}, r={speech.rank}) is not in the package: "
            "the decoder runs with the vision adapter for every turn"
        )
    return PreparedWeights(out, line)


def _where(adapter: Adapter) -> str:
    return f"{adapter.folder.name}/" if adapter.folder else "inline"


def _adapter_refs(adapter: Adapter, refs: dict[str, Any]) -> dict[str, Any]:
    """The adapter's tensors as references (from its PEFT folder, or the checkpoint's)."""
    if adapter.folder is None:
        return refs
    return checkpoint_refs(adapter.folder)


def _merged(base: Any, a: Any, b: Any, scale: float) -> Any:
    import torch

    with torch.no_grad():
        return base.read().float() + scale * (b.read().float() @ a.read().float())


def peft_config(adapter: Adapter) -> dict[str, Any]:
    """The PEFT adapter_config.json of an adapter (for an inline one, written by verify)."""
    # Exactly the wrapped modules: the audio encoder has modules of the same short names.
    modules = "^(" + "|".join(re.escape(m) for m in sorted(adapter.pairs)) + ")$"
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": adapter.rank,
        "lora_alpha": adapter.alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": modules,
        "inference_mode": True,
    }


def write_peft_folder(adapter: Adapter, refs: dict[str, Any], folder: Path) -> Path:
    """An inline adapter as a PEFT folder transformers' load_adapter reads."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Any] = {}
    for module, (a_name, b_name) in adapter.pairs.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = refs[a_name].read().contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = refs[b_name].read().contiguous()
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps(peft_config(adapter), indent=2))
    return folder


def activate_adapters(model: Any, checkpoint: Checkpoint) -> None:
    """Load the checkpoint's LoRAs into the HF model with PEFT, each active as released.

    The released model (its remote code, and transformers' `set_adapter`) runs the
    **speech** adapter for a prompt with audio and no image, the **vision** adapter for
    one with an image (or both), and **none** for a prompt without either (the remote
    code's `Phi4MMForCausalLM.forward` calls `unset_lora_adapter()` for
    `InputMode.LANGUAGE`). A hook on the model picks the adapter per call from its
    inputs; a decode step keeps the adapter of the prompt it continues. An inline adapter
    is first written out as a PEFT folder.
    Verify then compares the package with the model as released, not with its base.
    """
    import tempfile

    names = [t.name for t in checkpoint.tensors or ()]
    found = find_adapters(
        checkpoint.folder, checkpoint.written, names, inline_first=checkpoint.remote_layout
    )
    if "vision" not in found:
        return
    try:
        from peft import PeftModel
    except ImportError as e:
        raise MmforgeError(
            "Comparing with this Phi-4-multimodal checkpoint needs the peft package (its "
            "LoRA adapters)",
            "Install peft (pip install peft)",
        ) from e
    with tempfile.TemporaryDirectory(prefix="mmforge-lora-") as scratch:
        folders = {}
        for name, adapter in found.items():
            folder = adapter.folder
            if folder is None:
                refs = checkpoint_refs(checkpoint.folder)
                folder = write_peft_folder(adapter, refs, Path(scratch) / name)
            folders[name] = folder
        # PEFT wraps the model's own modules in place: `model` runs with the adapter.
        # (transformers' load_adapter would do the same, but wants PEFT >= 0.22.)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # PEFT asks a renamed attribute
            peft = PeftModel.from_pretrained(
                model, str(folders["vision"]), adapter_name="vision", is_trainable=False
            )
            if "speech" in folders:
                peft.load_adapter(str(folders["speech"]), adapter_name="speech")
    peft.set_adapter("vision")
    model.register_forward_pre_hook(_adapter_for_call(peft, "speech" in folders), with_kwargs=True)


def _adapter_for_call(peft: Any, has_speech: bool) -> Any:
    """A forward pre-hook that makes the adapter the call's inputs select active."""
    lora = peft.base_model  # PEFT's LoraModel: adapter layers on or off

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        image = kwargs.get("image_pixel_values")
        audio = kwargs.get("audio_input_features")
        if image is not None or audio is not None:
            lora.enable_adapter_layers()
            peft.set_adapter("speech" if image is None and has_speech else "vision")
        elif not _continues(kwargs.get("past_key_values")):
            lora.disable_adapter_layers()  # a text-only prompt: the base model

    return hook


def _continues(cache: Any) -> bool:
    """Whether a call extends a cached prompt (a decode step)."""
    if cache is None:
        return False
    try:
        return int(cache.get_seq_length()) > 0
    except (AttributeError, TypeError):
        return True


def adapter_limit(request: LimitRequest) -> str | None:
    """Verify's named limit for a prompt the released model runs without the vision LoRA.

    An audio-only prompt runs the speech LoRA, a text-only one no LoRA at all; the
    package's decoder always has the vision LoRA merged in.
    """
    checkpoint = request.checkpoint
    n_images = request.images
    n_audios = request.clips
    if n_images:
        return None
    names = [t.name for t in checkpoint.tensors or ()]
    adapters = find_adapters(
        checkpoint.folder, checkpoint.written, names, inline_first=checkpoint.remote_layout
    )
    if n_audios and "speech" in adapters:
        runs = "for a prompt with audio and no image the released model runs its speech LoRA"
    elif not n_audios and "vision" in adapters:
        runs = "for a prompt without image or audio the released model runs no LoRA"
    else:
        return None
    return (
        f"Known limit: {runs}, while the package's decoder has the vision LoRA merged in, "
        "and ONNX Runtime GenAI 0.18 cannot switch adapters in its multimodal pipeline "
        "(benchmarks/phi4_speech_adapter.py); the difference below is that of the adapters"
    )
