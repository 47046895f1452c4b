"""VipLLaVA: LLaVA-1.5 with five CLIP layers concatenated and a LayerNorm before the projector.

The same package as LLaVA-1.5 (videochat_flash_qwen, K = 576, LlavaProcessor's layout);
graphs.py reads `model_type` for what differs: the hidden states of every layer in
`vision_feature_layer(s)` ([-2, -5, -8, -11, 6] as released), each without its class
token, concatenated along the width, then `projector_layernorm` and the two Linears
(with biases, always), as VipLlavaModel.get_image_features computes them.

Its tiny checkpoint uses LLaVA-1.5's tokens and chat template: the text of
llava-hf/vip-llava-7b-hf's config.json and chat template was not found offline (its model
card's prompt is "###Human: <image>", a newline, the question, "###Assistant:"), so there
is no release-shaped one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mmforge.backend.families._base import Cfg, Family, Fixtures, Projector, Recognition
from mmforge.backend.families.llava import expect, fields
from mmforge.backend.families.llava.graphs import feature_layers
from mmforge.backend.tiny.build import TinySpec


def _projector(cfg: Cfg) -> Projector:
    act = cfg.get("projector_hidden_act", "gelu")
    layers = feature_layers(cfg)
    return Projector(
        "VipLlavaMultiModalProjector",
        f"LayerNorm → Linear → {str(act).upper()} → Linear",
        f"VipLLaVA concatenates the CLIP tower's hidden states {layers} (class token "
        f"dropped), then LayerNorm (projector_layernorm_eps="
        f"{cfg.get('projector_layernorm_eps', 1e-5)}) and a two-layer MLP "
        f"(projector_hidden_act={act})",
        {"vision_feature_layer": layers, "projector_hidden_act": act},
    )


def _vipllava_config(s: dict[str, int], vocab: int) -> Any:
    from transformers import VipLlavaConfig

    from mmforge.backend.families.llava.tiny import LLAVA

    llava = LLAVA.make_config(s, vocab)
    return VipLlavaConfig(
        text_config=llava.text_config.to_dict(),
        # 4 layers, so that the indices reach the embeddings (0), a middle layer and the
        # last one read (-2), as the release's [-2, -5, -8, -11, 6] spread over 24.
        vision_config={**llava.vision_config.to_dict(), "num_hidden_layers": 4},
        image_token_index=s["<image>"],
        projector_hidden_act="gelu",
        vision_feature_layer=[-2, -4, 0, 2],
        image_seq_length=16,
        tie_word_embeddings=False,
    )


def make(llava: Family) -> Family:
    """The VipLLaVA entry: LLaVA-1.5's package and reference, its own tower reading."""
    from mmforge.backend.families.llava.tiny import LLAVA as LLAVA_TINY

    tiny: TinySpec = dataclasses.replace(
        LLAVA_TINY,
        family_key="vipllava",
        hf_class="VipLlavaForConditionalGeneration",
        make_config=_vipllava_config,
    )
    return dataclasses.replace(
        llava,
        key="vipllava",
        name="VipLLaVA",
        recognition=Recognition(model_types=("vipllava",)),
        profile=dataclasses.replace(
            llava.profile,
            projector=_projector,
            hf_class="VipLlavaForConditionalGeneration",
            fields=fields.VIPLLAVA,
        ),
        fixtures=Fixtures(tiny=tiny, expect=expect.VIPLLAVA),
    )
