"""Phi-3 / Phi-3.5-Vision config fields (config.json as written, remote-code layout).

"Honoured" here means: read by the layout mapping (`layout.py`) into the native part that
computes with it (transformers' Phi3Config for the text model, CLIPVisionConfig for the
tower, the HD-transform settings). Checked fields are the HD-transform variants the
released models use; any other value is refused by name before anything else happens.
"""

from __future__ import annotations

from mmforge.backend.families._fields import Rule, honoured, inert, only

_TEXT = "mapped to transformers' Phi3Config (the text model)"

PHI3V: tuple[Rule, ...] = (
    *(
        honoured(path, _TEXT)
        for path in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "hidden_act",
            "rms_norm_eps",
            "rope_theta",
            "rope_scaling.*",
            "original_max_position_embeddings",
            "max_position_embeddings",
            "sliding_window",
            "tie_word_embeddings",
            "bos_token_id",
            "eos_token_id",
            "pad_token_id",
        )
    ),
    honoured("img_processor.image_dim_out", "the tower's width (the weights confirm it)"),
    honoured("img_processor.num_img_tokens", "tokens per 336 px crop (12×12 after the merge)"),
    honoured("img_processor.layer_idx", "the tower layer the features come from (default -2)"),
    only(
        "img_processor.name",
        "clip_vision_model",
        note="the remote code builds a CLIP ViT-L/14-336 tower; no other is known",
    ),
    inert("img_processor.model_name", "names the tower's origin; sizes are read from weights"),
    only("embd_layer.embedding_cls", "image", note="the released image embedding"),
    only("embd_layer.projection_cls", "mlp", note="Linear → GELU → Linear, as released"),
    only("embd_layer.use_hd_transform", True, note="the HD crops plus a global view"),
    only("embd_layer.with_learnable_separator", True, note="the glb_GN / sub_GN separators"),
    only(
        "embd_layer.hd_transform_order",
        "sub_glb",
        note="crops first, then the separator, then the global view, as released",
    ),
    *(
        inert(path, "bookkeeping or training only")
        for path in (
            "_name_or_path",
            "architectures",
            "auto_map.*",
            "model_type",
            "transformers_version",
            "torch_dtype",
            "use_cache",
            "initializer_range",
            "attention_dropout",
            "embd_pdrop",
            "resid_pdrop",
        )
    ),
)
