"""Phi-3.5-Vision's reference model: transformers' Phi-3 and CLIP joined by the HD transform.

Imported only by verify (it imports torch). The HD transform and projector follow the remote
code's description (`Phi3ImageEmbedding.hd_feature_transform`, order sub_glb, exact GELU).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F

from mmforge.backend.families.phi3v import layout


class Phi3VReference(torch.nn.Module):  # type: ignore[misc]
    """Phi-3.5-Vision as transformers' parts: CLIP tower → HD transform → Phi-3.

    Called like an HF model (`input_ids` with the processor's negative placeholders,
    `pixel_values` [images, crops, 3, 336, 336], `image_sizes` [images, 2]) and generates
    like one.
    """

    def __init__(self, text: Any, tower: Any, written: dict[str, Any]):
        super().__init__()
        self.language = text
        self.tower = tower
        self.feature_layer = layout.feature_layer(written)
        hd = layout.hd_settings(written)
        width, hidden = 4 * hd["image_dim_out"], int(written["hidden_size"])
        self.projector = torch.nn.ParameterDict(
            {
                "glb_GN": torch.nn.Parameter(torch.zeros(1, 1, width)),
                "sub_GN": torch.nn.Parameter(torch.zeros(1, 1, 1, width)),
                "img_projection_0_weight": torch.nn.Parameter(torch.zeros(hidden, width)),
                "img_projection_0_bias": torch.nn.Parameter(torch.zeros(hidden)),
                "img_projection_2_weight": torch.nn.Parameter(torch.zeros(hidden, hidden)),
                "img_projection_2_bias": torch.nn.Parameter(torch.zeros(hidden)),
            }
        )
        self.crop = int(tower.config.image_size)
        self.generation_config = text.generation_config

    def get_input_embeddings(self) -> Any:
        """The text model's token embedding."""
        return self.language.get_input_embeddings()

    def get_output_embeddings(self) -> Any:
        """The text model's output layer."""
        return self.language.get_output_embeddings()

    def image_features(self, pixel_values: Any, image_sizes: Any) -> Any:
        """Projected features of every image, concatenated: [image tokens, hidden]."""
        p = self.projector
        out = []
        for pixels, (height, width) in zip(pixel_values, image_sizes.tolist(), strict=True):
            rows, cols = int(height) // self.crop, int(width) // self.crop
            crops = pixels[: 1 + rows * cols].float()
            states = self.tower(crops, output_hidden_states=True).hidden_states
            patches = states[self.feature_layer][:, 1:]  # the class token dropped
            glb = self._merge(patches[:1], 1, 1)
            sub = self._merge(patches[1:], rows, cols)
            out += [self._row_ends(sub), p["glb_GN"].reshape(1, -1), self._row_ends(glb)]
        joined = torch.cat(out, dim=0)
        hidden = F.gelu(F.linear(joined, p["img_projection_0_weight"], p["img_projection_0_bias"]))
        return F.linear(hidden, p["img_projection_2_weight"], p["img_projection_2_bias"])

    @staticmethod
    def _merge(patches: Any, rows: int, cols: int) -> Any:
        """[rows·cols, side², C] → [rows·side/2, cols·side/2, 4C]: 2×2 merge, crops tiled."""
        n, length, channels = patches.shape
        side = int(length**0.5)
        half = side // 2
        merged = patches.reshape(n, half, 2, half, 2, channels).permute(0, 1, 3, 2, 4, 5)
        merged = merged.reshape(rows, cols, half, half, 4 * channels).permute(0, 2, 1, 3, 4)
        return merged.reshape(rows * half, cols * half, 4 * channels)

    def _row_ends(self, grid: Any) -> Any:
        """sub_GN after every row of a [h, w, 4C] grid, flattened to [h·(w+1), 4C]."""
        ends = self.projector["sub_GN"].reshape(1, 1, -1).expand(grid.shape[0], 1, -1)
        return torch.cat([grid, ends], dim=1).reshape(-1, grid.shape[-1])

    def embed(self, input_ids: Any, pixel_values: Any = None, image_sizes: Any = None) -> Any:
        """Token embeddings with the image features at the negative placeholder ids."""
        placeholders = input_ids < 0
        embeds = self.language.get_input_embeddings()(input_ids.clamp(min=0))
        if pixel_values is not None and bool(placeholders.any()):
            features = self.image_features(pixel_values, image_sizes)
            if features.shape[0] != int(placeholders.sum()):
                raise ValueError(
                    f"{features.shape[0]} image features for {int(placeholders.sum())} "
                    "placeholder tokens"
                )
            embeds = embeds.clone()
            embeds[placeholders] = features.to(embeds.dtype)
        return torch.as_tensor(embeds)

    def forward(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        pixel_values: Any = None,
        image_sizes: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The text model's output on the merged embeddings."""
        embeds = self.embed(input_ids, pixel_values, image_sizes)
        return self.language(inputs_embeds=embeds, attention_mask=attention_mask, **kwargs)

    def generate(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        pixel_values: Any = None,
        image_sizes: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Transformers' generate from the merged embeddings; returns prompt + new ids."""
        embeds = self.embed(input_ids, pixel_values, image_sizes)
        new = self.language.generate(inputs_embeds=embeds, attention_mask=attention_mask, **kwargs)
        return torch.cat([input_ids, new], dim=1)
