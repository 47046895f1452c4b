"""The library under the families: graph pieces, tokenizer helpers and hosts they share.

A family folder is a composition of its fields, sizing rule, framing and graphs; what two
families share lives here, split by what it is, never in a family's folder:

- `graph_builder`: the op-by-op ONNX builder every graph we write uses;
- `tokens`: tokenizer.json's added tokens and the chat template the runtime reads;
- `hosts/`: what a runtime pipeline that hosts other models asks of every family it
  hosts (`videochat`: `videochat_flash_qwen`; `qwen`: the Qwen-VL pipelines' inputs);
- `towers/`: vision towers written op by op (`siglip`, `navit`);
- `splitting`: whether a checkpoint's image processor splits its pictures.

Nothing here names a family or imports one: an import contract in pyproject.toml keeps
the family folders independent of each other, so a new family touches its folder and one
registry line.
"""
