"""The [power] table: defaults and errors that name the key."""

from __future__ import annotations

from typing import Any

import pytest

from rtmatrix.metrics import power


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
        ({"meter_devices": []}, "meter_devices"),
        ({"meter_devices": ["wall"]}, "meter_devices"),
        ({"meter_devices": ["GPU 0"]}, "meter_devices"),
        ({"meter_devices": ["gpu:CUDA0"]}, "meter_devices"),
        ({"meter_devices": ["system", "cpu"]}, "meter_devices"),
        ({"meter_devices": ["cpu", "cpu"]}, "meter_devices"),
        ({"meter_devices": 3}, "meter_devices"),
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
    assert cfg["meter_devices"] == ["system"]  # a wall or USB meter: the whole machine
    assert power.normalize_config({"meter_devices": "CPU"})["meter_devices"] == ["cpu"]
    both = power.normalize_config({"meter_devices": ["cpu", "gpu:0"]})
    assert both["meter_devices"] == ["cpu", "gpu:0"]
    assert power.normalize_config({"meter": "meter --joules 'a b'"})["meter"] == [
        "meter",
        "--joules",
        "a b",
    ]


def test_meter_devices_errors_say_what_to_write() -> None:
    with pytest.raises(power.PowerConfigError) as exc:
        power.normalize_config({"meter_devices": ["wall"]})
    assert str(exc.value) == (
        'meter_devices: \'wall\': a meter measures "system" (the whole machine), "cpu", '
        '"gpu" (every GPU) or "gpu:N"'
    )
