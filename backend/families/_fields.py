"""Which config fields a family's graphs honour, and which values they refuse.

Every field transformers' config class of a family defines is in that family's table
(`families/<family>/fields.py`), as one of:
- **honoured**: the converted graphs (or the package's JSON) follow its value;
- **checked**: the graphs implement only some values (a fixed activation, a feature
  they do not build); any other value is refused before conversion, naming the field,
  its value and what is supported;
- **inert**: transformers' modeling code does not read it at inference (dropout,
  initialisation, output flags) or it is bookkeeping (names, versions).

The tables are read against the transformers config as `from_pretrained` builds it, so
a field a released config.json leaves out has transformers' default, and legacy keys
(`rope_scaling`, a top-level `rope_theta`) arrive as transformers 5 names them. A test
holds every table complete: a field the config class gains and no table lists fails it.
The values were measured, one field at a time, by `scripts/field_survey.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mmforge.backend.families._base import Cfg

Kind = Literal["honoured", "checked", "inert"]


@dataclass(frozen=True)
class Rule:
    """What a family does with one config field (or every field under a prefix).

    Attributes:
        path: Dotted path in the config's dict form ("vision_config.hidden_act"); a
            trailing ".*" covers everything under the prefix.
        kind: "honoured", "checked" or "inert".
        accepts: For checked fields: whether a value is one the graphs implement (the
            value, and the whole config for fields that must agree with another).
        supported: For checked fields: the supported values, in words.
        note: Where it is honoured, or why it is inert.
    """

    path: str
    kind: Kind
    accepts: Callable[[Any, Cfg], bool] | None = None
    supported: str = ""
    note: str = ""

    def allows(self, value: Any, cfg: Cfg) -> bool:
        """Whether a checked field may have this value (a value of the wrong type may not)."""
        if self.accepts is None:
            return True
        try:
            return bool(self.accepts(value, cfg))
        except (TypeError, ValueError):
            return False

    def covers(self, path: str) -> bool:
        """Whether this rule is the one for `path`."""
        if self.path.endswith(".*"):
            prefix = self.path[:-2]
            return path == prefix or path.startswith(prefix + ".")
        return path == self.path


def honoured(path: str, note: str = "") -> Rule:
    """A field the graphs follow."""
    return Rule(path, "honoured", note=note)


def inert(path: str, note: str = "") -> Rule:
    """A field inference does not read."""
    return Rule(path, "inert", note=note)


def only(path: str, *values: Any, note: str = "") -> Rule:
    """A field the graphs implement for these values only (None: the field unset)."""
    return Rule(
        path,
        "checked",
        accepts=lambda v, cfg: any(_same(v, allowed) for allowed in values),
        supported=" or ".join("unset" if v is None else repr(v) for v in values),
        note=note,
    )


def check(path: str, accepts: Callable[[Any, Cfg], bool], supported: str, note: str = "") -> Rule:
    """A field whose supported values a predicate decides."""
    return Rule(path, "checked", accepts=accepts, supported=supported, note=note)


def _same(value: Any, allowed: Any) -> bool:
    if isinstance(allowed, float) and isinstance(value, (int, float)):
        return abs(float(value) - allowed) <= 1e-9 * max(1.0, abs(allowed))
    return bool(value == allowed)


# Fields every transformers config has that inference never reads.
COMMON_INERT: tuple[Rule, ...] = tuple(
    inert(f"{prefix}rope_parameters.type", "transformers 4's name, read as rope_type")
    for prefix in ("", "text_config.", "vision_config.")
) + tuple(
    inert(f"{prefix}{name}", "transformers bookkeeping or training-only")
    for prefix in ("", "text_config.", "vision_config.", "audio_config.")
    for name in (
        "_name_or_path",
        "architectures",
        "chunk_size_feed_forward",
        "dtype",
        "torch_dtype",
        "is_encoder_decoder",
        "output_attentions",
        "output_hidden_states",
        "problem_type",
        "return_dict",
        "transformers_version",
        "id2label",
        "label2id",
        "initializer_range",
        "attention_dropout",
        "dropout",
        "use_cache",
        "model_type",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
    )
)


@dataclass(frozen=True)
class Refusal:
    """A checked field set to a value the graphs do not implement."""

    path: str
    value: Any
    supported: str
    note: str

    def sentence(self) -> str:
        """One line naming the field, its value and what is supported."""
        line = f"{self.path} = {self.value!r} (supported: {self.supported})"
        return f"{line}; {self.note}" if self.note else line


@dataclass(frozen=True)
class FieldReview:
    """The outcome of reading a config against a family's table.

    Attributes:
        refused: Checked fields with unsupported values.
        unlisted: Fields the config has and the table does not list (transformers'
            class does not define them either, or the table would be incomplete).
        honoured: How many fields the graphs follow.
    """

    refused: tuple[Refusal, ...]
    unlisted: tuple[str, ...]
    honoured: int


def flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of a nested dict as (dotted path, value); lists are leaves."""
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and key not in ("id2label", "label2id"):
            yield from flatten(value, path + ".")
        else:
            yield path, value


def rule_for(rules: tuple[Rule, ...], path: str) -> Rule | None:
    """The rule covering `path`: an exact one before a prefix one."""
    exact = next((r for r in rules if r.path == path), None)
    return exact or next((r for r in rules if r.covers(path)), None)


def review(rules: tuple[Rule, ...], config: Mapping[str, Any]) -> FieldReview:
    """Read a config's dict form against a table."""
    cfg = Cfg(config)
    refused: list[Refusal] = []
    unlisted: list[str] = []
    honoured_count = 0
    for path, value in flatten(config):
        rule = rule_for(rules, path)
        if rule is None:
            unlisted.append(path)
        elif rule.kind == "checked":
            if not rule.allows(value, cfg):
                refused.append(Refusal(path, value, rule.supported, rule.note))
        elif rule.kind == "honoured":
            honoured_count += 1
    return FieldReview(tuple(refused), tuple(unlisted), honoured_count)


def shapes(prefix: str, *names: str) -> tuple[Rule, ...]:
    """Sizes the graphs are built with (and the weights' shapes confirm)."""
    return tuple(honoured(f"{prefix}{n}", "a size the graphs are built with") for n in names)


def token_ids(*paths: str) -> tuple[Rule, ...]:
    """Token ids written into genai_config and the processor JSON."""
    return tuple(honoured(p, "written into genai_config.json") for p in paths)


TEXT_SIZES = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
)
