"""Qwen3-VL MoE (Qwen3-VL-30B-A3B, 235B-A22B): Qwen3-VL with sparse expert layers.

The vision tower, DeepStack, M-RoPE, embedding and packaging are Qwen3-VL's; only the
text layers differ. transformers' Qwen3VLMoeTextDecoderLayer puts a sparse MoE block
(router `mlp.gate` [E, H]: softmax over all experts in float32, top-k, the k weights
renormalised to sum to 1 whatever `norm_topk_prob` says; SwiGLU experts; no shared
expert) on layer i when i is not in `mlp_only_layers` and (i + 1) is a multiple of
`decoder_sparse_step`, and a dense MLP of `intermediate_size` elsewhere.

mobius 0.1 registers `qwen3_vl_moe` only as a text model (MoECausalLMModel), so the
graphs are mobius's Qwen3-VL 3-model split with the sparse layers' MLP swapped for
mobius's MoE layer (`moe_decoder`), before the build.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from mmforge.backend.families._base import Cfg, Family, Fixtures, PackageSpec, Recognition
from mmforge.backend.families._fields import (
    Rule,
    honoured,
    inert,
    shapes,
)
from mmforge.backend.families.qwen import expect
from mmforge.backend.families.qwen import fields as qwen_fields
from mmforge.backend.families.qwen.build import deepstack_vision_output
from mmforge.backend.families.qwen.tiny_qwen3_vl_moe import QWEN3_VL_MOE, RELEASED_QWEN3_VL_MOE


def sparse_layers(text: Any) -> list[int]:
    """The text layers with a sparse MoE block, as transformers picks them.

    Args:
        text: The text config, as a mapping or a transformers config object.
    """

    def get(key: str, default: Any = None) -> Any:
        if isinstance(text, dict):
            return text.get(key, default)
        return getattr(text, key, default)

    experts = get("num_local_experts") or get("num_experts") or 0
    step = int(get("decoder_sparse_step", 1) or 1)
    dense = set(get("mlp_only_layers") or [])
    layers = int(get("num_hidden_layers"))
    return [i for i in range(layers) if i not in dense and experts > 0 and (i + 1) % step == 0]


def qk_norm(hf_config: Any) -> None:
    """Tell mobius the attention normalises q and k per head, as every Qwen3-VL layer does.

    mobius 0.1 decides it by the text model_type (`qwen3_vl_text` yes,
    `qwen3_vl_moe_text` not listed) or by `use_qk_norm`.
    """
    text = getattr(hf_config, "text_config", hf_config)
    text.use_qk_norm = True


def moe_decoder(module: Any, hf_config: Any) -> None:
    """Qwen3-VL's 3-model module, with the sparse layers' MLP made mixtures of experts.

    Also DeepStack's vision output (as for Qwen3-VL) and the fused expert tensors split
    per expert when the weights are renamed (`split_experts`).
    """
    from mobius.components._moe import MoELayer, SoftmaxTopKGate

    deepstack_vision_output(module, hf_config)
    config = module.config
    text = getattr(hf_config, "text_config", hf_config)
    layers = module.decoder.model.layers
    for index in sparse_layers(text):
        # transformers renormalises the top-k weights always (Qwen3VLMoeTextTopKRouter).
        gate = SoftmaxTopKGate(
            config.hidden_size,
            config.num_local_experts,
            config.num_experts_per_tok,
            norm_topk_prob=True,
        )
        layers[index].mlp = MoELayer(config, gate=gate)
    experts = int(config.moe_intermediate_size or 0)
    hidden = int(config.hidden_size)
    base = type(module)

    class MoeSplit(base):  # type: ignore[misc, valid-type]
        def preprocess_weights(self, state_dict: dict[str, Any]) -> dict[str, Any]:
            renamed: dict[str, Any] = base.preprocess_weights(
                self, split_experts(state_dict, experts, hidden)
            )
            return renamed

    module.__class__ = MoeSplit


_FUSED = re.compile(r"(.*\.mlp\.experts\.)(gate_up_proj|down_proj)$")


def split_experts(state: dict[str, Any], inner: int, hidden: int) -> dict[str, Any]:
    """Fused expert tensors as one Linear weight [out, in] per expert and projection.

    Two layouts exist, and transformers tells them apart by shape alone
    (conversion_mapping.py, "qwen3_vl_moe": Transpose(1, 2, check_dims=True)): the
    releases' `gate_up_proj` [E, H, 2I] and `down_proj` [E, I, H], and the one
    transformers 5 holds in memory and saves, [E, 2I, H] and [E, H, I]. A tensor already
    shaped like the in-memory one is read as that one, as transformers reads it. Gate
    rows come before up rows. The slices stay views of the checkpoint tensor (its name is
    kept), so each expert is read from the file as its component is written.
    """
    out: dict[str, Any] = {}
    for name, value in state.items():
        match = _FUSED.fullmatch(name)
        if match is None or len(value.shape) != 3:
            out[name] = value
            continue
        prefix, kind = match.group(1), match.group(2)
        count = int(value.shape[0])
        if kind == "gate_up_proj":
            in_memory = tuple(value.shape[1:]) == (2 * inner, hidden)
            for e in range(count):
                if in_memory:
                    gate, up = value[e, :inner], value[e, inner:]
                else:
                    gate, up = value[e, :, :inner].t(), value[e, :, inner:].t()
                out[f"{prefix}{e}.gate_proj.weight"] = gate
                out[f"{prefix}{e}.up_proj.weight"] = up
        else:
            in_memory = tuple(value.shape[1:]) == (hidden, inner)
            for e in range(count):
                out[f"{prefix}{e}.down_proj.weight"] = value[e] if in_memory else value[e].t()
    return out


def architecture(cfg: Cfg) -> tuple[str, ...]:
    """The decoder's experts, in words, for inspect and the model card."""
    text = cfg.text
    experts = text.first("num_local_experts", "num_experts")
    top_k = text.get("num_experts_per_tok")
    layers = int(text.get("num_hidden_layers"))
    sparse = sparse_layers(text.data)
    dense = [i for i in range(layers) if i not in sparse]
    where = (
        "every layer"
        if not dense
        else f"{len(sparse)} of {layers} layers (dense MLP at "
        f"{'layer' if len(dense) == 1 else 'layers'} {', '.join(map(str, dense))})"
    )
    return (
        f"Mixture of experts on {where}: {experts} routed experts of width "
        f"{text.get('moe_intermediate_size')}, {top_k} active per token (softmax router, "
        "top-k weights renormalised), no shared expert; the package computes every expert "
        "for every token (the graph builder's portable form), so decoding costs what the "
        "total parameters cost, not the active ones",
    )


FIELDS: tuple[Rule, ...] = (
    *qwen_fields.QWEN3_VL,
    *shapes("text_config.", "moe_intermediate_size", "num_local_experts", "num_experts"),
    honoured("text_config.num_experts_per_tok", "top-k routing (measured)"),
    honoured("text_config.decoder_sparse_step", "which layers are sparse (measured)"),
    honoured("text_config.mlp_only_layers", "layers with a dense MLP instead (measured)"),
    inert(
        "text_config.norm_topk_prob",
        "transformers' Qwen3-VL MoE router renormalises the top-k weights always and does "
        "not read it; so does the package",
    ),
    inert("text_config.output_router_logits", "training-only router loss"),
    inert("text_config.router_aux_loss_coef", "training-only router loss"),
    inert("text_config.sliding_window", "transformers sets it to None: no sliding window"),
)


def family(qwen3_vl: Family, package: PackageSpec) -> Family:
    """The Qwen3-VL MoE entry, from Qwen3-VL's entry and package."""
    moe_package = dataclasses.replace(
        package,
        config_patch=qk_norm,
        module_patch=moe_decoder,
        builder_type=lambda cfg: "qwen3_vl",
        notes=(
            *package.notes,
            "The sparse layers' experts are split from the checkpoint's fused tensors "
            "(either layout: the releases' [E, H, 2I] or transformers' [E, 2I, H]).",
        ),
    )
    return dataclasses.replace(
        qwen3_vl,
        key="qwen3_vl_moe",
        name="Qwen3-VL MoE",
        recognition=Recognition(model_types=("qwen3_vl_moe",)),
        profile=dataclasses.replace(
            qwen3_vl.profile,
            hf_class="Qwen3VLMoeForConditionalGeneration",
            fields=FIELDS,
            architecture=architecture,
            notes=(
                *qwen3_vl.profile.notes,
                "Mixture-of-experts text layers (Qwen3-VL-30B-A3B, 235B-A22B); the pipeline "
                "is Qwen3-VL's.",
            ),
        ),
        package=moe_package,
        fixtures=Fixtures(
            tiny=QWEN3_VL_MOE, released=RELEASED_QWEN3_VL_MOE, expect=expect.QWEN3_VL_MOE
        ),
    )
