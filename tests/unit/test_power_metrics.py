"""Energy metrics from a meter's info and the repetitions' phases."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.metrics import power
from rtmatrix.metrics.power.base import HARDWARE
from tests.helpers.power import make_powercap


@pytest.fixture
def powercap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_powercap(tmp_path, monkeypatch)


def test_power_metrics_without_a_measurement() -> None:
    m = power.power_metrics(None, [])
    assert "ended before the first counted repetition" in str(m["energy_j"].reason)
    rapl = {"meter": "rapl", "source": str(HARDWARE), "devices": ["cpu"]}
    info = {"meter": "rapl", "meters": [rapl], "tried": {"rapl": "selected"}, "min_steps": 5}
    assert power.power_metrics(info, [])["power_w"].reason == "no counted repetition finished"
    failed = [{"energy": {"prefill": {"s": 1.0, "cpu_s": 0.0,
                                      "meters": {"rapl": {"j": 1.0, "resolved": True}}},
                          "decode": {"s": 1.0, "cpu_s": 0.0,
                                     "meters": {"rapl": {"j": None, "error": "EIO"}}}},
               "tokens": [1]}]  # fmt: skip
    assert "meter read failed in repetition 0 (decode, rapl): EIO" in str(
        power.power_metrics(info, failed)["energy_j"].reason
    )


def test_metrics_serialise_with_provenance(powercap: Path) -> None:
    with power.open_meter({"sources": ["rapl"]}) as meter:
        with meter.phase("prefill"):
            pass
        with meter.phase("decode"):
            pass
        reps = [{"energy": meter.take(), "tokens": [1, 2, 3]}]
        info = meter.info()
    d = power.power_metrics(info, reps)["energy_per_token_j"].to_dict()
    assert d["source"] == str(HARDWARE) and d["unit"] == "J" and d["value"] == 0.0
    assert d["generated_tokens"] == [3] and d["resolved"] is False
    assert d["cell_devices"] == ["cpu"] and d["meter_devices"] == {"rapl": ["cpu"]}
