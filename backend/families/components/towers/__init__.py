"""Vision towers written op by op with the GraphBuilder, on the checkpoint's tensor names.

- `siglip`: SigLIP's encoder and post layernorm on patch embeddings (PaliGemma's tower,
  and the NaViT tower's encoder);
- `navit`: the NaViT-style SigLIP on a picture's own size, with bucketed positions
  (Idefics2's and Idefics3's towers).
"""
