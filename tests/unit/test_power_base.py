"""The source base classes: abstract methods enforced, sampled power integrated."""

from __future__ import annotations

import pytest

from rtmatrix.metrics.power.base import EnergySource, SampledPower


class Ramp(SampledPower):
    """Watts rising by 2 W per sample: 0, 2, 4, ..."""

    name = "ramp"

    def __init__(self) -> None:
        self.watts = -2.0
        super().__init__(interval_s=3600.0)  # no background polling is involved here

    def sample_w(self) -> float:
        self.watts += 2.0
        return self.watts


def test_a_source_without_read_j_cannot_be_created() -> None:
    class NoRead(EnergySource):
        pass

    with pytest.raises(TypeError, match="read_j"):
        NoRead()  # type: ignore[abstract]


def test_sampled_power_integrates_trapezoids_and_counts_samples() -> None:
    src = Ramp()
    assert src.sample_count() == 1 and src.sampled and src.poll_interval_s == 3600.0
    joules = src.read_j()
    assert src.sample_count() == 2
    assert joules > 0  # (0 W + 2 W) / 2 x the time between the two samples
    src.poll()
    assert src.sample_count() == 3 and src.read_j() > joules
