"""Real apache-tvm on the tiny fixture, AOT and JIT rows, through real worker processes."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix
from tests.helpers.metrics import ENERGY_METRICS, GENERATE_METRICS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(find_spec("tvm") is None, reason="apache-tvm is not installed"),
]

ROWS = (
    "[[runtimes]]\nname = 'tvm_aot'\nadapter = 'tvm'\noptions = {mode = 'aot'}\n"
    "[[runtimes]]\nname = 'tvm_jit'\nadapter = 'tvm'\noptions = {mode = 'jit'}\n"
)


def _run(tmp_path: Path, body: str, n_ctx: int = 128) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    text = (
        "[run]\nrepetitions = 2\nwarmup = 1\ntimeout_s = 180\n"
        f"[params]\nthreads = 1\nn_ctx = {n_ctx}\nprompt_tokens = 16\ngen_tokens = 24\n" + body
    )
    m = parse_matrix(text, tmp_path / "m.toml")
    return cast(
        dict[str, Any],
        load_run(run_matrix(m, tmp_path / "results", progress=lambda _: None, cwd=repo)),
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    body = ROWS + "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\n"
    return _run(tmp_path_factory.mktemp("tvm"), body)


def cell(run: dict[str, Any], runtime: str) -> dict[str, Any]:
    return next(c for c in run["cells"] if c["runtime"] == runtime)


def test_both_rows_ok_with_versions(tiny_run: dict[str, Any]) -> None:
    assert [c["outcome"]["status"] for c in tiny_run["cells"]] == ["ok", "ok"]
    for name in ("tvm_aot", "tvm_jit"):
        rt = tiny_run["runtimes"][name]
        assert rt["distribution"] == "apache-tvm" and rt["extra"] == "mlc"
        assert rt["container"] == "tvm" and rt["version"]
        assert cell(tiny_run, name)["outcome"]["runtime_version"] == rt["version"]


@pytest.mark.parametrize("runtime", ["tvm_aot", "tvm_jit"])
def test_f32_greedy_tokens_equal_the_reference(tiny_run: dict[str, Any], runtime: str) -> None:
    par = cell(tiny_run, runtime)["parity"]
    assert par["tokens_agree"] == par["tokens_compared"] == 24
    assert par["max_abs_logit_err"] < 1e-3 and par["within_tolerance"]
    assert par["deterministic_across_reps"]


def test_metrics_present_and_no_invented_counters(tiny_run: dict[str, Any]) -> None:
    for c in tiny_run["cells"]:
        m = c["metrics"]
        assert set(m) >= GENERATE_METRICS  # other rows' metrics may be added; these must be there
        for name in GENERATE_METRICS - ENERGY_METRICS - {"pp_tps_counter", "tg_tps_counter"}:
            assert m[name]["value"] is not None, (c["runtime"], name, m[name])
        for name in ("pp_tps_counter", "tg_tps_counter"):
            assert m[name]["source"] == "unavailable" and m[name]["value"] is None
        assert m["pp_tps"]["source"] == "harness-clock" and len(m["tg_tps"]["samples"]) == 2
        assert m["package_size_bytes"]["value"] > 100 * 2**20  # the whole wheel, compiler included


def test_jit_pays_compile_time_at_load(tiny_run: dict[str, Any]) -> None:
    aot = cell(tiny_run, "tvm_aot")["metrics"]
    jit = cell(tiny_run, "tvm_jit")["metrics"]
    assert jit["cold_start_load_s"]["value"] > aot["cold_start_load_s"]["value"] + 0.2
    compile_s = cell(tiny_run, "tvm_jit")["evidence"]["load_breakdown"]["jit"]["compile_s"]
    assert compile_s > 0.2


def test_evidence_has_manifest_label_and_runtime_only_import(tiny_run: dict[str, Any]) -> None:
    aot = cell(tiny_run, "tvm_aot")
    ev = aot["evidence"]
    assert ev["row_label"].startswith("TVM 0.")
    assert "compiled ahead of time" in ev["row_label"] and "mlc_llm engine" in ev["row_label"]
    manifest = ev["manifest"]
    assert ev["artifact"]["manifest_path"].endswith("tvm-manifest.json")
    assert manifest["library"]["sha256"] == aot["fixture"]["sha256"]
    assert manifest["fixture"]["spec_sha256"] == aot["fixture"]["spec_sha256"]
    assert manifest["compile"]["pipeline"] == "rtmatrix-cpu"
    assert ev["artifact"]["library_sha256_verified"] is True
    assert ev["runtime_import"]["compiler_loaded"] is False
    assert "libtvm_runtime.so" in ev["runtime_import"]["libraries_mapped"]
    pkg = ev["package"]
    assert 0 < pkg["runtime_library_bytes"] < pkg["wheel_installed_bytes"] / 20
    assert ev["mlc_llm"]["importable"] in (True, False)
    assert any("set_instrument" in f for f in ev["debug_facilities"])
    assert ev["placement"]["fallback"] is False
    assert ev["load_breakdown"]["allocator"] == "naive"
    st = ev["settings"]  # the target the library was compiled for, the allocator, the pool
    assert st["effective"]["allocator"] == "naive" and st["requested"]["mode"] == "aot"
    assert st["effective"]["mcpu"] == manifest["target"]["mcpu"]
    assert st["effective"]["llvm_cpu_features"] == len(manifest["target"]["llvm_cpu_features"])
    assert st["effective"]["tvm_num_threads"] is not None and "allocator" in st["binding_defaults"]
    jit = cell(tiny_run, "tvm_jit")["evidence"]
    assert "compiled at load (JIT)" in jit["row_label"]
    assert jit["runtime_import"]["compiler_loaded"] is True
    assert jit["manifest"]["library"]["sha256"] == manifest["library"]["sha256"]


def test_jit_uses_less_memory_only_when_nothing_compiles(tiny_run: dict[str, Any]) -> None:
    # the runtime-only AOT worker never maps the 250 MB compiler library
    aot = cell(tiny_run, "tvm_aot")["metrics"]["peak_rss_os_bytes"]["value"]
    jit = cell(tiny_run, "tvm_jit")["metrics"]["peak_rss_os_bytes"]["value"]
    assert aot < jit


def test_failures_are_clean_errors(tmp_path: Path) -> None:
    body = (
        "[[runtimes]]\nname = 'tvm_aot'\nadapter = 'tvm'\noptions = {mode = 'aot'}\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\nvariant = 'unknown-arch'\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\nvariant = 'missing-tensor'\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\nvariant = 'truncated'\n"
    )
    run = _run(tmp_path, body)
    got = {c["fixture"]["variant"]: c["outcome"] for c in run["cells"]}
    for variant, text in (
        ("unknown-arch", "rtmatrix.fixture.unknown_op"),
        ("missing-tensor", "blk.0.attn_qkv.weight"),
        ("truncated", "sha256"),
    ):
        out = got[variant]
        assert out["status"] == "error" and out["phase"] == "load", (variant, out)
        assert text in out["message"], (variant, out["message"])


def test_context_past_the_rope_tables_is_refused_at_load(tmp_path: Path) -> None:
    body = ROWS.split("[[runtimes]]")[1]
    run = _run(
        tmp_path, "[[runtimes]]" + body + "[[fixtures]]\nmodel='tiny'\ndtypes=['f32']\n", 1024
    )
    out = run["cells"][0]["outcome"]
    assert out["status"] == "error" and out["phase"] == "load"
    assert "exceeds the 512 positions" in out["message"]


def test_a_users_own_artifact_folder_runs(tiny_run: dict[str, Any], tmp_path: Path) -> None:
    folder = Path(cell(tiny_run, "tvm_aot")["fixture"]["path"]).parent
    body = (
        "[[runtimes]]\nname = 'tvm_aot'\nadapter = 'tvm'\n"
        f"[[fixtures]]\nname = 'mine'\npath = '{folder}'\n"
    )
    run = _run(tmp_path, body)
    c = run["cells"][0]
    assert c["outcome"]["status"] == "ok", c["outcome"]
    assert c["parity"]["status"] == "unavailable"  # no reference for a user's model
    assert c["evidence"]["manifest"]["library"]["sha256"] == c["fixture"]["sha256"]


def test_a_position_past_the_context_is_a_clean_error(tmp_path: Path) -> None:
    # 16 prompt + 24 generated tokens do not fit 32 positions: without the adapter's check the
    # in-place cache write would run past the cache (TVM checks nothing there)
    body = ROWS.split("[[runtimes]]")[1]
    run = _run(tmp_path, "[[runtimes]]" + body + "[[fixtures]]\nmodel='tiny'\ndtypes=['f32']\n", 32)
    out = run["cells"][0]["outcome"]
    assert out["status"] == "error" and out["phase"] == "generate", out
    assert "past the context of 32" in out["message"]


def test_short_and_untiled_prompts_match_the_reference(tmp_path: Path) -> None:
    # prompt lengths below and off the GEMM row tile (tvm_layout.ROW_TILE = 4): the padded rows
    # of a prefill GEMM were written past the end of the real (s, n) outputs -> heap corruption
    # (SIGABRT/SIGSEGV, once a hang). Unknown option keys (merged in from fixture-level
    # scenario options) are ignored and listed, not an error.
    text = (
        "[run]\nrepetitions = 1\nwarmup = 0\ntimeout_s = 120\n"
        "[params]\nthreads = 1\nn_ctx = 64\nprompt_tokens = [1, 2, 3, 5, 17]\ngen_tokens = 6\n"
        "[[runtimes]]\nname = 'tvm_aot'\nadapter = 'tvm'\n"
        "options = {mode = 'aot', cancel_cycles = 3, leak_tolerance_mb = 8.0}\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32']\n"
    )
    repo = Path(__file__).resolve().parents[2]
    m = parse_matrix(text, tmp_path / "m.toml")
    run = load_run(run_matrix(m, tmp_path / "results", progress=lambda _: None, cwd=repo))
    assert len(run["cells"]) == 5
    for c in run["cells"]:
        assert c["outcome"]["status"] == "ok", (c["params"], c["outcome"])
        par = c["parity"]
        assert par["tokens_agree"] == par["tokens_compared"] == 6, (c["params"], par)
        assert par["within_tolerance"], (c["params"], par)
        ignored = c["evidence"]["ignored_options"]
        assert ignored == ["cancel_cycles", "leak_tolerance_mb"]
