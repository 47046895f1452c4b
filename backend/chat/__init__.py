"""The chat pipeline: a package loaded in ONNX Runtime GenAI, turn by turn.

- `session`: `ChatSession` (prefill, stream, stop, regenerate, continue);
- `values`: what a session takes and gives (options, turn results, package info);
- `conversations`: the saved conversations;
- `worker` and `client`: the session in a worker process, and its client.
"""

from mmforge.backend.chat.session import ChatSession
from mmforge.backend.chat.values import GenerationOptions, PackageInfo, TurnResult, available_eps

__all__ = ["ChatSession", "GenerationOptions", "PackageInfo", "TurnResult", "available_eps"]
