from __future__ import annotations

import pytest

from rtmatrix.outcome import Metric, Source, percentile, summarize


def test_measured_keeps_samples_and_reports_median() -> None:
    m = Metric.measured([3.0, 1.0, 2.0, 10.0], "tokens/s", Source.HARNESS_CLOCK)
    d = m.to_dict()
    assert d["value"] == 2.5 and d["samples"] == [3.0, 1.0, 2.0, 10.0]
    assert d["stats"]["n"] == 4 and d["stats"]["mean"] == 4.0 and d["source"] == "harness-clock"


def test_unavailable_needs_reason_and_no_value() -> None:
    assert Metric.unavailable("W", "no counter").to_dict() == {
        "value": None,
        "unit": "W",
        "source": "unavailable",
        "reason": "no counter",
    }
    with pytest.raises(ValueError, match="needs a reason"):
        Metric(None, "W", Source.UNAVAILABLE)
    with pytest.raises(ValueError, match="exactly when"):
        Metric(0, "W", Source.UNAVAILABLE, reason="x")
    with pytest.raises(ValueError, match="exactly when"):
        Metric(None, "W", Source.HARNESS_CLOCK)


def test_percentile_and_summary() -> None:
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([0, 10], 90) == pytest.approx(9.0)
    assert summarize([2.0])["sd"] == 0.0
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)


def test_a_lost_host_fails_whatever_was_expected() -> None:
    from rtmatrix.outcome import Expect, Status, Verdict, verdict

    assert verdict(Expect.OK, Status.HOST_LOST) is Verdict.FAIL
    assert verdict(Expect.ERROR, Status.HOST_LOST) is Verdict.FAIL
