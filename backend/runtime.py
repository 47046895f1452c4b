"""Running a package with ONNX Runtime GenAI: load, prompt, process attachments, generate.

Shared by validation, parity and chat, so all three feed the runtime the same way.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.errors import MmforgeError
from mmforge.backend.threads import CpuWatch, ThreadPlan, default_threads
from mmforge.backend.vocabulary import GENAI_SECTIONS


@dataclass
class RuntimeInputs:
    """What the runtime's processor produced, kept as numpy arrays for comparison.

    Attributes:
        prompt: The chat-template text given to the processor.
        arrays: Each named tensor of the processor output as a numpy array.
        named: The processor output itself, to hand to a generator.
    """

    prompt: str
    arrays: dict[str, Any]
    named: Any

    @property
    def input_ids(self) -> list[int]:
        """The prompt's token ids after placeholder expansion."""
        return [int(t) for t in self.arrays["input_ids"].reshape(-1)]


class Runtime:
    """A loaded package (model, tokenizer, processor) on one execution provider."""

    def __init__(self, folder: Path, ep: str = "cpu"):
        import onnxruntime_genai as og

        from mmforge.backend.localfiles import check_local_files
        from mmforge.backend.package_files import check_tokenizer_model
        from mmforge.backend.templates import check_folder_template
        from mmforge.backend.token_range import check_tokenizer, check_tokens_fit

        # On CPU, whether the cores are free decides the thread plan (`backend.threads`):
        # the look starts here, so the checks below are most of its window.
        watch = CpuWatch() if ep == "cpu" else None
        # The runtime opens the package's files itself: a FIFO among them would block
        # it for good, a link out of the folder make it read what the package names.
        check_local_files(folder)
        # The runtime renders the template in native code that no signal stops: a
        # template that would not end is refused here, under limits. The same check
        # finds which content form it takes (a list of parts, or text only).
        self.content_form = check_folder_template(folder)
        vocab = read_genai_config(folder)["model"].get("vocab_size")
        check_tokenizer(folder / "tokenizer.json", str(folder))
        check_tokenizer_model(folder / "tokenizer.json", str(folder))
        check_tokens_fit(
            folder / "tokenizer.json", vocab if isinstance(vocab, int) else None, str(folder)
        )
        self.og = og
        self.folder = folder
        self.ep = ep
        # One plan, for every turn of every conversation on this model.
        self.plan: ThreadPlan | None = None
        if watch is not None:
            self.plan = cpu_plan(folder, watch.cores_free(wait=True))
        self.model = self._load(self.plan)
        self.tokenizer = og.Tokenizer(self.model)
        self._processor: Any = None

    def _load(self, plan: ThreadPlan | None) -> Any:
        """The package's model, loaded once: every turn runs on it."""
        config = self.og.Config(str(self.folder))
        if plan is None:
            config.clear_providers()
            config.append_provider(self.ep)
        else:
            overlay = cpu_threads_overlay(self.folder, plan)
            if overlay:
                config.overlay(overlay)
            # A package made for CUDA names its provider: on CPU (chat --ep cpu, the
            # encoder precision probe of a CUDA conversion) it runs on none but the CPU.
            config.clear_providers()
        return self.og.Model(config)

    @property
    def processor(self) -> Any:
        """The model's multimodal processor (made on first use: a text turn needs none)."""
        if self._processor is None:
            self._processor = self.model.create_multimodal_processor()
        return self._processor

    def prompt(self, messages: list[dict[str, Any]], tools: str = "") -> str:
        """Apply the package's chat template, the messages in the content form it takes.

        `tools` (JSON text of a list of tools, "" for none) is handed to the template as
        its `tools`; a template that does not use them ignores them.
        """
        messages = package_messages(self.folder, without_nul(messages), self.content_form)
        extra = {"tools": without_nul(tools)} if tools else {}
        try:
            return str(
                self.tokenizer.apply_chat_template(
                    json.dumps(messages), add_generation_prompt=True, **extra
                )
            )
        except RuntimeError as e:
            # A template's raise_exception (PaliGemma's takes one user message) comes back
            # as "<its message> at row R, column C: <the template>".
            said = str(e).split(" at row ")[0].strip()
            raise MmforgeError(
                f"The model's chat template refuses this conversation: {said}",
                "Start a new conversation for this message",
                details=str(e),
                kind="template",
            ) from None

    def process(
        self, prompt: str, images: Sequence[Path] = (), audios: Sequence[Path] = ()
    ) -> RuntimeInputs:
        """Run the runtime's processor on the prompt and attachment files."""
        kwargs: dict[str, Any] = {}
        if images:
            from mmforge.backend.anyres import runtime_images  # stacked pictures: 2 files

            files = runtime_images(self.folder, list(images))
            kwargs["images"] = self.og.Images.open(*[str(p) for p in files])
        if audios:
            kwargs["audios"] = self.og.Audios.open(*[str(p) for p in audios])
        if kwargs:
            named = self.processor(prompt, **kwargs)
        else:
            ids = self.tokenizer.encode(prompt)
            named = None
            return RuntimeInputs(prompt, {"input_ids": _as_array(ids)}, named)
        arrays = {key: named[key].as_numpy() for key in named.keys()}  # noqa: SIM118 - not a dict
        return RuntimeInputs(prompt, arrays, named)

    def greedy(self, inputs: RuntimeInputs, max_new_tokens: int) -> list[int]:
        """Greedy tokens after the prompt (stops at EOS or after max_new_tokens)."""
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(
            max_length=len(inputs.input_ids) + max_new_tokens, do_sample=False, top_k=1
        )
        generator = self.og.Generator(self.model, params)
        if inputs.named is not None:
            generator.set_inputs(inputs.named)
        else:
            generator.append_tokens(inputs.arrays["input_ids"])
        out: list[int] = []
        while not generator.is_done() and len(out) < max_new_tokens:
            generator.generate_next_token()
            out.append(int(generator.get_next_tokens()[0]))
        return out


def package_messages(
    folder: Path, messages: list[dict[str, Any]], form: str | None
) -> list[dict[str, Any]]:
    """`messages` in the content form a package's template takes (`content_form.conform`).

    The placeholders for a text-only template are those of the package's family, found
    by its pipeline type.
    """
    from mmforge.backend import families
    from mmforge.backend.content_form import conform

    family = None
    with contextlib.suppress(MmforgeError, KeyError, TypeError):
        family = families.by_pipeline(str(read_genai_config(folder)["model"]["type"]))
    if family is None:
        return conform(messages, form, None)
    return conform(messages, form, family.profile.text_placeholder, family.name)


def without_nul(value: Any) -> Any:
    """`value` with every NUL character in its strings made U+FFFD.

    The runtime renders templates and tokenizes in native code that takes text up to its
    first NUL: an answer holding one (a byte-level model can write byte 0) cut the next
    prompt there, the new message and its image placeholder with it ("Prompt contained 0
    vision_start tokens but received 1 images").
    """
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    if isinstance(value, dict):
        return {k: without_nul(v) for k, v in value.items()}
    return value


def read_genai_config(folder: Path) -> dict[str, Any]:
    """A package's genai_config.json, checked to be one the runtime can run.

    A package folder may come from anyone. Its `model.type` must be a multimodal chat
    type of ONNX Runtime GenAI 0.18 (`runtime_types.MULTIMODAL_CHAT`): with another, the
    runtime fails inside the worker with no word about the package ("the chat worker
    stopped before the model loaded").

    Raises:
        MmforgeError: The folder is not a package, its config is damaged, or its model
            type is not one the runtime runs.
    """
    from mmforge.backend.package_files import check_genai_config
    from mmforge.backend.runtime_types import MULTIMODAL_CHAT, multimodal_list
    from mmforge.backend.untrusted import read_json_object

    path = folder / "genai_config.json"
    if not folder.is_dir():
        raise MmforgeError(f"No such package folder: {folder}", "Check the path")
    if not path.exists():
        raise MmforgeError(
            f"{folder} is not an ONNX Runtime GenAI package (no genai_config.json)",
            "Pick a folder made by `mmforge convert`",
        )
    data = read_json_object(path, "package")
    model = data.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("decoder"), dict):
        raise MmforgeError(f"{path} is damaged (no model.decoder)", "Convert the model again")
    kind = model.get("type")
    if kind not in MULTIMODAL_CHAT:
        shown = (kind if isinstance(kind, str) else repr(kind))[:80]
        raise MmforgeError(
            f"{folder} is not a runnable package: its genai_config.json names model.type "
            f"'{shown}', which ONNX Runtime GenAI does not run as a chat model",
            f"Convert the model again with mmforge (it writes one of {multimodal_list()})",
        )
    check_genai_config(data, path)
    _check_processor(folder, model)
    return dict(data)


def _check_processor(folder: Path, model: dict[str, Any]) -> None:
    """The vision processor JSON a package names, checked before the runtime applies it.

    The runtime reads it for every picture: its pixel bounds are bounded here
    (`package_files.check_processor`). A package without one is left to the runtime,
    which says so when it is asked to take a picture.
    """
    from mmforge.backend.package_files import check_processor
    from mmforge.backend.untrusted import read_json_file

    vision = model.get("vision")
    name = vision.get("config_filename", "processor_config.json") if vision else ""
    path = folder / name  # a name check_genai_config found to be a file in the package
    if name and (path.exists() or path.is_symlink()):
        check_processor(read_json_file(path, "package"), path)


def cpu_plan(folder: Path, free: bool) -> ThreadPlan:
    """The thread plan a package's sessions run with on CPU under `Runtime`.

    One thread per physical core this process may use, spinning briefly when `free` (the
    cores were free when it loaded; `backend.threads`), with the values the package's own
    decoder `session_options` set winning.
    """
    own = _session_options(folder, "decoder") or {}
    threads = own.get("intra_op_num_threads", default_threads())
    spinning = own.get("session.intra_op.allow_spinning", "1" if free else "0")
    return ThreadPlan(
        threads if isinstance(threads, int) and threads >= 0 else default_threads(),
        str(spinning) == "1",
    )


def cpu_threads_overlay(folder: Path, plan: ThreadPlan) -> str | None:
    """A genai_config overlay applying a thread plan to every CPU session.

    The embedding, vision and speech sessions inherit the decoder's options when they set
    none of their own, so the decoder's entry covers them. ONNX Runtime GenAI 0.18
    replaces a sub-model's `session_options` wholesale when an overlay names them (the
    decoder's are merged), so a sub-model that sets its own gets them written back along
    with the plan's keys it lacks. Keys a section already sets keep their value.
    """
    try:
        model = read_genai_config(folder)["model"]
    except MmforgeError:
        return None  # the runtime reports the broken config itself
    options = plan.session_options()
    sections: dict[str, Any] = {}
    for name in GENAI_SECTIONS.values():
        section = model.get(name)
        if not isinstance(section, dict):
            continue
        own = section.get("session_options")
        if name != "decoder" and not isinstance(own, dict):
            continue  # inherits the decoder's
        own = own if isinstance(own, dict) else {}
        added = {k: v for k, v in options.items() if k not in own}
        if added:
            sections[name] = {"session_options": added if name == "decoder" else {**own, **added}}
    return json.dumps({"model": sections}) if sections else None


def _session_options(folder: Path, name: str) -> dict[str, Any] | None:
    try:
        options = read_genai_config(folder)["model"].get(name, {}).get("session_options")
    except (MmforgeError, AttributeError):
        return None
    return options if isinstance(options, dict) else None


def _as_array(ids: Any) -> Any:
    import numpy as np

    return np.asarray(ids, dtype=np.int32).reshape(1, -1)
