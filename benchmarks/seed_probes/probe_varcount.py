"""LLaVA-1.5 hosted on ONNX Runtime GenAI 0.18's `qwen2_5_vl` pipeline, end to end.

The variable-count host (docs/seed-families.md): with `vision.spatial_merge_size` 1 and
`vision.patch_size` p, the Qwen processor splices (H/p)·(W/p) `<|image_pad|>` per picture,
the package's tokenizer reads the block as that many `<image>` ids, and the vision graph
gets Qwen's patches and un-patches them. This script derives such a package from mmforge's
converted LLaVA package (made for `videochat_flash_qwen`, a constant count) and compares
the runtime with transformers' LlavaForConditionalGeneration on LlavaProcessor's ids: ids,
pixels, prefill logits and greedy tokens; with an echo decoder, the embeddings the decoder
gets (the features' placement) and its position ids and mask. Cases: one picture and two
pictures at the tower's size (LLaVA's CLIP graph), and pictures of 28×56, 14×518 and 14×14
(8, 37 and 1 ids) with a tower-free vision graph (LLaVA's patch embedding and projector,
one feature per patch), since LLaVA's tower takes one size only.

    python benchmarks/seed_probes/probe_varcount.py [folder]   (default /tmp/varcount)

A measurement, not mmforge's converter; tests/backend/test_varcount_host.py holds it.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PATCH = 14
TEMPORAL = 2  # PatchImage writes each picture as two equal frames
# The runtime's marker text as the package's tokenizer reads it: each piece one `<image>`
# id (leftmost-longest). The first is a one-patch picture's whole block.
MARKERS = (
    "<|vision_start|><|image_pad|><|vision_end|>",
    "<|vision_start|><|image_pad|>",
    "<|image_pad|><|vision_end|>",
    "<|image_pad|>",
    "<|vision_start|>",
)
QUESTION = "What is in the pictures?"
ODD_SIZES = ((28, 56), (14, 518), (14, 14))  # 8, 37 and 1 patches


# ---------------------------------------------------------------- package files


def model_config(package: Path) -> dict[str, Any]:
    """genai_config.json's `model` section."""
    return dict(json.loads((package / "genai_config.json").read_text())["model"])


def absorbing_tokenizer(tokenizer: dict[str, Any], image_id: int) -> dict[str, Any]:
    """A copy of tokenizer.json with every marker piece an added token on `image_id`."""
    data = json.loads(json.dumps(tokenizer))
    added = data.setdefault("added_tokens", [])
    have = {t["content"] for t in added}
    for content in MARKERS:
        if content not in have:
            added.append(
                {"id": image_id, "content": content, "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": True}
            )  # fmt: skip
    return data


def processor_json(mean: list[float], std: list[float]) -> dict[str, Any]:
    """mmforge's Qwen chain with merge 1, its Resize the identity on multiples of PATCH.

    ConvertRGB after DecodeImage(RGB) swaps red and blue and Normalize's `qwen2_5_vl`
    swaps them back (measured on the 0.18 wheel, each alone gives BGR): the pair gives RGB.
    """

    def op(name: str, kind: str, **attrs: Any) -> dict[str, Any]:
        return {"operation": {"name": name, "type": kind, **({"attrs": attrs} if attrs else {})}}

    return {
        "processor": {
            "name": "qwen2_5_image_processor",
            "transforms": [
                op("decode_image", "DecodeImage", color_space="RGB"),
                op("convert_to_rgb", "ConvertRGB"),
                op("resize", "Resize", smart_resize=1, min_pixels=PATCH * PATCH,
                   max_pixels=10**8, patch_size=PATCH, merge_size=1),
                op("rescale", "Rescale", rescale_factor=1 / 255),
                op("normalize", "Normalize", mean=mean, std=std, qwen2_5_vl=1),
                op("patch_image", "PatchImage", patch_size=PATCH, temporal_patch_size=TEMPORAL,
                   merge_size=1),
            ],
        }
    }  # fmt: skip


def genai_config(source: dict[str, Any], *, guard: int | None, echo: bool) -> dict[str, Any]:
    """A copy of the LLaVA package's genai_config as a `qwen2_5_vl` one.

    `guard`: None leaves the M-RoPE ids out (config.h then reads them as 0); else that id
    (one no tokenizer produces) is written for them and for the pad id. `echo`: the decoder
    declares position_ids.
    """
    data = json.loads(json.dumps(source))
    model = data["model"]
    model["type"] = "qwen2_5_vl"
    model.pop("image_token_id", None)
    if guard is not None:
        for key in ("vision_start_token_id", "image_token_id", "video_token_id", "pad_token_id"):
            model[key] = guard
    vision = model["vision"]
    vision.pop("num_visual_tokens", None)
    vision.update(spatial_merge_size=1, patch_size=PATCH)
    vision["inputs"] = {"pixel_values": "pixel_values", "image_grid_thw": "image_grid_thw"}
    if echo:
        model["decoder"]["inputs"]["position_ids"] = "position_ids"
    return data


# ---------------------------------------------------------------- graphs


def _c(name: str, value: Any) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value), name)


def _n(kind: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    from onnx import helper

    return helper.make_node(kind, inputs, outputs, **attrs)


def _model(nodes: list[Any], name: str, ins: list[Any], outs: list[Any], inits: list[Any]) -> Any:
    from onnx import helper

    graph = helper.make_graph(nodes, name, ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _tensor(name: str, float_: bool, shape: list[Any]) -> Any:
    from onnx import TensorProto, helper

    kind = TensorProto.FLOAT if float_ else TensorProto.INT64
    return helper.make_tensor_value_info(name, kind, shape)


def vision_inputs(per_call: str, channels: int = 3) -> list[Any]:
    """pixel_values [rows, C·T·p·p] and image_grid_thw: [1, 3] (`per_call` "one") or [images, 3].

    A grid of one row makes the runtime call the graph once per picture; a symbolic one lets
    it pass pictures of one size in one call (QwenVisionState::Run).
    """
    grid_rows: Any = 1 if per_call == "one" else "images"
    return [
        _tensor("pixel_values", True, ["patches", channels * TEMPORAL * PATCH * PATCH]),
        _tensor("image_grid_thw", False, [grid_rows, 3]),
    ]


def unpatch_nodes(out: str, channels: int, rank5: bool) -> tuple[list[Any], list[Any]]:
    """Qwen's patches and grid -> the pictures of one call, [G, C, H, W] ([1, G, C, H, W]).

    PatchImage with merge 1 writes the patches row by row, each [C, T, p, p] (measured:
    the PNG's pixels to 6e-8). The pictures of one call share one grid.
    """
    p = "varcount_"
    nodes = [
        _n("Gather", ["image_grid_thw", p + "zero"], [p + "thw"], axis=0),
        _n("Slice", [p + "thw", p + "one1", p + "three1"], [p + "hw"]),
        _n("Shape", ["image_grid_thw"], [p + "g"], start=0, end=1),
        _n("Concat", [p + "g", p + "hw", p + "ctpp"], [p + "shape7"], axis=0),
        _n("Reshape", ["pixel_values", p + "shape7"], [p + "x7"]),  # G h w C T p p
        _n("Gather", [p + "x7", p + "zero"], [p + "x6"], axis=4),  # frame 0
        _n("Transpose", [p + "x6"], [p + "xt"], perm=[0, 3, 1, 4, 2, 5]),  # G C h p w p
        _n("Mul", [p + "hw", p + "patch"], [p + "side"]),
        _n("Concat", [p + "g", p + "c1", p + "side"], [p + "shape4"], axis=0),
        _n("Reshape", [p + "xt", p + "shape4"], [p + "x4" if rank5 else out]),
    ]
    if rank5:
        nodes.append(_n("Unsqueeze", [p + "x4", p + "zero1"], [out]))
    inits = [
        _c(p + "zero", np.int64(0)), _c(p + "zero1", np.array([0])), _c(p + "one1", np.array([1])),
        _c(p + "three1", np.array([3])), _c(p + "c1", np.array([channels])),
        _c(p + "ctpp", np.array([channels, TEMPORAL, PATCH, PATCH])),
        _c(p + "patch", np.array([PATCH])),
    ]  # fmt: skip
    return nodes, inits


def tower_vision(source: Path, per_call: str) -> Any:
    """The un-patching prefix before the LLaVA package's own graph (CLIP tower, projector)."""
    import onnx

    model = onnx.load(str(source / "vision.onnx"))  # with its external data
    graph = model.graph
    old = graph.input[0].name  # pixel_values [batch, num_images, 3, S, S]
    inner = "varcount_llava_pixels"
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = inner
    nodes, inits = unpatch_nodes(inner, 3, rank5=True)
    graph.ClearField("input")
    graph.input.extend(vision_inputs(per_call))
    existing = list(graph.node)
    graph.ClearField("node")
    graph.node.extend(nodes + existing)
    graph.initializer.extend(inits)
    return model


def _clip(hf_model: Any) -> Any:
    """The CLIP module holding `embeddings` (transformers 5 flattens CLIPVisionModel)."""
    tower = hf_model.model.vision_tower
    return getattr(tower, "vision_model", tower)


def patch_vision(hf_model: Any, per_call: str) -> Any:
    """Tower-free: un-patch, LLaVA's patch embedding, its projector; a feature per patch.

    A picture of any multiple-of-14 size gives (H/14)·(W/14) rows, as `patch_features` does
    in transformers.
    """
    proj = hf_model.model.multi_modal_projector
    kernel = _clip(hf_model).embeddings.patch_embedding.weight.detach().numpy()
    width = kernel.shape[0]
    w1, b1 = proj.linear_1.weight.detach().numpy(), proj.linear_1.bias.detach().numpy()
    w2, b2 = proj.linear_2.weight.detach().numpy(), proj.linear_2.bias.detach().numpy()
    nodes, inits = unpatch_nodes("pictures", kernel.shape[1], rank5=False)
    nodes += [
        _n("Conv", ["pictures", "kernel"], ["conv"], strides=[PATCH, PATCH]),  # G D h w
        _n("Transpose", ["conv"], ["nhwc"], perm=[0, 2, 3, 1]),
        _n("Reshape", ["nhwc", "rows_shape"], ["rows"]),  # G·h·w, D (row-major patches)
        _n("MatMul", ["rows", "w1t"], ["y1"]),
        _n("Add", ["y1", "b1"], ["z1"]),
        _n("Div", ["z1", "sqrt2"], ["zs"]),  # gelu with erf (projector_hidden_act "gelu")
        _n("Erf", ["zs"], ["ze"]),
        _n("Add", ["ze", "onef"], ["ze1"]),
        _n("Mul", ["z1", "ze1"], ["zm"]),
        _n("Mul", ["zm", "half"], ["a1"]),
        _n("MatMul", ["a1", "w2t"], ["y2"]),
        _n("Add", ["y2", "b2"], ["image_features"]),
    ]
    inits += [
        _c("kernel", kernel), _c("rows_shape", np.array([-1, width])),
        _c("w1t", w1.T.copy()), _c("b1", b1), _c("w2t", w2.T.copy()), _c("b2", b2),
        _c("sqrt2", np.float32(np.sqrt(2))), _c("onef", np.float32(1)), _c("half", np.float32(0.5)),
    ]  # fmt: skip
    out = _tensor("image_features", True, ["features", w2.shape[0]])
    return _model(nodes, "varcount_patches", vision_inputs(per_call), [out], inits)


def echo_vision(hidden: int, per_call: str) -> Any:
    """Features that say which call made them: [rows received, grid rows, row index, 0…]."""
    nodes = [
        _n("ReduceProd", ["image_grid_thw", "ax1"], ["counts"], keepdims=0),
        _n("ReduceSum", ["counts"], ["r"], keepdims=0),
        _n("Range", ["zero", "r", "one"], ["index"]),
        _n("Shape", ["pixel_values"], ["p"], start=0, end=1),
        _n("Shape", ["image_grid_thw"], ["g"], start=0, end=1),
        _n("Concat", ["p", "g"], ["pg"], axis=0),
        _n("Unsqueeze", ["r", "ax0"], ["r1"]),
        _n("Concat", ["r1", "two"], ["pg_shape"], axis=0),
        _n("Expand", ["pg", "pg_shape"], ["pg_rows"]),
        _n("Unsqueeze", ["index", "ax1"], ["index_col"]),
        _n("Concat", ["pg_rows", "index_col"], ["meta"], axis=1),
        _n("Cast", ["meta"], ["metaf"], to=1),
        _n("Concat", ["r1", "rest"], ["zshape"], axis=0),
        _n("ConstantOfShape", ["zshape"], ["zeros"], value=_c("z", np.zeros(1, np.float32))),
        _n("Concat", ["metaf", "zeros"], ["image_features"], axis=1),
    ]
    inits = [
        _c("ax0", np.array([0])), _c("ax1", np.array([1])), _c("zero", np.int64(0)),
        _c("one", np.int64(1)), _c("two", np.array([2])), _c("rest", np.array([hidden - 3])),
    ]  # fmt: skip
    out = _tensor("image_features", True, ["features", hidden])
    return _model(nodes, "varcount_echo_vision", vision_inputs(per_call), [out], inits)


def echo_decoder(model: dict[str, Any]) -> Any:
    """A decoder whose logits are what it is fed (it predicts nothing).

    logits[b, s] = [inputs_embeds | position_ids[0..2] | mask length | mask at s | 0…]; its
    KV outputs are its inputs plus zeros. It declares position_ids [3, batch, sequence],
    Qwen2VLPositionInputs' shape.
    """
    d = model["decoder"]
    hidden, vocab = int(d["hidden_size"]), int(model["vocab_size"])
    kv, head = int(d["num_key_value_heads"]), int(d["head_size"])
    zero = _c("z", np.zeros(1, np.float32))
    nodes = [
        _n("Shape", ["inputs_embeds"], ["bs"], start=0, end=2),
        _n("Shape", ["inputs_embeds"], ["b"], start=0, end=1),
        _n("Shape", ["inputs_embeds"], ["s"], start=1, end=2),
        _n("Shape", ["attention_mask"], ["t"], start=1, end=2),
        _n("Cast", ["t"], ["tf"], to=1),
        _n("Concat", ["bs", "one1"], ["bs1"], axis=0),
        _n("Expand", ["tf", "bs1"], ["tcol"]),
        _n("Cast", ["attention_mask"], ["maskf"], to=1),
        _n("Neg", ["s"], ["negs"]),
        _n("Slice", ["maskf", "negs", "big", "one1"], ["mask_s"]),
        _n("Unsqueeze", ["mask_s", "minus1"], ["mcol"]),
        _n("Cast", ["position_ids"], ["pf"], to=1),
        _n("Transpose", ["pf"], ["pcols"], perm=[1, 2, 0]),
        _n("Concat", ["bs", "rest"], ["zshape"], axis=0),
        _n("ConstantOfShape", ["zshape"], ["zeros"], value=zero),
        _n("Concat", ["inputs_embeds", "pcols", "tcol", "mcol", "zeros"], ["logits"], axis=2),
        _n("Concat", ["b", "kv", "s", "head"], ["kvshape"], axis=0),
        _n("ConstantOfShape", ["kvshape"], ["kvz"], value=zero),
    ]
    ins = [
        _tensor("inputs_embeds", True, ["batch", "sequence", hidden]),
        _tensor("attention_mask", False, ["batch", "total"]),
        _tensor("position_ids", False, [3, "batch", "sequence"]),
    ]
    outs = [_tensor("logits", True, ["batch", "sequence", vocab])]
    for i in range(int(d["num_hidden_layers"])):
        for kind in ("key", "value"):
            past, present = (
                d["inputs"][f"past_{kind}_names"] % i,
                d["outputs"][f"present_{kind}_names"] % i,
            )
            nodes.append(_n("Concat", [past, "kvz"], [present], axis=2))
            ins.append(_tensor(past, True, ["batch", kv, "past", head]))
            outs.append(_tensor(present, True, ["batch", kv, "all", head]))
    inits = [
        _c("one1", np.array([1])), _c("big", np.array([1 << 30])), _c("minus1", np.array([-1])),
        _c("rest", np.array([vocab - hidden - 5])), _c("kv", np.array([kv])),
        _c("head", np.array([head])),
    ]  # fmt: skip
    return _model(nodes, "varcount_echo_decoder", ins, outs, inits)


# ---------------------------------------------------------------- the derived package


def derive_package(
    source: Path,
    out: Path,
    *,
    hf_model: Any = None,
    vision: str = "tower",
    per_call: str = "any",
    guard: int | None = None,
    echo: bool = False,
) -> Path:
    """A `qwen2_5_vl` package made of mmforge's LLaVA package `source` (in `out`, replaced).

    Args:
        source: The converted LLaVA package (videochat_flash_qwen).
        out: The new package's folder.
        hf_model: transformers' model, for `vision` "patches".
        vision: "tower" (`tower_vision`), "patches" (`patch_vision`) or "echo" (`echo_vision`).
        per_call: "one" or "any" (`vision_inputs`).
        guard: The id written for the M-RoPE ids and the pad id, or None (left out).
        echo: The decoder is `echo_decoder`, not the package's.
    """
    import onnx

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in ("embedding.onnx", "embedding.onnx.data", "tokenizer_config.json"):
        shutil.copy(source / name, out / name)
    config = genai_config(
        json.loads((source / "genai_config.json").read_text()), guard=guard, echo=echo
    )
    (out / "genai_config.json").write_text(json.dumps(config, indent=1))
    if echo:
        onnx.save(echo_decoder(config["model"]), str(out / "decoder.onnx"))
    else:
        # Every position's logits (the package's decoder keeps the last one only), so the
        # whole prefill is compared with transformers'.
        from mmforge.backend.last_logits import unpruned

        shutil.copy(source / "decoder.onnx.data", out / "decoder.onnx.data")
        whole = unpruned(source / "decoder.onnx")
        if whole is None:
            shutil.copy(source / "decoder.onnx", out / "decoder.onnx")
        else:
            onnx.save(whole, str(out / "decoder.onnx"))
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    image_id = int(model_config(source)["image_token_id"])
    (out / "tokenizer.json").write_text(json.dumps(absorbing_tokenizer(tokenizer, image_id)))
    chain = json.loads((source / "processor_config.json").read_text())["processor"]["transforms"]
    norm = next(t["operation"]["attrs"] for t in chain if t["operation"]["type"] == "Normalize")
    (out / "processor_config.json").write_text(
        json.dumps(processor_json(norm["mean"], norm["std"]), indent=1)
    )
    hidden = int(config["model"]["decoder"]["hidden_size"])
    if vision == "tower":
        graph = tower_vision(source, per_call)
    else:
        mine = patch_vision(hf_model, per_call) if vision == "patches" else None
        graph = mine if mine is not None else echo_vision(hidden, per_call)
        onnx.checker.check_model(graph, full_check=True)
    onnx.save(graph, str(out / "vision.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="vision.onnx.data")  # fmt: skip
    return out


# ---------------------------------------------------------------- the two sides


def messages(n_pictures: int, text: str = QUESTION) -> list[dict[str, Any]]:
    """One user turn: the pictures, then the text."""
    content: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_pictures)]
    return [{"role": "user", "content": [*content, {"type": "text", "text": text}]}]


@dataclass(frozen=True)
class RuntimeRun:
    """What the runtime made of one conversation."""

    prompt: str
    ids: list[int]
    grid: list[list[int]]
    pixel_values: np.ndarray  # the processor's rows, [rows, C·T·p·p]
    prefill: np.ndarray  # the decoder's logits at prefill, [S, V]
    steps: list[np.ndarray]  # its logits at each step after, [V]
    tokens: list[int]


def run_runtime(
    folder: Path, chat: list[dict[str, Any]], pictures: list[Path], new: int
) -> RuntimeRun:
    """The package's chat template, processor and greedy generation (`new` tokens at most)."""
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(folder)))
    prompt = og.Tokenizer(model).apply_chat_template(json.dumps(chat), add_generation_prompt=True)
    images = og.Images.open(*[str(p) for p in pictures]) if pictures else None
    named = model.create_multimodal_processor()(prompt, images=images)
    ids = [int(t) for t in named["input_ids"].as_numpy().reshape(-1)]
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + new, do_sample=False)
    generator = og.Generator(model, params)
    generator.set_inputs(named)
    logits = []
    while not generator.is_done():
        generator.generate_next_token()
        logits.append(np.array(generator.get_output("logits"))[0])
    return RuntimeRun(
        prompt=prompt,
        ids=ids,
        grid=named["image_grid_thw"].as_numpy().tolist() if pictures else [],
        pixel_values=named["pixel_values"].as_numpy() if pictures else np.zeros((0, 0)),
        prefill=logits[0],
        steps=[x[-1] for x in logits[1:]],
        tokens=[int(t) for t in generator.get_sequence(0)][len(ids) :],
    )


def hf_processor(checkpoint: Path, *, keep_size: bool) -> Any:
    """LlavaProcessor as llava-hf configures it (the tiny checkpoint has no processor_config).

    Patch 14, strategy `default`, one additional token. `keep_size`: no resize or crop, and
    strategy `full` with no additional token, so a picture counts (H/14)·(W/14) ids, the
    tower-free graph's features.
    """
    from transformers import AutoImageProcessor, AutoTokenizer, LlavaProcessor

    kw = {"do_resize": False, "do_center_crop": False} if keep_size else {}
    return LlavaProcessor(
        image_processor=AutoImageProcessor.from_pretrained(checkpoint, **kw),
        tokenizer=AutoTokenizer.from_pretrained(checkpoint),
        patch_size=PATCH,
        vision_feature_select_strategy="full" if keep_size else "default",
        num_additional_image_tokens=0 if keep_size else 1,
    )


def patch_features(hf_model: Any) -> Any:
    """LlavaModel.get_image_features for the tower-free graph: per picture, at its size."""
    import torch
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    clip, proj = _clip(hf_model), hf_model.model.multi_modal_projector

    def features(pixel_values: Any, image_sizes: Any = None, **_: Any) -> Any:
        out = []
        for picture, (height, width) in zip(pixel_values, image_sizes, strict=True):
            x = clip.embeddings.patch_embedding(picture[None, :, :height, :width])
            out.append(proj(x.flatten(2).transpose(1, 2)[0]))
        return BaseModelOutputWithPooling(last_hidden_state=torch.cat(out), pooler_output=out)

    return features


def load_hf(checkpoint: Path, *, patches: bool) -> Any:
    """transformers' model (mmforge's loader); `patches`: with `patch_features`."""
    from mmforge.backend.verify.hf_reference import load_model

    model = load_model(checkpoint).eval()
    if patches:
        model.model.get_image_features = patch_features(model)
    return model


@dataclass(frozen=True)
class HfRun:
    """transformers' side of one conversation."""

    ids: list[int]
    pixels: list[np.ndarray]  # per picture, [C, H, W], normalized
    embeds: np.ndarray  # inputs_embeds with the features in place, [S, hidden]
    prefill: np.ndarray  # logits, [S, V]
    tokens: list[int]


def run_hf(
    hf_model: Any, checkpoint: Path, chat: list[dict[str, Any]], pictures: list[Path], new: int,
    *, keep_size: bool,
) -> HfRun:  # fmt: skip
    """LlavaProcessor's ids and pixels; the model's embeddings, prefill logits and generate."""
    import torch
    from PIL import Image

    processor = hf_processor(checkpoint, keep_size=keep_size)
    prompt = processor.tokenizer.apply_chat_template(
        chat, add_generation_prompt=True, tokenize=False
    )
    images = [Image.open(p).convert("RGB") for p in pictures]
    out = processor(text=prompt, images=images or None)
    ids = torch.tensor(out["input_ids"])
    pixels = [np.asarray(p, dtype=np.float32) for p in out.get("pixel_values", [])]
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if pixels:  # pictures of several sizes: padded, with image_sizes (patch_features)
        high, wide = max(p.shape[1] for p in pixels), max(p.shape[2] for p in pixels)
        batch = torch.zeros(len(pixels), pixels[0].shape[0], high, wide)
        for i, p in enumerate(pixels):
            batch[i, :, : p.shape[1], : p.shape[2]] = torch.from_numpy(p)
        kwargs["pixel_values"] = batch
        if keep_size:
            kwargs["image_sizes"] = torch.tensor([p.shape[1:] for p in pixels])
    config, model = hf_model.config, hf_model.model
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        if pixels:
            features = model.get_image_features(
                pixel_values=batch,
                image_sizes=kwargs.get("image_sizes"),
                vision_feature_layer=config.vision_feature_layer,
                vision_feature_select_strategy=config.vision_feature_select_strategy,
            ).pooler_output
            embeds[ids == config.image_token_id] = torch.cat(list(features))
        prefill = hf_model(**kwargs).logits[0].numpy()
        tokens = hf_model.generate(**kwargs, max_new_tokens=new, do_sample=False)
    return HfRun(
        ids=ids[0].tolist(),
        pixels=pixels,
        embeds=embeds[0].numpy(),
        prefill=prefill,
        tokens=tokens[0, ids.shape[1] :].tolist(),
    )


# ---------------------------------------------------------------- what is compared


def unpatch(pixel_values: np.ndarray, grid: list[list[int]]) -> list[np.ndarray]:
    """The processor's rows as pictures [C, H, W]: picture i at row i · the largest's rows."""
    per = pixel_values.shape[0] // max(len(grid), 1)
    out = []
    for i, (_, gh, gw) in enumerate(grid):
        rows = pixel_values[i * per : i * per + gh * gw]
        x = rows.reshape(gh, gw, -1, TEMPORAL, PATCH, PATCH)[:, :, :, 0]
        out.append(x.transpose(2, 0, 3, 1, 4).reshape(-1, gh * PATCH, gw * PATCH))
    return out


def blocks(ids: list[int], token: int) -> list[int]:
    """The lengths of the runs of `token` in `ids`, in order."""
    runs, n = [], 0
    for t in [*ids, -1]:
        if t == token:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs


def compare(rt: RuntimeRun, hf: HfRun, image_id: int, echo: int = 0) -> dict[str, Any]:
    """The facts of one conversation; `echo`: the echo decoder's hidden size (0: none)."""
    facts: dict[str, Any] = {
        "grid": rt.grid,
        "runtime_counts": blocks(rt.ids, image_id),
        "hf_counts": blocks(hf.ids, image_id),
        "ids_equal": rt.ids == hf.ids,
        "length": len(rt.ids),
    }
    if rt.grid:
        mine = unpatch(rt.pixel_values, rt.grid)
        facts["pixels_max_diff"] = max(
            float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
            for a, b in zip(mine, hf.pixels, strict=True)
        )
    if not echo:
        facts["prefill_max_diff"] = float(np.abs(rt.prefill - hf.prefill).max())
        facts["runtime_tokens"], facts["hf_tokens"] = rt.tokens, hf.tokens
        facts["tokens_equal"] = rt.tokens == hf.tokens
        return facts
    fed = rt.prefill[:, :echo]
    facts["embeds_max_diff"] = float(np.abs(fed - hf.embeds).max())
    positions = rt.prefill[:, echo : echo + 3].T.astype(int)
    facts["positions_1d"] = bool((positions == np.arange(len(rt.ids))).all())
    facts["masked"] = [i for i, m in enumerate(rt.prefill[:, echo + 4]) if not m]
    later = [s[echo : echo + 4].astype(int).tolist() for s in rt.steps]
    facts["steps_1d"] = all(s == [len(rt.ids) + i] * 3 + [len(rt.ids) + i + 1]
                            for i, s in enumerate(later))  # fmt: skip
    return facts


def calls(rt: RuntimeRun, image_id: int) -> list[tuple[int, int, int]]:
    """echo_vision's calls, in the order their rows reach the image ids: (rows, grid rows, n)."""
    rows = rt.prefill[np.array(rt.ids) == image_id][:, :3].astype(int)
    out: list[tuple[int, int, int]] = []
    for received, grids, index in rows.tolist():
        if index == 0 or not out:
            out.append((received, grids, 0))
        out[-1] = (received, grids, out[-1][2] + 1)
    return out


def save_picture(path: Path, height: int, width: int, seed: int) -> Path:
    """A random RGB PNG."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


@dataclass(frozen=True)
class Setup:
    """What every case needs: the folders, the pictures and transformers' two models."""

    root: Path
    checkpoint: Path
    source: Path
    square: list[Path]  # two pictures at the tower's size
    odd: list[Path]  # ODD_SIZES
    tower: Any
    patches: Any

    @classmethod
    def make(cls, root: Path, checkpoint: Path, source: Path) -> Setup:
        """Pictures written under `root`; `source` is mmforge's converted LLaVA package."""
        config = json.loads((checkpoint / "config.json").read_text())
        size = int(config["vision_config"]["image_size"])
        square = [save_picture(root / f"square{i}.png", size, size, i) for i in range(2)]
        odd = [save_picture(root / f"odd{h}x{w}.png", h, w, 10 + h) for h, w in ODD_SIZES]
        models = load_hf(checkpoint, patches=False), load_hf(checkpoint, patches=True)
        return cls(root, checkpoint, source, square, odd, *models)

    @property
    def image_id(self) -> int:
        """`<image>`'s id."""
        return int(model_config(self.source)["image_token_id"])

    @property
    def hidden(self) -> int:
        """The decoder's width."""
        return int(model_config(self.source)["decoder"]["hidden_size"])

    def case(self, name: str, vision: str, pictures: list[Path], *, per_call: str = "any",
             echo: bool = False, guard: int | None = None, text: str = QUESTION,
             new: int = 12) -> tuple[RuntimeRun, HfRun]:  # fmt: skip
        """Derive the package, run both sides on one user turn."""
        keep = vision != "tower"
        hf_model = self.patches if keep else self.tower
        folder = derive_package(self.source, self.root / name, hf_model=hf_model, vision=vision,
                                per_call=per_call, guard=guard, echo=echo)  # fmt: skip
        chat = messages(len(pictures), text)
        rt = run_runtime(folder, chat, pictures, new)
        return rt, run_hf(hf_model, self.checkpoint, chat, pictures, new, keep_size=keep)


def measure(setup: Setup) -> dict[str, Any]:
    """Every case of the module docstring."""
    s, image_id, hidden = setup, setup.image_id, setup.hidden
    out: dict[str, Any] = {}
    for name, vision, pictures, per_call, echo in (
        ("tower, one picture", "tower", s.square[:1], "any", False),
        ("tower, two pictures, one call", "tower", s.square, "any", False),
        ("tower, two pictures, a call each", "tower", s.square, "one", False),
        ("patches, 8 + 37 + 1", "patches", s.odd, "any", False),
        ("text only", "tower", [], "any", False),
        ("patches, 8 + 37 + 1, echo decoder", "patches", s.odd, "any", True),
        ("tower, two pictures, echo decoder", "tower", s.square, "any", True),
    ):
        rt, hf = s.case(name, vision, pictures, per_call=per_call, echo=echo)
        out[name] = compare(rt, hf, image_id, hidden if echo else 0)
    for name, pictures, per_call in (
        ("calls: 8 + 37 + 1", s.odd, "any"),
        ("calls: two of one size, grid [images, 3]", s.square, "any"),
        ("calls: two of one size, grid [1, 3]", s.square, "one"),
    ):
        rt, _ = s.case(name, "echo", pictures, per_call=per_call, echo=True, new=1)
        out[name] = {"(rows received, grid rows, features)": calls(rt, image_id)}
    out["hazards"] = hazards(setup)
    return out


def hazards(setup: Setup) -> dict[str, Any]:
    """Ids Qwen2VLPositionInputs reads as a picture or as padding, without and with a guard.

    config.h reads absent vision_start/image/video_token_id as 0: an id 0 followed by an id
    0 counts as a picture; a pad id gets mask 0 and no position. The guard writes an id no
    tokenizer produces (the vocabulary size) for all four.
    """
    vocab = int(model_config(setup.source)["vocab_size"])
    texts = {"id 0 twice": "Wow!!! " + QUESTION, "pad id": "A<pad>B " + QUESTION}
    out: dict[str, Any] = {}
    for label, guard in (("left out", None), ("guarded", vocab)):
        for echo in (False, True):
            for what, text in texts.items():
                key = f"{what}, ids {label}, {'echo' if echo else 'LLaVA'} decoder"
                try:
                    rt, hf = setup.case(f"hazard-{len(out)}", "tower", setup.square[:1],
                                        echo=echo, guard=guard, text=text)  # fmt: skip
                except RuntimeError as error:  # the runtime's refusal is the fact measured
                    out[key] = f"refused: {error}"
                    continue
                facts = compare(rt, hf, setup.image_id, setup.hidden if echo else 0)
                keep = ("ids_equal", "tokens_equal", "prefill_max_diff", "positions_1d", "masked")
                out[key] = {k: v for k, v in facts.items() if k in keep}
    return out


def main() -> None:
    """Build the tiny LLaVA checkpoint and its package, then print every measurement."""
    from mmforge.backend.convert import convert
    from mmforge.backend.tiny import build_tiny

    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/varcount")
    root.mkdir(parents=True, exist_ok=True)
    checkpoint, source = root / "tiny-llava", root / "pkg-llava"
    if not (checkpoint / "config.json").exists():
        build_tiny("llava", checkpoint)
    if not (source / "genai_config.json").exists():
        convert(str(checkpoint), source, dtype="f32")
    for name, facts in measure(Setup.make(root, checkpoint, source)).items():
        print(name)
        for key, value in facts.items():
            print(f"   {key}: {value}")


if __name__ == "__main__":
    main()
