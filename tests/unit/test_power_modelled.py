"""The modelled source: labelled with its inputs, never chosen silently."""

from __future__ import annotations

import os
import time

import pytest

from rtmatrix.metrics import power
from rtmatrix.outcome import Source
from tests.helpers.power import reading


def test_modelled_is_labelled_with_its_inputs() -> None:
    cfg = {"sources": ["modelled"], "modelled": True, "tdp_w": 120.0}
    with power.open_meter(cfg) as meter:
        with meter.phase("prefill"):
            end = time.process_time() + 0.05
            while time.process_time() < end:
                pass
        with meter.phase("decode"):
            time.sleep(0.01)
        rep = {ph: reading(rec, "modelled") for ph, rec in meter.take().items()}
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
