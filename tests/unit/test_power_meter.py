"""The phase meter: source order, broken probes, the bare-VM reason, the null meter."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.metrics import power
from rtmatrix.metrics.power import meter as power_meter
from rtmatrix.metrics.power.config import SOURCE_NAMES
from rtmatrix.metrics.power.devices import SYSTEM
from rtmatrix.metrics.power.metrics import ENERGY_KEYS
from rtmatrix.metrics.power.rapl import POWERCAP_ENV
from rtmatrix.outcome import Source
from tests.helpers.power import FakeSource, fake_nvml, make_powercap


@pytest.fixture
def powercap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_powercap(tmp_path, monkeypatch)


def test_every_usable_source_opens_unless_an_earlier_one_meters_its_devices(
    powercap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvml(monkeypatch)
    with power.open_meter({"sources": ["nvml", "rapl"]}) as meter:
        info = meter.info()
        assert info["meter"] == "nvml+rapl" and info["devices"] == ["gpu:0", "gpu:1", "cpu"]
        assert meter.tried == {"nvml": "selected", "rapl": "selected"}
        assert meter.src is not None and meter.src.name == "nvml"
    # the modelled source would meter the CPU again: RAPL, earlier, wins it
    with power.open_meter({"modelled": True, "tdp_w": 35}) as meter:
        assert meter.info()["meter"] == "rapl+nvml"
        assert meter.tried["modelled"] == "not needed: rapl already meters the CPU"
    # a whole-system meter listed first covers both: neither RAPL nor NVML is opened
    cfg = {"sources": ["external", "rapl", "nvml"], "meter": ["true"]}
    monkeypatch.setitem(
        power_meter.PROBES, "external", lambda cfg: FakeSource("external", (SYSTEM,), 1.0)
    )
    with power.open_meter(cfg) as meter:
        assert meter.info()["devices"] == ["system"]
        assert meter.tried["rapl"] == "not needed: external already meters the CPU"
        assert meter.tried["nvml"] == "not needed: external already meters the GPU"


def test_a_probe_that_raises_makes_only_its_source_unusable(
    powercap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(cfg: Any) -> Any:
        raise OSError(5, "Input/output error")

    monkeypatch.setitem(power_meter.PROBES, "nvml", broken)
    with power.open_meter({"sources": ["nvml", "rapl"]}) as meter:
        assert meter.tried["nvml"] == "probe failed: OSError: [Errno 5] Input/output error"
        assert meter.info()["meter"] == "rapl"


def test_null_meter_is_a_no_op() -> None:
    with power.NULL_METER.phase("prefill"):
        pass
    assert power.NULL_METER.take() == {} and not power.NULL_METER.available


def _bare_vm() -> bool:
    return not Path("/sys/class/powercap").exists() and importlib.util.find_spec("pynvml") is None


@pytest.mark.skipif(not _bare_vm(), reason="this machine has powercap or NVML")
def test_on_a_bare_vm_power_is_unavailable_naming_what_was_looked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(POWERCAP_ENV, raising=False)
    meter = power.open_meter()
    reason = str(meter.reason)
    for looked_for in (
        "rapl: no /sys/class/powercap",
        "nvml: pynvml (nvidia-ml-py) not installed",
        "external: no external meter configured",
        "modelled: modelled source not enabled",
    ):
        assert looked_for in reason
    reps = [{"energy": {}, "tokens": [1, 2]}]
    m = power.power_metrics(meter.info(), reps)
    assert set(m) == set(ENERGY_KEYS)
    assert all(v.value is None and v.source == Source.UNAVAILABLE for v in m.values())
    assert m["energy_j"].reason == reason and m["power_w"].unit == "W"
    # ... unless the matrix enables the modelled source: then the values say modelled
    with power.open_meter({"modelled": True, "tdp_w": 35}) as modelled:
        assert modelled.info()["meter"] == "modelled"
        assert modelled.info()["tried"]["rapl"] == "no /sys/class/powercap"


def test_every_source_name_has_a_probe() -> None:
    assert tuple(power_meter.PROBES) == SOURCE_NAMES
