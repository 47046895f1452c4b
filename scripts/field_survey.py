"""Measure which config fields the converted graphs honour, one field at a time.

For each case below, build the family's tiny checkpoint (vectors noised, so a dropped
bias shows) with that field changed, convert it to f32 and verify it against
transformers. A field whose change still verifies PASS (or the family's usual verdict)
is honoured; one that FAILs is not, and the family's field table must refuse values
other than the ones that work. Each case is also checked to change transformers' output
at all (the unchanged package must FAIL against it), else it proves nothing: VACUOUS.

    python scripts/field_survey.py [family ...] [--tokens 8]

Prints one line per case: family, field, value, verdict, first failing stage. Slow (a
conversion and a verification per case); its results are what the tables in
`backend/families/*/fields.py` record.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Each case changes one field (or a few that only act together) from the tiny value.
CASES: dict[str, list[dict[str, Any]]] = {
    "qwen2_5_vl": [
        {"text_config.hidden_act": "gelu_pytorch_tanh"},
        {"text_config.rms_norm_eps": 0.05},
        {"text_config.rope_parameters.rope_theta": 500.0},
        {"text_config.rope_parameters.mrope_section": [4, 2, 2]},
        {
            "text_config.use_sliding_window": True,
            "text_config.sliding_window": 3,
            "text_config.max_window_layers": 0,
        },
        {"vision_config.hidden_act": "gelu_pytorch_tanh"},
        {"vision_config.window_size": 28},
        {"vision_config.fullatt_block_indexes": [0]},
    ],
    "qwen3_vl": [
        {"text_config.hidden_act": "gelu_pytorch_tanh"},
        {"text_config.rms_norm_eps": 0.05},
        {"text_config.rope_parameters.rope_theta": 500.0},
        {"text_config.rope_parameters.mrope_interleaved": False},
        {"text_config.attention_bias": True},
        {"vision_config.hidden_act": "silu"},
        {"vision_config.deepstack_visual_indexes": [0]},
    ],
    "gemma3": [
        {"text_config.hidden_activation": "silu"},
        {"text_config.rms_norm_eps": 0.05},
        {"text_config.rope_parameters.full_attention.rope_theta": 500.0},
        {"text_config.rope_parameters.sliding_attention.rope_theta": 50.0},
        {"text_config.query_pre_attn_scalar": 64},
        {"text_config.final_logit_softcapping": 0.3},
        {"text_config.attn_logit_softcapping": 0.1},
        {"text_config.sliding_window": 3},
        {"text_config.layer_types": ["full_attention", "sliding_attention"]},
        {"text_config.attention_bias": True},
        {"text_config.use_bidirectional_attention": True},
        {
            "text_config.rope_parameters.full_attention": {
                "rope_type": "linear",
                "factor": 8.0,
                "rope_theta": 1000000.0,
            }
        },
        {"vision_config.hidden_act": "silu"},
        {"vision_config.layer_norm_eps": 0.05},
    ],
    "gemma4": [
        {"text_config.hidden_activation": "silu"},
        {"text_config.rms_norm_eps": 0.05},
        {"text_config.final_logit_softcapping": 0.3},
        {"text_config.sliding_window": 3},
        {"text_config.rope_parameters.full_attention.partial_rotary_factor": 0.5},
        {"text_config.rope_parameters.sliding_attention.rope_theta": 50.0},
        {"text_config.attention_bias": True},
        {"text_config.use_double_wide_mlp": True},
        {"vision_config.hidden_activation": "silu"},
        {"vision_config.rms_norm_eps": 0.05},
        {"vision_config.standardize": True},
        {"vision_config.rope_parameters.rope_theta": 1000.0},
        {"audio_config.hidden_act": "gelu"},
        {"audio_config.attention_logit_cap": 1.0},
        {"audio_config.residual_weight": 1.0},
        {"audio_config.rms_norm_eps": 0.05},
        {"text_config.layer_types": ["full_attention", "sliding_attention"]},
        {"text_config.num_kv_shared_layers": 1},
        {"vision_config.use_clipped_linears": True},
        {"audio_config.attention_context_left": 5},
        {"audio_config.attention_chunk_size": 6},
        {"audio_config.use_clipped_linears": False},
    ],
    "mistral3": [
        {"text_config.hidden_act": "gelu_pytorch_tanh"},
        {"text_config.rms_norm_eps": 0.05},
        {"text_config.rope_parameters.rope_theta": 500.0},
        {"text_config.sliding_window": 3},
        {"vision_config.hidden_act": "gelu"},
        {"vision_config.rope_parameters.rope_theta": 500.0},
        {"projector_hidden_act": "silu"},
        {"multimodal_projector_bias": True},
        {"vision_feature_layer": -2},
    ],
    "phi4mm": [
        {"hidden_act": "gelu_pytorch_tanh"},
        {"rms_norm_eps": 0.05},
        {"rope_parameters.partial_rotary_factor": 0.75},
        {"rope_parameters.rope_theta": 500.0},
        {"vision_config.hidden_act": "gelu"},
        {"vision_config.layer_norm_eps": 0.05},
        {"vision_config.feature_layer": -1},
        {"audio_config.conv_activation": "relu"},
        {"audio_config.nemo_activation": "silu"},
        {"audio_config.bias_symmetric": True},
    ],
    "lfm2_vl": [
        {"text_config.norm_eps": 0.05},
        {"text_config.conv_bias": True},
        {"text_config.rope_parameters.rope_theta": 500.0},
        {"projector_bias": False},
        {"projector_use_layernorm": False},
        {"text_config.layer_types": ["full_attention", "conv"]},
        {"vision_config.hidden_act": "gelu"},
        {"vision_config.layer_norm_eps": 0.05},
    ],
}


def run_case(
    family: str, overrides: dict[str, Any], tokens: int, scratch: Path, base: Path | None
) -> str:
    """Build, convert and verify one case; its outcome in words."""
    from mmforge.backend.convert import convert
    from mmforge.backend.errors import MmforgeError
    from mmforge.backend.tiny import specs, write_tiny
    from mmforge.backend.tiny.build import with_config
    from mmforge.backend.verify import verify

    folder = scratch / "ckpt"
    out = scratch / "pkg"
    try:
        write_tiny(with_config(specs()[family], overrides), folder)
    except Exception as e:  # noqa: BLE001 - a survey records every outcome
        return f"transformers refuses: {type(e).__name__}: {str(e)[:100]}"
    try:
        convert(str(folder), out)
    except MmforgeError as e:
        return f"convert refuses: {e.user_message[:140]}"
    except Exception as e:  # noqa: BLE001
        return f"convert crashes: {type(e).__name__}: {str(e)[:100]}"
    try:
        report = verify(out, str(folder), tokens=tokens)
    except Exception as e:  # noqa: BLE001
        return f"verify crashes: {type(e).__name__}: {str(e)[:100]}"
    failing = [c.name for c in report.components if c.verdict != "PASS"]
    result = f"{report.verdict} {failing}"
    if base is not None:
        # The package of the unchanged checkpoint against the changed one: a change that
        # still PASSes there does not alter transformers' output on these inputs, and the
        # case proves nothing.
        against = verify(base, str(folder), tokens=tokens)
        result += " | HF output changed" if against.verdict != "PASS" else " | VACUOUS"
    return result


def main() -> int:
    """Run the cases of the families named (all by default) and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", default=list(CASES))
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--only", help="run only the cases whose label contains this text")
    args = parser.parse_args()
    import transformers

    from mmforge.backend.checkpoint import Checkpoint

    transformers.utils.logging.set_verbosity_error()
    # The survey measures the graphs, not the tables made from it: their refusals are off.
    Checkpoint.refuse_unsupported_fields = lambda self: None  # type: ignore[method-assign]
    for family in args.families:
        cases: list[dict[str, Any] | None] = [None, *CASES[family]]
        with tempfile.TemporaryDirectory(prefix="mmforge-survey-base-") as kept:
            base = Path(kept) / "pkg"
            for case in cases:
                overrides = case or {}
                if case is not None and args.only and args.only not in str(case):
                    continue
                started = time.perf_counter()
                with tempfile.TemporaryDirectory(prefix="mmforge-survey-") as scratch:
                    result = run_case(
                        family,
                        overrides,
                        args.tokens,
                        Path(scratch),
                        None if case is None else base,
                    )
                    if case is None:
                        shutil.copytree(Path(scratch) / "pkg", base)
                label = ", ".join(f"{k}={v!r}" for k, v in overrides.items()) or "(as built)"
                took = time.perf_counter() - started
                print(f"{family:11} {label:60} {result}  [{took:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
