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

        from mmforge.backend.templates import check_folder_template

        # The runtime renders the template in native code that no signal stops: a
        # template that would not end is refused here, under limits. The same check
        # finds which content form it takes (a list of parts, or text only).
        self.content_form = check_folder_template(folder)
        config = og.Config(str(folder))
        if ep != "cpu":
            config.clear_providers()
            config.append_provider(ep)
        else:
            overlay = cpu_threads_overlay(folder)
            if overlay:
                config.overlay(overlay)
        self.og = og
        self.folder = folder
        self.model = og.Model(config)
        self.tokenizer = og.Tokenizer(self.model)
        self._processor: Any = None

    @property
    def processor(self) -> Any:
        """The multimodal processor (created on first use)."""
        if self._processor is None:
            self._processor = self.model.create_multimodal_processor()
        return self._processor

    def prompt(self, messages: list[dict[str, Any]]) -> str:
        """Apply the package's chat template, the messages in the content form it takes."""
        messages = package_messages(self.folder, messages, self.content_form)
        return str(
            self.tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
        )

    def process(
        self, prompt: str, images: Sequence[Path] = (), audios: Sequence[Path] = ()
    ) -> RuntimeInputs:
        """Run the runtime's processor on the prompt and attachment files."""
        kwargs: dict[str, Any] = {}
        if images:
            kwargs["images"] = self.og.Images.open(*[str(p) for p in images])
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
    return conform(messages, form, family.text_placeholder, family.name)


def read_genai_config(folder: Path) -> dict[str, Any]:
    """A package's genai_config.json; a folder that is not a package gets a clear error."""
    path = folder / "genai_config.json"
    if not folder.is_dir():
        raise MmforgeError(f"No such package folder: {folder}", "Check the path")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["model"]["decoder"]
    except FileNotFoundError:
        raise MmforgeError(
            f"{folder} is not an ONNX Runtime GenAI package (no genai_config.json)",
            "Pick a folder made by `mmforge convert`",
        ) from None
    except (ValueError, KeyError, TypeError) as e:
        raise MmforgeError(f"{path} is damaged", "Convert the model again", str(e)) from None
    return dict(data)


def cpu_threads_overlay(folder: Path) -> str | None:
    """A genai_config overlay that gives every CPU session one thread per usable core.

    Left to its defaults, ONNX Runtime GenAI 0.18 ran the decoder at the speed of one
    thread here (36 tokens/s for a 121M model on 2 cores; 74 with 2 threads). The count
    depends on the machine, so it is set at load time rather than written in the package.
    Sections that already set `intra_op_num_threads` keep their value.
    """
    import os

    try:
        model = read_genai_config(folder)["model"]
    except MmforgeError:
        return None  # the runtime reports the broken config itself
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    sections: dict[str, Any] = {}
    for name in ("decoder", "embedding", "vision", "speech"):
        section = model.get(name)
        if not isinstance(section, dict):
            continue
        if "intra_op_num_threads" in section.get("session_options", {}):
            continue
        sections[name] = {"session_options": {"intra_op_num_threads": threads or 1}}
    return json.dumps({"model": sections}) if sections else None


def _as_array(ids: Any) -> Any:
    import numpy as np

    return np.asarray(ids, dtype=np.int32).reshape(1, -1)
