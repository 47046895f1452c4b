"""The families the tests cover, read from the registry: a family added there is covered.

A variant that runs another entry's model under its own pipeline type (Fara, a
Qwen2.5-VL fine-tune) is covered by that entry's tests and its own release-shaped ones.
"""

from __future__ import annotations

from mmforge.backend.families import ALL, Family, lookup


def _owns_its_model_type(family: Family) -> bool:
    """Whether the family is tested as itself: it owns its model_type, or it is a variant
    with a model of its own (LLaVA-1.5 beside Pixtral-12B, both model_type llava). A
    variant whose tiny checkpoint is the owner's model (Fara: Qwen2.5-VL's) is covered by
    the owner's tests."""
    owner = lookup(family.recognition.model_types[0])
    if owner is family:
        return True
    mine, theirs = family.fixtures.tiny, owner.fixtures.tiny
    return mine is not None and theirs is not None and mine.make_config is not theirs.make_config


# Families with a tiny checkpoint and a verify reference: convert, verify and chat run.
TESTED: list[str] = [
    f.key
    for f in ALL
    if f.fixtures.tiny is not None and f.reference is not None and _owns_its_model_type(f)
]
# Those whose tiny checkpoint takes audio.
AUDIO: set[str] = {
    f.key for f in ALL if f.fixtures.tiny is not None and f.fixtures.tiny.audio_preprocessor
}


def verdict(family_key: str) -> str:
    """The verdict a good package of this family gets (its expect.py says where not PASS)."""
    return lookup_key(family_key).fixtures.expect.verdict


def lookup_key(family_key: str) -> Family:
    """The registry entry with this key."""
    return next(f for f in ALL if f.key == family_key)


def agrees_but_for_decoder_prefill(report) -> bool:
    """Whether a report is PASS, or AMBIGUOUS only at `decoder_prefill` with every token equal.

    Random-weight decoders put some prompt position's two best logits within the
    arithmetic's error of each other (a near-tie), or their f32 logits a little past the
    elementwise bound on one processor's kernels and not another's: verify then rightly
    cannot decide that stage (AMBIGUOUS, never FAIL). Measured on this workplace's
    machines on main 37d202f too (Mistral-Small-3.1's release shape: a near-tie at
    position 481; Qwen3.6 MoE with three images: 1.3× the bound at cosine 1.0000).
    """
    others = [c for c in report.components if c.name != "decoder_prefill"]
    prefill = [c for c in report.components if c.name == "decoder_prefill"]
    return (
        all(c.verdict == "PASS" for c in others)
        and all(c.verdict in ("PASS", "AMBIGUOUS") for c in prefill)
        and report.verdict in ("PASS", "AMBIGUOUS")
        and report.tokens["matched"] == report.tokens["total"]
    )
