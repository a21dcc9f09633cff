"""Real onnxruntime-genai on the tiny fixture (the same ONNX folder as the onnxruntime row),
through real worker processes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.fixtures import prepare_fixture
from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

pytestmark = pytest.mark.integration
og = pytest.importorskip("onnxruntime_genai")


@pytest.fixture(scope="module")
def genai_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("genai")
    repo = Path(__file__).resolve().parents[2]
    good = prepare_fixture("tiny", "tiny", "f32", None, "onnx").path
    lone = tmp / "lone"
    lone.mkdir()
    shutil.copy(good, lone / "model.onnx")  # no genai_config.json beside it
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 120\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 16\ngen_tokens = 24\n"
        "[[runtimes]]\nname = 'onnxruntime_genai'\n"
        "[[runtimes]]\nname = 'genai_cuda'\nadapter = 'onnxruntime_genai'\n"
        "options = { providers = ['cuda'] }\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32', 'int8']\n"
        f"[[fixtures]]\nname = 'lone'\npath = '{lone / 'model.onnx'}'\n"
    )
    m = parse_matrix(text, tmp / "m.toml")
    return cast(
        dict[str, Any], load_run(run_matrix(m, tmp / "results", progress=lambda _: None, cwd=repo))
    )


def cell(run: dict[str, Any], runtime: str, label: str) -> dict[str, Any]:
    return next(
        c for c in run["cells"] if c["runtime"] == runtime and c["key"].split("|")[1] == label
    )


def test_runtime_recorded(genai_run: dict[str, Any]) -> None:
    rt = genai_run["runtimes"]["onnxruntime_genai"]
    assert rt["distribution"] == "onnxruntime-genai" and rt["version"] == og.__version__
    assert rt["extra"] == "onnxruntime-genai" and rt["container"] == "onnx"


def test_f32_greedy_tokens_equal_the_reference(genai_run: dict[str, Any]) -> None:
    c = cell(genai_run, "onnxruntime_genai", "tiny/f32")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    par = c["parity"]
    assert par["tokens_agree"] == par["tokens_compared"] == 24
    assert par["max_abs_logit_err"] < 1e-4 and par["within_tolerance"]
    assert par["deterministic_across_reps"]


def test_int8_parity_is_recorded(genai_run: dict[str, Any]) -> None:
    c = cell(genai_run, "onnxruntime_genai", "tiny/int8")
    assert c["outcome"]["status"] == "ok", c["outcome"]
    par = c["parity"]
    assert par["status"] == "measured" and 1e-3 < par["max_abs_logit_err"] <= 0.5
    assert par["within_tolerance"]


def test_metrics_and_no_counters(genai_run: dict[str, Any]) -> None:
    m = cell(genai_run, "onnxruntime_genai", "tiny/f32")["metrics"]
    for key in ("pp_tps", "tg_tps", "ttft_s", "tpot_s", "cold_start_load_s"):
        assert m[key]["value"] > 0, key
    assert m["tg_tps_counter"]["source"] == "unavailable"
    assert m["package_size_bytes"]["value"] > 5 * 2**20
    assert len(m["tg_tps"]["samples"]) == 2


def test_placement_evidence_from_orts_log(genai_run: dict[str, Any]) -> None:
    c = cell(genai_run, "onnxruntime_genai", "tiny/f32")
    ev = c["evidence"]
    pl = ev["placement"]
    assert pl["requested"] == ["cpu"] and pl["used"] == ["CPU"] and pl["fallback"] is False
    assert pl["nodes_by_provider"]["CPUExecutionProvider"] > 100
    assert ev["debug_facilities"]["log_options"]["available"]
    assert "enabled" in ev["debug_facilities"]["log_options"]["keys"]
    assert ev["genai_config"]["type"] == "llama"
    # verbose load lines are evidence, not stderr noise
    assert "[V:onnxruntime" not in ev["stderr_tail"]
    assert "leaked" not in ev["stderr_tail"]


@pytest.mark.skipif(og.is_cuda_available(), reason="this machine really has CUDA")
def test_requested_cuda_is_a_clean_load_error(genai_run: dict[str, Any]) -> None:
    c = cell(genai_run, "genai_cuda", "tiny/f32")
    out = c["outcome"]
    assert out["status"] == "error" and out["phase"] == "load", out
    assert "cuda" in out["message"].lower()
    assert c["evidence"]["placement"]["requested"] == ["cuda"]
    assert c["evidence"]["placement"]["fallback"] is False  # nothing ran at all


def test_a_folder_without_genai_config_is_a_clear_error(genai_run: dict[str, Any]) -> None:
    c = cell(genai_run, "onnxruntime_genai", "lone")
    assert c["outcome"]["status"] == "error" and c["outcome"]["phase"] == "load"
    assert "genai_config.json" in c["outcome"]["message"]
