"""Which decoder head sizes ONNX Runtime's GroupQueryAttention runs.

mobius fuses a decoder's attention into `com.microsoft.GroupQueryAttention` when it builds
for the cpu or cuda provider. ONNX Runtime checks that operator's inputs in one helper
shared by its CPU and CUDA kernels (onnxruntime 1.32,
contrib_ops/cpu/bert/group_query_attention_helper.h):

- `Check_Q_K_V` / `Check_QKV`: the head size must be a multiple of 8;
- `CheckRotaryCaches`, when the operator applies the rotary embedding itself
  (`do_rotary`, cos and sin caches given): a multiple of 16.

Measured on the onnxruntime 1.32 CPU wheel with a one-node graph (head sizes 8 to 264):
without rotary, 12 and 20 are refused and 8, 24, 40 run; with rotary, 8, 24, 40 and 264
are refused too. The refusal comes when the session runs, not when it loads. mobius's
fusion applies the rotary inside the operator for a plain RoPE decoder (LLaVA's Llama)
and outside it for M-RoPE (Qwen2-VL, Qwen2.5-VL), so the rule is read from the graph
built, and a refused one is built again with the portable attention (ONNX Attention and
a separate rotary), which has no such rule.
"""

from __future__ import annotations

from typing import Any

from mmforge.backend.families import Cfg

GQA = "GroupQueryAttention"
MULTIPLE = 8  # group_query_attention_helper.h, Check_Q_K_V
ROTARY_MULTIPLE = 16  # group_query_attention_helper.h, CheckRotaryCaches


def head_size(cfg: Cfg) -> int | None:
    """The decoder's head size: `head_dim`, else hidden_size / num_attention_heads.

    Read from the language model's config (`text_config`, `llm_config`, else the top
    level). None when the config gives neither.
    """
    text = cfg.text
    explicit = text.get("head_dim")
    if isinstance(explicit, int) and explicit > 0:
        return explicit
    hidden, heads = text.get("hidden_size"), text.get("num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None


def _fused_nodes(model: Any) -> list[Any]:
    graphs = [*model.graphs(), *(f.graph for f in model.functions.values())]
    return [n for g in graphs for n in g.all_nodes() if n.op_type == GQA]


def _applies_rotary(node: Any) -> bool:
    flag = node.attributes.get("do_rotary")
    if flag is not None and int(flag.value):
        return True
    caches = node.inputs[7:9]
    return any(value is not None for value in caches)


def refused(cfg: Cfg, decoder: Any) -> str | None:
    """Why the runtime's GroupQueryAttention would refuse this decoder, or None.

    Args:
        cfg: The checkpoint's config (its head size).
        decoder: The built decoder (an onnx_ir model), or None.

    Returns:
        A line for the manifest when a GroupQueryAttention node of `decoder` cannot run
        with the config's head size; None when it can or the decoder has none.
    """
    size = head_size(cfg)
    if decoder is None or size is None:
        return None
    nodes = _fused_nodes(decoder)
    if not nodes:
        return None
    rotary = any(_applies_rotary(n) for n in nodes)
    multiple = ROTARY_MULTIPLE if rotary else MULTIPLE
    if size % multiple == 0:
        return None
    inside = " with the rotary embedding inside it" if rotary else ""
    return (
        f"Decoder attention: the portable Attention graph, not the GroupQueryAttention "
        f"fusion{inside}: ONNX Runtime runs that fusion only for a head size that is a "
        f"multiple of {multiple} (onnxruntime 1.32, CPU and CUDA alike), and this "
        f"decoder's is {size}"
    )
