"""A checkpoint folder, read once: config, processor settings, generation defaults, family.

`Checkpoint.read(folder)` parses `config.json` once, with transformers' defaults applied
where transformers knows the model type, and the processor and generation configs beside
it. Inspect, build, weights, package and verify all take this value instead of reading
the folder again; the tensor headers are read on first use and kept.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmforge.backend import families
from mmforge.backend.bounds import (
    check_config_sizes,
    check_head_counts,
    check_image_settings,
    check_token_ids,
    check_token_ids_within,
    vocab_size,
)
from mmforge.backend.errors import REMOTE_CODE, MmforgeError
from mmforge.backend.families import (
    Approximation,
    Cfg,
    Family,
    FieldReview,
    VariantRequest,
    review,
)
from mmforge.backend.source import read_json
from mmforge.backend.tensors import TensorInfo, local_tensors
from mmforge.backend.untrusted import text_field


@dataclass(frozen=True)
class Checkpoint:
    """A Hugging Face checkpoint folder as every stage sees it.

    Attributes:
        folder: The folder holding config.json.
        family: Its family entry.
        config: The config as a dict, with transformers' defaults applied (as written
            when the model type exists only as remote code).
        remote_code: Whether the model type exists only as remote code.
        preprocessor: Image processor settings (preprocessor_config.json, else the
            image_processor block of processor_config.json).
        audio_preprocessor: Audio feature extractor settings.
        generation: generation_config.json (empty when absent).
        hf_config: The transformers config object (None for remote code); builders that
            adapt it get their own copy from `transformers_config()`.
        written: config.json as written (for a remote-code layout read as data, `config`
            is the native config it maps to).
        remote_layout: Whether the folder is a remote-code layout mapped to the native
            classes (`Recognition.remote_layout`), its code never run.
        approximation: The family's approximation, when the user opted in to it: then
            `preprocessor` holds its overrides, and so does `image_processor_overrides`.
    """

    folder: Path
    family: Family
    config: dict[str, Any]
    remote_code: bool
    preprocessor: Cfg
    audio_preprocessor: Cfg
    generation: dict[str, Any]
    hf_config: Any = field(default=None, repr=False, compare=False)
    written: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    remote_layout: bool = False
    approximation: Approximation | None = None

    @property
    def image_processor_overrides(self) -> dict[str, Any]:
        """Settings transformers' image processor takes over its file's (an approximation's)."""
        return dict(self.approximation.overrides) if self.approximation is not None else {}

    @property
    def cfg(self) -> Cfg:
        """The config with dotted-path access."""
        return Cfg(self.config)

    @property
    def model_type(self) -> str:
        """The config's model_type."""
        return str(self.config.get("model_type"))

    def transformers_config(self) -> Any:
        """A private copy of the transformers config, for code that adapts it.

        Raises:
            MmforgeError: The model type exists only as remote code.
        """
        if self.hf_config is None:
            raise MmforgeError(
                f"transformers has no native class for {self.family.name} "
                f"(model_type '{self.model_type}')",
                "Use the model's native transformers version",
            )
        return copy.deepcopy(self.hf_config)

    @functools.cached_property
    def tensors(self) -> list[TensorInfo] | None:
        """The tensors of its safetensors files (None when it has none), read once.

        Raises:
            MmforgeError: A shard named by the index is missing, or a file is corrupt.
        """
        return local_tensors(self.folder)

    @functools.cached_property
    def field_review(self) -> FieldReview:
        """The config read against the family's field table (`families/<family>/fields.py`).

        Remote-code configs are read as written; checkpoints of families without a table
        have nothing refused.
        """
        return review(self.family.profile.fields, self.config)

    def refuse_unsupported_fields(self) -> None:
        """Raise when a checked field has a value the family's graphs do not implement.

        Raises:
            MmforgeError: Naming each such field, its value and what is supported.
        """
        refused = self.field_review.refused
        if not refused:
            return
        lines = "; ".join(r.sentence() for r in refused)
        raise MmforgeError(
            f"This {self.family.name} checkpoint sets "
            f"{'a config field' if len(refused) == 1 else 'config fields'} that mmforge's "
            f"graphs do not implement: {lines}",
            "The converted model would compute something other than transformers does, so "
            "it is not converted: use a checkpoint with the supported value "
            "(`mmforge inspect` lists every such field), or report the model id",
        )

    @functools.cached_property
    def output_tied(self) -> bool:
        """Whether the output layer is the token embedding, by transformers' rule.

        transformers ties when the config says so (the top-level `tie_word_embeddings`)
        and the checkpoint has no output layer of its own; an `lm_head` tensor that is
        present is used even when the config says to tie (it differs, or tying changes
        nothing). The graphs follow the same rule, not the config field alone.

        Raises:
            MmforgeError: No `lm_head` tensor and a config that does not tie: transformers
                would start the output layer from random values.
        """
        names = [t.name for t in self.tensors or ()]
        ties = getattr(self.hf_config, "tie_word_embeddings", None)
        if ties is None:
            ties = self.config.get("tie_word_embeddings", False)
        if not names:  # no safetensors headers (pickled weights): the config decides
            return bool(ties)
        if any(n.endswith("lm_head.weight") for n in names):
            return False
        if not ties:
            raise MmforgeError(
                "The checkpoint has no output layer (lm_head.weight) and tie_word_embeddings "
                "is false (in config.json or by default): transformers itself would start "
                "the output layer from random values",
                "If the output layer is the token embedding, set tie_word_embeddings to true "
                "in config.json",
            )
        return True

    @classmethod
    def read(
        cls,
        folder: Path,
        *,
        trust_remote_code: bool = False,
        config: dict[str, Any] | None = None,
        approximate: bool = False,
        earlier: bool = False,
    ) -> Checkpoint:
        """Read a checkpoint folder.

        Args:
            folder: The folder holding config.json.
            trust_remote_code: Accept a model type that exists only as remote code (its
                config is read as written; its code is never run).
            config: config.json as already parsed (`ResolvedSource.config`), so that it
                is not parsed again.
            approximate: The user accepts the family's approximation, if it has one
                (`Family.approximation`): the processor settings take its overrides.
            earlier: The package compared with records an approximation (verify): a
                family that has converted exactly since is read as it converted then
                (`Family.earlier`), its approximation included.

        Raises:
            MmforgeError: Malformed or unreadable config, an unknown or text-only family,
                or remote code without consent.
        """
        written = config if config is not None else read_json(folder / "config.json", "model")
        check_config_sizes(written, folder / "config.json")
        family = families.lookup(text_field(written, "model_type", str(folder / "config.json")))
        family = family.recognition.variant(VariantRequest(written, folder)) or family
        if earlier and family.earlier is not None:
            family = family.earlier
        converted = family.converts
        check_token_ids(written, folder / "config.json", converted)
        raw, layout = written, family.recognition.remote_layout
        mapped = (
            layout is not None and written.get("model_type") in family.recognition.remote_code_types
        )
        if mapped:
            assert layout is not None
            try:
                shapes = {t.name: list(t.shape) for t in local_tensors(folder) or ()}
            except MmforgeError:  # some shards not in yet (a download resumed from the cache)
                shapes = {}
            raw = layout.config(written, shapes or None)
        generation = _optional_json(folder / "generation_config.json")
        check_token_ids_within(
            generation,
            folder / "generation_config.json",
            vocab_size(written, folder) if converted else None,
        )
        preprocessor = _image_settings(folder)
        check_image_settings(dict(preprocessor.data), _image_settings_path(folder))
        hf_config = _transformers_config(folder, raw, family, trust_remote_code)
        check_head_counts(raw if hf_config is None else hf_config.to_dict(), folder / "config.json")
        classes = layout.processor_classes if mapped and layout is not None else {}
        approximation = family.approximation if approximate else None
        if approximation is not None:
            preprocessor = Cfg({**preprocessor.data, **approximation.overrides})
        return cls(
            folder=folder,
            family=family,
            config=raw if hf_config is None else hf_config.to_dict(),
            remote_code=hf_config is None,
            preprocessor=_native_classes(preprocessor, classes),
            audio_preprocessor=_native_classes(_audio_settings(folder), classes),
            generation=generation,
            hf_config=hf_config,
            written=written,
            remote_layout=mapped,
            approximation=approximation,
        )


def _transformers_config(
    folder: Path, raw: dict[str, Any], family: Family, trust_remote_code: bool
) -> Any:
    """The transformers config built from the parsed dict, or None for remote code.

    Built with `from_dict`, as `from_pretrained` does after reading the file, so the file
    is parsed only once.
    """
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    model_type = raw.get("model_type")
    if model_type not in CONFIG_MAPPING_NAMES or model_type in family.recognition.remote_code_types:
        if not trust_remote_code:
            raise MmforgeError(
                f"{family.name} (model_type '{model_type}') is defined only by code in its "
                "repository, which mmforge does not run without your consent",
                "If you trust the repository, rerun with --trust-remote-code",
                kind=REMOTE_CODE,
            )
        return None
    try:
        return CONFIG_MAPPING[model_type].from_dict(dict(raw))
    except Exception as e:  # noqa: BLE001 - whatever transformers refuses, the file is at fault
        reason = " ".join(f"{type(e).__name__}: {e}".split())
        raise MmforgeError(
            f"transformers cannot read {folder / 'config.json'} "
            f"({reason[:300]}{'…' if len(reason) > 300 else ''})",
            "The config is malformed; download the model again or fix the file",
            details=reason,
        ) from None


def _native_classes(settings: Cfg, classes: dict[str, str]) -> Cfg:
    """Processor settings with the remote layout's class names made native."""
    if not classes:
        return settings
    data = dict(settings.data)
    for key in ("image_processor_type", "feature_extractor_type"):
        if data.get(key) in classes:
            data[key] = classes[data[key]]
    return Cfg(data)


def _optional_json(path: Path) -> dict[str, Any]:
    return read_json(path, "model") if path.is_file() else {}


def _image_settings(folder: Path) -> Cfg:
    """preprocessor_config.json, else the image_processor block of processor_config.json."""
    pre = folder / "preprocessor_config.json"
    if pre.is_file():
        return Cfg(read_json(pre, "model"))
    return Cfg(_optional_json(folder / "processor_config.json")).sub("image_processor")


def _image_settings_path(folder: Path) -> Path:
    pre = folder / "preprocessor_config.json"
    return pre if pre.is_file() else folder / "processor_config.json"


def _audio_settings(folder: Path) -> Cfg:
    """processor_config.json's feature_extractor, else an audio preprocessor_config.json."""
    found = Cfg(_optional_json(folder / "processor_config.json")).sub("feature_extractor")
    if found.data:
        return found
    pre = _optional_json(folder / "preprocessor_config.json")
    return Cfg(pre) if "feature_extractor_type" in pre else Cfg({})
