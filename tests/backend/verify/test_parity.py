"""The verdict logic of stage-by-stage parity: tolerances, near-ties, first divergence."""

from __future__ import annotations

import numpy as np
import pytest

from mmforge.backend.verify.parity import (
    AMBIGUOUS,
    FAIL,
    PASS,
    compare,
    compare_ids,
    cosine,
    overall,
    tolerance,
)

F32 = tolerance("f32")
RNG = np.random.default_rng(0)


def test_tolerances_follow_the_seed():
    assert (F32.atol, F32.rtol) == (1e-4, 2e-2)
    assert (tolerance("f32", layers=32).atol, tolerance("f32", layers=32).rtol) == (1e-3, 5e-2)
    assert (tolerance("f16").atol, tolerance("bf16").rtol) == (1e-2, 5e-2)
    assert not tolerance("int4").elementwise
    with pytest.raises(ValueError):
        tolerance("f8")


def test_equal_outputs_pass_and_small_noise_passes():
    ref = RNG.normal(size=(4, 32)).astype(np.float32)
    assert compare("vision", ref, ref, F32).verdict == PASS
    noisy = ref + RNG.normal(scale=1e-6, size=ref.shape)
    c = compare("vision", ref, noisy, F32)
    assert c.verdict == PASS and c.max_abs_diff < 1e-5 and c.cosine > 0.999999


def test_a_perturbed_output_is_ambiguous_when_close_and_fails_when_far():
    ref = RNG.normal(size=(64, 64))
    close = ref + RNG.uniform(-3e-4, 3e-4, size=ref.shape)
    c = compare("embedding", ref, close, F32)
    assert c.verdict == AMBIGUOUS and "× the bound" in c.reason
    wrong_but_aligned = ref + RNG.normal(scale=1e-2, size=ref.shape)
    c = compare("embedding", ref, wrong_but_aligned, F32)
    assert c.cosine > 0.999 and c.verdict == FAIL and "beyond rounding noise" in c.reason
    far = ref + RNG.normal(scale=1.0, size=ref.shape)
    c = compare("embedding", ref, far, F32)
    assert c.verdict == FAIL and "cosine" in c.reason


def test_swapped_channels_fail():
    ref = RNG.normal(size=(1, 3, 16, 16))
    c = compare("preprocessing", ref, ref[:, ::-1], F32)
    assert c.verdict == FAIL


def test_a_shape_mismatch_or_nan_fails_with_the_reason():
    ref = np.zeros((2, 8))
    c = compare("vision", ref, np.zeros((3, 8)), F32)
    assert c.verdict == FAIL and "shape [3, 8]" in c.reason and c.max_abs_diff is None
    bad = ref.copy()
    bad[0, 0] = np.nan
    assert "NaN" in compare("vision", ref, bad, F32).reason


def test_logits_top_token_mismatch_fails_but_a_near_tie_is_ambiguous():
    ref = RNG.normal(size=(3, 100))
    ref[1, 7], ref[1, 9] = 9.0, 8.99999  # positions 1: a near-tie between 7 and 9
    got = ref + RNG.normal(scale=1e-5, size=ref.shape)
    got[1, 7], got[1, 9] = 9.0, 9.00001  # not left to the noise (the module's RNG is shared)
    c = compare("decoder", ref, got, F32, logits=True)
    assert c.verdict == AMBIGUOUS and c.near_ties == [1] and c.argmax_match is False
    assert len(c.per_position) == 3

    wrong = ref.copy()
    wrong[2, int(np.argmin(ref[2]))] = ref[2].max() + 5.0
    c = compare("decoder", ref, wrong, F32, logits=True)
    assert c.verdict == FAIL and "position(s), first at 2" in c.reason


def test_int4_is_judged_by_cosine_and_top_tokens():
    ref = RNG.normal(size=(2, 50)) * 3
    got = ref + RNG.normal(scale=0.05, size=ref.shape)
    got[:, ref.argmax(axis=1)] += 1.0  # keep the top tokens clear of the noise
    ref_top = ref.copy()
    ref_top[:, ref.argmax(axis=1)] += 1.0
    c = compare("decoder", ref_top, got, tolerance("int4"), logits=True)
    assert c.verdict == PASS and c.argmax_match


def test_ids_and_the_first_divergent_stage():
    assert compare_ids("tokens", [1, 2, 3], [1, 2, 3]).verdict == PASS
    c = compare_ids("tokens", [1, 2, 3, 4], [1, 2, 5])
    assert c.verdict == FAIL and c.max_abs_diff == 2.0 and "position 2" in c.reason

    ref = np.ones(8)
    ok = compare("preprocessing", ref, ref, F32)
    noise = compare("vision", ref, ref + 5e-2, F32)  # 2.5x the bound
    broken = compare("decoder", ref, -ref, F32)
    assert overall([ok, ok]) == (PASS, None)
    assert overall([ok, noise, ok]) == (AMBIGUOUS, "vision")
    assert overall([ok, noise, broken]) == (FAIL, "decoder")
    assert cosine(np.zeros(3), np.zeros(3)) == 1.0 and cosine(np.zeros(3), ref[:3]) == 0.0


def test_the_prefill_plot_shows_each_position_against_the_tolerance():
    """A non-expert reads the plot as "under the dashed line passes": positions are
    drawn as multiples of what the tolerance allows, with axis titles and several ticks."""
    from mmforge.backend.verify.report import plot_svg

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((6, 50)).astype(np.float32) * 0.5  # RMS under 1: atol as is
    got = ref.copy()
    got[3, 7] += 10 * (1e-4 + 2e-2 * abs(ref[3, 7]))  # ten times the bound, at position 3
    c = compare("decoder_prefill", ref, got, tolerance("f32"), logits=True)
    assert len(c.per_position_excess) == 6
    assert c.per_position_excess[3] == pytest.approx(10, rel=1e-3)
    assert max(c.per_position_excess[:3] + c.per_position_excess[4:]) == 0.0
    svg = plot_svg(c.per_position_excess)
    assert "tolerance: above this line" in svg
    assert "position in the prompt" in svg and "difference ÷ allowed" in svg
    assert svg.count('text-anchor="middle" fill="currentColor">') >= 5  # x ticks, titles
    assert ">1×<" in svg and ">10×<" in svg
    # The rotated axis title fits a short chart (the app's at 1366×768 was about 130 px
    # high and cut it to "difference ÷ allowe"): a smaller font, else a shorter title.
    import re

    for height in (240, 130, 90):
        short = plot_svg(c.per_position_excess, 720, height)
        size, title = re.findall(r'font-size="(\d+)"[^>]*rotate[^>]*>([^<]*)<', short)[0]
        assert 8 <= int(size) <= 12 and 0.6 * int(size) * len(title) <= height - 4, height


def test_end_to_end_calls_a_flip_a_near_tie_by_the_decoder_stages_own_bound():
    """An f16 Gemma 4 package flipped its second token at a near-tie: decoder_step called
    it one by the f16 bound, end_to_end (by twice the measured error alone) a FAIL. Both
    now use the same bound."""
    from mmforge.backend.verify.evidence import ReferenceEvidence, RuntimeEvidence
    from mmforge.backend.verify.stages import end_to_end

    rt = RuntimeEvidence(prompt="", tokens=[5, 6, 7])
    ref = ReferenceEvidence(inputs=None, images=[], tokens=[5, 9, 9], near_tie=(1, 2.0, 1.9))
    assert end_to_end(rt, ref, 0.01).verdict == FAIL  # 0.1 apart, measured error 0.01
    tie = end_to_end(rt, ref, 0.01, tolerance("f16"))  # 2·(0.01 + 0.05·2) = 0.22
    assert tie.verdict == AMBIGUOUS and "near-tie" in tie.reason
    assert end_to_end(rt, ref, 0.01, F32).verdict == FAIL  # 2·(1e-4 + 0.02·2) ≈ 0.08
    assert end_to_end(rt, ref, 0.06, F32).verdict == AMBIGUOUS  # the measured error decides
    wide = ReferenceEvidence(inputs=None, images=[], tokens=[5, 9, 9], near_tie=(1, 2.0, 1.0))
    assert end_to_end(rt, wide, 0.01, tolerance("f16")).verdict == FAIL


def test_a_flip_the_package_s_own_encoder_outputs_explain_is_a_fail_that_says_so():
    """An int4 Gemma 4 26B-A4B package (f16 vision encoder, 0.0024 from HF's features)
    flipped its first token 1.8 logits apart: the decoder alone moved no logit by more
    than 4e-5, the package's own features moved them by 4.5 (a routing flip in the
    experts). Still a FAIL, which now names the cause and the way out."""
    from mmforge.backend.verify.evidence import ReferenceEvidence, RuntimeEvidence
    from mmforge.backend.verify.stages import end_to_end

    rt = RuntimeEvidence(prompt="", tokens=[5, 6, 7])
    ref = ReferenceEvidence(inputs=None, images=[], tokens=[9, 9, 9], near_tie=(0, 2.0, 0.2))
    plain = end_to_end(rt, ref, 4e-5, F32)
    carried = end_to_end(rt, ref, 4e-5, F32, carried=4.5)
    assert plain.verdict == carried.verdict == FAIL
    assert "--encoders f32" not in plain.reason
    assert "move by up to 4.5" in carried.reason and "--encoders f32" in carried.reason
    # An encoder error no larger than the decoder's bound says nothing more.
    assert end_to_end(rt, ref, 4e-5, F32, carried=0.01).reason == plain.reason
    # A near-tie stays a near-tie whatever the encoders carry.
    tie = ReferenceEvidence(inputs=None, images=[], tokens=[9, 9, 9], near_tie=(0, 2.0, 1.99))
    assert end_to_end(rt, tie, 4e-5, F32, carried=4.5).verdict == AMBIGUOUS


def test_a_fused_weight_s_parts_are_found_at_any_offset_under_grouped_query_attention():
    """q, k and v rows fused under grouped-query attention are 64 + 16 + 16 rows: the q
    part (64 rows) does not divide the 96 and was not found, so an int4 Phi-4 package with
    one KV head had no rounded reference (measured on benchmarks/heldout.py's checkpoint)."""
    import torch

    from mmforge.backend.errors import LayoutError
    from mmforge.backend.verify.rounding import _row_blocks

    fused = torch.arange(96 * 8, dtype=torch.float32).reshape(96, 8)
    q, k, v = fused[:64], fused[64:80], fused[80:]
    assert any(torch.equal(c, q) for c in _row_blocks(fused, (64, 8)))
    for part in (k, v):
        assert any(torch.equal(c, part) for c in _row_blocks(fused, (16, 8)))
    with pytest.raises(LayoutError, match="No rows of shape"):
        _row_blocks(fused, (97, 8))
