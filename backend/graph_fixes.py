"""Surgery on built graphs where mobius 0.1 computes something other than HF.

Each fix names the family and the mismatch it repairs, checks that the graph has the
shape it expects (raising a clear error otherwise, never patching blindly), and returns
a line for the package manifest. Family entries list the fixes they need.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mmforge.backend.errors import LayoutError
from mmforge.backend.families import Cfg


class _Nodes:
    """Collects new nodes and constants for one graph edit."""

    def __init__(self, graph: Any):
        self.graph = graph
        self.nodes: list[Any] = []

    def add(self, op: str, inputs: list[Any], **attrs: Any) -> Any:
        """A new node (not yet inserted); returns its first output."""
        import onnx_ir as ir

        node = ir.node(op, inputs=inputs, attributes=attrs)
        self.nodes.append(node)
        return node.outputs[0]

    def const(self, name: str, array: np.ndarray) -> Any:
        """An initializer, shared by name."""
        return _const(self.graph, name, array)

    def insert_before(self, anchor: Any) -> None:
        """Insert every collected node, in order, before `anchor`."""
        for node in self.nodes:
            self.graph.insert_before(anchor, node)


def pixtral_rope_any_grid(models: dict[str, Any], cfg: Cfg) -> str:
    """Mistral 3: compute the vision 2-D RoPE angles from the patch grid itself.

    mobius gathers cos/sin from a table indexed by `h * (image_size // patch) + w`, which
    is only right while the grid fits in image_size. The runtime resizes within a pixel
    budget, so a wide image has more columns than that and rows alias each other. HF
    (transformers 5) computes the angles from (h, w) directly: h·f[0::2] ‖ w·f[1::2].
    """
    import onnx_ir as ir

    graph = models["vision_encoder"].graph
    vision = cfg.sub("vision_config")
    head_dim = int(
        vision.get("head_dim") or vision.get("hidden_size") // vision.get("num_attention_heads")
    )
    theta = float(vision.get("rope_parameters.rope_theta", vision.get("rope_theta", 10000.0)))
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    f_h = inv_freq[0::2].astype(np.float32)
    f_w = inv_freq[1::2].astype(np.float32)

    gathers = {
        kind: node
        for node in graph
        if node.op_type == "Gather"
        for kind in ("cos", "sin")
        if node.inputs[0] is not None and node.inputs[0].name.endswith(f"rope.{kind}_cache")
    }
    if set(gathers) != {"cos", "sin"}:
        raise LayoutError("The Mistral 3 vision graph does not have the expected RoPE tables")
    try:
        flat = gathers["cos"].inputs[1].producer()  # Reshape(grid, [1, -1])
        grid = flat.inputs[0].producer()  # Add(Unsqueeze(h * width), Unsqueeze(w))
        rows = grid.inputs[0].producer().inputs[0].producer().inputs[0]  # Range(0, H)
        cols = grid.inputs[1].producer().inputs[0]  # Range(0, W)
        assert flat.op_type == "Reshape" and grid.op_type == "Add"
        assert rows.producer().op_type == "Range" and cols.producer().op_type == "Range"
    except (AttributeError, AssertionError, IndexError) as e:
        raise LayoutError("The Mistral 3 vision RoPE indexing has an unexpected form") from e

    dtype = gathers["cos"].outputs[0].dtype or ir.DataType.FLOAT
    edit = _Nodes(graph)
    add, const = edit.add, edit.const

    freq_h = const("mmforge_pixtral_rope_freq_h", f_h.reshape(1, -1))
    freq_w = const("mmforge_pixtral_rope_freq_w", f_w.reshape(1, -1))
    axis1 = const("mmforge_pixtral_axis1", np.array([1], dtype=np.int64))
    axis0 = const("mmforge_pixtral_axis0", np.array([0], dtype=np.int64))
    quarter = const("mmforge_pixtral_quarter", np.array([len(f_h)], dtype=np.int64))
    flat_shape = const(
        "mmforge_pixtral_flat_shape", np.array([1, -1, head_dim // 2], dtype=np.int64)
    )

    h = add("Cast", [rows], to=ir.DataType.FLOAT)
    w = add("Cast", [cols], to=ir.DataType.FLOAT)
    ang_h = add("Mul", [add("Unsqueeze", [h, axis1]), freq_h])  # [H, q]
    ang_w = add("Mul", [add("Unsqueeze", [w, axis1]), freq_w])  # [W, q]
    shape = add("Concat", [add("Shape", [rows]), add("Shape", [cols]), quarter], axis=0)
    grid_h = add("Expand", [add("Unsqueeze", [ang_h, axis1]), shape])  # [H, W, q]
    grid_w = add("Expand", [add("Unsqueeze", [ang_w, axis0]), shape])  # [H, W, q]
    angles = add("Reshape", [add("Concat", [grid_h, grid_w], axis=-1), flat_shape])
    results = {"cos": add("Cos", [angles]), "sin": add("Sin", [angles])}
    if dtype != ir.DataType.FLOAT:
        results = {k: add("Cast", [v], to=dtype) for k, v in results.items()}
    edit.insert_before(gathers["cos"])
    for kind, node in gathers.items():
        node.outputs[0].replace_all_uses_with(results[kind])
        graph.remove(node, safe=True)
    _drop_dead(models["vision_encoder"])
    return "Mistral 3 vision: RoPE angles computed from the patch grid (any image size)"


def _drop_dead(model: Any) -> None:
    """Remove the nodes and initializers a fix left without consumers."""
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    RemoveUnusedNodesPass()(model)
    graph = model.graph
    for name, value in list(graph.initializers.items()):
        if not value.uses() and not value.is_graph_output():
            del graph.initializers[name]


def bidirectional_image_attention(models: dict[str, Any], cfg: Cfg) -> str:
    """Gemma 3 and 4: image tokens of one image attend to each other in both directions.

    HF builds this from token_type_ids, which the runtime never passes to the decoder. The
    decoder gets an `input_ids` input instead (ORT GenAI 0.18 feeds it the prompt ids at
    prefill and one id per step) and builds the same mask from it: allowed = the causal
    mask OR (query and key are image tokens of the same image), inside the sliding window
    on local layers. Image numbers count begin-of-image tokens; past positions count as
    text, which is exact while the multimodal prefill runs in one pass (search.chunk_size
    unset).
    """
    import onnx_ir as ir

    graph = models["decoder"].graph
    image_id = int(cfg.first("image_token_index", "image_token_id"))
    boi_id = int(cfg.first("boi_token_index", "boi_token_id"))
    attention = [n for n in graph if n.op_type == "Attention"]
    if not attention:
        raise LayoutError("The decoder has no Attention nodes to make bidirectional")
    conditions = {}
    for node in attention:
        where = node.inputs[3].producer() if node.inputs[3] is not None else None
        while where is not None and where.op_type in ("Unsqueeze", "Cast"):
            where = where.inputs[0].producer()
        if where is None or where.op_type != "Where":
            raise LayoutError("The decoder's attention mask has an unexpected form")
        conditions[where.name] = where
    mask_input = next(v for v in graph.inputs if v.name == "attention_mask")
    ids = next((v for v in graph.inputs if v.name == "input_ids"), None)
    if ids is None:  # Gemma 4's decoder already takes input_ids (per-layer embeddings)
        ids = ir.Value(
            name="input_ids",
            type=ir.TensorType(ir.DataType.INT64),
            shape=ir.Shape([graph.inputs[0].shape[0], graph.inputs[0].shape[1]]),
        )
        graph.inputs.append(ids)
    edit = _Nodes(graph)
    add, const = edit.add, edit.const

    image = const("mmforge_image_token_id", np.array(image_id, dtype=np.int64))
    boi = const("mmforge_boi_token_id", np.array(boi_id, dtype=np.int64))
    one = const("mmforge_axis_1", np.array(1, dtype=np.int64))
    axes1 = const("mmforge_axes_1", np.array([1], dtype=np.int64))
    axes2 = const("mmforge_axes_2", np.array([2], dtype=np.int64))

    is_image = add("Equal", [ids, image])  # [B, S]
    number = add("CumSum", [add("Cast", [add("Equal", [ids, boi])], to=ir.DataType.INT64), one])
    same = add("Equal", [add("Unsqueeze", [number, axes2]), add("Unsqueeze", [number, axes1])])
    both = add("And", [add("Unsqueeze", [is_image, axes2]), add("Unsqueeze", [is_image, axes1])])
    block = add("And", [same, both])  # [B, S, S]
    # Left-pad with "not allowed" for the past keys: [B, S, P + S].
    ids_shape = add("Shape", [ids])
    total = add("Shape", [mask_input], start=1, end=2)
    past = add("Sub", [total, add("Shape", [ids], start=1, end=2)])
    pad_shape = add("Concat", [ids_shape, past], axis=0)
    pad = add("ConstantOfShape", [pad_shape], value=ir.tensor(np.array([False])))
    extra = add("Concat", [pad, block], axis=2)
    keep = add("Cast", [add("Unsqueeze", [mask_input, axes1])], to=ir.DataType.BOOL)
    extra = add("And", [extra, keep])  # padding stays masked

    edit.insert_before(graph.node(min(graph.index(w) for w in conditions.values())))
    for where in conditions.values():
        allowed = extra
        window = _window_check(where.inputs[0])
        if window is not None:
            # Sliding layers: HF keeps the window on the image block too,
            # AND(window, OR(causal, block)).
            limit = ir.node("And", inputs=[extra, window])
            graph.insert_before(where, limit)
            allowed = limit.outputs[0]
        combined = ir.node("Or", inputs=[where.inputs[0], allowed])
        graph.insert_before(where, combined)
        where.replace_input_with(0, combined.outputs[0])
    for node in attention:
        node.attributes["is_causal"] = ir.AttrInt64("is_causal", 0)
    return (
        "Decoder: image tokens attend bidirectionally within their image, the mask built "
        "from input_ids (the runtime never passes token_type_ids)"
    )


def _window_check(condition: Any, depth: int = 0) -> Any:
    """The `q - k < window` boolean inside a sliding-window mask condition, if any."""
    producer = condition.producer() if condition is not None else None
    if producer is None or depth > 8:
        return None
    if producer.op_type == "Less" and _is_constant(producer.inputs[1]):
        return producer.outputs[0]
    for source in producer.inputs:
        found = _window_check(source, depth + 1)
        if found is not None:
            return found
    return None


def _is_constant(value: Any) -> bool:
    if value is None:
        return False
    source = value.producer()
    return value.const_value is not None or (source is not None and source.op_type == "Constant")


def text_embedding_without_features(models: dict[str, Any], cfg: Cfg) -> str | None:
    """Keep the token embedding for placeholder ids when no features come with them.

    mobius's InputMixer writes zero vectors at every placeholder id when the feature input
    is empty, as on every decode step. HF replaces placeholders only when pixel values
    (or audio) are given, so a generated placeholder token embeds as text there. Each
    replacement condition gets "and its feature input is not empty" added.
    """
    import onnx_ir as ir

    graph = models["embedding"].graph
    feature_inputs = {v.name: v for v in graph.inputs if v.name.endswith("_features")}
    if not feature_inputs:
        return None
    changed = 0
    for where in [n for n in graph if n.op_type == "Where"]:
        condition = where.inputs[0]
        producer = condition.producer() if condition is not None else None
        source = producer.inputs[0].producer() if producer is not None else None
        if producer is None or producer.op_type != "Unsqueeze" or source is None:
            continue
        if source.op_type != "Equal" or source.inputs[0].name != "input_ids":
            continue
        features = _feature_source(where.inputs[1], feature_inputs)
        if features is None:
            raise LayoutError("An embedding replacement draws from no known feature input")
        # Element count, not rows: batched features arrive as [images, tokens, hidden].
        count = ir.node("Size", inputs=[features])
        zero = _const(graph, "mmforge_zero", np.array(0, dtype=np.int64))
        has = ir.node("Greater", inputs=[count.outputs[0], zero])
        both = ir.node("And", inputs=[condition, has.outputs[0]])
        for node in (count, has, both):
            graph.insert_before(where, node)
        where.replace_input_with(0, both.outputs[0])
        changed += 1
    if not changed:
        raise LayoutError("The embedding graph has no placeholder replacement to guard")
    return "Embedding: placeholder ids keep their text embedding when no features are given"


def _feature_source(value: Any, inputs: dict[str, Any], depth: int = 0) -> Any:
    """The feature graph input that `value` is computed from (breadth-limited search)."""
    if value is None or depth > 6:
        return None
    if value.name in inputs and value.producer() is None:
        return value
    producer = value.producer()
    if producer is None:
        return None
    for source in producer.inputs:
        found = _feature_source(source, inputs, depth + 1)
        if found is not None:
            return found
    return None


def qwen3_deepstack(models: dict[str, Any], cfg: Cfg) -> str:
    """Qwen3-VL: carry the DeepStack levels from the vision encoder to the decoder.

    ORT GenAI 0.18 passes one image_features tensor to the embedding and one
    inputs_embeds tensor to the decoder. The vision graph (see graphs._deepstack_vision)
    emits [merged ‖ level 1 ‖ … ‖ level K] per image token; the embedding writes all of
    it at image positions and zeros in the extra columns at text positions; the decoder
    uses the first H columns as embeddings and adds column block k after layer k-1, as
    HF adds deepstack_visual_embeds[k-1] at image positions. decoder.hidden_size in
    genai_config becomes (1 + K)·H; the KV cache is unaffected.
    """
    import onnx_ir as ir

    levels = len(cfg.get("vision_config.deepstack_visual_indexes") or [])
    hidden = int(cfg.text.get("hidden_size"))
    layers = int(cfg.text.get("num_hidden_layers"))
    if levels == 0:
        return "Qwen3-VL without DeepStack levels"
    if levels > layers:
        raise LayoutError(f"{levels} DeepStack levels for {layers} decoder layers")
    wide = (1 + levels) * hidden
    _widen_embedding(models["embedding"].graph, hidden, wide)
    decoder = models["decoder"].graph
    old = next(v for v in decoder.inputs if v.name == "inputs_embeds")
    new = ir.Value(
        name="inputs_embeds",
        type=ir.TensorType(old.dtype),
        shape=ir.Shape([old.shape[0], old.shape[1], wide]),
    )
    old.name = "inputs_embeds_main"
    front = decoder.node(0)

    def columns(start: int, stop: int) -> Any:
        bounds = [
            _const(decoder, f"mmforge_ds_{start}_{name}", np.array([v], dtype=np.int64))
            for name, v in (("start", start), ("stop", stop), ("axis", 2))
        ]
        node = ir.node("Slice", inputs=[new, *bounds])
        decoder.insert_before(front, node)  # depends only on the graph input
        return node.outputs[0]

    main = columns(0, hidden)
    old.replace_all_uses_with(main)
    decoder.inputs[decoder.inputs.index(old)] = new
    skips = [n for n in decoder if n.op_type == "SkipSimplifiedLayerNormalization"]
    for k in range(levels):
        # The fused norm that opens layer k+1 (or the final norm) sums the residual
        # stream with layer k's MLP output: adding level k+1 to that MLP output puts it
        # into the residual stream exactly where HF adds it.
        marker = f"layers.{k + 1}.input_layernorm" if k + 1 < layers else "model.norm"
        opening = [n for n in skips if marker in n.outputs[0].name]
        if len(opening) != 1:
            raise LayoutError("The Qwen3-VL decoder has an unexpected layer structure")
        level = columns((k + 1) * hidden, (k + 2) * hidden)
        add = ir.node("Add", inputs=[opening[0].inputs[1], level])
        decoder.insert_before(opening[0], add)
        opening[0].replace_input_with(1, add.outputs[0])
    return f"Qwen3-VL DeepStack: {levels} levels carried as extra embedding columns"


def _widen_embedding(graph: Any, hidden: int, wide: int) -> None:
    """Take [N, wide] image features and output [B, S, wide] embeddings."""
    import onnx_ir as ir

    features = next(v for v in graph.inputs if v.name == "image_features")
    features.shape = ir.Shape([features.shape[0], wide])
    where = [n for n in graph if n.op_type == "Where"]
    concat = [n for n in graph if n.op_type == "Concat" and n.inputs[0] is features]
    if len(where) != 1 or len(concat) != 1 or concat[0].inputs[1].const_value is None:
        raise LayoutError("The Qwen3-VL embedding graph has an unexpected form")
    zero_row = concat[0].inputs[1]
    zero_row.const_value = ir.tensor(np.zeros((1, wide), dtype=zero_row.const_value.numpy().dtype))
    zero_row.shape = ir.Shape([1, wide])
    text = where[0].inputs[2]
    zeros = ir.node(
        "ConstantOfShape",
        inputs=[
            ir.node(
                "Concat",
                inputs=[
                    ir.node("Shape", inputs=[text], attributes={"start": 0, "end": 2}).outputs[0],
                    _const(graph, "mmforge_ds_extra", np.array([wide - hidden], dtype=np.int64)),
                ],
                attributes={"axis": 0},
            ).outputs[0]
        ],
        attributes={"value": ir.tensor(np.zeros(1, dtype=zero_row.const_value.numpy().dtype))},
    )
    padded = ir.node("Concat", inputs=[text, zeros.outputs[0]], attributes={"axis": 2})
    for node in [*_producers_chain(zeros), padded]:
        graph.insert_before(where[0], node)
    where[0].replace_input_with(2, padded.outputs[0])
    graph.outputs[0].shape = ir.Shape([graph.outputs[0].shape[0], graph.outputs[0].shape[1], wide])
    # Shapes recorded at build time still say `hidden` wide; ORT plans buffers by them.
    for node in graph:
        for value in node.outputs:
            if not value.is_graph_output():
                value.shape = None


def _producers_chain(node: Any) -> list[Any]:
    """The not-yet-inserted producer nodes of `node`, in dependency order, then `node`."""
    chain: list[Any] = []
    for value in node.inputs:
        producer = value.producer() if value is not None else None
        if producer is not None and producer.graph is None:
            chain.extend(_producers_chain(producer))
    chain.append(node)
    return chain


def _const(graph: Any, name: str, array: np.ndarray) -> Any:
    import onnx_ir as ir

    if name in graph.initializers:
        return graph.initializers[name]
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    graph.register_initializer(value)
    return value


def gemma3_batched_images(models: dict[str, Any], cfg: Cfg) -> str:
    """Gemma 3: several images per prompt.

    The runtime sizes the vision output by its rank: rank 3 is [images, 256, hidden]; rank
    2 is [256, hidden], one image's worth (the Gemma 3 processor always reports 256). The
    vision graph keeps the image axis (mobius squeezes it), and the embedding flattens
    [images, 256, hidden] to rows before the placeholder replacement.
    """
    import onnx_ir as ir

    vision = models["vision_encoder"].graph
    out = vision.outputs[0]
    squeeze = out.producer()
    if squeeze is None or squeeze.op_type != "Squeeze":
        raise LayoutError("The Gemma 3 vision output has an unexpected form")
    batched = squeeze.inputs[0]
    hidden = int(cfg.text.get("hidden_size"))
    vision.outputs[vision.outputs.index(out)] = batched
    vision.remove(squeeze, safe=False)
    batched.name = "image_features"
    batched.shape = ir.Shape([ir.SymbolicDim("num_images"), ir.SymbolicDim("image_tokens"), hidden])

    embedding = models["embedding"].graph
    old = next(v for v in embedding.inputs if v.name == "image_features")
    # No declared rank: with images the runtime passes [images, 256, hidden], without
    # (text only, decode steps) an empty [0, hidden].
    new = ir.Value(name="image_features", type=ir.TensorType(old.dtype), shape=None)
    old.name = "image_features_rows"
    rows = _const(embedding, "mmforge_rows_shape", np.array([-1, int(hidden)], dtype=np.int64))
    flatten = ir.node("Reshape", inputs=[new, rows])
    old.replace_all_uses_with(flatten.outputs[0])
    flatten.outputs[0].name = "image_features_rows"
    embedding.inputs[embedding.inputs.index(old)] = new
    embedding.insert_before(embedding.node(0), flatten)
    return "Gemma 3 vision keeps the image axis, so one prompt can hold several images"


def qwen_unpad_images(models: dict[str, Any], cfg: Cfg) -> str:
    """Qwen-VL: several images of different sizes in one prompt.

    The runtime stacks the patches of each image padded to the largest image
    ([images · max_patches, dim]), while the vision graph reads the patches of image i
    right after those of image i-1. The graph now first keeps, per image, the rows its
    grid (t·h·w) accounts for, in order, and drops the padding.
    """
    graph = models["vision_encoder"].graph
    inputs = {v.name: v for v in graph.inputs}
    pixels, grid = inputs.get("pixel_values"), inputs.get("image_grid_thw")
    if pixels is None or grid is None:
        raise LayoutError("The Qwen vision graph lacks pixel_values or image_grid_thw")
    edit = _Nodes(graph)
    add, const = edit.add, edit.const
    zero = const("mmforge_i64_0", np.array(0, dtype=np.int64))
    one = const("mmforge_i64_1", np.array(1, dtype=np.int64))
    axis0 = const("mmforge_axes_0", np.array([0], dtype=np.int64))
    axis1 = const("mmforge_axes_1_", np.array([1], dtype=np.int64))
    flat = const("mmforge_flat", np.array([-1], dtype=np.int64))
    counts = add("ReduceProd", [grid, axis1], keepdims=0)  # [N] patches per image
    images = add("Shape", [grid], start=0, end=1)  # [1]
    rows = add("Shape", [pixels], start=0, end=1)  # [1]
    longest = add("Squeeze", [add("Div", [rows, images]), axis0])  # scalar max patches
    slots = add("Range", [zero, longest, one])  # [P]
    keep = add("Less", [add("Unsqueeze", [slots, axis0]), add("Unsqueeze", [counts, axis1])])
    index = add("Squeeze", [add("NonZero", [add("Reshape", [keep, flat])]), axis0])
    # Clean value for the graph's consumers of pixel_values.
    unpadded = add("Gather", [pixels, index], axis=0)
    for use in list(pixels.uses()):
        if use.node not in edit.nodes:
            use.node.replace_input_with(use.idx, unpadded)
    edit.insert_before(graph.node(0))
    return "Qwen vision: per-image padding of the runtime's stacked patches is removed"


def phi4mm_audio_sizes_input(models: dict[str, Any], cfg: Cfg) -> str | None:
    """Phi-4-multimodal: the runtime always binds `audio_sizes` to the speech graph.

    mobius's speech graph derives the lengths from the features and has no such input,
    so ORT GenAI 0.18 fails with "Model input was not found: audio_sizes". The graph
    gets the input (one length per clip); its value is not needed.
    """
    import onnx_ir as ir

    speech = models.get("audio_encoder")
    if speech is None or any(v.name == "audio_sizes" for v in speech.graph.inputs):
        return None
    speech.graph.inputs.append(
        ir.Value(
            name="audio_sizes",
            type=ir.TensorType(ir.DataType.INT64),
            shape=ir.Shape([ir.SymbolicDim("num_audios")]),
        )
    )
    return "Phi-4 speech graph: an audio_sizes input for the runtime to bind"


def phi4mm_crops_as_batch(models: dict[str, Any], cfg: Cfg) -> str:
    """Phi-4-multimodal: take the runtime's [images, crops, ...] pixels and masks.

    The runtime passes pixel_values [images, crops, 3, H, W] and image_attention_mask
    [images, crops, h, w]; mobius's vision graph reads crops as its batch axis
    ([crops, 3, H, W], [crops, h, w]). The inputs lose their declared rank and are
    flattened to that layout first.
    """
    import onnx_ir as ir

    graph = models["vision_encoder"].graph
    edit = _Nodes(graph)
    for name in ("pixel_values", "image_attention_mask"):
        old = next((v for v in graph.inputs if v.name == name), None)
        if old is None or old.shape is None:
            raise LayoutError(f"The Phi-4 vision graph has no {name} input of known shape")
        tail = [int(d) for d in list(old.shape)[1:]]
        new = ir.Value(name=name, type=ir.TensorType(old.dtype), shape=None)
        old.name = f"{name}_crops"
        shape = edit.const(f"mmforge_{name}_crops", np.array([-1, *tail], dtype=np.int64))
        flat = edit.add("Reshape", [new, shape])
        old.replace_all_uses_with(flat)
        flat.name = f"{name}_crops"
        graph.inputs[graph.inputs.index(old)] = new
    edit.insert_before(graph.node(0))
    return "Phi-4 vision: the runtime's per-image crops are flattened into the batch axis"


def phi4mm_projection_mode(models: dict[str, Any], cfg: Cfg) -> str | None:
    """Phi-4-multimodal: pick the audio projection branch by the runtime's mode codes.

    ORT GenAI 0.18 passes audio_projection_mode 2 for speech alone and 3 for speech with
    an image; mobius's graph takes the vision-speech branch only for 1. With an image,
    HF projects audio through the vision-speech branch, so the test becomes `mode == 3`.
    """
    speech = models.get("audio_encoder")
    if speech is None:
        return None
    mode = next((v for v in speech.graph.inputs if v.name == "audio_projection_mode"), None)
    if mode is None:
        raise LayoutError("The Phi-4 speech graph has no audio_projection_mode input")
    equals = [u.node for u in mode.uses() if u.node.op_type == "Equal"]
    if len(equals) != 1:
        raise LayoutError("The Phi-4 speech graph chooses its projection in an unexpected way")
    both = _const(speech.graph, "mmforge_mode_speech_and_vision", np.array(3, dtype=np.int64))
    equals[0].replace_input_with(1, both)
    return "Phi-4 speech: the vision-speech projection follows the runtime's mode 3"
