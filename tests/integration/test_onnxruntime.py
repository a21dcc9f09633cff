"""Real onnxruntime on the tiny fixture, through real worker processes (the pure placement
helpers: ``tests/unit/test_onnxruntime_placement.py`` and ``test_onnxruntime_profile.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.fixtures import prepare_fixture, reference_for
from rtmatrix.matrix import parse_matrix
from rtmatrix.metrics.parity import LOGIT_TOLERANCE
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration
ort = pytest.importorskip("onnxruntime")

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
NEEDS_NO_CUDA = pytest.mark.skipif(
    CUDA in ort.get_available_providers(), reason="this machine really has CUDA"
)


def _run(tmp_path: Path, body: str) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 120\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 16\ngen_tokens = 24\n" + body
    )
    m = parse_matrix(text, tmp_path / "m.toml")
    return cast(
        dict[str, Any],
        load_run(run_matrix(m, tmp_path / "results", progress=lambda _: None, cwd=repo)),
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    body = (
        "[[runtimes]]\nname = 'onnxruntime'\n"
        "[[runtimes]]\nname = 'ort_cuda'\nadapter = 'onnxruntime'\n"
        f"options = {{ providers = ['{CUDA}', '{CPU}'] }}\n"
        "[[runtimes]]\nname = 'ort_strict'\nadapter = 'onnxruntime'\n"
        f"options = {{ providers = ['{CUDA}'], disable_cpu_ep_fallback = true }}\n"
        "[[runtimes]]\nname = 'ort_swept'\nadapter = 'onnxruntime'\n"
        "options = { graph_optimization_level = 'basic' }\n"
        "sweep = { allow_spinning = [false], execution_mode = ['sequential', 'parallel'] }\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32', 'int8']\n"
    )
    return _run(tmp_path_factory.mktemp("ort"), body)


def cell(run: dict[str, Any], runtime: str, dtype: str) -> dict[str, Any]:
    return next(
        c for c in run["cells"] if c["runtime"] == runtime and c["fixture"]["dtype"] == dtype
    )


def test_runtime_recorded(tiny_run: dict[str, Any]) -> None:
    rt = tiny_run["runtimes"]["onnxruntime"]
    assert rt["distribution"] == "onnxruntime" and rt["version"] == ort.__version__
    assert rt["extra"] == "onnxruntime" and rt["container"] == "onnx"
    assert cell(tiny_run, "onnxruntime", "f32")["fixture"]["path"].endswith("model.onnx")


def test_f32_greedy_tokens_equal_the_reference(tiny_run: dict[str, Any]) -> None:
    c = cell(tiny_run, "onnxruntime", "f32")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    par = c["parity"]
    assert par["tokens_agree"] == par["tokens_compared"] == 24
    assert par["max_abs_logit_err"] < 1e-4 and par["within_tolerance"]
    assert par["deterministic_across_reps"]


def test_onnx_and_gguf_f32_share_one_reference() -> None:
    # cross-runtime agreement: both formats are judged against the same greedy tokens
    onnx_ref = reference_for("tiny", "f32", 16, 24, "onnx")
    gguf_ref = reference_for("tiny", "f32", 16, 24, "gguf")
    assert onnx_ref.tokens == gguf_ref.tokens


def test_int8_parity_is_recorded(tiny_run: dict[str, Any]) -> None:
    c = cell(tiny_run, "onnxruntime", "int8")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    par = c["parity"]
    assert par["status"] == "measured" and par["logit_tolerance"] == LOGIT_TOLERANCE["int8"]
    assert 1e-3 < par["max_abs_logit_err"] <= 0.5  # really quantized, still close
    assert par["within_tolerance"]
    assert par["tokens_agree"] >= 1


def test_metrics_come_from_the_harness_clock_only(tiny_run: dict[str, Any]) -> None:
    m = cell(tiny_run, "onnxruntime", "f32")["metrics"]
    for key in ("pp_tps", "tg_tps", "ttft_s", "tpot_s"):
        assert m[key]["source"] == "harness-clock" and m[key]["value"] > 0, key
    for key in ("pp_tps_counter", "tg_tps_counter"):
        assert m[key]["source"] == "unavailable" and m[key]["reason"]
    assert m["package_size_bytes"]["value"] > 20 * 2**20
    assert m["license"]["value"]
    assert m["cold_start_load_s"]["value"] > 0
    assert m["peak_rss_os_bytes"]["value"] > 0


def test_placement_evidence_present(tiny_run: dict[str, Any]) -> None:
    ev = cell(tiny_run, "onnxruntime", "f32")["evidence"]
    pl = ev["placement"]
    assert pl["fallback"] is False and pl["requested_explicitly"] is False
    assert pl["requested"][-1] == CPU and CPU in pl["used"]
    assert pl["nodes_by_provider"][CPU] > 100
    assert set(pl["nodes_by_provider"]) == {CPU}
    assert pl["source"]
    if pl["source"] != "verbose-log (second session, same options)":
        assert pl["partitions"] == 1
    fac = ev["debug_facilities"]
    assert fac["profiling"]["available"] and fac["verbose_log"]["available"]
    assert isinstance(fac["placement_api"]["available"], bool)
    assert ev["system_info"].startswith(f"onnxruntime {ort.__version__}")
    assert ev["session"]["intra_op_num_threads"] == 2


@NEEDS_NO_CUDA
def test_requested_cuda_is_a_fallback_with_orts_warning(tiny_run: dict[str, Any]) -> None:
    for dtype in ("f32", "int8"):
        c = cell(tiny_run, "ort_cuda", dtype)
        assert c["outcome"]["status"] == "fallback", c["outcome"]
        assert c["verdict"] == "FAIL"
        pl = c["evidence"]["placement"]
        assert pl["fallback"] is True and pl["used"] == [CPU]
        assert pl["requested"] == [CUDA, CPU]
        assert "not in available provider names" in pl["detail"]  # ORT's own words
        assert "not in available provider names" in c["outcome"]["message"]
        assert pl["nodes_by_provider"] == {CPU: pl["nodes_by_provider"][CPU]}
    assert cell(tiny_run, "ort_cuda", "f32")["parity"]["all_tokens_agree"]


@NEEDS_NO_CUDA
def test_strict_cuda_is_a_clean_load_error(tiny_run: dict[str, Any]) -> None:
    for dtype in ("f32", "int8"):
        c = cell(tiny_run, "ort_strict", dtype)
        out = c["outcome"]
        assert out["status"] == "error" and out["phase"] == "load", out
        assert "disable_cpu_ep_fallback" in out["message"]
        assert "fallback to CPU EP has been explicitly disabled" in out["message"]
        assert out["signal"] is None
        assert c["parity"]["status"] == "unavailable"
        pl = c["evidence"]["placement"]
        assert pl["strict"] is True and pl["fallback"] is False and pl["used"] == []
        assert any("explicitly disabled" in w for w in c["evidence"]["warnings"])


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("ort-probe")
    good = prepare_fixture("tiny", "tiny", "f32", None, "onnx").path
    byo = tmp / "byo"
    byo.mkdir()
    shutil.copy(good, byo / "mine.onnx")  # a user's own file: no genai_config, no reference
    body = (
        "[[runtimes]]\nname = 'ort_log'\nadapter = 'onnxruntime'\n"
        "options = { placement_source = 'log' }\n"
        "[[runtimes]]\nname = 'ort_profile'\nadapter = 'onnxruntime'\n"
        "options = { placement_source = 'profile' }\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\nvariant = 'unknown-arch'\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['int8']\nvariant = 'missing-tensor'\n"
        f"[[fixtures]]\nname = 'mine'\npath = '{byo / 'mine.onnx'}'\n"
    )
    return _run(tmp, body)


def _probe_cell(run: dict[str, Any], runtime: str, name: str) -> dict[str, Any]:
    return next(
        c for c in run["cells"] if c["runtime"] == runtime and c["key"].split("|")[1] == name
    )


def test_log_and_profile_sources_count_the_same_nodes(probe_run: dict[str, Any]) -> None:
    log = _probe_cell(probe_run, "ort_log", "tiny/f32")
    prof = _probe_cell(probe_run, "ort_profile", "tiny/f32")
    assert log["outcome"]["status"] == prof["outcome"]["status"] == "ok"
    lp, pp = log["evidence"]["placement"], prof["evidence"]["placement"]
    assert lp["source"].startswith("verbose-log") and pp["source"].startswith("profiling-json")
    assert lp["nodes_by_provider"] == pp["nodes_by_provider"]
    assert lp["nodes_by_provider"][CPU] > 100
    assert lp["partitions"] is None and lp["partitions_reason"]
    assert pp["partitions"] == 1
    # the diagnostic sessions leave the measured cell's parity untouched
    assert log["parity"]["all_tokens_agree"] and prof["parity"]["all_tokens_agree"]


def test_broken_models_are_clean_load_errors(probe_run: dict[str, Any]) -> None:
    expected = {
        "tiny/f32": None,
        "tiny-unknown-arch/f32": "is not a registered function/op",
        "tiny-missing-tensor/int8": "is not a graph input, initializer",
    }
    labels = {c["key"].split("|")[1] for c in probe_run["cells"]}
    assert set(expected) <= labels, labels
    for label, words in expected.items():
        if words is None:
            continue
        c = _probe_cell(probe_run, "ort_log", label)
        assert c["outcome"]["status"] == "error" and c["outcome"]["phase"] == "load"
        assert words in c["outcome"]["message"]
        assert c["verdict"] == "PASS"  # the variant expects a clean error


def test_a_users_own_onnx_file_runs_without_a_reference(probe_run: dict[str, Any]) -> None:
    c = _probe_cell(probe_run, "ort_log", "mine")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    assert c["parity"]["status"] == "unavailable"
    assert c["metrics"]["tg_tps"]["value"] > 0


def test_settings_are_recorded_as_asked_and_as_the_session_reports_them(
    tiny_run: dict[str, Any],
) -> None:
    plain = cell(tiny_run, "onnxruntime", "f32")["evidence"]["settings"]
    assert plain["requested"] == {"intra_op_num_threads": 2}
    eff = plain["effective"]  # read back from the session: ORT's own defaults where unset
    assert eff["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert eff["execution_mode"] == "ORT_SEQUENTIAL" and eff["intra_op_num_threads"] == 2
    assert eff["session.intra_op.allow_spinning"] == "(ORT default)"
    assert "intra_op_num_threads" in plain["binding_defaults"]
    # a sweep's rows: each combination is its own row, and the session says it took the values
    names = {c["runtime"] for c in tiny_run["cells"] if c["runtime"].startswith("ort_swept")}
    assert names == {
        "ort_swept[allow_spinning=false,execution_mode=sequential]",
        "ort_swept[allow_spinning=false,execution_mode=parallel]",
    }
    par = cell(tiny_run, "ort_swept[allow_spinning=false,execution_mode=parallel]", "f32")
    eff = par["evidence"]["settings"]["effective"]
    assert par["outcome"]["status"] == "ok"
    assert eff["execution_mode"] == "ORT_PARALLEL"
    assert eff["graph_optimization_level"] == "ORT_ENABLE_BASIC"
    assert eff["session.intra_op.allow_spinning"] == "0"
    assert tiny_run["runtimes"][par["runtime"]]["sweep"] == {
        "base": "ort_swept",
        "values": {"allow_spinning": False, "execution_mode": "parallel"},
    }
