"""InternVL 3 / 3.5's vision tower and embedding graphs, written here; the decoder is mobius's.

mobius 0.1 registers `internvl` with its InternVL2 model (the remote-code layout: fused
qkv, `mlp1.*`), whose Qwen2 / Qwen3 decoder taking inputs_embeds is right, built from
`text_config` (Qwen3's q_norm / k_norm included), but whose tower reads the remote-code
config and weights. So the graph fix `own_vision_and_embedding` puts our graphs in place
of its vision and embedding, op by op with the checkpoint's own tensor names, and gives
the decoder's initializers the checkpoint's names too, so every weight goes through the
common path (convert/weights.py).

The vision graph takes one picture a call as ONNX Runtime GenAI's `qwen2_5_vl` processor
hands it (its views stacked in one canvas, backend/internvl_tiles.py), un-patches it into
the views, [views, 3, 448, 448], and follows transformers 5's
InternVLModel.get_image_features on them:

- InternVLVisionEmbeddings: the patch Conv (with bias), the CLS token first, the
  position embeddings added as they are (the view's patch grid is the table's, so
  transformers does not interpolate; another size is refused);
- InternVLVisionLayer × depth: `layernorm_before` (LayerNorm or RMSNorm by `norm_type`),
  q/k/v (biases by `attention_bias`), q_norm / k_norm over the whole width when
  `use_qk_norm` (RMSNorm, eps 1e-6), full attention, `projection_layer`, scaled by
  `lambda_1`, then `layernorm_after`, the MLP (fc1, `hidden_act`, fc2) scaled by `lambda_2`;
- the hidden state `vision_feature_layer` selects (-1: the last, through the tower's final
  LayerNorm unless `use_mean_pooling`), the CLS token dropped (strategy `default`);
- InternVLModel.pixel_shuffle with `downsample_ratio`, its reshapes and permutes in order;
- InternVLMultiModalProjector: LayerNorm, linear_1, `projector_hidden_act`, linear_2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families._graph_edit import name_decoder_weights
from mmforge.backend.families._hooks import FixRequest
from mmforge.backend.families.components.graph_builder import GELU_TANH, GraphBuilder
from mmforge.backend.families.components.hosts.videochat import features_at_image_ids

# The names the graphs use: transformers 5's save_pretrained names (its legacy layout).
VISION = "vision_tower."
PROJECTOR = "multi_modal_projector."
TEXT = "language_model.model."
HEAD = "language_model.lm_head.weight"

# transformers' activations the tower and projector may name.
ACTS = ("gelu", "silu", "quick_gelu", *GELU_TANH)
NORMS = ("layer_norm", "rms_norm")
QK_NORM_EPS = 1e-6  # InternVLVisionRMSNorm's default: q_norm / k_norm are built without eps


def checkpoint_name(name: str) -> str:
    """A tensor name in the layout the graphs use.

    The -hf releases (transformers 4.52's converter) write `model.vision_tower.*`,
    `model.multi_modal_projector.*`, `model.language_model.*` and `lm_head.*`;
    transformers 5's save_pretrained writes `vision_tower.*`, `multi_modal_projector.*`,
    `language_model.model.*` and `language_model.lm_head.*` (measured).
    """
    for new, old in (
        ("model.language_model.", TEXT),
        ("model.vision_tower.", VISION),
        ("model.multi_modal_projector.", PROJECTOR),
        ("lm_head.", "language_model.lm_head."),
    ):
        if name.startswith(new):
            return old + name[len(new) :]
    return name


def _pair(value: Any, default: int) -> tuple[int, int]:
    if isinstance(value, (list, tuple)):
        return int(value[0]), int(value[-1])
    if value is None:
        return default, default
    return int(value), int(value)


def view_size(cfg: Cfg) -> int:
    """The tower's picture side (448 in the releases); a non-square tower is refused."""
    height, width = _pair(cfg.get("vision_config.image_size"), 448)
    if height != width:
        raise MmforgeError(
            f"vision_config.image_size {[height, width]} is not square",
            "InternVL releases use 448 × 448 views; mmforge builds square towers only",
        )
    return height


def patch_size(cfg: Cfg) -> int:
    """The tower's patch side (14 in the releases)."""
    height, width = _pair(cfg.get("vision_config.patch_size"), 14)
    if height != width:
        raise MmforgeError(
            f"vision_config.patch_size {[height, width]} is not square",
            "InternVL releases use 14 × 14 patches",
        )
    return height


def scale(cfg: Cfg) -> int:
    """How many patches a side one feature merges: 1 / downsample_ratio (2 in the releases)."""
    ratio = float(cfg.get("downsample_ratio", 0.5))
    merge = round(1 / ratio) if ratio > 0 else 0
    grid = view_size(cfg) // patch_size(cfg)
    if merge < 1 or abs(merge * ratio - 1) > 1e-9 or grid % merge:
        raise MmforgeError(
            f"downsample_ratio {ratio} does not divide the {grid} × {grid} patch grid",
            "InternVL releases use downsample_ratio 0.5 on 32 × 32 patches",
        )
    return merge


def runtime_patch(cfg: Cfg) -> int:
    """The runtime's patch side: one id a patch, so a view is tokens_per_image ids (28).

    The tower's patch times the pixel shuffle's scale: a view of S px is (S / p)² ids.
    """
    return patch_size(cfg) * scale(cfg)


def tokens_per_image(cfg: Cfg) -> int:
    """The features one 448 × 448 view gives: (grid / merge)², 256 in the releases."""
    grid = view_size(cfg) // patch_size(cfg)
    return (grid // scale(cfg)) ** 2


def feature_layer(cfg: Cfg) -> int:
    """The hidden_states index the features are read from (0: the embeddings)."""
    depth = int(cfg.get("vision_config.num_hidden_layers", 24))
    layer = cfg.get("vision_feature_layer", -1)
    if isinstance(layer, list):
        raise MmforgeError(
            f"vision_feature_layer {layer} is a list",
            "InternVL reads one layer; set vision_feature_layer to one index",
        )
    index = int(layer) if int(layer) >= 0 else depth + 1 + int(layer)
    if not 0 <= index <= depth:
        raise MmforgeError(
            f"vision_feature_layer {layer} is outside the {depth}-layer tower",
            "The config is inconsistent: check vision_feature_layer",
        )
    return index


def final_norm(cfg: Cfg) -> bool:
    """Whether the features pass the tower's final LayerNorm (layer -1, no mean pooling)."""
    return int(cfg.get("vision_feature_layer", -1)) == -1 and not bool(
        cfg.get("vision_config.use_mean_pooling", True)
    )


def unused_tensors(cfg: Cfg) -> tuple[str, ...]:
    """Tower tensors InternVLModel never computes with: the layers past the one read."""
    depth = int(cfg.get("vision_config.num_hidden_layers", 24))
    past = [rf"{VISION}encoder\.layer\.{i}\." for i in range(feature_layer(cfg), depth)]
    unread_norm = () if final_norm(cfg) else (rf"{VISION}layernorm\.",)
    return (*past, *unread_norm)


def _act(g: GraphBuilder, x: Any, name: str) -> Any:
    if name == "silu":
        return g.op("Mul", x, g.op("Sigmoid", x))
    if name == "quick_gelu":
        return g.op("Mul", x, g.op("Sigmoid", g.op("Mul", x, g.const(np.float32(1.702)))))
    return g.gelu(x, tanh=name in GELU_TANH)


def _rms_norm(g: GraphBuilder, x: Any, name: str, size: int, eps: float) -> Any:
    """InternVLVisionRMSNorm: weight · x / √(mean(x²) + eps)."""
    mean = g.op("ReduceMean", g.op("Mul", x, x), g.const(np.array([-1])), keepdims=1)
    normed = g.op(
        "Mul", x, g.op("Reciprocal", g.op("Sqrt", g.op("Add", mean, g.const(np.float32(eps)))))
    )
    return g.op("Mul", g.weight(name + ".weight", [size]), normed)


def _norm(g: GraphBuilder, x: Any, prefix: str, size: int, eps: float, kind: str) -> Any:
    if kind == "rms_norm":
        return _rms_norm(g, x, prefix, size, eps)
    return g.layer_norm(x, prefix, size, eps)


def check(cfg: Cfg) -> None:
    """Refuse, with one clear message each, the settings the graph does not build."""
    v = cfg.sub("vision_config")
    for what, value, allowed in (
        ("vision_config.hidden_act", v.get("hidden_act", "gelu"), ACTS),
        ("projector_hidden_act", cfg.get("projector_hidden_act", "gelu"), ACTS),
        ("vision_config.norm_type", v.get("norm_type", "layer_norm"), NORMS),
        (
            "vision_feature_select_strategy",
            cfg.get("vision_feature_select_strategy", "default"),
            ("default",),
        ),
    ):
        if value not in allowed:
            raise MmforgeError(
                f"{what} {value!r} is not supported", f"Supported: {', '.join(allowed)}"
            )
    if int(v.get("num_channels", 3)) != 3:
        raise MmforgeError(
            f"vision_config.num_channels is {v.get('num_channels')}",
            "ONNX Runtime GenAI hands the tower RGB pictures: 3 channels",
        )
    if not bool(v.get("use_absolute_position_embeddings", True)):
        raise MmforgeError(
            "vision_config.use_absolute_position_embeddings is false",
            "InternVL releases use absolute position embeddings; mmforge builds them only",
        )
    tokens_per_image(cfg)
    feature_layer(cfg)


def vision_graph(cfg: Cfg) -> Any:
    """One picture a call: its canvas un-patched into views, the tower, shuffle, projector.

    Inputs as the Qwen pipeline gives a graph whose grid is [1, 3] (QwenVisionState::Run:
    one picture's rows each call): pixel_values [a·b, 3·2·p·p], the canvas's p px
    patches row by row (two equal frames each), and image_grid_thw [1, 3] = (1, a, b),
    with b = S / p and a = b · views. Output: image_features [views · K, text hidden],
    the views' features in transformers' order (the tiles row by row, the thumbnail).
    """
    import onnx_ir as ir

    check(cfg)
    size, p = view_size(cfg), runtime_patch(cfg)
    side = size // p  # patches a side of one view
    g = GraphBuilder("internvl_vision")
    rows = g.input("pixel_values", ir.DataType.FLOAT, ["patches", 3 * 2 * p * p])
    grid = g.input("image_grid_thw", ir.DataType.INT64, [1, 3])

    def c(*values: int) -> Any:
        return g.const(np.array(values, np.int64))

    # The canvas's views: [views, side, side, 3, 2, p, p], frame 0, then [views, 3, S, S].
    down = g.op("Reshape", g.op("Slice", grid, c(0, 1), c(1, 2), c(0, 1)), c(1))
    views = g.op("Div", down, c(side))
    x = g.op("Reshape", rows, g.op("Concat", views, c(side, side, 3, 2, p, p), axis=0))
    x = g.op("Gather", x, g.const(np.int64(0)), axis=4)  # [views, side, side, 3, p, p]
    x = g.op("Transpose", x, perm=[0, 3, 1, 4, 2, 5])  # [views, 3, side, p, side, p]
    x = g.op("Reshape", x, c(-1, 3, size, size))
    g.output(_tower(g, cfg, x), "image_features")
    return g.model()


def _tower(g: GraphBuilder, cfg: Cfg, views: Any) -> Any:
    """InternViT, pixel shuffle and projector on views [N, 3, S, S]: [N · K, text hidden]."""
    v = cfg.sub("vision_config")
    width = int(v.get("hidden_size", 1024))
    heads = int(v.get("num_attention_heads", 16))
    ff = int(v.get("intermediate_size", 4096))
    eps = float(v.get("layer_norm_eps", 1e-6))
    channels = int(v.get("num_channels", 3))
    act = str(v.get("hidden_act", "gelu"))
    norm = str(v.get("norm_type", "layer_norm"))
    bias = bool(v.get("attention_bias", False))
    qk_norm = bool(v.get("use_qk_norm", False))
    proj_act = str(cfg.get("projector_hidden_act", "gelu"))
    size, patch, merge = view_size(cfg), patch_size(cfg), scale(cfg)
    grid = size // patch
    text_hidden = int(cfg.text.get("hidden_size"))
    layer = feature_layer(cfg)
    head_dim = width // heads

    x = views
    emb = VISION + "embeddings."
    x = g.op(
        "Conv",
        x,
        g.weight(emb + "patch_embeddings.projection.weight", [width, channels, patch, patch]),
        g.weight(emb + "patch_embeddings.projection.bias", [width]),
        strides=[patch, patch],
        kernel_shape=[patch, patch],
    )  # [N, D, g, g]
    x = g.op("Transpose", g.op("Reshape", x, g.const(np.array([0, width, -1]))), perm=[0, 2, 1])
    count = g.op("Shape", x, start=0, end=1)
    cls = g.op(
        "Expand",
        g.weight(emb + "cls_token", [1, 1, width]),
        g.op("Concat", count, g.const(np.array([1, width])), axis=0),
    )
    x = g.op("Concat", cls, x, axis=1)  # [N, 1 + g², D]
    x = g.op("Add", x, g.weight(emb + "position_embeddings", [1, grid * grid + 1, width]))

    split = g.const(np.array([0, 0, heads, head_dim]))

    def heads_first(t: Any) -> Any:
        return g.op("Transpose", g.op("Reshape", t, split), perm=[0, 2, 1, 3])

    for i in range(layer):
        p = f"{VISION}encoder.layer.{i}."
        h = _norm(g, x, p + "layernorm_before", width, eps, norm)
        q = g.linear(h, p + "attention.q_proj", width, width, bias)
        k = g.linear(h, p + "attention.k_proj", width, width, bias)
        val = g.linear(h, p + "attention.v_proj", width, width, bias)
        if qk_norm:
            q = _rms_norm(g, q, p + "attention.q_norm", width, QK_NORM_EPS)
            k = _rms_norm(g, k, p + "attention.k_norm", width, QK_NORM_EPS)
        scores = g.op(
            "MatMul", heads_first(q), g.op("Transpose", heads_first(k), perm=[0, 1, 3, 2])
        )
        scores = g.op("Mul", scores, g.const(np.float32(head_dim**-0.5)))
        ctx = g.op("MatMul", g.op("Softmax", scores, axis=-1), heads_first(val))
        ctx = g.op(
            "Reshape", g.op("Transpose", ctx, perm=[0, 2, 1, 3]), g.const(np.array([0, 0, width]))
        )
        out = g.linear(ctx, p + "attention.projection_layer", width, width)
        x = g.op("Add", g.op("Mul", g.weight(p + "lambda_1", [width]), out), x)
        h = _norm(g, x, p + "layernorm_after", width, eps, norm)
        h = g.linear(_act(g, g.linear(h, p + "mlp.fc1", width, ff), act), p + "mlp.fc2", ff, width)
        x = g.op("Add", g.op("Mul", g.weight(p + "lambda_2", [width]), h), x)
    if final_norm(cfg):
        x = g.layer_norm(x, VISION + "layernorm", width, eps)

    # The CLS token dropped, the patches as [N, g (rows), g (columns), D].
    x = g.slice(x, 1, grid * grid + 1, axis=1)
    x = g.op("Reshape", x, g.const(np.array([-1, grid, grid, width])))
    # InternVLModel.pixel_shuffle (its names: [N, W, H, C] for our [N, rows, cols, D]):
    # view [N, W, H/m, C·m], swap the middle axes, view [N, H/m, W/m, C·m²], swap back.
    x = g.op("Reshape", x, g.const(np.array([-1, grid, grid // merge, width * merge])))
    x = g.op("Transpose", x, perm=[0, 2, 1, 3])
    wide = width * merge * merge
    x = g.op("Reshape", x, g.const(np.array([-1, grid // merge, grid // merge, wide])))
    x = g.op("Transpose", x, perm=[0, 2, 1, 3])
    x = g.op("Reshape", x, g.const(np.array([-1, (grid // merge) ** 2, wide])))

    y = g.layer_norm(x, PROJECTOR + "layer_norm", wide, 1e-5)  # nn.LayerNorm's default eps
    y = g.linear(y, PROJECTOR + "linear_1", wide, text_hidden)
    y = g.linear(_act(g, y, proj_act), PROJECTOR + "linear_2", text_hidden, text_hidden)
    return g.op("Reshape", y, g.const(np.array([-1, text_hidden])))


def embedding_graph(cfg: Cfg) -> Any:
    """The features at the `<IMG_CONTEXT>` ids (hosts/videochat.py, `features_at_image_ids`)."""
    table = TEXT + "embed_tokens.weight"
    return features_at_image_ids(
        cfg, "internvl_embedding", table, "<IMG_CONTEXT>", field="image_token_id"
    )


def int_sizes(hf_config: Any) -> None:
    """Give the config's tower image_size and patch_size as ints, as mobius reads them.

    mobius's InternVL2 tower reads ints; transformers 5's InternVLVisionConfig holds
    pairs. Our tower replaces mobius's, so the ints only let mobius build.
    """
    vision = hf_config.vision_config
    vision.image_size = _pair(vision.image_size, 448)[0]
    vision.patch_size = _pair(vision.patch_size, 14)[0]


def checkpoint_names(module: Any, hf_config: Any) -> None:
    """Keep the checkpoint's tensor names: every graph names its weights as the checkpoint.

    mobius's InternVL2 module routes remote-code names (`language_model.*` to
    `decoder.*`, `vision_model.*`, `mlp1.*`) and drops the rest; after the graph fix our
    vision and embedding graphs and the renamed decoder use the checkpoint's names.
    """

    def same(state_dict: dict[str, Any]) -> dict[str, Any]:
        return dict(state_dict)

    module.preprocess_weights = same


def own_vision_and_embedding(request: FixRequest) -> str | None:
    """Put our vision and embedding graphs in place of mobius's; name the decoder's weights."""
    models, cfg = request.models, request.cfg
    models["vision_encoder"] = vision_graph(cfg)
    models["embedding"] = embedding_graph(cfg)
    renamed = name_decoder_weights(models["decoder"].graph, TEXT, HEAD)
    text_type = cfg.text.get("model_type", "qwen2")
    return (
        f"Graphs: the InternViT tower (hidden state {feature_layer(cfg)}, pixel shuffle "
        f"×{scale(cfg)}, the projector) and the embedding are mmforge's; mobius's "
        f"{text_type} decoder ({renamed} weights)"
    )
