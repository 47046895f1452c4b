"""The transformers model packages a frozen app needs, read from the family registry.

transformers imports model classes lazily by name, so PyInstaller cannot see them: the
spec collects these. Each converted family's model class, its concrete sub-configs and
its processors' classes are found here; a family added to the registry is collected
without editing the spec. Towers that a config names only through AutoConfig (Mistral 3's
Pixtral and Mistral text models, LFM2-VL's SigLIP2 and LFM2, LLaVA's and PaliGemma's text
models, InternVL's Qwen2 and Qwen3) are listed by hand, and
tests/packaging checks that every tiny checkpoint's sub-model types are covered.
"""

from __future__ import annotations

# Model types a family's config picks through AutoConfig, so no class names them
# (LLaVA's Llama, PaliGemma's Gemma and PaliGemma 2's Gemma 2, InternVL 3's Qwen2 and
# InternVL 3.5's Qwen3 text models among them).
VIA_AUTO_CONFIG = (
    "mistral",
    "ministral3",
    "lfm2",
    "siglip",
    "siglip2",
    "llama",
    "gemma",
    "gemma2",
    "qwen2",
    "qwen3",
)


def _package_of(obj: object) -> str | None:
    module = getattr(obj, "__module__", "")
    parts = module.split(".")
    return parts[2] if module.startswith("transformers.models.") and len(parts) > 2 else None


def transformers_models() -> list[str]:
    """`transformers.models.X` names (X) for every family mmforge converts."""
    import transformers

    from mmforge.backend.families import ALL

    names = {"auto", *VIA_AUTO_CONFIG}
    for family in ALL:
        if family.package is None or not family.profile.hf_class:
            continue
        model = getattr(transformers, family.profile.hf_class)
        found = [model, *getattr(model.config_class, "sub_configs", {}).values()]
        tiny = family.fixtures.tiny
        for settings, key in (
            (tiny.preprocessor if tiny else None, "image_processor_type"),
            (tiny.audio_preprocessor if tiny else None, "feature_extractor_type"),
        ):
            name = (settings or {}).get(key)
            if name and hasattr(transformers, name):
                found.append(getattr(transformers, name))
        names |= {p for p in map(_package_of, found) if p}
    return sorted(names)
