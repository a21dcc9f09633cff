"""metrics/utilization.py: bytes per decode token, FLOPs per prompt token and the two derived
metrics, from given inputs (the 'small' spec: 8 layers, 8 heads, 4 KV heads, head_dim 64,
vocab 1000, n_embd 512, n_ff 1536, untied)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.metrics import utilization
from rtmatrix.metrics.hostlimits import HostLimits, Probe
from rtmatrix.metrics.utilization import Shape

#: the 'small' spec's matmul parameters, worked by hand: per layer 2·512² (q, o) + 2·256·512
#: (k, v) + 3·512·1536 (ffn) + 2·512 (norms) = 3 146 752; × 8 layers + the 1000×512 output head
#: + the final norm (the 1000×512 input embedding is a lookup)
SMALL_MATMUL_PARAMS = 8 * 3_146_752 + 1000 * 512 + 512
SMALL_HEAD = 1000 * 512  # the output head: vocabulary × width


def _limits(bandwidth: float | None = 25e9) -> HostLimits:
    bw = (Probe("bytes/s", bandwidth, (bandwidth,), "numpy maximum.reduce")
          if bandwidth is not None else Probe("bytes/s", reason="the probe crashed"))  # fmt: skip
    return HostLimits(
        key={"hostname": "h", "kernel": "k", "cpu_model": "c", "threads": 2},
        bandwidth=bw,
        matmul={"f32": Probe("FLOP/s", 1e11, (1e11,), "numpy matmul"),
                "int8": Probe("OP/s", reason="onnxruntime not installed")},
        command="probe",
        measured_utc="2026-12-05T00:00:00+00:00",
        wall_s=3.0,
    )


def _cell(kv: str | None = "f16", **over: Any) -> dict[str, Any]:
    numerics: dict[str, Any] = {"matmul": {"value": "f32", "said": "F32 weights"}}
    if kv:
        numerics["kv_cache"] = {"value": kv, "said": f"K ({kv}), V ({kv})"}
    rec: dict[str, Any] = {
        "outcome": {"status": "ok"},
        "fixture": {"model": "small", "dtype": "f32", "path": None},
        "params": {"threads": 2, "n_ctx": 512, "prompt_tokens": 128, "gen_tokens": 64},
        "metrics": {"tg_tps": {"value": 200.0}, "pp_tps": {"value": 1000.0}},
        "evidence": {"stack": {"format": {"weights": {"read_per_token_bytes": 100_000_000,
                                                      "how": "tensors"}},
                               "numerics": numerics}},
    }  # fmt: skip
    return rec | over


def _host(limits: HostLimits | str) -> utilization.Limits:
    return lambda threads: limits


def test_the_small_spec_shape_is_read_from_its_spec() -> None:
    shape = utilization.shape_of("small")
    assert shape == Shape(n_layer=8, n_head=8, n_head_kv=4, head_dim=64,
                          matmul_params=SMALL_MATMUL_PARAMS, head_params=SMALL_HEAD)  # fmt: skip


def test_kv_bytes_at_f16_are_half_those_at_f32() -> None:
    shape = Shape(8, 8, 4, 64, 0)
    f16 = utilization.kv_bytes(shape, 2.0, 128, 64)
    assert f16 == 2 * 8 * 4 * 64 * 2 * (128 + 32.5)  # K and V, 8 layers, at the mean depth
    assert utilization.kv_bytes(shape, 4.0, 128, 64) == 2 * f16
    at16 = utilization.bandwidth_util(_cell("f16"), _host(_limits())).detail
    at32 = utilization.bandwidth_util(_cell("f32"), _host(_limits())).detail
    assert at32["kv_bytes_per_token"] == 2 * at16["kv_bytes_per_token"] == 2 * 1_314_816
    assert at32["kv_precision"] == "f32" and at16["kv_precision"] == "f16"


def test_tg_bandwidth_util_from_given_inputs() -> None:
    m = utilization.bandwidth_util(_cell(), _host(_limits(25e9)))
    # 100 000 000 weight bytes + 8192 KV bytes per position × 160.5 positions
    assert m.detail["bytes_per_token"] == 101_314_816
    assert m.value == pytest.approx(200 * 101_314_816 / 25e9)  # 0.8105
    assert m.source == "derived" and m.unit == "ratio"
    assert m.detail["limit_tps"] == pytest.approx(25e9 / 101_314_816)
    assert m.detail["versus"] == "this host's measured bandwidth"
    assert m.detail["bandwidth_bytes_s"] == 25e9 and m.detail["threads"] == 2


def test_pp_compute_util_from_given_inputs() -> None:
    m = utilization.compute_util(_cell(), _host(_limits()))
    attention = 2 * 8 * 8 * 64 * 129  # QKᵀ and A·V over the causal mean of (P + 1) / 2 keys
    head = 2 * SMALL_HEAD / 128  # the output head once per 128-token prompt: its last logits
    want = 2 * (SMALL_MATMUL_PARAMS - SMALL_HEAD) + head + attention
    assert m.detail["flops_per_token"] == want == 51_413_824
    assert m.value == pytest.approx(1000 * 51_413_824 / 1e11)  # 0.5141
    assert m.detail["peak_dtype"] == "f32" and m.source == "derived"


@pytest.mark.parametrize(
    ("change", "metric", "reason"),
    [
        ({"metrics": {"pp_tps": {"value": 1000.0}}}, "tg", "no tg_tps figure"),
        ({"metrics": {"tg_tps": {"value": None}}}, "pp", "no pp_tps figure"),
        ({"fixture": {"model": None, "dtype": "f32"}}, "tg", "a user's model file"),
        ({"fixture": {"model": None, "dtype": "f32"}}, "pp", "a user's model file"),
        ({"params": {"prompt_tokens": 128, "gen_tokens": 64}}, "tg", "no thread count"),
    ],
)
def test_a_missing_input_is_unavailable_with_its_reason(
    change: dict[str, Any], metric: str, reason: str
) -> None:
    rec = _cell() | change
    fn = utilization.bandwidth_util if metric == "tg" else utilization.compute_util
    m = fn(rec, _host(_limits()))
    assert m.value is None and m.source == "unavailable" and reason in str(m.reason)


def test_missing_host_limits_kv_precision_or_peak_are_named() -> None:
    why = utilization.bandwidth_util(_cell(), _host("no host limits measured at 2 threads"))
    assert why.value is None and why.reason == "no host limits measured at 2 threads"
    crashed = utilization.bandwidth_util(_cell(), _host(_limits(None)))
    assert "read bandwidth: the probe crashed" in str(crashed.reason)
    no_kv = utilization.bandwidth_util(_cell(kv=None), _host(_limits()))
    assert no_kv.value is None and "no KV-cache precision" in str(no_kv.reason)
    q8 = _cell()
    q8["evidence"]["stack"]["numerics"]["activation_quantization"] = {"value": "i8"}
    peak = utilization.compute_util(q8, _host(_limits()))
    assert peak.value is None and "int8 matmul peak" in str(peak.reason)
    assert "onnxruntime not installed" in str(peak.reason)


def test_the_kv_precision_falls_back_on_the_graphs_cache_inputs() -> None:
    rec = _cell(kv=None)
    rec["evidence"]["stack"]["format"]["kv_cache_inputs"] = {"FLOAT16": 16}
    found = utilization.kv_precision(rec)
    assert isinstance(found, tuple) and found[0] == "f16" and "KV-cache inputs" in found[1]
    rec["evidence"]["stack"]["format"]["kv_cache_inputs"] = {"FLOAT16": 8, "FLOAT": 8}
    assert isinstance(utilization.kv_precision(rec), str)  # mixed: not guessed


def test_the_weights_fall_back_on_the_file_size(tmp_path: Path) -> None:
    model = tmp_path / "model.bin"
    model.write_bytes(b"\0" * 4096)
    rec = _cell()
    rec["evidence"]["stack"]["format"] = {"unavailable": "rtmatrix reads no 'x' files"}
    rec["fixture"] = {"model": "small", "dtype": "f32", "path": str(model)}
    found = utilization.weight_bytes(rec)
    assert isinstance(found, tuple) and found[0] == 4096 and "approximation" in found[1]
    rec["fixture"]["path"] = str(tmp_path / "gone")
    assert isinstance(utilization.weight_bytes(rec), str)


@pytest.mark.parametrize(
    ("numerics", "dtype", "expected"),
    [
        ({"activation_quantization": {"value": "u8"}}, "int8", "int8"),
        ({"matmul": {"value": "q4_0"}}, "q4_0", "int8"),
        ({"matmul": {"value": "bfloat16"}}, "f32", "bf16"),
        ({"matmul": {"value": "f16"}}, "f16", "f32"),
        ({}, "q8_0", "int8"),
        ({}, "genai-int4", "int8"),  # a converter's own quantization: integer weights too
        ({}, "mnn-q8", "int8"),
        ({}, "f32", "f32"),
    ],
)
def test_the_peak_follows_what_the_matmuls_ran_in(
    numerics: dict[str, Any], dtype: str, expected: str
) -> None:
    rec = {"fixture": {"dtype": dtype}, "evidence": {"stack": {"numerics": numerics}}}
    assert utilization.peak_dtype(rec)[0] == expected


def test_the_hook_marks_a_cell_that_did_not_run_ok() -> None:
    rec = copy.deepcopy(_cell())
    rec["outcome"] = {"status": "crash"}
    out = utilization.metrics_for(rec, _host(_limits()))
    assert set(out) == {"tg_bandwidth_util", "pp_compute_util"}
    assert all(m["reason"] == "cell outcome is crash" for m in out.values())
    ok = utilization.metrics_for(_cell(), _host(_limits()))
    assert ok["tg_bandwidth_util"]["value"] == pytest.approx(0.81051853)
    assert ok["pp_compute_util"]["pp_tps"] == 1000.0  # its inputs, flat in the record
