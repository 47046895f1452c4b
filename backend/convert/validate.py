"""The last conversion stage: ONNX Runtime GenAI must load the package and run it.

A package that fails here is not written: the conversion fails with the runtime's message.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mmforge.backend import anyres, pictures
from mmforge.backend.errors import MmforgeError
from mmforge.backend.jobs import JobContext
from mmforge.backend.picture_sizing import ANYRES, Intake

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Validation:
    """What the runtime did with the package.

    Attributes:
        prompt_tokens: Tokens the runtime's processor produced for the probe prompt.
        image_tokens: Image placeholder tokens among them.
        first_token: The first generated token id.
        ep: The execution provider the check ran on.
    """

    prompt_tokens: int
    image_tokens: int
    first_token: int
    ep: str = "cpu"


def validate_package(
    folder: Path,
    image_token_id: int | None,
    ctx: JobContext,
    *,
    ep: str = "cpu",
    intake: Intake | None = None,
) -> Validation:
    """Load the package in ORT GenAI, run its processor on the probe image, generate a token.

    The probe goes through chat's intake as the package records it (`intake`: sized as
    transformers sizes it, or packed as a split picture's canvas), as every picture does.
    A CUDA package holds CUDA-only kernels; on a machine without CUDA only its
    configuration and ONNX structure are checked, and the result says so.

    Raises:
        MmforgeError: The runtime rejected the package; the message is the runtime's.
    """
    import onnxruntime_genai as og

    from mmforge import resources
    from mmforge.backend.runtime import package_messages, read_genai_config
    from mmforge.backend.templates import check_folder_template

    ctx.report("validate", 0, 3, message="loading the package in ONNX Runtime GenAI", force=True)
    read_genai_config(folder)  # a model.type the runtime does not run is never published
    if ep == "cuda" and not og.is_cuda_available():
        return _check_without_cuda(folder, ctx)
    probe = [
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}],
        }
    ]
    # In the form the template takes (checked already: the same text is not run again).
    messages = package_messages(folder, probe, check_folder_template(folder, ctx))
    try:
        model = og.Model(str(folder))
        tokenizer = og.Tokenizer(model)
        ctx.report("validate", 1, 3, message="running the image processor")
        processor = model.create_multimodal_processor()
        prompt = tokenizer.apply_chat_template(json.dumps(messages), add_generation_prompt=True)
        with tempfile.TemporaryDirectory(prefix="mmforge-probe-") as work:
            sent = Path(work) / "probe.png"
            pictures.save_lossless(pictures.take(resources.probe_image(), intake).image, sent)
            files = [sent]
            if intake is not None and intake.sizing is not None and intake.sizing.rule == ANYRES:
                files = anyres.runtime_files(sent, Path(work))  # the stacked picture's blocks
            images = og.Images.open(*[str(f) for f in files])
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
        prompt_tokens=int(ids.shape[-1]), image_tokens=image_tokens, first_token=first, ep=ep
    )


def _check_without_cuda(folder: Path, ctx: JobContext) -> Validation:
    """What can be checked of a CUDA package without CUDA: config and graph structure.

    Each graph is loaded in an onnxruntime CPU session without optimisations, which checks
    its types and shapes against onnxruntime's own operator schemas (ONNX's checker does
    not know onnxruntime's operators in the default domain). A node whose kernel exists
    only for CUDA is accepted: this machine cannot say more about it.
    """
    import onnxruntime as ort
    import onnxruntime_genai as og
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as NoKernel

    ctx.report(
        "validate", 0, 1, message="no CUDA here: checking config and graphs only", force=True
    )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        og.Config(str(folder))
        for path in sorted(folder.glob("*.onnx")):
            try:
                ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except NoKernel as e:
                log.info("%s needs CUDA kernels: %s", path.name, e)
    except Exception as e:
        raise MmforgeError(
            f"The CUDA package is malformed: {e}",
            "This is a conversion bug for this model; the package was not written",
        ) from e
    ctx.report("validate", 1, 1, message="not run: this machine has no CUDA device")
    return Validation(prompt_tokens=0, image_tokens=0, first_token=-1, ep="not run (no CUDA here)")
