"""Quality figures of a teacher-forced pass: KL divergence, same top token, perplexity — checked
against values computed by hand, and the plan only real-model cells get."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rtmatrix.metrics.quality import QualityPlan, anchor_n_ctx, figures, plan, unavailable, window
from rtmatrix.names import M


def _detail() -> dict[str, object]:
    return QualityPlan("m", "quality.txt", "t", [1, 2, 3, 4], 3).detail()


def test_identical_logits_have_zero_kld_full_agreement_and_equal_perplexity() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 40)).astype(np.float32) * 4
    out = figures(logits, logits, [3, 1, 4, 1, 5], _detail())
    assert out[M.KLD_MEAN].value == pytest.approx(0, abs=1e-12)
    assert out[M.SAME_TOP].value == 100.0
    assert out[M.PPL].value == pytest.approx(out[M.PPL_REFERENCE].value)
    assert (
        out[M.KLD_MEAN].detail["positions"] == 3 and out[M.KLD_MEAN].source == "harness-comparison"
    )


def test_figures_match_a_hand_computation() -> None:
    ref = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]], dtype=np.float64))
    rt = np.log(np.array([[0.25, 0.5, 0.25], [0.1, 0.7, 0.2]], dtype=np.float64))
    out = figures(rt.astype(np.float32), ref.astype(np.float32), [0, 1], _detail())
    kl0 = 0.5 * math.log(0.5 / 0.25) + 0.25 * math.log(0.25 / 0.5) + 0.0
    kl1 = 0.6 * math.log(0.6 / 0.7) + 0.3 * math.log(0.3 / 0.2)
    assert out[M.KLD_MEAN].value == pytest.approx((kl0 + kl1) / 2, rel=1e-5)
    assert out[M.SAME_TOP].value == 50.0  # row 0: top 0 vs top 1; row 1: both 1
    assert out[M.PPL].value == pytest.approx(
        math.exp(-(math.log(0.25) + math.log(0.7)) / 2), rel=1e-5
    )
    assert out[M.PPL_REFERENCE].value == pytest.approx(
        math.exp(-(math.log(0.5) + math.log(0.6)) / 2), rel=1e-5
    )


def test_mismatched_or_non_finite_logits_are_unavailable_with_the_reason() -> None:
    ref = np.zeros((2, 4), dtype=np.float32)
    short = figures(np.zeros((1, 4), np.float32), ref, [0, 1], _detail())
    assert short[M.KLD_MEAN].value is None and "do not match" in str(short[M.KLD_MEAN].reason)
    bad = ref.copy()
    bad[0, 0] = np.nan
    assert "non-finite" in str(figures(bad, ref, [0, 1], _detail())[M.PPL].reason)
    assert set(unavailable("x")) == {M.KLD_MEAN, M.KLD_P99, M.SAME_TOP, M.PPL, M.PPL_REFERENCE}


def test_only_a_real_model_gets_a_quality_pass() -> None:
    assert plan("tiny", 512, {}) is None  # seeded weights: no text to judge on
    assert plan(None, 512, {}) is None  # a user's model file without a source
    assert plan("tiny", 512, {"quality": False}) is None


def test_a_real_model_is_prompted_with_its_text_unless_told_otherwise() -> None:
    from rtmatrix.fixtures.sources import SourceError

    try:
        with_text = plan("smollm2-135m", 512, {}, prompt_tokens=16)
    except SourceError as exc:  # no registry here
        pytest.skip(f"the shipped model cannot be found or downloaded: {exc}")
    assert with_text is not None and with_text.prompt_ids == with_text.text_ids[:16]
    assert with_text.positions == 511 and with_text.ids == with_text.text_ids[:512]
    seeded = plan("smollm2-135m", 512, {"text_prompt": False}, prompt_tokens=16)
    assert seeded is not None and seeded.prompt_ids is None
    too_long = plan("smollm2-135m", 4096, {}, prompt_tokens=2000)  # the text has ~700 tokens
    assert too_long is not None and too_long.prompt_ids is None and too_long.positions < 2000
    assert with_text.prompt_name == "the first 16 tokens of quality.txt"


def test_a_fixture_prompt_is_its_first_ids_and_a_short_one_is_refused() -> None:
    from rtmatrix.fixtures.sources import SourceError
    from rtmatrix.fixtures.tokenizer import shipped_text

    story = ("rtmatrix's text story.txt", shipped_text("story.txt"))
    try:
        got = plan("smollm2-135m", 512, {}, prompt_tokens=32, prompt=story)
    except SourceError as exc:  # no registry here
        pytest.skip(f"the shipped model cannot be found or downloaded: {exc}")
    assert got is not None and got.prompt_ids is not None and len(got.prompt_ids) == 32
    assert got.prompt_ids != got.text_ids[:32]  # the story, not the quality text
    assert got.prompt_name.startswith("the first 32 of ") and "story.txt" in got.prompt_name
    with pytest.raises(ValueError, match=r"the fixture's prompt is \d+ tokens, fewer than "
                       r"prompt_tokens = 32: .*prompt_tokens = \d+ or fewer"):  # fmt: skip
        plan("smollm2-135m", 512, {}, prompt_tokens=32, prompt=("the fixture's prompt", "Hi."))


def test_the_anchor_chunk_fits_the_pass_and_twice_fits_the_text() -> None:
    long_text = QualityPlan("m", "q", "t", list(range(709)), 511)
    assert anchor_n_ctx(long_text) == 354  # llama-perplexity needs 2 x n_ctx ids of text
    short_pass = QualityPlan("m", "q", "t", list(range(2000)), 300)
    assert anchor_n_ctx(short_pass) == 301  # positions 150..299: inside the 300 scored


def test_the_anchor_window_scores_the_tools_positions_only() -> None:
    kld = np.arange(10, dtype=np.float64)  # KLD i at position i
    same = np.array([True] * 5 + [False] * 5)
    got = window(kld, same, 8)  # one chunk of 8 ids: positions 4..6 predict ids 5..7
    assert got == {"n_ctx": 8, "positions": [4, 6], "kld_mean": 5.0,
                   "same_top_pct": pytest.approx(100 / 3)}  # fmt: skip
    assert "unavailable" in window(kld, same, 40)  # the pass is shorter than the chunk
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((9, 12)).astype(np.float32)
    out = figures(logits, logits + 0.5 * rng.standard_normal((9, 12)).astype(np.float32),
                  list(range(9)), _detail(), anchor=8)  # fmt: skip
    assert out[M.KLD_MEAN].detail["anchor_window"]["positions"] == [4, 6]
    assert (
        "anchor_window" not in figures(logits, logits, list(range(9)), _detail())[M.KLD_MEAN].detail
    )


def test_agreement_names_each_flip_with_the_references_margin() -> None:
    from rtmatrix.metrics.quality import agreement

    ref = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.9], [1.0, 0.0, 0.5]], dtype=np.float32)
    rt = ref.copy()
    rt[1] = [0.0, 1.8, 2.0]  # flips at a near-tie (margin 0.1)
    rt[2, 1] = 0.25
    got = agreement(rt, ref)
    assert got["top1_agree"] == 2 and got["top1_positions"] == 3
    assert got["top1_flips"] == [{"position": 1, "reference_margin": 0.1}]
    assert got["max_abs_logit_diff"] == pytest.approx(0.25)
    assert got["max_abs_logit_diff_position"] in (1, 2)
