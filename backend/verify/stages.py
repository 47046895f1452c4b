"""Verify's stages: each compares one part of the package with the evidence.

Every graph stage is fed the *reference's* inputs, so that an error upstream cannot be
blamed on a stage downstream:

1. preprocessing (preprocessing.py): the runtime's processor against HF's;
2. vision encoder: the package's vision graph on the runtime's pixels against the HF
   features that land at the image token positions;
3. audio encoder: the same for audio;
4. embedding: the package's embedding graph on the HF features and ids against HF's
   merged embeddings; and on a text-only prompt with no features;
5. decoder: prefill logits on HF's embeddings, attention mask and position ids (3-D for
   Qwen), then one decode step through the KV cache;
6. runtime config: the genai_config fields the runtime needs to wire the graphs together;
7. end to end: the runtime's N greedy tokens against HF generate from the same ids and
   pixels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmforge.backend.checkpoint import Checkpoint
from mmforge.backend.jobs import JobContext
from mmforge.backend.picture_sizing import Sizing
from mmforge.backend.verify import sessions
from mmforge.backend.verify.evidence import Forward, ReferenceEvidence, RuntimeEvidence
from mmforge.backend.verify.parity import (
    AMBIGUOUS,
    FAIL,
    PASS,
    Comparison,
    Tolerance,
    compare,
    compare_ids,
)


@dataclass(frozen=True)
class Setup:
    """What every stage knows about the package under test.

    Attributes:
        package: The package folder.
        model: genai_config's `model` section.
        checkpoint: The reference checkpoint.
        tol: Tolerances for the package's dtype (the decoder's).
        tol_encoders: Tolerances for encoders and embedding (int4 quantizes the decoder
            only: they stay float32).
        n_images: Images in the prompt.
        n_audios: Audio clips in the prompt.
        tol_embedding: Tolerances for the embedding where they differ from the encoders'
            (an int4 package's f16 encoders beside its exactly judged embedding).
        pictures: The user's picture files as given (the reference reads these, as
            transformers' load_image does; the runtime gets chat's intake copies).
        sizing: How the package says transformers sizes its pictures (None: it does not).
    """

    package: Path
    model: dict[str, Any]
    checkpoint: Checkpoint
    tol: Tolerance
    tol_encoders: Tolerance
    n_images: int
    n_audios: int
    tol_embedding: Tolerance | None = None
    pictures: tuple[Path, ...] = ()
    sizing: Sizing | None = None

    @property
    def image_token(self) -> int | None:
        """The package's image token id."""
        return self.model.get("image_token_id")

    @property
    def audio_token(self) -> int | None:
        """The package's audio token id."""
        return self.model.get("audio_token_id")

    def session(self, section: str) -> Any:
        """A session on the graph of a genai_config section."""
        return sessions.open_session(self.package, self.model, section)


@dataclass(frozen=True)
class StageResult:
    """A stage's comparisons, and what a later stage needs from it.

    Attributes:
        comparisons: The stage's comparisons.
        features: An encoder's output (None when it did not run or failed).
        error: The decoder's measured error, the largest logit difference.
    """

    comparisons: list[Comparison]
    features: Any = None
    error: float = 0.0


def graph_stages(
    setup: Setup, rt: RuntimeEvidence, ref: ReferenceEvidence, ctx: JobContext
) -> list[Comparison]:
    """Stages 2 to 7, in check order."""
    out: list[Comparison] = []
    vision = audio = StageResult([])
    if setup.n_images and "vision" in setup.model:
        vision = _guarded(["vision_encoder"], lambda: encoder(setup, rt, ref, "vision"))
        out += vision.comparisons
    if setup.n_audios and "filename" in setup.model.get("speech", {}):
        audio = _guarded(["audio_encoder"], lambda: encoder(setup, rt, ref, "speech"))
        out += audio.comparisons
    ctx.report("verify", 2.5, 4, message="embedding and decoder graphs")
    out += _guarded(["embedding"], lambda: embedding(setup, rt, ref, vision, audio)).comparisons
    decoded = _guarded(["decoder_prefill", "decoder_step"], lambda: decoder(setup, rt, ref))
    out += decoded.comparisons
    out.append(runtime_config(setup))
    final = end_to_end(rt, ref, decoded.error, setup.tol)
    if final.verdict == FAIL and ref.near_tie is not None:
        # Before calling a flip a fault: what the package's own encoder outputs (f16, or
        # within their bounds) move the logits by, which the decoder stages, fed HF's
        # embeddings, cannot see.
        try:
            carried = carried_error(setup, rt, ref, vision, audio)
        except sessions.GraphError:  # the stages above name the graph that fails
            carried = None
        if carried is not None:
            final = end_to_end(rt, ref, decoded.error, setup.tol, carried)
    out.append(final)
    return out


def carried_error(
    setup: Setup,
    rt: RuntimeEvidence,
    ref: ReferenceEvidence,
    vision: StageResult,
    audio: StageResult,
) -> float | None:
    """The largest prefill logit difference once the package's own encoder outputs are in.

    The embedding and decoder graphs run on the features the package's encoders made
    (where the encoder stages fed them HF's), so the logits carry every encoder's error
    as the runtime's prompt does. None where no encoder ran.
    """
    import numpy as np

    main = ref.main
    features = {"image_features": vision.features, "audio_features": audio.features}
    if main is None or all(f is None for f in features.values()):
        return None
    session = setup.session("embedding")
    try:
        specs = {i.name: i for i in session.get_inputs()}
        feeds: dict[str, Any] = {"input_ids": np.asarray([rt.ids], dtype=np.int64)}
        feeds.update({k: f for k, f in features.items() if k in specs and f is not None})
        embedded = sessions.run_named(
            session, sessions.cast(session, sessions.fill_empty(session, feeds))
        )
    finally:
        del session
    session = setup.session("decoder")
    try:
        inputs = {i.name: i for i in session.get_inputs()}
        head_size = int(setup.model["decoder"].get("head_size", 0))
        feeds = _decoder_feeds(setup, inputs, main, rt.ids, 0)
        feeds["inputs_embeds"] = embedded["inputs_embeds"]
        if "per_layer_inputs" in feeds and "per_layer_inputs" in embedded:
            shape = feeds["per_layer_inputs"].shape
            feeds["per_layer_inputs"] = embedded["per_layer_inputs"].reshape(shape)
        feeds.update(sessions.empty_past(inputs, head_size))
        logits = sessions.run_named(session, sessions.cast(session, feeds))["logits"][0]
    finally:
        del session
    return float(np.max(np.abs(np.asarray(logits, np.float64) - main.logits)))


def _guarded(names: list[str], stage: Callable[[], StageResult]) -> StageResult:
    """Run a stage; a graph that fails on the inputs is that stage's FAIL, not a crash."""
    try:
        result = stage()
    except sessions.GraphError as e:
        reason = f"the graph fails on these inputs: {e}"
        return StageResult([Comparison(n, FAIL, None, 0.0, None, reason, [], []) for n in names])
    return result


def positions(ids: Any, token: int | None) -> Any:
    """Where `token` sits in `ids` (a boolean mask).

    A negative token id is Phi-3-Vision's: ONNX Runtime GenAI 0.18 writes image N's
    placeholders as -N, so every negative id is an image position (no vocabulary id is
    negative), and a prompt with two images holds -1s and -2s.
    """
    import numpy as np

    ids = np.asarray(ids)
    if token is not None and token < 0:
        return ids < 0
    return ids == token


def _hf_rows(setup: Setup, ids: list[int], main: Forward, token: int | None) -> Any:
    """HF's decoder inputs at the positions of `token` in `ids` (with DeepStack columns)."""
    import numpy as np

    rows = main.hidden[0][positions(ids, token)]
    if token == setup.image_token and main.deepstack:
        rows = np.concatenate([rows, *main.deepstack], axis=-1)
    return rows


def encoder(setup: Setup, rt: RuntimeEvidence, ref: ReferenceEvidence, section: str) -> StageResult:
    """Stage 2 or 3: an encoder graph on the runtime's arrays against HF's features."""
    assert ref.main is not None
    stage = "vision_encoder" if section == "vision" else "audio_encoder"
    token = setup.image_token if section == "vision" else setup.audio_token
    session = setup.session(section)
    try:
        prefix = "image" if section == "vision" else "audio"
        mapping = setup.model[section].get("inputs", {})
        feeds = sessions.encoder_feeds(session, mapping, rt.arrays, prefix)
        features = sessions.run_per_item(session, feeds)[0]
    finally:
        del session
    rows = features.reshape(-1, features.shape[-1])
    family = setup.checkpoint.family.reference
    if section == "vision" and family is not None and family.feature_rows is not None:
        # Rows the embedding graph fills itself (Idefics2's fake tokens between the
        # parts of a split picture): the features are the rest, at HF's image ids.
        rows = rows[family.feature_rows(setup.checkpoint.cfg, rows.shape[0])]
    reference = _hf_rows(setup, ref.ids(rt), ref.main, token)
    if rows.shape[0] != reference.shape[0]:
        what = "image" if section == "vision" else "audio"
        reason = (
            f"{rows.shape[0]} {what} features for {reference.shape[0]} {what} tokens in "
            "the prompt (image token count mismatch)"
        )
        return StageResult([Comparison(stage, FAIL, None, 0.0, None, reason, [], [])], features)
    return StageResult([compare(stage, reference, rows, setup.tol_encoders)], features)


def _features_like(spec: Any, onnx_features: Any, reference: Any) -> Any:
    """HF's features shaped for the embedding input.

    Rows where the input is 2-D; the encoder output's layout where its rank is open.
    """
    if len(spec.shape) == 2 or onnx_features is None:
        return reference
    if reference.size == onnx_features.size:
        return reference.reshape(onnx_features.shape)
    return reference


def merged(setup: Setup, forward: Forward, ids: Any) -> Any:
    """HF's decoder input embeddings (with Qwen3-VL's DeepStack columns)."""
    import numpy as np

    hidden = forward.hidden[0]
    if not forward.deepstack:
        width = int(setup.model["decoder"].get("hidden_size", 0))
        if width > hidden.shape[-1]:  # DeepStack columns are zero at text positions
            pad = np.zeros((hidden.shape[0], width - hidden.shape[-1]), hidden.dtype)
            return np.concatenate([hidden, pad], axis=-1)
        return hidden
    extra = np.zeros((hidden.shape[0], sum(d.shape[-1] for d in forward.deepstack)), hidden.dtype)
    extra[positions(ids[: hidden.shape[0]], setup.image_token)] = np.concatenate(
        forward.deepstack, axis=-1
    )
    return np.concatenate([hidden, extra], axis=-1)


def embedding(
    setup: Setup,
    rt: RuntimeEvidence,
    ref: ReferenceEvidence,
    vision: StageResult,
    audio: StageResult,
) -> StageResult:
    """Stage 4: the embedding graph on HF's features and ids, and on a text-only prompt."""
    import numpy as np

    main, text = ref.main, ref.text
    assert main is not None and text is not None
    session = setup.session("embedding")
    try:
        specs = {i.name: i for i in session.get_inputs()}
        feeds: dict[str, Any] = {"input_ids": np.asarray([rt.ids], dtype=np.int64)}
        for name, encoded, token in (
            ("image_features", vision, setup.image_token),
            ("audio_features", audio, setup.audio_token),
        ):
            if name in specs and encoded.features is not None:
                rows = _hf_rows(setup, rt.ids, main, token)
                feeds[name] = _features_like(specs[name], encoded.features, rows)
        outs = sessions.run_named(
            session, sessions.cast(session, sessions.fill_empty(session, feeds))
        )
        tol = setup.tol_embedding or setup.tol_encoders
        expected = merged(setup, main, np.asarray(rt.ids))
        result = [compare("embedding", expected, outs["inputs_embeds"][0], tol)]
        if "per_layer_inputs" in outs and main.per_layer is not None:
            per_layer = main.per_layer.reshape(outs["per_layer_inputs"].shape)
            result.append(compare("embedding_per_layer", per_layer, outs["per_layer_inputs"], tol))
        text_ids = np.asarray([rt.text_ids], dtype=np.int64)
        text_feeds = sessions.cast(session, sessions.fill_empty(session, {"input_ids": text_ids}))
        text_out = sessions.run(session, ["inputs_embeds"], text_feeds)[0]
        expected_text = merged(setup, text, np.asarray(rt.text_ids))
        result.append(compare("embedding_text_only", expected_text, text_out[0], tol))
    finally:
        del session
    return StageResult(result)


def decoder(setup: Setup, rt: RuntimeEvidence, ref: ReferenceEvidence) -> StageResult:
    """Stage 5: prefill logits on HF's embeddings, then several steps through the cache.

    Each step feeds one of HF's greedy tokens with the state the previous run returned
    (KV cache, convolution and recurrent state), so an error in how state is carried
    grows step by step instead of hiding in one.
    """
    import numpy as np

    main, step_fw = ref.main, ref.step
    assert main is not None and step_fw is not None
    session = setup.session("decoder")
    try:
        inputs = {i.name: i for i in session.get_inputs()}
        seq = len(rt.ids)
        head_size = int(setup.model["decoder"].get("head_size", 0))
        feeds = _decoder_feeds(setup, inputs, main, rt.ids, 0)
        feeds.update(sessions.empty_past(inputs, head_size))
        outs = sessions.run_named(session, sessions.cast(session, feeds))
        prefill = compare("decoder_prefill", main.logits, outs["logits"][0], setup.tol, logits=True)
        ids = [*rt.ids, *ref.step_tokens]
        stepped = []
        for end in range(seq + 1, len(ids) + 1):
            feeds = _decoder_feeds(setup, inputs, step_fw, ids, end - 1, end)
            feeds.update(sessions.carried_state(inputs, outs))
            outs = sessions.run_named(session, sessions.cast(session, feeds))
            stepped.append(outs["logits"][0, -1])
        steps = len(ref.step_tokens)
        step = compare(
            "decoder_step",
            step_fw.logits[seq : seq + steps],
            np.stack(stepped),
            setup.tol,
            logits=True,
        )
        if steps > 1:
            step = dataclasses.replace(step, reason=f"{steps} steps: {step.reason}")
    finally:
        del session
    # The decoder's measured error: what rounding alone can move a logit by.
    error = max(prefill.max_abs_diff or 0.0, step.max_abs_diff or 0.0)
    return StageResult([prefill, step], error)


def _decoder_feeds(
    setup: Setup,
    inputs: dict[str, Any],
    forward: Forward,
    ids: list[int],
    start: int,
    end: int | None = None,
) -> dict[str, Any]:
    """The decoder's inputs for positions [start, end) from an HF forward pass over `ids`."""
    import numpy as np

    end = len(ids) if end is None else end
    hidden = merged(setup, forward, np.asarray(ids))
    feeds: dict[str, Any] = {
        "inputs_embeds": hidden[None, start:end],
        "attention_mask": np.ones((1, end), dtype=np.int64),
    }
    if "position_ids" in inputs:
        feeds["position_ids"] = sessions.positions(
            forward.position_ids, start, end, inputs["position_ids"]
        )
    if "input_ids" in inputs:
        feeds["input_ids"] = np.asarray([ids[start:end]], dtype=np.int64)
    if "per_layer_inputs" in inputs and forward.per_layer is not None:
        feeds["per_layer_inputs"] = forward.per_layer.reshape(1, len(ids), -1)[:, start:end]
    return feeds


def runtime_config(setup: Setup) -> Comparison:
    """Stage 6: the token ids genai_config must name, against the checkpoint's."""
    ref = setup.checkpoint.cfg
    reference = setup.checkpoint.family.reference
    problems = []
    wanted = {"image_token_id": ref.first("image_token_id", "image_token_index")}
    for name in reference.config_tokens if reference is not None else ():
        wanted[name] = ref.get(name)
    if setup.n_audios:
        wanted["audio_token_id"] = ref.first("audio_token_id", "audio_token_index")
    for name, value in wanted.items():
        have = setup.model.get(name)
        if value is None:
            continue
        if have is None:
            problems.append(f"{name} is missing")
        elif int(have) != int(value):
            problems.append(f"{name} is {have}, the checkpoint says {value}")
    if problems:
        reason = "genai_config.json: " + "; ".join(problems)
        return Comparison("runtime_config", FAIL, None, 0.0, None, reason, [], [])
    return Comparison(
        "runtime_config", PASS, 0.0, 1.0, None, "token ids the runtime needs are set", [], []
    )


def end_to_end(
    rt: RuntimeEvidence,
    ref: ReferenceEvidence,
    decoder_error: float,
    tol: Tolerance | None = None,
    carried: float | None = None,
) -> Comparison:
    """Stage 7: the runtime's greedy tokens against HF's, a near-tie being AMBIGUOUS.

    A near-tie is two logits closer than twice the decoder's measured error, or than
    twice the bound the decoder stages are judged by (`tol`, as they judge their own top
    tokens): where decoder_step calls a flipped top token a near-tie, so does this stage.
    `carried` is the logit error measured with the package's own encoder outputs in
    (`carried_error`): where it is larger than the decoder's, a FAIL says so, since the
    encoders (stored in f16, or within their bounds) then move the answer.
    """
    if rt.generation_error is not None:
        reason = f"the runtime failed while generating: {rt.generation_error}"
        return Comparison("end_to_end", FAIL, None, 0.0, False, reason, [], [])
    result = compare_ids("end_to_end", ref.tokens, rt.tokens)
    if result.verdict != PASS and ref.generated_placeholder is not None:
        step, token = ref.generated_placeholder
        return dataclasses.replace(
            result,
            verdict=AMBIGUOUS,
            reason=f"{result.reason}; both generated placeholder token {token} at step "
            f"{step}, which has no image or audio behind it, so neither side's continuation "
            "means anything (random weights do this; a trained model does not)",
        )
    if result.verdict == PASS or ref.near_tie is None:
        return result
    k, hf_logit, rt_logit = ref.near_tie
    # A tie is two logits closer than the decoder's measured error on either side, or
    # than the decoder stages' own bound.
    margin = 2 * decoder_error + 1e-6
    if tol is not None:
        margin = max(margin, 2 * (tol.atol + tol.rtol * abs(hf_logit)))
    gap = hf_logit - rt_logit
    if gap > margin:
        if carried is not None and carried > margin / 2:
            reason = (
                f"{result.reason}; HF's logits for the two tokens at step {k} are {gap:.2g} "
                f"apart, and with the package's own encoder outputs in (not HF's) the "
                f"prompt's logits move by up to {carried:.2g}, where the decoder alone moves "
                f"them by {decoder_error:.2g}: the encoders' stored precision or error "
                "changes the answer (convert with --encoders f32 to keep them float32)"
            )
            return dataclasses.replace(result, reason=reason)
        return result
    return Comparison(
        "end_to_end",
        AMBIGUOUS,
        result.max_abs_diff,
        result.cosine,
        False,
        f"tokens differ from step {k}, where HF's logits for the two tokens are "
        f"{gap:.2g} apart, within twice the decoder's measured error or bound (a near-tie)",
        [],
        [k],
    )
