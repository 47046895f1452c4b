"""Surgery on built graphs where mobius 0.1 computes something other than HF.

Each fix names the family and the mismatch it repairs, checks that the graph has the
shape it expects (raising LayoutError otherwise, never patching blindly), and returns a
line for the package manifest. Family entries list the fixes they need.
"""

from mmforge.backend.graph_fixes.attention import bidirectional_image_attention
from mmforge.backend.graph_fixes.embedding import text_embedding_without_features
from mmforge.backend.graph_fixes.gemma import gemma3_batched_images
from mmforge.backend.graph_fixes.mistral import pixtral_rope_any_grid
from mmforge.backend.graph_fixes.phi import (
    phi4mm_audio_sizes_input,
    phi4mm_images_one_at_a_time,
    phi4mm_projection_mode,
)
from mmforge.backend.graph_fixes.qwen import qwen3_deepstack, qwen_unpad_images

__all__ = [
    "bidirectional_image_attention",
    "gemma3_batched_images",
    "phi4mm_audio_sizes_input",
    "phi4mm_images_one_at_a_time",
    "phi4mm_projection_mode",
    "pixtral_rope_any_grid",
    "qwen3_deepstack",
    "qwen_unpad_images",
    "text_embedding_without_features",
]
