"""OpenVINO's own runtime (the ``openvino`` row) on the tiny fixture family through real worker
processes: greedy parity with the numpy reference, settings read back from the compiled model,
the infer request's own latency as the runtime counter, and each failing fixture's kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration
ov = pytest.importorskip("openvino")

FAILING = {  # variant -> the error kind that passes (as the ONNX Runtime row's)
    "truncated": "bad-file",
    "garbage-header": "bad-file",
    "empty": "bad-file",
    "missing-tensor": "missing-tensor",
    "unknown-arch": "unsupported-op",
    "fixed-shape": "dynamic-shape",
}


@pytest.fixture(scope="module")
def ov_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    fixtures = "".join(
        f"[[fixtures]]\nmodel = 'tiny'\nvariant = '{v}'\nexpect_kind = '{k}'\n"
        + ("expect = 'error'\n" if v == "fixed-shape" else "")
        for v, k in FAILING.items()
    )
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 120\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 64\ngen_tokens = 16\n"
        "[[runtimes]]\nname = 'openvino'\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32', 'int8', 'int8w', 'int4w']\n"
        "[[fixtures]]\nmodel = 'tiny'\nvariant = 'nan-weights'\n"
        "[[fixtures]]\nmodel = 'tiny'\nvariant = 'future-opset'\nexpect_kind = 'unsupported-op'\n"
        + fixtures
    )
    tmp = tmp_path_factory.mktemp("openvino")
    m = parse_matrix(text, tmp / "m.toml")
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    )


def cell(run: dict[str, Any], fixture: str, dtype: str = "f32") -> dict[str, Any]:
    return next(
        c
        for c in run["cells"]
        if c["fixture"]["name"] == fixture and c["fixture"]["dtype"] == dtype
    )


def test_f32_greedy_tokens_equal_the_reference_with_settings_read_back(
    ov_run: dict[str, Any],
) -> None:
    rt = ov_run["runtimes"]["openvino"]
    assert rt["distribution"] == "openvino" and rt["container"] == "onnx"
    c = cell(ov_run, "tiny")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    par = c["parity"]
    assert par["within_tolerance"], par
    matmul = c["evidence"]["stack"]["numerics"]["matmul"]
    hint = c["evidence"]["settings"]["compiled_model"]["INFERENCE_PRECISION_HINT"]
    if matmul["value"] == "f32":  # an AVX2-only host: OpenVINO's default is f32
        assert "bf16" not in str(hint) and "bfloat16" not in str(hint), hint
        assert par["tokens_agree"] == par["tokens_compared"] == 16 and "numerics" not in par, par
    else:  # AVX512_BF16 / AMX: bf16 by default, judged as what ran, marked, and controlled
        assert matmul["value"] == "bf16" and matmul["host_dependent"], matmul
        assert par["numerics"]["judged_as"] == "bf16" and "bfloat16" in str(hint).lower()
        assert "judged as bf16, not f32" in c["numerics_mark"]
        assert "INFERENCE_PRECISION_HINT" in c["evidence"]["stack"]["numerics"]["host_changed"][0]
        if par["numerics"]["within_requested_tolerance"] is False:
            ctl = c["numerics_control"]
            assert ctl["options"] == {"inference_precision": "f32"} and ctl["diagnosed"], ctl
            assert ctl["parity"]["tokens_agree"] == 16 and "numerics" not in ctl["parity"]
            assert ctl["numerics"]["matmul"]["value"] == "f32"
            assert "diagnosed: bf16 by default" in c["verdict_reason"]
    settings = c["evidence"]["settings"]
    assert settings["compiled_model"]["INFERENCE_NUM_THREADS"] == 2
    assert settings["compiled_model"]["PERFORMANCE_HINT"] == "LATENCY"
    assert "KV_CACHE_PRECISION" in settings["openvino_defaults"]
    assert c["evidence"]["load_timing_s"]["read_model_s"] > 0


def test_the_infer_requests_latency_is_the_runtime_counter(ov_run: dict[str, Any]) -> None:
    m = cell(ov_run, "tiny")["metrics"]
    assert m["tg_tps_counter"]["source"] == "runtime-counter"
    ratio = m["tg_tps_counter"]["value"] / m["tg_tps"]["value"]
    # the request's own latency leaves out the Python around it: counter >= harness clock
    assert 0.9 < ratio < 3.0, (m["tg_tps_counter"], m["tg_tps"])


def test_benchmark_app_gives_reference_figures_at_the_cells_shapes(
    ov_run: dict[str, Any],
) -> None:
    m = cell(ov_run, "tiny")["metrics"]
    ref = m["pp_tps_reference"]
    assert ref["source"] == "reference-tool" and ref["tool"] == "benchmark_app", ref
    assert "input_ids[1,64]" in ref["command"] and "-nthreads 2" in ref["command"]
    assert m["tg_tps_reference"]["value"] > 0 and m["pp_reference_ratio"]["value"] > 0


def test_int8_runs_and_says_which_kernels_computed_it(ov_run: dict[str, Any]) -> None:
    """ONNX Runtime's int8 file (MatMulInteger): OpenVINO runs it with int8 FullyConnected
    layers where the CPU has the instructions, else with f32 ones on decompressed weights — a
    kernel-level fallback, marked. Either way the cell ran and its kernels are recorded."""
    c = cell(ov_run, "tiny", "int8")
    kernels = c["evidence"]["stack"]["kernels"]
    fc = kernels["matmul_layers"]["FullyConnected"]
    if set(fc) <= {"f32", "f16", "bf16"}:
        assert c["outcome"]["status"] == "fallback", c["outcome"]
        assert kernels["fallback"] and "decompressed" in kernels["fallback_reason"]
    else:
        assert c["outcome"]["status"] == "ok", c["outcome"]
    assert c["parity"]["status"] == "measured"


@pytest.mark.parametrize(("dtype", "weights"), [("int8w", "i8"), ("int4w", "i4")])
def test_weight_only_files_keep_their_weights_compressed(
    ov_run: dict[str, Any], dtype: str, weights: str
) -> None:
    c = cell(ov_run, "tiny", dtype)
    assert c["outcome"]["status"] == "ok", c["outcome"]
    assert c["parity"]["within_tolerance"], c["parity"]
    layers = c["evidence"]["runtime_model"]["layers"]
    assert set(layers["FullyConnected"]) == {weights}, layers  # OpenVINO's own compression


@pytest.mark.parametrize("variant", sorted(FAILING))
def test_failing_fixtures_end_with_their_kind(ov_run: dict[str, Any], variant: str) -> None:
    c = cell(ov_run, f"tiny-{variant}")
    assert c["verdict"] == "PASS", (c["outcome"], c.get("verdict_reason"))
    assert c["outcome"]["error_kind"] == FAILING[variant], c["outcome"]


def test_nan_weights_and_a_silently_accepted_future_opset_are_caught(
    ov_run: dict[str, Any],
) -> None:
    # NaN weights run without an error and give NaN logits: the harness catches it (as on every
    # row: a silent wrong output FAILs)
    nan = cell(ov_run, "tiny-nan-weights")
    assert nan["outcome"]["status"] == "wrong-output" and nan["verdict"] == "FAIL", nan["outcome"]
    assert "non-finite logits" in nan["outcome"]["message"]
    # OpenVINO reads a model stamped with opset 99 and runs it without a word (ONNX Runtime
    # refuses it), and its logits are not the model's: parity catches it, the cell FAILs
    future = cell(ov_run, "tiny-future-opset")
    assert future["outcome"]["status"] == "wrong-output", future["outcome"]
    assert future["verdict"] == "FAIL" and "parity broken" in future["outcome"]["message"]
