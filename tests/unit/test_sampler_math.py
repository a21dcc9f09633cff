"""The sampler rebuilt in numpy (``rtmatrix.metrics.sampler``): each stage, the two documented
orders, the goodness of fit, and that the test tells the orders apart with the power it claims."""

from __future__ import annotations

import numpy as np
import pytest

from rtmatrix.metrics import sampler as sm

LOGITS = np.log(np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]))


def test_top_p_keeps_the_id_that_crosses_p() -> None:
    prob = sm.distribution(LOGITS, sm.Params(top_p=0.6), sm.ORDERS["truncate-then-temperature"])
    np.testing.assert_allclose(prob, [0.4 / 0.65, 0.25 / 0.65, 0, 0, 0, 0])


def test_top_k_min_p_and_penalties() -> None:
    order = sm.ORDERS["truncate-then-temperature"]
    assert (sm.distribution(LOGITS, sm.Params(top_k=3), order) > 0).sum() == 3
    kept = sm.distribution(LOGITS, sm.Params(min_p=0.3), order) > 0  # >= 0.12
    assert kept.tolist() == [True, True, True, False, False, False]
    logits = np.array([2.0, -1.0, 1.0])
    pen = sm.distribution(logits, sm.Params(repeat_penalty=2.0), order, history=[0, 1])
    np.testing.assert_allclose(pen, np.exp([1.0, -2.0, 1.0]) / np.exp([1.0, -2.0, 1.0]).sum())


def test_the_orders_differ_where_temperature_meets_top_p() -> None:
    p = sm.Params(temperature=3.0, top_p=0.6)
    first = sm.distribution(LOGITS, p, sm.ORDERS["truncate-then-temperature"])
    later = sm.distribution(LOGITS, p, sm.ORDERS["temperature-then-truncate"])
    assert (first > 0).sum() == 2  # the nucleus of the untempered probabilities
    assert (later > 0).sum() > 2  # the flattened probabilities need more ids to reach 0.6
    same = sm.Params(temperature=3.0)  # without a truncation the order does not matter
    np.testing.assert_allclose(
        sm.distribution(LOGITS, same, sm.ORDERS["truncate-then-temperature"]),
        sm.distribution(LOGITS, same, sm.ORDERS["temperature-then-truncate"]),
    )


def _draws(prob: np.ndarray, n: int, seed: int) -> np.ndarray:
    ids = np.random.default_rng(seed).choice(len(prob), size=n, p=prob)
    return np.bincount(ids, minlength=len(prob)).astype(np.int64)


@pytest.mark.parametrize("true", sorted(sm.ORDERS))
def test_the_judge_finds_the_order_the_draws_came_from(true: str) -> None:
    rng = np.random.default_rng(7)
    logits = rng.normal(0.0, 2.0, 200)
    p = sm.Params(temperature=2.0, top_p=0.5)
    prob = sm.distribution(logits, p, sm.ORDERS[true])
    counts = _draws(prob, 400, seed=1)
    other = next(o for o in sm.ORDERS if o != true)
    got = sm.judge_order(counts, logits, p, documented=other, alpha=0.01)
    assert got["found"] == true, got
    assert got["fits"][other]["p_value"] < 0.01
    assert got["power_against"][true] > 0.99, got["power_against"]  # the design's claim


def test_a_fit_to_the_right_distribution_is_not_rejected_too_often() -> None:
    prob = sm.distribution(
        LOGITS, sm.Params(temperature=1.5), sm.ORDERS["truncate-then-temperature"]
    )
    rejected = sum(sm.fit(_draws(prob, 300, seed), prob, "x").p_value < 0.05 for seed in range(200))
    assert rejected <= 20  # 5 % of 200 = 10 expected; a calibrated test stays near it


def test_a_draw_outside_the_support_is_a_zero_p_value() -> None:
    prob = np.array([0.5, 0.5, 0.0])
    f = sm.fit(np.array([10, 10, 1]), prob, "x")
    assert f.outside == 1 and f.p_value == 0.0 and f.chi2 is None


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sm.Params(temperature=0.0).validate()
    with pytest.raises(ValueError, match="top_p"):
        sm.Params(top_p=1.5).validate()
