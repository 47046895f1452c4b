"""The model types ONNX Runtime GenAI 0.18 runs, as measured against the installed wheel.

Read from the library and its source (`src/models/model_type.h`, the processor table in
`model.cpp`), and held true by `tests/backend/test_runtime_types.py`, which writes a
minimal genai_config.json for every name here and asks the installed runtime whether it
knows the type: a runtime upgrade that adds or drops one fails that test.
"""

from __future__ import annotations

# Multimodal chat pipelines: images, audio or video in, text out.
MULTIMODAL_CHAT = (
    "fara",
    "gemma3",
    "gemma4",
    "gemma4_unified",
    "lfm2_audio",
    "lfm2_vl",
    "mistral3",
    "phi3v",
    "phi4mm",
    "qwen2_5_vl",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_vl",
    "videochat_flash_qwen",
)

# Multimodal types whose processor takes one audio clip per prompt: a second makes
# Gemma4MultiModalProcessor::Process (gemma4_multimodal_processor.cpp) refuse the prompt
# ("supports only 1 audio clip per prompt"), measured on the 0.18 wheel for both types.
# A conversation re-sends its history each time, so it holds one clip.
ONE_CLIP = ("gemma4", "gemma4_unified")

# Speech-to-text pipelines: audio in, a transcript out; not chat models.
SPEECH_TO_TEXT = ("nemotron_speech", "parakeet_tdt", "whisper")

# Names people expect that the 0.18 wheel answers "Unsupported model_type" for
# (moonshine among them, although older notes list it as a speech type).
NOT_IN_RUNTIME = ("moonshine", "llava")

# transformers model_type -> the runtime's speech-to-text type that runs it.
SPEECH_MODEL_TYPES = {
    "whisper": "whisper",
    "parakeet_tdt": "parakeet_tdt",
    "moonshine": None,
}


def multimodal_list() -> str:
    """The multimodal chat types, for messages."""
    return ", ".join(MULTIMODAL_CHAT)
