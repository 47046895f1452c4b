"""The values a chat session takes and gives: options, turn results, what a package takes.

Nothing heavy is imported here: the GUI and the CLI build these from the worker's JSON
(`from_dict`) in their own processes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from mmforge.backend import typed
from mmforge.backend.chat.conversations import Conversation
from mmforge.backend.errors import MmforgeError
from mmforge.backend.library import read_manifest
from mmforge.backend.runtime_types import ONE_CLIP

STOP_EOS = "eos"
STOP_LENGTH = "length"
STOP_STOPPED = "stopped"
# What a turn does when the conversation outgrows the model's context.
CONTEXT_DROP = "drop"  # the oldest turns leave the model's view (the system prompt stays)
CONTEXT_STOP = "stop"  # the turn is refused; a new conversation or a shorter message helps
# A new conversation ("Continued: <title>") takes the message, opening with the last turns
# that fit, or with a summary the model writes of the old one.
CONTEXT_CARRY = "carry"
CONTEXT_SUMMARY = "summary"
CONTEXT_FULL = (CONTEXT_DROP, CONTEXT_STOP, CONTEXT_CARRY, CONTEXT_SUMMARY)


# ONNX Runtime GenAI divides a repeated word's positive logit by the penalty (multiplies a
# negative one): past 10 nothing said before is ever said again.
MAX_REPETITION_PENALTY = 10.0
# ONNX Runtime GenAI 0.18 takes `random_seed` as a C++ int: a larger seed fails inside
# the runtime ("Unable to cast Python instance of type <class 'int'> to C++ type").
MAX_SEED = 2**31 - 1
# What ONNX Runtime GenAI 0.18 constrains an answer to (`GeneratorParams.set_guidance`,
# llguidance): a JSON schema, a regular expression or a Lark grammar.
GUIDANCE_TYPES = ("json_schema", "regex", "lark_grammar")


@dataclass(frozen=True)
class GenerationOptions:
    """How to pick tokens. Greedy unless `do_sample` is set.

    Attributes:
        max_new_tokens: Answer length limit.
        do_sample: Sample instead of taking the most likely token.
        temperature: Sampling temperature.
        top_p: Nucleus sampling mass.
        top_k: Keep the k most likely tokens before sampling.
        seed: Random seed for sampling, 0 to `MAX_SEED` (None: the runtime picks one).
        repetition_penalty: Above 1, words already in the conversation become less likely
            (greedy or sampled); None keeps the package's own (its generation_config's).
        context_full: When the conversation outgrows the context: "drop" the oldest
            turns from the model's view (they stay saved), "stop" with an error, or go on
            in a new conversation that opens with the last turns that fit ("carry") or
            with a summary the model writes of the old one ("summary").
        guidance_type: What the answer is constrained to, one of `GUIDANCE_TYPES` ("":
            nothing); the runtime masks every token that would leave it.
        guidance_data: The schema, expression or grammar of `guidance_type`.
        tools: The tools the chat template is given, as JSON text of a list of
            {"type": "function", "function": {name, description, parameters}} ("": none).
    """

    max_new_tokens: int = 256
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 50
    seed: int | None = None
    repetition_penalty: float | None = None
    context_full: str = CONTEXT_DROP
    guidance_type: str = ""
    guidance_data: str = ""
    tools: str = ""

    def __post_init__(self) -> None:
        if self.guidance_type not in ("", *GUIDANCE_TYPES) or (
            bool(self.guidance_type) != bool(self.guidance_data)
        ):
            raise MmforgeError(
                f"Unknown guidance {self.guidance_type!r} or guidance without its data",
                f"Use {', '.join(GUIDANCE_TYPES)} with its schema, expression or grammar",
            )
        if self.max_new_tokens < 1:
            raise MmforgeError("max_new_tokens must be at least 1", "Pass a positive number")
        if self.context_full not in CONTEXT_FULL:
            raise MmforgeError(
                f"Unknown context_full {self.context_full!r}", f"Use {' or '.join(CONTEXT_FULL)}"
            )
        penalty = self.repetition_penalty
        if penalty is not None and not 0 < penalty <= MAX_REPETITION_PENALTY:
            raise MmforgeError(
                f"repetition_penalty {penalty} is out of range",
                f"Use a number above 0 and at most {MAX_REPETITION_PENALTY} (1 changes nothing)",
            )
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise MmforgeError(
                f"The seed must be a whole number from 0 to {MAX_SEED} (got {self.seed})",
                "Pick a smaller seed, or none for a random one",
            )
        valid = self.temperature > 0 and 0 < self.top_p <= 1 and self.top_k >= 1
        if self.do_sample and not valid:
            raise MmforgeError(
                "Sampling needs temperature > 0, 0 < top_p ≤ 1 and top_k ≥ 1",
                "Fix the sampling options",
            )

    @property
    def guided(self) -> bool:
        """Whether the answer is constrained (`guidance_type`)."""
        return bool(self.guidance_type)

    def within_vocabulary(self, vocab_size: int | None) -> GenerationOptions:
        """These options with `top_k` at most the vocabulary, which means the same.

        ONNX Runtime GenAI 0.18 refuses a top_k above the vocabulary ("top_k (…) must be
        less than or equal to vocab_size"); keeping every token is what it asks for.
        """
        if vocab_size is None or vocab_size < 1 or self.top_k <= vocab_size:
            return self
        return replace(self, top_k=vocab_size)

    def search_options(self, max_length: int) -> dict[str, Any]:
        """The runtime's search options for a generator."""
        options: dict[str, Any] = {"max_length": max_length}
        if self.repetition_penalty is not None:
            options["repetition_penalty"] = float(self.repetition_penalty)
        if not self.do_sample:
            return {**options, "do_sample": False, "top_k": 1}
        options.update(
            do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k
        )
        if self.seed is not None:
            options["random_seed"] = self.seed
        return options

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> GenerationOptions:
        """From a JSON object; unknown keys are refused."""
        data = dict(data or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise MmforgeError(
                f"Unknown generation options: {', '.join(sorted(unknown))}",
                f"Use {', '.join(sorted(known))}",
            )
        return cls(**data)


@dataclass(frozen=True)
class TurnStats:
    """Figures for one answer.

    Attributes:
        prompt_tokens: Tokens in the context when the answer began.
        prefill_tokens: Tokens this turn had to process before the first new one.
        new_tokens: Tokens in the answer.
        time_to_first_token_s: From the request to the first answer token (includes
            preprocessing, encoders and prefill).
        decode_tokens_per_s: Answer tokens after the first, per second.
        total_s: From the request to the end of the answer.
        prefill: "continued" (appended to the live KV cache) or "fresh".
    """

    prompt_tokens: int
    prefill_tokens: int
    new_tokens: int
    time_to_first_token_s: float
    decode_tokens_per_s: float
    total_s: float
    prefill: str


@dataclass(frozen=True)
class TurnResult:
    """One finished (or stopped) answer."""

    text: str
    token_ids: list[int]
    stop_reason: str
    stats: TurnStats

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**asdict(self), "stats": asdict(self.stats)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnResult:
        """The turn from its JSON form (`to_dict`)."""
        return typed.from_dict(cls, data)


@dataclass(frozen=True)
class SessionInfo:
    """What a chat worker reports once the package is loaded (its `ready` event).

    Attributes:
        package: The package folder.
        pipeline_type: Its ONNX Runtime GenAI model type.
        vision: Whether it takes images.
        audio: Whether it takes audio.
        ep: The execution provider it runs on.
        load_s: Seconds the load took.
        load_memory_bytes: Resident memory the load added.
        conversation: The conversation the session holds.
    """

    package: str
    pipeline_type: str
    vision: bool
    audio: bool
    ep: str
    load_s: float
    load_memory_bytes: int
    conversation: Conversation

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**asdict(self), "conversation": self.conversation.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionInfo:
        """The information from its JSON form (`to_dict`)."""
        return typed.from_dict(cls, data)


@dataclass(frozen=True)
class PackageInfo:
    """What a package can take, read without loading the runtime.

    From genai_config.json, for Phi-4's image limit from the manifest, and for the
    clips a conversation holds from the runtime's pipeline (runtime_types.ONE_CLIP).
    """

    folder: Path
    pipeline_type: str
    vision: bool
    audio: bool
    context_length: int
    eos_token_ids: tuple[int, ...]
    special_ids: tuple[int, ...]
    max_images: int | None
    can_rewind: bool = True
    one_clip: bool = False
    vocab_size: int | None = None

    @classmethod
    def read(cls, folder: Path) -> PackageInfo:
        """Read a package folder; a folder that is not one gets a clear error."""
        from mmforge.backend.runtime import read_genai_config

        model = read_genai_config(folder)["model"]
        eos = model.get("eos_token_id", [])
        eos_ids = tuple(int(t) for t in (eos if isinstance(eos, list) else [eos]))
        specials = [model.get(k) for k in ("image_token_id", "video_token_id", "audio_token_id")]
        pipeline = str(model.get("type", ""))
        return cls(
            folder=folder,
            pipeline_type=pipeline,
            vision="vision" in model,
            audio="filename" in model.get("speech", {}),
            context_length=int(model.get("context_length", 4096)),
            eos_token_ids=eos_ids,
            special_ids=tuple(int(t) for t in specials if isinstance(t, int)),
            max_images=_max_images(folder, pipeline),
            one_clip=pipeline in ONE_CLIP,
            # A short-convolution state (LFM2) cannot be rewound ("LFM2 does not support
            # RewindTo"): it would need every earlier token replayed.
            can_rewind="past_conv_names" not in model.get("decoder", {}).get("inputs", {}),
            # read_genai_config checked it: a positive whole number where present
            vocab_size=int(model["vocab_size"]) if "vocab_size" in model else None,
        )


def _max_images(folder: Path, pipeline: str) -> int | None:
    """How many images a package takes per conversation (None: no limit known).

    The manifest's `max_images` field; a package written before it has none, and its
    family reads the limit from the manifest's notes.
    """
    from mmforge.backend.families import by_pipeline

    data = read_manifest(folder)
    if not data:  # none, or unreadable: no limit known
        return None
    if "max_images" in data:
        value = data["max_images"]
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    family = by_pipeline(pipeline)
    notes = data.get("notes", [])
    if family is None or not isinstance(notes, list):
        return None
    return family.profile.old_package_max_images([str(n) for n in notes])


def available_eps() -> dict[str, str | None]:
    """Each execution provider and why it cannot be used (None when it can)."""
    import onnxruntime_genai as og

    cuda: str | None = None
    if not og.is_cuda_available():
        cuda = (
            "The installed onnxruntime-genai has no CUDA support; install "
            "onnxruntime-genai-cuda, NVIDIA's CUDA 13 runtime and cuDNN 9 on a machine with an "
            "NVIDIA GPU"
        )
    elif (devices := cuda_devices()) is not None:
        cuda = devices
    return {"cpu": None, "cuda": cuda}


def cuda_devices() -> str | None:
    """Why no NVIDIA GPU can be used here, or None when the driver reports one.

    onnxruntime-genai-cuda says CUDA is available wherever its CUDA library loads, GPU or
    not; the driver (libcuda) is asked how many devices it sees.
    """
    import ctypes
    import sys

    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        driver = ctypes.CDLL(name)
    except OSError:
        return "No NVIDIA driver was found on this machine (CUDA needs an NVIDIA GPU)"
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "The NVIDIA driver reports no usable GPU (check nvidia-smi)"
    return None if count.value > 0 else "The NVIDIA driver reports no GPU"
