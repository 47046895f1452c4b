"""The last conversion stage: ONNX Runtime GenAI must load the package and run it.

A package that fails here is not written: the conversion fails with the runtime's message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mmforge.backend.errors import MmforgeError
from mmforge.backend.jobs import JobContext


@dataclass(frozen=True)
class Validation:
    """What the runtime did with the package.

    Attributes:
        prompt_tokens: Tokens the runtime's processor produced for the probe prompt.
        image_tokens: Image placeholder tokens among them.
        first_token: The first generated token id.
    """

    prompt_tokens: int
    image_tokens: int
    first_token: int


def validate_package(
    folder: Path, image_token_id: int | None, ctx: JobContext, *, image: Path | None = None
) -> Validation:
    """Load the package in ORT GenAI, run its processor on the probe image, generate a token.

    Raises:
        MmforgeError: The runtime rejected the package; the message is the runtime's.
    """
    import onnxruntime_genai as og

    from mmforge import resources

    ctx.report("validate", 0, 3, message="loading the package in ONNX Runtime GenAI", force=True)
    try:
        model = og.Model(str(folder))
        tokenizer = og.Tokenizer(model)
        ctx.report("validate", 1, 3, message="running the image processor")
        processor = model.create_multimodal_processor()
        messages = [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}],
            }
        ]
        prompt = tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
        images = og.Images.open(str(image or resources.probe_image()))
        inputs = processor(prompt, images=images)
        ids = inputs["input_ids"].as_numpy()
        ctx.report("validate", 2, 3, message="generating one token")
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=int(ids.shape[-1]) + 1, do_sample=False)
        generator = og.Generator(model, params)
        generator.set_inputs(inputs)
        generator.generate_next_token()
        first = int(generator.get_next_tokens()[0])
    except Exception as e:
        raise MmforgeError(
            f"ONNX Runtime GenAI could not run the converted package: {e}",
            "This is a conversion bug for this model; the package was not written",
            details=repr(e),
        ) from e
    ctx.report("validate", 3, 3, message="the runtime runs the package")
    image_tokens = int((ids == image_token_id).sum()) if image_token_id is not None else 0
    if image_token_id is not None and image_tokens == 0:
        raise MmforgeError(
            "The runtime's processor put no image tokens in the prompt",
            "The chat template or processor configuration is wrong for this family",
        )
    return Validation(
        prompt_tokens=int(ids.shape[-1]), image_tokens=image_tokens, first_token=first
    )
