from __future__ import annotations

import numpy as np

from rtmatrix.converters.dtypes import names as converter_dtypes
from rtmatrix.metrics.parity import LOGIT_TOLERANCE, VENDOR_TOLERANCE, agreeing_prefix, compare


def test_agreeing_prefix() -> None:
    assert agreeing_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert agreeing_prefix([1, 2], [1, 2]) == 2
    assert agreeing_prefix([5], [6]) == 0


def test_f32_needs_every_token_and_small_logit_error() -> None:
    ref = np.zeros(8, dtype=np.float32)
    ok = compare("f32", [1, 2, 3], ref, [1, 2, 3], ref + 1e-3)
    assert ok["within_tolerance"] and ok["all_tokens_agree"] and ok["first_divergence"] is None
    diverged = compare("f32", [1, 2, 3], ref, [1, 2, 4], ref)
    assert not diverged["within_tolerance"] and diverged["first_divergence"] == 2
    assert not compare("f32", [1], ref, [1], ref + 0.5)["within_tolerance"]


def test_quantized_reports_divergence_without_demanding_tokens() -> None:
    ref = np.zeros(8, dtype=np.float32)
    out = compare("q4_0", [1, 2, 3], ref, [1, 9, 9], ref + 0.2)
    assert out["within_tolerance"] and out["tokens_agree"] == 1


def test_nan_logits_are_never_within_tolerance() -> None:
    ref = np.zeros(4, dtype=np.float32)
    out = compare("q8_0", [1], ref, [1], np.full(4, np.nan, dtype=np.float32))
    assert out["logits_finite"] is False and out["max_abs_logit_err"] is None
    assert not out["within_tolerance"]


def test_missing_logits() -> None:
    out = compare("f32", [1], np.zeros(4, dtype=np.float32), [1], None)
    assert not out["within_tolerance"] and "no first-step logits" in out["logit_reason"]


def test_a_flip_at_a_near_tie_is_numerics_a_clear_margin_is_wrong() -> None:
    import numpy as np

    from rtmatrix.metrics.parity import compare

    ref, logits = [1, 2, 3, 4], np.zeros(8, dtype=np.float32)
    near = compare("f32", ref, logits, [1, 2, 9, 9], logits, [1.0, 1.0, 0.004, 1.0])
    assert near["within_tolerance"] and near["divergence_kind"] == "near-tie"
    assert near["first_divergence"] == 2 and near["margin_at_divergence"] == 0.004
    clear = compare("f32", ref, logits, [1, 2, 9, 9], logits, [1.0, 1.0, 0.5, 1.0])
    assert not clear["within_tolerance"] and clear["divergence_kind"] == "clear-margin"
    unknown = compare("f32", ref, logits, [1, 2, 9, 9], logits)
    assert not unknown["within_tolerance"]


def test_a_real_models_f32_is_judged_by_tokens_and_its_quantized_rows_by_kld() -> None:
    from rtmatrix.metrics.parity import judged_by_quality
    from rtmatrix.outcome import Metric, Source

    f32 = {"status": "measured", "all_tokens_agree": True, "within_tolerance": False,
           "max_abs_logit_err": 0.02}  # fmt: skip
    judged = judged_by_quality(f32, "f32", {})
    assert judged["within_tolerance"] and "greedy tokens" in judged["judged_by"]
    assert judged["max_abs_logit_err"] == 0.02  # still reported

    def figs(kld: float, same: float) -> dict[str, Metric]:
        return {"kld_mean": Metric(kld, "nats", Source.HARNESS_COMPARISON),
                "same_top_pct": Metric(same, "%", Source.HARNESS_COMPARISON)}  # fmt: skip

    q = {"status": "measured", "all_tokens_agree": False, "within_tolerance": False}
    assert judged_by_quality(q, "int8", figs(0.11, 78.7))["within_tolerance"]
    assert not judged_by_quality(q, "q4_0", figs(0.9, 78.7))["within_tolerance"]
    assert not judged_by_quality(q, "q4_0", figs(0.1, 40.0))["within_tolerance"]
    assert judged_by_quality({"status": "unavailable"}, "q4_0", figs(0.1, 90)) == {
        "status": "unavailable"
    }


def test_an_engine_without_logits_is_judged_on_its_ids() -> None:
    ref = np.zeros((1, 8), dtype=np.float32)
    why = "an engine's own loop: ids, no logits"
    same = compare("f32", [1, 2, 3], ref, [1, 2, 3], None, [5.0, 5.0, 5.0], ids_only=why)
    assert same["within_tolerance"] and same["judged_on"] == "ids" and same["logit_reason"] == why
    clear = compare("f32", [1, 2, 3], ref, [1, 4, 3], None, [5.0, 5.0, 5.0], ids_only=why)
    assert not clear["within_tolerance"] and clear["divergence_kind"] == "clear-margin"
    tie = compare("f32", [1, 2, 3], ref, [1, 4, 3], None, [5.0, 1e-6, 5.0], ids_only=why)
    assert tie["within_tolerance"] and tie["divergence_kind"] == "near-tie"
    int8 = compare("int8", [1, 2, 3], ref, [1, 4, 3], None, [5.0, 5.0, 5.0], ids_only=why)
    assert int8["status"] == "unavailable" and int8["tokens_agree"] == 1
    assert "no logits to judge" in int8["reason"] and int8["within_tolerance"] is None
    # without the engine's reason, missing logits still fail (a loop row that lost them)
    assert not compare("f32", [1, 2, 3], ref, [1, 2, 3], None)["within_tolerance"]


def _agreement(worst: float, flips: list[tuple[int, float]]) -> dict[str, object]:
    return {"max_abs_logit_diff": worst, "top1_agree": 48 - len(flips), "top1_positions": 48,
            "top1_flips": [{"position": p, "reference_margin": m} for p, m in flips]}  # fmt: skip


def test_a_conversion_that_moves_logits_beyond_what_ran_changed_the_model() -> None:
    from rtmatrix.metrics.parity import conversion_judged

    measured = {"status": "measured", "within_tolerance": True}
    exact = conversion_judged(measured, "f32", _agreement(4e-5, []), "tool (dist 1)")
    assert exact["within_tolerance"] and not exact["conversion"]["changed_the_model"]
    # a flip at a clear margin: another model, whatever the greedy tokens did
    flipped = conversion_judged(measured, "f32", _agreement(2.2, [(7, 0.9)]), "tool (dist 1)")
    conv = flipped["conversion"]
    assert not flipped["within_tolerance"] and conv["changed_the_model"]
    assert conv["first_divergence_position"] == 7 and conv["clear_flips"] == 1
    assert "top-1 47/48" in conv["summary"] and "position 7" in conv["summary"]
    # logits beyond the f32 tolerance without a flip: still a changed model
    moved = conversion_judged(measured, "f32", _agreement(0.3, []), "tool (dist 1)")
    assert moved["conversion"]["changed_the_model"]
    # a flip at a near-tie (margin within what ran) with small logit error: numerics
    tie = conversion_judged(measured, "f16", _agreement(0.04, [(3, 0.01)]), "tool (dist 1)")
    assert tie["within_tolerance"] and not tie["conversion"]["changed_the_model"]
    # computed in f16, a logit error grown over depth is not a changed model; a clear flip is
    deep = conversion_judged(measured, "f16", _agreement(0.08, [(3, 0.04)]), "tool (dist 1)")
    assert not deep["conversion"]["changed_the_model"]
    clear = conversion_judged(measured, "f16", _agreement(0.08, [(3, 0.6)]), "tool (dist 1)")
    assert clear["conversion"]["changed_the_model"]


def test_a_quantized_conversion_is_left_to_the_kld_judgement() -> None:
    from rtmatrix.metrics.parity import conversion_judged

    measured = {"status": "measured", "within_tolerance": True}
    q8 = conversion_judged(measured, "q8_0", _agreement(0.4, [(2, 0.1)]), "tool (dist 1)")
    assert q8["within_tolerance"] and not q8["conversion"]["changed_the_model"]
    unavailable = {"status": "unavailable", "reason": "x"}
    assert conversion_judged(unavailable, "f32", _agreement(9.0, []), "t") == unavailable


def test_a_converters_own_quantization_has_the_weight_only_tolerance() -> None:
    assert converter_dtypes()  # the homes declare some
    for dtype in converter_dtypes():
        assert LOGIT_TOLERANCE[dtype] == VENDOR_TOLERANCE == LOGIT_TOLERANCE["int4w"], dtype
    ref = np.zeros(8, dtype=np.float32)
    out = compare("ov-int8", [1, 2, 3], ref, [1, 9, 9], ref + 0.2)  # ids may differ
    assert out["within_tolerance"] and out["logit_tolerance"] == VENDOR_TOLERANCE
