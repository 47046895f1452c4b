"""Idefics2's vision tower and embedding graphs, written here; the decoder is mobius's.

mobius 0.1 registers `idefics2` with its LLaVA model: its Llama decoder (inputs_embeds in,
Mistral's sliding window as GroupQueryAttention's `local_window_size`) is right, but its
vision graph is a fixed-size SigLIP with an MLP projector, where Idefics2 has a NaViT-style
SigLIP on the picture's own size and a perceiver resampler. So the graph fix
`own_vision_and_embedding` (`own_split_graphs` for a checkpoint that splits its pictures)
puts our graphs in place of mobius's vision and embedding, and gives the decoder's
initializers the checkpoint's names (`model.text_model.*`, `lm_head.weight`), so every
weight goes through the common path (convert/weights.py).

Pictures reach the vision graph as canvases (`canvas_vision_graph`): each part, sized as
transformers sizes it, cut out at its own size and run alone, which is what transformers
5.25's Idefics2Model.get_image_features gives it inside its padded, masked batch. On
each part:

- the NaViT SigLIP tower (components/towers/navit.py): Idefics2VisionEmbeddings' patch
  conv and bucketed positions, the SigLIP encoder and `post_layernorm`;
- Idefics2Connector: the modality projection (gate/up/down MLP with the text's
  activation) and the perceiver resampler (latents attending to the context and
  themselves, grouped-query, RMSNorms, a final RMSNorm) to `resampler_n_latents` rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import MmforgeError
from mmforge.backend.families._base import Cfg
from mmforge.backend.families._graph_edit import name_decoder_weights
from mmforge.backend.families._hooks import FixRequest
from mmforge.backend.families.components.graph_builder import GraphBuilder
from mmforge.backend.families.components.hosts.videochat import features_at_image_ids
from mmforge.backend.families.components.towers.navit import activation, navit_tower
from mmforge.backend.picture_sizing import SPLIT_PARTS

VISION = "model.vision_model."
CONNECTOR = "model.connector."
TEXT = "model.text_model."
HEAD = "lm_head.weight"


def checkpoint_name(name: str) -> str:
    """A tensor name in the layout the graphs use (transformers 5's, which the release shares).

    transformers 4.40's Idefics2 (the release's) wrote the same names; only a checkpoint
    saved without the `model.` prefix (the base Idefics2Model) is renamed.
    """
    for part in ("vision_model.", "connector.", "text_model."):
        if name.startswith(part):
            return "model." + name
    return name


def tokens_per_image(cfg: Cfg) -> int:
    """The features one picture gives: the perceiver's latents."""
    return int(cfg.get("perceiver_config.resampler_n_latents", 64))


def _rms_norm(g: GraphBuilder, x: Any, name: str, size: int, eps: float) -> Any:
    """Idefics2RMSNorm: weight · x / √(mean(x²) + eps)."""
    mean = g.op("ReduceMean", g.op("Mul", x, x), g.const(np.array([-1])), keepdims=1)
    normed = g.op("Div", x, g.op("Sqrt", g.op("Add", mean, g.const(np.float32(eps)))))
    return g.op("Mul", g.weight(name, [size]), normed)


def _mlp(g: GraphBuilder, x: Any, prefix: str, n_in: int, ff: int, n_out: int, act: str) -> Any:
    """Idefics2MLP: down(act(gate(x)) · up(x)), no biases."""
    gate = activation(g, g.linear(x, prefix + "gate_proj", n_in, ff, False), act, "Connector")
    up = g.linear(x, prefix + "up_proj", n_in, ff, False)
    return g.linear(g.op("Mul", gate, up), prefix + "down_proj", ff, n_out, False)


def connector(g: GraphBuilder, cfg: Cfg, x: Any) -> Any:
    """Idefics2Connector on the tower's output [N, patches, width]: [N, latents, hidden].

    The modality projection, then the perceiver resampler.
    """
    v = cfg.sub("vision_config")
    width = int(v.get("hidden_size", 768))
    text = cfg.text
    hidden = int(text.get("hidden_size"))
    text_ff = int(text.get("intermediate_size"))
    text_act = str(text.get("hidden_act", "silu"))
    p = cfg.sub("perceiver_config")
    latents = tokens_per_image(cfg)
    depth = int(p.get("resampler_depth", 3))
    p_heads = int(p.get("resampler_n_heads", 16))
    p_dim = int(p.get("resampler_head_dim", 96))
    p_kv = int(p.get("num_key_value_heads", 4))
    p_eps = float(p.get("rms_norm_eps", text.get("rms_norm_eps", 1e-6)))
    p_act = str(p.get("hidden_act", "silu"))

    def heads_first(t: Any, n: int, d: int) -> Any:
        return g.op(
            "Transpose", g.op("Reshape", t, g.const(np.array([0, 0, n, d]))), perm=[0, 2, 1, 3]
        )

    context = _mlp(g, x, CONNECTOR + "modality_projection.", width, text_ff, hidden, text_act)
    res = CONNECTOR + "perceiver_resampler."
    count = g.op("Shape", context, start=0, end=1)
    lat = g.op(
        "Expand",
        g.weight(res + "latents", [latents, hidden]),
        g.op("Concat", count, g.const(np.array([latents, hidden])), axis=0),
    )  # [N, L, H]

    def repeat(t: Any) -> Any:
        if p_kv == p_heads:
            return t
        b = g.op("Unsqueeze", t, g.const(np.array([2])))  # [N, kv, 1, T, d]
        shape = g.op(
            "Concat",
            g.op("Shape", t, start=0, end=2),
            g.const(np.array([p_heads // p_kv])),
            g.op("Shape", t, start=2, end=4),
            axis=0,
        )
        return g.op("Reshape", g.op("Expand", b, shape), g.const(np.array([0, p_heads, -1, p_dim])))

    for i in range(depth):
        pre = f"{res}layers.{i}."
        normed = _rms_norm(g, lat, pre + "input_latents_norm.weight", hidden, p_eps)
        ctx_n = _rms_norm(g, context, pre + "input_context_norm.weight", hidden, p_eps)
        both = g.op("Concat", ctx_n, normed, axis=1)  # context first, then the latents
        q = heads_first(
            g.linear(normed, pre + "self_attn.q_proj", hidden, p_heads * p_dim, False),
            p_heads,
            p_dim,
        )
        k = heads_first(
            g.linear(both, pre + "self_attn.k_proj", hidden, p_kv * p_dim, False), p_kv, p_dim
        )
        val = heads_first(
            g.linear(both, pre + "self_attn.v_proj", hidden, p_kv * p_dim, False), p_kv, p_dim
        )
        scores = g.op("MatMul", q, g.op("Transpose", repeat(k), perm=[0, 1, 3, 2]))
        scores = g.op("Mul", scores, g.const(np.float32(p_dim**-0.5)))
        att = g.op("MatMul", g.op("Softmax", scores, axis=-1), repeat(val))
        att = g.op(
            "Reshape",
            g.op("Transpose", att, perm=[0, 2, 1, 3]),
            g.const(np.array([0, 0, p_heads * p_dim])),
        )
        lat = g.op(
            "Add", lat, g.linear(att, pre + "self_attn.o_proj", p_heads * p_dim, hidden, False)
        )
        h = _rms_norm(g, lat, pre + "post_attention_layernorm.weight", hidden, p_eps)
        lat = g.op("Add", lat, _mlp(g, h, pre + "mlp.", hidden, 4 * hidden, hidden, p_act))
    lat = _rms_norm(g, lat, res + "norm.weight", hidden, p_eps)
    return lat


def embedding_graph(cfg: Cfg) -> Any:
    """The features at the `<image>` ids (hosts/videochat.py, `features_at_image_ids`)."""
    table = TEXT + "embed_tokens.weight"
    return features_at_image_ids(
        cfg, "idefics2_embedding", table, "<image>", field="image_token_id"
    )


def own_vision_and_embedding(request: FixRequest) -> str | None:
    """Our canvas vision graph (one part a picture) and embedding in place of mobius's."""
    models, cfg = request.models, request.cfg
    models["vision_encoder"] = canvas_vision_graph(cfg, 1)
    models["embedding"] = embedding_graph(cfg)
    renamed = name_decoder_weights(models["decoder"].graph, TEXT, HEAD)
    return (
        "Graphs: the NaViT SigLIP tower, the connector (modality projection, perceiver "
        f"resampler to {tokens_per_image(cfg)} latents) on each picture's canvas and the "
        f"embedding are mmforge's; mobius's Mistral decoder ({renamed} weights)"
    )


# --- image splitting (do_image_splitting) ----------------------------------------------

PARTS = SPLIT_PARTS  # the four quarters, then the whole


def split_tokens(cfg: Cfg) -> int:
    """The runtime's ids a split picture takes: five parts of K features, a fake id between.

    Idefics2Processor frames the five parts as `<fake>` + (K `<image>` + `<fake>`) × 5;
    the runtime writes K' marker ids between the outer two, so K' = 5 K + 4, and the
    embedding graph puts the fake token's embedding at the four inner places.
    """
    return PARTS * tokens_per_image(cfg) + PARTS - 1


def canvas_vision_graph(cfg: Cfg, parts: int) -> Any:
    """The tower and connector on each part of each canvas: image_features [N·K', H].

    Input: pixel_values [1, N, 3, L + 1, `parts` L], the canvases the intake packs
    (picture_sizing.canvas_size: five parts a split picture, else one) after the
    runtime's rescale and normalisation. Row 0
    holds each part's size; the graph reads it through slot 0's black and white pixels
    (2 and 3), so it holds whatever the normalisation. Each part is cut to its own size
    and goes through the tower and connector alone (an ONNX Loop): transformers pads the
    parts to one size and masks the padding (a patch is kept only where all its pixels
    are the part's), which gives each part exactly what it gives alone; pictures of a
    prompt may have any sizes, as their canvases have one. The rows: each part's K
    features, with a split picture's zero row between parts (`with_gaps`): K' = 5 K + 4.
    """
    import onnx_ir as ir

    hidden = int(cfg.text.get("hidden_size"))
    g = GraphBuilder("idefics2_vision")
    f32 = ir.DataType.FLOAT
    given = g.input("pixel_values", f32, ["batch", "num_images", 3, "height", "width"])
    shape = g.op("Concat", g.const(np.array([-1])), g.op("Shape", given, start=2, end=5), axis=0)
    canvases = g.op("Reshape", given, shape)  # [N, 3, L + 1, 5 L]
    side = g.op("Shape", canvases, start=2, end=3)
    side = g.op("Sub", side, g.const(np.array([1])))  # L
    header = g.op("Gather", canvases, g.const(np.int64(0)), axis=2)  # [N, 3, 5 L]
    black = g.op("Gather", header, g.const(np.array([2])), axis=2)  # [N, 3, 1]
    white = g.op("Gather", header, g.const(np.array([3])), axis=2)
    levels = g.op(
        "Round",
        g.op(
            "Mul",
            g.op("Div", g.op("Sub", header, black), g.op("Sub", white, black)),
            g.const(np.float32(255.0)),
        ),
    )  # the header's 0..255 values, [N, 3, 5 L]
    starts = g.op("Mul", g.const(np.arange(parts, dtype=np.int64)), side)  # each slot's column

    def size_at(column: Any) -> Any:
        """A part's side from its two header channels: [N · parts]."""
        at = g.op("Gather", levels, column, axis=2)  # [N, 3, parts]
        high = g.op("Gather", at, g.const(np.int64(0)), axis=1)
        low = g.op("Gather", at, g.const(np.int64(1)), axis=1)
        value = g.op("Add", g.op("Mul", high, g.const(np.float32(256.0))), low)
        return g.op("Reshape", g.op("Cast", value, to=ir.DataType.INT64), g.const(np.array([-1])))

    heights = size_at(starts)
    widths = size_at(g.op("Add", starts, g.const(np.int64(1))))
    # The slots under the header, one after another: [N · parts, 3, L, L].
    body = g.op("Slice", canvases, g.const(np.array([1])), g.const(np.array([2**62])),
                g.const(np.array([2])))  # fmt: skip
    per_slot = g.op(
        "Concat", g.const(np.array([0, 3])), side, g.const(np.array([parts])), side, axis=0
    )
    body = g.op("Transpose", g.op("Reshape", body, per_slot), perm=[0, 3, 1, 2, 4])
    square = g.op("Concat", g.const(np.array([-1, 3])), side, side, axis=0)
    slots = g.op("Reshape", body, square)
    count = g.op("Squeeze", g.op("Shape", slots, start=0, end=1))

    def one_part(index: Any) -> Any:
        at = g.op("Unsqueeze", index, g.const(np.array([0])))
        ends = g.op(
            "Concat",
            g.op("Add", at, g.const(np.array([1]))),
            g.op("Gather", heights, at),
            g.op("Gather", widths, at),
            axis=0,
        )
        part = g.op(
            "Slice", slots, g.op("Concat", at, g.const(np.array([0, 0])), axis=0), ends,
            g.const(np.array([0, 2, 3])),
        )  # fmt: skip
        lat = connector(g, cfg, navit_tower(g, cfg, VISION, pixels=part))  # [1, K, H]
        return g.op("Squeeze", lat, g.const(np.array([0])))

    features = g.loop(count, one_part, "idefics2_part")  # [N · parts, K, H]
    if parts > 1:
        features = with_gaps(g, cfg, features)
    g.output(g.op("Reshape", features, g.const(np.array([-1, hidden]))), "image_features")
    return g.model()


def with_gaps(g: GraphBuilder, cfg: Cfg, rows: Any, gap: Any = None) -> Any:
    """Each picture's five parts of K rows with a `gap` row between them: [N, 5 K + 4, H].

    `rows`: [N · 5, K, H] (or [N, 5, K, H]); `gap`: a [1, H] row (None: zeros). The
    runtime hands the embedding graph `vision.num_visual_tokens` rows a picture, 5 K + 4:
    the vision graph fills the gaps with zeros, the embedding graph with the fake token.
    """
    hidden = int(cfg.text.get("hidden_size"))
    per_part = tokens_per_image(cfg)
    groups = g.op("Reshape", rows, g.const(np.array([-1, PARTS, per_part, hidden])))
    shape = g.op(
        "Concat", g.op("Shape", groups, start=0, end=2), g.const(np.array([1, hidden])), axis=0
    )
    if gap is None:
        fill = g.op("ConstantOfShape", shape, value=g.ir.tensor(np.zeros(1, np.float32)))
    else:
        fill = g.op("Expand", gap, shape)  # [N, 5, 1, H]
    out = g.op("Concat", groups, fill, axis=2)  # [N, 5, K + 1, H]
    out = g.op("Reshape", out, g.const(np.array([-1, PARTS * (per_part + 1), hidden])))
    return g.slice(out, 0, split_tokens(cfg), axis=1)  # no gap after the last part


def split_embedding_graph(cfg: Cfg, fake: int) -> Any:
    """Token embeddings with each split picture's features and inner fake tokens written.

    The runtime's ids hold 5 K + 4 image ids a picture (`split_tokens`), and the vision
    graph's rows are each part's K features with a zero row between parts. The rows
    between parts become the fake token's embedding (`fake`, <fake_token_around_image>'s
    id) and every row goes, in order, to the image ids: transformers' embeddings of its
    own ids, in which those four are fake ids.
    """
    import onnx_ir as ir

    vocab, hidden = int(cfg.text.get("vocab_size")), int(cfg.text.get("hidden_size"))
    per_part = tokens_per_image(cfg)
    image_token = int(cfg.get("image_token_id"))
    g = GraphBuilder("idefics2_split_embedding")
    ids = g.input("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"])
    features = g.input("image_features", ir.DataType.FLOAT, ["num_image_tokens", hidden])
    table = g.weight(TEXT + "embed_tokens.weight", [vocab, hidden])
    # One Gather for the ids and the fake token (an int4 package quantizes the table
    # under its one Gather): [ids..., fake] -> rows.
    flat = g.op("Reshape", ids, g.const(np.array([-1])))
    looked_up = g.op(
        "Gather", table, g.op("Concat", flat, g.const(np.array([fake])), axis=0), axis=0
    )
    embeds = g.op(
        "Reshape",
        g.op(
            "Slice",
            looked_up,
            g.const(np.array([0])),
            g.const(np.array([-1])),
            g.const(np.array([0])),
        ),
        g.op("Concat", g.op("Shape", ids), g.const(np.array([hidden])), axis=0),
    )
    fake_row = g.op("Slice", looked_up, g.const(np.array([-1])), g.const(np.array([2**62])),
                    g.const(np.array([0])))  # fmt: skip
    # Each picture's rows padded by one to five parts of K + 1, the last row of each dropped.
    pictures = g.op("Reshape", features, g.const(np.array([-1, split_tokens(cfg), hidden])))
    pad = g.op(
        "ConstantOfShape",
        g.op(
            "Concat",
            g.op("Shape", pictures, start=0, end=1),
            g.const(np.array([1, hidden])),
            axis=0,
        ),
        value=g.ir.tensor(np.zeros(1, np.float32)),
    )
    parts = g.op("Reshape", g.op("Concat", pictures, pad, axis=1),
                 g.const(np.array([-1, per_part + 1, hidden])))  # fmt: skip
    parts = g.slice(parts, 0, per_part, axis=1)  # [N · 5, K, H]
    rows = g.op("Reshape", with_gaps(g, cfg, parts, fake_row), g.const(np.array([-1, hidden])))
    has_features = g.op("Greater", g.op("Size", features), g.const(np.int64(0)))
    slots = g.op("And", g.op("Equal", ids, g.const(np.int64(image_token))), has_features)
    where = g.op("Transpose", g.op("NonZero", slots), perm=[1, 0])  # [M, 2]
    g.output(g.op("ScatterND", embeds, where, rows), "inputs_embeds")
    return g.model()


def feature_rows(cfg: Cfg, count: int) -> Any:
    """Which of the split vision graph's `count` rows are features (not a gap): a mask."""
    per_part = tokens_per_image(cfg)
    slot = np.arange(count) % split_tokens(cfg)
    return slot % (per_part + 1) != per_part


def own_split_graphs(request: FixRequest) -> str | None:
    """The split picture's vision and embedding graphs in place of mobius's; decoder names."""
    from mmforge.backend.families.idefics2.tokenizer import FAKE_TEXT, token_id
    from mmforge.backend.untrusted import read_json_file

    models, cfg, folder = request.models, request.cfg, request.folder
    if folder is None or not (folder / "tokenizer.json").is_file():
        raise MmforgeError(
            "This Idefics2 checkpoint has no tokenizer.json, whose "
            f"{FAKE_TEXT} id a split picture needs",
            "Add the release's tokenizer.json to the checkpoint folder",
        )
    fake = token_id(read_json_file(folder / "tokenizer.json", "tokenizer.json"), FAKE_TEXT)
    models["vision_encoder"] = canvas_vision_graph(cfg, PARTS)
    models["embedding"] = split_embedding_graph(cfg, fake)
    renamed = name_decoder_weights(models["decoder"].graph, TEXT, HEAD)
    return (
        "Graphs: the NaViT SigLIP tower and the connector (modality projection, perceiver "
        f"resampler to {tokens_per_image(cfg)} latents) on each of a picture's five parts, "
        f"and the embedding ({FAKE_TEXT} between the parts) are mmforge's; mobius's "
        f"Mistral decoder ({renamed} weights)"
    )
