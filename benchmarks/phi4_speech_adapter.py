"""Can ONNX Runtime GenAI switch Phi-4-multimodal to its speech LoRA for a turn? Measured.

The released model runs audio-only turns with its speech adapter. ONNX Runtime has LoRA
adapters (`.onnx_adapter` files whose tensors override same-named graph inputs for a
run) and ONNX Runtime GenAI exposes them (`og.Adapters`, `Generator.set_active_adapter`).
This script tries exactly that on a release-shaped Phi-4-multimodal package:

1. convert the test checkpoint (vision LoRA merged into the decoder, as mmforge does);
2. give every adapted decoder projection a LoRA path whose A and B are graph inputs with
   empty (rank 0) defaults, so the package still runs the vision adapter by default;
3. write the speech adapter as `speech.onnx_adapter`: A = [A_speech; A_vision],
   B = [s·B_speech, -s·B_vision], so base + vision + path = base + speech;
4. run the decoder in plain onnxruntime with and without the adapter, and the package in
   ONNX Runtime GenAI with and without `set_active_adapter`, and compare with
   transformers running the speech adapter (PEFT).

    python benchmarks/phi4_speech_adapter.py [--keep DIR]

It prints what each runtime did. With onnxruntime-genai 0.18 the adapter changes the
decoder's logits in onnxruntime but not one token in ONNX Runtime GenAI's multimodal
pipeline, which is why mmforge's Phi-4 packages carry only the vision adapter.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

_PROJECTION = re.compile(
    r"layers[./](\d+)/(self_attn|mlp)/(q_proj|k_proj|v_proj|o_proj|gate_up_proj|down_proj)/MatMul"
)
_MODULE = {
    "q_proj": "self_attn.qkv_proj",
    "k_proj": "self_attn.qkv_proj",
    "v_proj": "self_attn.qkv_proj",
    "o_proj": "self_attn.o_proj",
    "gate_up_proj": "mlp.gate_up_proj",
    "down_proj": "mlp.down_proj",
}


def add_lora_paths(decoder: Path) -> list[tuple[str, str, int, int]]:
    """Give each adapted projection a rank-0 LoRA path with overridable A and B."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(decoder), load_external_data=False)
    weights = {i.name: i for i in model.graph.initializer}
    nodes, added = [], []
    for node in list(model.graph.node):
        nodes.append(node)
        match = _PROJECTION.search(node.name)
        if not match or node.op_type != "MatMul":
            continue
        layer, _, proj = match.groups()
        fan_in, fan_out = weights[node.input[1]].dims
        a, b = f"speech_lora.layers.{layer}.{proj}.A", f"speech_lora.layers.{layer}.{proj}.B"
        out = node.output[0]
        node.output[0] = out + ".base"
        nodes += [
            helper.make_node("MatMul", [node.input[0], a], [a + ".out"], name=a + "/MatMul"),
            helper.make_node("MatMul", [a + ".out", b], [b + ".out"], name=b + "/MatMul"),
            helper.make_node("Add", [out + ".base", b + ".out"], [out], name=out + "/lora"),
        ]
        for name, shape in ((a, (fan_in, 0)), (b, (0, fan_out))):
            model.graph.initializer.append(
                numpy_helper.from_array(np.zeros(shape, np.float32), name)
            )
        model.graph.input.append(
            helper.make_tensor_value_info(a, TensorProto.FLOAT, [fan_in, "rank"])
        )
        model.graph.input.append(
            helper.make_tensor_value_info(b, TensorProto.FLOAT, ["rank", fan_out])
        )
        added.append((layer, proj, fan_in, fan_out))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(decoder))
    return added


def write_speech_adapter(checkpoint: Path, package: Path, added: list[Any], cfg: Any) -> Path:
    """speech.onnx_adapter: the speech delta minus the merged vision one."""
    import json

    import onnxruntime as ort
    import torch
    from safetensors.torch import load_file

    def adapter(name: str) -> tuple[dict[str, Any], float]:
        folder = checkpoint / f"{name}-lora"
        settings = json.loads((folder / "adapter_config.json").read_text())
        return load_file(folder / "adapter_model.safetensors"), settings["lora_alpha"] / settings[
            "r"
        ]

    (vision, sv), (speech, ss) = adapter("vision"), adapter("speech")
    heads, kv = int(cfg.get("num_attention_heads")), int(cfg.get("num_key_value_heads"))
    head = int(cfg.get("hidden_size")) // heads
    rows = {
        "q_proj": slice(0, heads * head),
        "k_proj": slice(heads * head, (heads + kv) * head),
        "v_proj": slice((heads + kv) * head, None),
    }
    params = {}
    for layer, proj, _, _ in added:
        key = f"base_model.model.model.layers.{layer}.{_MODULE[proj]}"
        av, bv = vision[key + ".lora_A.weight"].float(), vision[key + ".lora_B.weight"].float()
        as_, bs = speech[key + ".lora_A.weight"].float(), speech[key + ".lora_B.weight"].float()
        if proj in rows:
            bv, bs = bv[rows[proj]], bs[rows[proj]]
        a = torch.cat([as_, av], 0).T.contiguous().numpy()
        b = torch.cat([ss * bs, -sv * bv], 1).T.contiguous().numpy()
        params[f"speech_lora.layers.{layer}.{proj}.A"] = ort.OrtValue.ortvalue_from_numpy(a)
        params[f"speech_lora.layers.{layer}.{proj}.B"] = ort.OrtValue.ortvalue_from_numpy(b)
    fmt = ort.AdapterFormat()
    fmt.set_adapter_version(1)
    fmt.set_model_version(1)
    fmt.set_parameters(params)
    path = package / "speech.onnx_adapter"
    fmt.export_adapter(str(path))
    return path


def onnxruntime_logits(decoder: Path, adapter: Path, hidden: int) -> tuple[Any, Any, Any]:
    """The decoder's logits for random embeddings without and with the adapter, and them."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(decoder), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds: dict[str, Any] = {
        "inputs_embeds": rng.standard_normal((1, 5, hidden)).astype(np.float32) * 0.1,
        "attention_mask": np.ones((1, 5), np.int64),
        "position_ids": np.arange(5, dtype=np.int64)[None],
    }
    for i in session.get_inputs():
        if i.name.startswith("past_key_values"):
            feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    plain = session.run(["logits"], feeds)[0]
    lora = ort.LoraAdapter()
    lora.Load(str(adapter))
    options = ort.RunOptions()
    options.add_active_adapter(lora)
    adapted = session.run(["logits"], feeds, run_options=options)[0]
    return plain, adapted, feeds["inputs_embeds"]


def main() -> int:
    """Build the package and adapter, run both runtimes and transformers, print the facts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build in this folder and keep it")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import transformers
    from peft import PeftModel

    from mmforge import resources
    from mmforge.backend.checkpoint import Checkpoint
    from mmforge.backend.convert import convert
    from mmforge.backend.families import lookup
    from mmforge.backend.runtime import Runtime
    from mmforge.backend.tiny.release import write_release
    from mmforge.backend.verify import hf_reference

    transformers.utils.logging.set_verbosity_error()
    work = args.keep or Path(tempfile.mkdtemp(prefix="mmforge-speech-"))
    spec = next(r for r in lookup("phi4mm").fixtures.released if r.key == "phi4mm-native")
    checkpoint, package = work / "checkpoint", work / "package"
    write_release(spec, checkpoint)
    convert(str(checkpoint), package)
    cfg = Checkpoint.read(checkpoint).cfg
    added = add_lora_paths(package / "decoder.onnx")
    adapter = write_speech_adapter(checkpoint, package, added, cfg)
    plain_logits, adapted_logits, embeds = onnxruntime_logits(
        package / "decoder.onnx", adapter, int(cfg.get("hidden_size"))
    )
    print(f"LoRA paths added to {len(added)} decoder projections; adapter {adapter.name}")
    change = float(np.abs(adapted_logits - plain_logits).max())
    print(f"onnxruntime: logits change by up to {change:.3g} with the adapter active")

    rt = Runtime(package)
    og = rt.og
    adapters = og.Adapters(rt.model)
    adapters.load(str(adapter), "speech")
    messages = hf_reference.messages_for("Describe this.", n_images=0, n_audios=1)
    inputs = rt.process(rt.prompt(messages), audios=[resources.probe_audio()])

    def genai(active: bool) -> list[int]:
        params = og.GeneratorParams(rt.model)
        params.set_search_options(max_length=len(inputs.input_ids) + 16, do_sample=False, top_k=1)
        generator = og.Generator(rt.model, params)
        if active:
            generator.set_active_adapter(adapters, "speech")
        generator.set_inputs(inputs.named)
        out: list[int] = []
        while not generator.is_done() and len(out) < 16:
            generator.generate_next_token()
            out.append(int(generator.get_next_tokens()[0]))
        return out

    def hf(adapter_name: str) -> list[int]:
        model = transformers.Phi4MultimodalForCausalLM.from_pretrained(checkpoint, dtype="float32")
        PeftModel.from_pretrained(
            model.eval(), str(checkpoint / f"{adapter_name}-lora"), adapter_name=adapter_name
        )
        ref = hf_reference.from_runtime(checkpoint, inputs.prompt, inputs.arrays)
        return hf_reference.greedy_generate(model, ref, 16)

    def hf_logits(adapter_name: str) -> Any:
        import torch

        model = transformers.Phi4MultimodalForCausalLM.from_pretrained(checkpoint, dtype="float32")
        PeftModel.from_pretrained(
            model.eval(), str(checkpoint / f"{adapter_name}-lora"), adapter_name=adapter_name
        )
        with torch.no_grad():
            return model(inputs_embeds=torch.from_numpy(embeds)).logits.numpy()

    speech_gap = float(np.abs(adapted_logits - hf_logits("speech")).max())
    vision_gap = float(np.abs(plain_logits - hf_logits("vision")).max())
    print(
        f"  against transformers: without it vs the vision LoRA {vision_gap:.2g}, "
        f"with it vs the speech LoRA {speech_gap:.2g} (the path computes the speech model)"
    )

    plain, active = genai(False), genai(True)
    hf_vision, hf_speech = hf("vision"), hf("speech")
    print(f"ONNX Runtime GenAI {og.__version__}, audio-only prompt, 16 greedy tokens:")
    print(f"  without the adapter = transformers with the vision LoRA: {plain == hf_vision}")
    print(f"  with set_active_adapter('speech') = without it: {active == plain}")
    matched = sum(a == b for a, b in zip(active, hf_speech, strict=False))
    print(
        f"  with set_active_adapter('speech') = transformers with the speech LoRA: "
        f"{active == hf_speech} ({matched} of {len(hf_speech)} tokens in place)"
    )
    print(f"  (transformers' speech and vision answers differ: {hf_speech != hf_vision})")
    print(f"files in {work}" if args.keep else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
