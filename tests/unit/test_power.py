from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

from rtmatrix.metrics import power
from rtmatrix.outcome import Source


def put(path: Path, text: str) -> None:
    """Replace a file atomically, as sysfs does: a concurrent reader never sees it half-written."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def zone(root: Path, dirname: str, name: str, uj: int, max_uj: int | None = 10**9) -> Path:
    d = root / dirname
    d.mkdir(parents=True)
    put(d / "name", f"{name}\n")
    put(d / "energy_uj", f"{uj}\n")
    if max_uj is not None:
        put(d / "max_energy_range_uj", f"{max_uj}\n")
    return d


@pytest.fixture
def powercap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A powercap tree as /sys/class/powercap lays it out (subzones listed flat as well)."""
    root = tmp_path / "powercap"
    root.mkdir()
    (root / "intel-rapl").mkdir()  # the control type: no counter
    zone(root, "intel-rapl:0", "package-0", 999_000_000)
    zone(root, "intel-rapl:0:0", "core", 5)
    zone(root, "intel-rapl:0:2", "dram", 0)
    zone(root, "intel-rapl-mmio:0", "package-0", 7)  # duplicate of the MSR package zone
    monkeypatch.setenv(power.POWERCAP_ENV, str(root))
    return root


def test_rapl_sums_package_and_dram_across_a_wrap(powercap: Path) -> None:
    with power.open_meter({"sources": ["rapl"]}) as meter:
        info = meter.info()
        assert info["meter"] == "rapl" and info["source"] == str(power.HARDWARE)
        names = sorted(z["name"] for z in info["inputs"]["zones"])
        assert names == ["dram", "package-0"]  # no core (inside package), no mmio duplicate
        with meter.phase("prefill"):
            # the package counter passes max_energy_range_uj (1e9 uJ) and restarts from 0
            put(powercap / "intel-rapl:0" / "energy_uj", "1000000\n")
            put(powercap / "intel-rapl:0:2" / "energy_uj", "500000\n")
        with meter.phase("decode"):
            put(powercap / "intel-rapl:0" / "energy_uj", "4000000\n")
        rep = meter.take()
        assert rep["prefill"]["j"] == pytest.approx(2.0 + 0.5)  # 1 J before the wrap, 1 J after
        assert rep["decode"]["j"] == pytest.approx(3.0)
        m = meter.metrics(n_generated_tokens=4)
        assert meter.info()["inputs"]["wraps"] == 1
    assert m["energy_prefill_j"].value == pytest.approx(2.5)
    assert m["energy_decode_j"].value == pytest.approx(3.0)
    assert m["energy_j"].value == pytest.approx(5.5)
    assert m["energy_per_token_j"].value == pytest.approx(5.5 / 4)
    e = m["energy_j"]
    assert e.source == power.HARDWARE and e.detail["meter"] == "rapl"
    assert e.detail["resolution_j"] == power.RAPL_RESOLUTION_J
    assert e.detail["update_interval_s"] == power.RAPL_UPDATE_S
    assert m["power_w"].unit == "W" and m["power_w"].value is not None
    assert m["power_w"].value == pytest.approx(5.5 / sum(e.detail["seconds"]))


def test_rapl_counter_wraps_repeatedly_on_reads(powercap: Path) -> None:
    src = power.RaplSource.probe(power.normalize_config({"rapl_domains": ["package"]}))
    assert isinstance(src, power.RaplSource)
    pkg = powercap / "intel-rapl:0" / "energy_uj"
    total = 0.0
    for raw, step_uj in ((999_900_000, 900_000), (100_000, 200_000), (999_999_999, 999_899_999)):
        put(pkg, f"{raw}\n")
        total += step_uj * 1e-6
        assert src.read_j() == pytest.approx(total)
    put(pkg, "5\n")  # wraps again: 1 uJ to the top, 5 after
    assert src.read_j() == pytest.approx(total + 6e-6)


def test_rapl_short_phase_is_flagged_long_one_resolved(powercap: Path) -> None:
    pkg = powercap / "intel-rapl:0" / "energy_uj"
    with power.open_meter({"sources": ["rapl"]}) as meter:
        with meter.phase("prefill"):
            pass  # far under 5 counter updates (1 ms each)
        with meter.phase("decode"):
            time.sleep(0.03)
            put(pkg, "999500000\n")  # 0.5 J
        rep = meter.take()
        m = meter.metrics(3)
    assert rep["prefill"]["resolved"] is False and rep["decode"]["resolved"] is True
    assert m["energy_prefill_j"].detail["resolved"] is False
    assert "below what the meter resolves" in m["energy_prefill_j"].detail["note"]
    assert m["energy_decode_j"].detail["resolved"] is True
    assert m["energy_j"].detail["unresolved_reps"] == 1


def test_rapl_without_wanted_zones_or_readable_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zone(tmp_path, "intel-rapl:0:0", "core", 1)
    monkeypatch.setenv(power.POWERCAP_ENV, str(tmp_path))
    meter = power.open_meter({"sources": ["rapl"]})
    assert not meter.available
    assert meter.reason is not None and "no package/dram zone" in meter.reason
    assert "zones found: core" in meter.reason
    zone(tmp_path, "intel-rapl:0", "package-0", 1)

    def denied(self: Any) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(power._Zone, "raw", denied)
    meter = power.open_meter({"sources": ["rapl"]})
    assert meter.reason is not None and "not readable by uid" in meter.reason


METER_J = (
    "import pathlib, sys\n"
    "p = pathlib.Path(sys.argv[1])\n"
    "v = float(p.read_text()) if p.exists() else 100.0\n"
    "v += 1.5\n"
    "p.write_text(repr(v))\n"
    "print('meter v1'); print(f'{v} J')\n"
)


def test_external_meter_polled_joules(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", METER_J, str(tmp_path / "state")]
    cfg = {"sources": ["external"], "meter": cmd, "meter_resolution_j": 0.01}
    with power.open_meter(cfg) as meter:
        assert meter.info()["meter"] == "external"
        for _ in range(2):
            with meter.phase("prefill"):
                pass
            with meter.phase("decode"):
                pass
            rep = meter.take()
            # every reading adds 1.5 J: each phase is one reading after the one before it
            assert rep["prefill"]["j"] == pytest.approx(1.5)
            assert rep["decode"]["j"] == pytest.approx(1.5)
        m = meter.metrics(n_generated_tokens=3)
    assert m["energy_j"].value == pytest.approx(3.0)
    assert m["energy_j"].samples == [3.0, 3.0]
    assert m["energy_per_token_j"].value == pytest.approx(1.0)
    assert m["energy_j"].source == power.EXTERNAL
    assert m["energy_j"].detail["input_command"].endswith("state")
    assert m["energy_j"].detail["resolution_j"] == 0.01


def test_external_meter_as_a_string_command(tmp_path: Path) -> None:
    script = tmp_path / "meter.py"
    script.write_text(METER_J)
    cfg = {"meter": f"{sys.executable} {script} {tmp_path / 'state'}"}
    with power.open_meter(cfg | {"sources": ["external"]}) as meter:
        with meter.phase("decode"):
            pass
        assert meter.take()["decode"]["j"] == pytest.approx(1.5)


def test_external_meter_streamed_joules() -> None:
    code = (
        "import time\nv = 0\nwhile True:\n    v += 1\n    print(v, flush=True)\n"
        "    time.sleep(0.01)\n"
    )
    cfg = {"sources": ["external"], "meter": [sys.executable, "-c", code], "meter_mode": "stream"}
    with power.open_meter(cfg) as meter:
        with meter.phase("decode"):
            time.sleep(0.3)
        rec = meter.take()["decode"]
        interval = meter.info()["update_interval_s"]
    assert 5 <= rec["j"] <= rec["s"] / 0.01 + 2  # at most 1 J per 10 ms, fewer under load
    assert interval is not None and interval >= 0.009


def test_external_meter_in_watts_is_sampled_and_integrated() -> None:
    code = "print('power: 12.5 W')"
    cfg = {
        "sources": ["external"],
        "meter": [sys.executable, "-c", code],
        "meter_unit": "W",
        "sample_interval_s": 0.1,
    }
    with power.open_meter(cfg) as meter:
        with meter.phase("prefill"):
            time.sleep(0.3)
        with meter.phase("decode"):
            time.sleep(0.3)
        rep = meter.take()
        m = meter.metrics(2)
    assert rep["decode"]["samples"] >= 2
    assert rep["decode"]["j"] / rep["decode"]["s"] == pytest.approx(12.5, rel=0.25)
    assert m["power_w"].value == pytest.approx(12.5, rel=0.25)
    assert m["power_w"].detail["sampled"] is True
    assert m["power_w"].detail["sample_interval_s"] == 0.1


def test_external_meter_streamed_watts() -> None:
    code = "import time\nwhile True:\n    print(40.0, flush=True)\n    time.sleep(0.005)\n"
    cfg = {
        "sources": ["external"],
        "meter": [sys.executable, "-c", code],
        "meter_unit": "W",
        "meter_mode": "stream",
        "sample_interval_s": 0.02,
    }
    with power.open_meter(cfg) as meter:
        with meter.phase("decode"):
            time.sleep(0.2)
        rec = meter.take()["decode"]
    assert rec["j"] == pytest.approx(40.0 * rec["s"], rel=0.05)


def test_a_failing_meter_is_unavailable_with_its_error() -> None:
    cmd = [sys.executable, "-c", "import sys; print('usb: no device', file=sys.stderr); exit(3)"]
    meter = power.open_meter({"sources": ["external"], "meter": cmd})
    assert not meter.available
    assert meter.tried["external"].startswith("meter command")
    assert "exited 3: usb: no device" in str(meter.reason)
    silent = [sys.executable, "-c", "print('ready')"]
    meter = power.open_meter({"sources": ["external"], "meter": silent})
    assert "printed no number" in str(meter.reason)


def test_modelled_is_labelled_with_its_inputs() -> None:
    cfg = {"sources": ["modelled"], "modelled": True, "tdp_w": 120.0}
    with power.open_meter(cfg) as meter:
        with meter.phase("prefill"):
            end = time.process_time() + 0.05
            while time.process_time() < end:
                pass
        with meter.phase("decode"):
            time.sleep(0.01)
        rep = meter.take()
        m = meter.metrics(n_generated_tokens=8)
    cpus = os.cpu_count() or 1
    assert rep["prefill"]["j"] == pytest.approx(120.0 * rep["prefill"]["cpu_s"] / cpus, rel=0.05)
    e = m["energy_prefill_j"]
    assert e.source == Source.MODELLED and isinstance(e.value, float) and e.value > 0
    assert e.detail["meter"] == "modelled"
    assert e.detail["input_tdp_w"] == 120.0 and e.detail["input_logical_cpus"] == cpus
    assert "tdp_w * process_cpu_s / logical_cpus" in e.detail["input_formula"]
    assert e.detail["cpu_s"][0] >= 0.05
    assert all(v.source == Source.MODELLED for v in m.values())


def test_modelled_needs_a_tdp_and_is_never_chosen_silently() -> None:
    with pytest.raises(power.PowerConfigError, match="never guesses") as exc:
        power.open_meter({"modelled": True})
    assert exc.value.key == "tdp_w"
    meter = power.open_meter({"sources": ["modelled"], "tdp_w": 65})
    assert not meter.available
    assert meter.tried == {"modelled": "modelled source not enabled ([power].modelled = false)"}


def _bare_vm() -> bool:
    return not Path("/sys/class/powercap").exists() and importlib.util.find_spec("pynvml") is None


@pytest.mark.skipif(not _bare_vm(), reason="this machine has powercap or NVML")
def test_on_a_bare_vm_power_is_unavailable_naming_what_was_looked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(power.POWERCAP_ENV, raising=False)
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
    assert set(m) == set(power.ENERGY_KEYS)
    assert all(v.value is None and v.source == Source.UNAVAILABLE for v in m.values())
    assert m["energy_j"].reason == reason and m["power_w"].unit == "W"
    # ... unless the matrix enables the modelled source: then the values say modelled
    with power.open_meter({"modelled": True, "tdp_w": 35}) as modelled:
        assert modelled.info()["meter"] == "modelled"
        assert modelled.info()["tried"]["rapl"] == "no /sys/class/powercap"


class FakeNvml:
    """Just enough of pynvml for the NVML paths, with or without the energy counter."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy: bool = True, count: int = 2) -> None:
        self.energy, self.count, self.mj, self.inited = energy, count, 1000, 0

    def nvmlInit(self) -> None:
        self.inited += 1

    def nvmlShutdown(self) -> None:
        self.inited -= 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H200"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.1"

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if not self.energy:
            msg = "Not Supported"
            raise self.NVMLError(msg)
        return self.mj * (h + 1)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 150_000  # mW

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return type("Mem", (), {"total": 141 * 2**30})()


def fake_nvml(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> FakeNvml:
    nv = FakeNvml(**kw)
    monkeypatch.setitem(sys.modules, "pynvml", cast(ModuleType, nv))
    return nv


def test_nvml_energy_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = fake_nvml(monkeypatch)
    with power.open_meter({"sources": ["nvml"], "nvml_devices": [1]}) as meter:
        with meter.phase("decode"):
            nv.mj += 250  # device 1 counts 2 x
        rec = meter.take()["decode"]
        info = meter.info()
    assert rec["j"] == pytest.approx(0.5)
    assert info["meter"] == "nvml" and info["resolution_j"] == power.NVML_RESOLUTION_J
    assert info["inputs"]["device_names"] == ["NVIDIA H200"] and info["inputs"]["driver"] == "570.1"
    assert nv.inited == 0  # shut down on close


def test_nvml_without_energy_counter_samples_power(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, energy=False)
    with power.open_meter({"sources": ["nvml"], "sample_interval_s": 0.01}) as meter:
        with meter.phase("decode"):
            time.sleep(0.1)
        rec = meter.take()["decode"]
        info = meter.info()
    assert info["sampled"] is True and "sampled" in info["inputs"]["method"]
    assert rec["j"] == pytest.approx(300.0 * rec["s"], rel=0.05)  # 2 devices x 150 W
    assert rec["samples"] >= 3


def test_nvml_without_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, count=0)
    assert power.open_meter({"sources": ["nvml"]}).tried == {"nvml": "no NVML device"}


def test_first_usable_source_in_order_wins(powercap: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch)
    with power.open_meter({"sources": ["nvml", "rapl"]}) as meter:
        assert meter.info()["meter"] == "nvml"
        assert meter.tried == {"nvml": "selected"}
    with power.open_meter() as meter:
        assert meter.info()["meter"] == "rapl"


def test_a_probe_that_raises_makes_only_its_source_unusable(
    powercap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(cfg: Any) -> Any:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(power, "probe_nvml", broken)
    with power.open_meter({"sources": ["nvml", "rapl"]}) as meter:
        assert meter.tried["nvml"] == "probe failed: OSError: [Errno 5] Input/output error"
        assert meter.info()["meter"] == "rapl"


def test_power_metrics_without_a_measurement() -> None:
    m = power.power_metrics(None, [])
    assert "ended before the first counted repetition" in str(m["energy_j"].reason)
    info = {"meter": "rapl", "source": str(power.HARDWARE), "min_steps": 5}
    assert power.power_metrics(info, [])["power_w"].reason == "no counted repetition finished"
    failed = [{"energy": {"prefill": {"j": 1.0, "s": 1.0, "cpu_s": 0.0, "resolved": True},
                          "decode": {"j": None, "s": 1.0, "cpu_s": 0.0, "error": "EIO"}},
               "tokens": [1]}]  # fmt: skip
    assert "meter read failed in repetition 0 (decode): EIO" in str(
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
    assert d["source"] == str(power.HARDWARE) and d["unit"] == "J" and d["value"] == 0.0
    assert d["generated_tokens"] == [3] and d["resolved"] is False


def test_null_meter_is_a_no_op() -> None:
    with power.NULL_METER.phase("prefill"):
        pass
    assert power.NULL_METER.take() == {} and not power.NULL_METER.available


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"sorces": ["rapl"]}, "sorces"),
        ({"sources": ["rapl", "gpu"]}, "sources"),
        ({"sources": []}, "sources"),
        ({"rapl_domains": ["pkg"]}, "rapl_domains"),
        ({"nvml_devices": [-1]}, "nvml_devices"),
        ({"meter": 3}, "meter"),
        ({"meter": "x", "sources": ["rapl"]}, "meter"),
        ({"meter_unit": "kWh"}, "meter_unit"),
        ({"meter_mode": "push"}, "meter_mode"),
        ({"sample_interval_s": 0}, "sample_interval_s"),
        ({"min_steps": 0}, "min_steps"),
        ({"modelled": "yes"}, "modelled"),
        ({"tdp_w": -5}, "tdp_w"),
        ({"modelled": True, "tdp_w": 10, "sources": ["rapl"]}, "modelled"),
    ],
)
def test_config_errors_name_the_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(power.PowerConfigError) as exc:
        power.normalize_config(table)
    assert exc.value.key == key and str(exc.value).startswith(f"{key}: ")


def test_config_defaults() -> None:
    cfg = power.normalize_config({})
    assert cfg["sources"] == ["rapl", "nvml", "external", "modelled"]
    assert cfg["meter"] == [] and cfg["modelled"] is False
    assert power.normalize_config({"meter": "meter --joules 'a b'"})["meter"] == [
        "meter",
        "--joules",
        "a b",
    ]
