"""Power attributed to the devices a cell ran on: a GPU board's energy is not a CPU cell's."""

from __future__ import annotations

from typing import Any

import pytest

from rtmatrix.metrics import cell, power
from rtmatrix.metrics.power.attribute import ASSUMED_CPU
from rtmatrix.metrics.power.metrics import ENERGY_KEYS
from rtmatrix.outcome import Source
from rtmatrix.protocol import PowerRecord, Repetition, WorkerResult
from tests.helpers.power import fake_sources


def metered(n_reps: int = 2) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The meter's info and the counted repetitions of a cell (3 generated tokens each)."""
    with power.open_meter() as meter:
        reps = []
        for _ in range(n_reps):
            with meter.phase("prefill"):
                pass
            with meter.phase("decode"):
                pass
            reps.append({"energy": meter.take(), "n_generated": 3})
        return meter.info(), reps


def test_a_cpu_cell_on_a_host_with_only_a_gpu_source_is_unavailable_naming_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_sources(monkeypatch, nvml_j=50.0)
    info, reps = metered()
    assert info["meter"] == "nvml" and info["devices"] == ["gpu:0"]
    m = power.power_metrics(info, reps, ["cpu"])
    assert set(m) == set(ENERGY_KEYS)
    for metric in m.values():
        assert metric.value is None and metric.source == Source.UNAVAILABLE  # never 0
    reason = str(m["energy_j"].reason)
    assert reason == (
        "no energy source: rapl: no /sys/class/powercap; "
        "nvml: NVML meters the GPU (gpu:0 NVIDIA H200) but this cell ran on the CPU; "
        "external: no external meter configured ([power].meter); "
        "modelled: modelled source not enabled ([power].modelled = false)"
    )
    # devices not reported: the cell is taken as CPU-only, and the reason says so
    unknown = str(power.power_metrics(info, reps)["power_w"].reason)
    assert "but this cell ran on the CPU (assumed: the cell did not report its devices)" in unknown
    # the same through the parent's entry point, from a worker result
    result = WorkerResult(
        status="ok",
        power=PowerRecord.from_dict(info),
        reps=[Repetition.from_dict(_rep(r)) for r in reps],
    )
    via_cell = cell.power(result, cell_devices=("cpu",))
    assert via_cell["energy_per_token_j"].reason == reason


def _rep(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "pp_s": 0.1, "pp_tokens": 4, "ttft_s": 0.1, "decode_s": [0.01, 0.01],
        "step_s": [0.01, 0.01], "tokens": [1, 2, 3], "counters": {}, "nonfinite_steps": 0,
        "first_token_monotonic": 0.0, "t_start": 0.0, "t_end": 1.0, "energy": r["energy"],
    }  # fmt: skip


def test_a_cpu_cell_with_rapl_and_nvml_takes_only_rapl(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sources(monkeypatch, rapl_j=2.0, nvml_j=50.0)
    info, reps = metered()
    assert [m["meter"] for m in info["meters"]] == ["rapl", "nvml"]  # both open, per device
    for cell_devices in (["cpu"], None):
        m = power.power_metrics(info, reps, cell_devices)
        e = m["energy_j"]
        assert e.source == Source.HARDWARE_COUNTER and e.samples == [4.0, 4.0]  # 2 J x 2 phases
        assert m["energy_prefill_j"].samples == [2.0, 2.0]
        assert m["energy_per_token_j"].value == pytest.approx(4.0 / 3)
        d = e.detail
        assert d["meter"] == "rapl" and d["counted_meters"] == ["rapl"]
        # the meter's devices and the cell's, side by side
        assert d["cell_devices"] == ["cpu"]
        assert d["meter_devices"] == {"rapl": ["cpu"], "nvml": ["gpu:0 NVIDIA H200"]}
        assert d["not_counted"] == {
            "nvml": "NVML meters the GPU (gpu:0 NVIDIA H200) but this cell ran on the CPU"
            + ("" if cell_devices else " (assumed: the cell did not report its devices)")
        }
        assert ("cell_devices_assumed" in d) is (cell_devices is None)
        assert "partial" not in d and "j_by_meter" not in d
    assert power.power_metrics(info, reps)["power_w"].detail["cell_devices_assumed"] == ASSUMED_CPU


def test_a_gpu_cell_with_rapl_and_nvml_records_both(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sources(monkeypatch, rapl_j=2.0, nvml_j=50.0)
    info, reps = metered()
    for cell_devices in (("cpu", "gpu"), ("cpu", "gpu:0")):
        m = power.power_metrics(info, reps, cell_devices)
        e = m["energy_j"]
        assert e.samples == [104.0, 104.0]  # (2 J + 50 J) x 2 phases
        assert e.detail["meter"] == "rapl+nvml" and e.detail["counted_meters"] == ["rapl", "nvml"]
        assert e.detail["j_by_meter"] == {"rapl": [4.0, 4.0], "nvml": [100.0, 100.0]}
        assert m["energy_decode_j"].detail["j_by_meter"] == {"rapl": [2.0, 2.0], "nvml": [50.0] * 2}
        assert set(e.detail["meters"]) == {"rapl", "nvml"} and "not_counted" not in e.detail
        assert e.detail["cell_devices"] == list(cell_devices)
    # a cell on another GPU than the one NVML meters takes the CPU's energy only, and says so
    other = power.power_metrics(info, reps, ("cpu", "gpu:1"))["energy_j"]
    assert other.samples == [4.0, 4.0] and other.detail["unmetered_devices"] == ["gpu:1"]
    assert other.detail["partial"] == (
        "only the CPU metered; no open source meters the GPU (gpu:1), which this cell also ran on"
    )


def test_a_gpu_named_by_the_runtime_is_matched_by_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sources(monkeypatch, rapl_j=2.0, nvml_j=50.0)
    info, reps = metered(1)
    # ONNX Runtime's CUDA provider, llama.cpp's CUDA0: NVIDIA, so NVML's board counts
    for gpu in ("gpu:CUDAExecutionProvider", "gpu:CUDA0"):
        e = power.power_metrics(info, reps, ["cpu", gpu])["energy_j"]
        assert e.samples == [104.0] and e.detail["cell_devices"] == ["cpu", gpu]
        assert e.detail["device_match"] == {
            gpu: "not named by index: counted as gpu:0 NVIDIA H200 (every metered device of its "
            "kind and vendor)"
        }
    # OpenVINO's GPU.0 is an Intel GPU: not the NVIDIA board NVML meters
    intel = power.power_metrics(info, reps, ["cpu", "gpu:GPU.0"])["energy_j"]
    assert intel.samples == [4.0] and intel.detail["unmetered_devices"] == ["gpu:GPU.0"]
    assert intel.detail["not_counted"] == {
        "nvml": "NVML meters the GPU (gpu:0 NVIDIA H200) but this cell ran on the CPU and the GPU "
        "(gpu:GPU.0)"
    }
    # a GPU-only cell on Intel's GPU: nothing here meters it
    reason = str(power.power_metrics(info, reps, ["gpu:GPU.0"])["energy_j"].reason)
    assert "rapl: RAPL meters the CPU but this cell ran on the GPU (gpu:GPU.0)" in reason


def test_a_gpu_cell_with_rapl_only_is_measured_and_marked_partial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_sources(monkeypatch, rapl_j=2.0)
    info, reps = metered(1)
    e = power.power_metrics(info, reps, ["cpu", "gpu"])["energy_j"]
    assert e.samples == [4.0] and e.detail["unmetered_devices"] == ["gpu"]
    assert "no open source meters the GPU" in e.detail["partial"]


def _info(*meters: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {
        "meter": "+".join(m[0] for m in meters),
        "meters": [{"meter": n, "source": s, "devices": d} for n, s, d in meters],
        "tried": {m[0]: "selected" for m in meters},
    }


def test_a_whole_system_meter_is_counted_once_in_sources_order() -> None:
    ext = ("external", str(Source.EXTERNAL_METER), ["system"])
    rapl = ("rapl", str(Source.HARDWARE_COUNTER), ["cpu"])
    nvml = ("nvml", str(Source.HARDWARE_COUNTER), ["gpu:0"])
    # RAPL first: a CPU cell takes RAPL; the system meter would count the CPU again
    att = power.attribute(_info(rapl, nvml, ext), ["cpu"])
    assert att.counted == ("rapl",) and att.reason is None
    assert "overlaps the CPU metered by rapl" in att.not_counted["external"]
    # a wall meter alone meters any cell, a GPU cell too
    assert power.attribute(_info(nvml, ext), ["cpu"]).counted == ("external",)
    assert power.attribute(_info(ext), ["cpu", "gpu"]).counted == ("external",)
    # a GPU-only cell on an NVML + RAPL host takes NVML's only
    assert power.attribute(_info(rapl, nvml), ["gpu"]).counted == ("nvml",)


def test_mixed_provenance_carries_the_weakest_label(monkeypatch: pytest.MonkeyPatch) -> None:
    info = _info(
        ("modelled", str(Source.MODELLED), ["cpu"]), ("nvml", str(Source.HARDWARE_COUNTER), ["gpu"])
    ) | {"min_steps": 5}
    phase = {"s": 1.0, "cpu_s": 1.0,
             "meters": {"modelled": {"j": 1.0, "resolved": True},
                        "nvml": {"j": 9.0, "resolved": True}}}  # fmt: skip
    reps = [{"energy": {"prefill": phase, "decode": phase}, "n_generated": 2}]
    e = power.power_metrics(info, reps, ["cpu", "gpu"])["energy_j"]
    assert e.source == Source.MODELLED and e.value == 20.0
    assert e.detail["meters"]["nvml"]["source"] == str(Source.HARDWARE_COUNTER)


def test_cell_devices_in_an_unknown_form_are_refused() -> None:
    info = _info(("rapl", str(Source.HARDWARE_COUNTER), ["cpu"]))
    with pytest.raises(power.DeviceError, match="is not a device"):
        power.attribute(info, ["GPU 0"])
    with pytest.raises(TypeError, match="not the string"):
        power.attribute(info, "cpu")
    bad = power.power_metrics(info | {"min_steps": 5}, [], ["GPU 0"])["energy_j"]
    assert bad.value is None and "cannot tell which source meters" in str(bad.reason)
    att = power.attribute(info, [])
    assert att.counted == ("rapl",) and "named no device" in str(
        att.detail()["cell_devices_assumed"]
    )


def test_devices_parse_print_and_cover() -> None:
    cuda = power.Device.parse("gpu:CUDA0")
    assert str(cuda) == "gpu:CUDA0" and cuda.vendor == "nvidia" and cuda.index is None
    assert power.Device.parse("gpu:ROCMExecutionProvider").vendor == "amd"
    assert power.Device.parse("gpu:Vulkan0").vendor is None  # any GPU's meter covers it
    assert power.Device("gpu", 0, vendor="nvidia").covers(power.Device.parse("gpu:Vulkan0"))
    assert not power.Device("gpu", 0, vendor="nvidia").covers(power.Device.parse("gpu:GPU.0"))
    gpu1 = power.Device.parse("GPU:1", "NVIDIA H200")
    assert str(gpu1) == "gpu:1" and gpu1.label == "gpu:1 NVIDIA H200"
    assert gpu1 == power.Device("gpu", 1)  # the name is a label, not identity
    assert power.Device.parse("gpu").covers(gpu1) and not power.Device("gpu", 0).covers(gpu1)
    assert power.Device.parse("system").covers(power.Device("npu"))
    assert not power.Device("cpu").covers(power.Device("system"))
    with pytest.raises(power.DeviceError, match="without an index"):
        power.Device.parse("system:0")
