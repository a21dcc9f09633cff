"""External meter commands: joules or watts, polled or streamed, and their failures."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from rtmatrix.metrics import power
from rtmatrix.metrics.power.base import EXTERNAL
from tests.helpers.power import reading, source_info

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
        assert meter.info()["devices"] == ["system"]  # by default: the whole machine
        for _ in range(2):
            with meter.phase("prefill"):
                pass
            with meter.phase("decode"):
                pass
            rep = {ph: reading(rec, "external") for ph, rec in meter.take().items()}
            # every reading adds 1.5 J: each phase is one reading after the one before it
            assert rep["prefill"]["j"] == pytest.approx(1.5)
            assert rep["decode"]["j"] == pytest.approx(1.5)
        m = meter.metrics(n_generated_tokens=3)
    assert m["energy_j"].value == pytest.approx(3.0)
    assert m["energy_j"].samples == [3.0, 3.0]
    assert m["energy_per_token_j"].value == pytest.approx(1.0)
    assert m["energy_j"].source == EXTERNAL
    assert m["energy_j"].detail["input_command"].endswith("state")
    assert m["energy_j"].detail["resolution_j"] == 0.01


def test_external_meter_as_a_string_command(tmp_path: Path) -> None:
    script = tmp_path / "meter.py"
    script.write_text(METER_J)
    cfg = {"meter": f"{sys.executable} {script} {tmp_path / 'state'}"}
    with power.open_meter(cfg | {"sources": ["external"], "meter_devices": ["cpu"]}) as meter:
        assert meter.info()["devices"] == ["cpu"]  # the user says it is wired to the CPU
        with meter.phase("decode"):
            pass
        assert reading(meter.take()["decode"], "external")["j"] == pytest.approx(1.5)


def test_external_meter_streamed_joules() -> None:
    code = (
        "import time\nv = 0\nwhile True:\n    v += 1\n    print(v, flush=True)\n"
        "    time.sleep(0.01)\n"
    )
    cfg = {"sources": ["external"], "meter": [sys.executable, "-c", code], "meter_mode": "stream"}
    with power.open_meter(cfg) as meter:
        with meter.phase("decode"):
            time.sleep(0.3)
        rec = reading(meter.take()["decode"], "external")
        interval = source_info(meter.info(), "external")["update_interval_s"]
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
        rep = {ph: reading(rec, "external") for ph, rec in meter.take().items()}
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
        rec = reading(meter.take()["decode"], "external")
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
