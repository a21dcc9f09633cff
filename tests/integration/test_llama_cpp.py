"""Real llama-cpp-python on the tiny fixture, through real worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.fixtures import prepare_fixture
from rtmatrix.matrix import parse_matrix
from rtmatrix.metrics.power.config import SOURCE_NAMES
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix
from tests.helpers.llama import KNOWN_TO_WORK
from tests.helpers.metrics import ENERGY_METRICS, GENERATE_METRICS, REFERENCE_METRICS, SOURCES

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, repo: Path, body: str) -> dict[str, Any]:
    text = (
        "[run]\nrepetitions = 3\nwarmup = 1\ntimeout_s = 120\n"
        "[params]\nn_ctx = 128\nprompt_tokens = 16\ngen_tokens = 24\n" + body
    )
    m = parse_matrix(text, tmp_path / "m.toml")
    return cast(
        dict[str, Any],
        load_run(run_matrix(m, tmp_path / "results", progress=lambda _: None, cwd=repo)),
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    body = (
        f"[[runtimes]]\nname = 'llama_cpp'\n{KNOWN_TO_WORK}"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['f32', 'f16', 'q8_0', 'q4_0']\n"
    )
    return _run(tmp_path_factory.mktemp("tiny"), repo, body)


def cell(run: dict[str, Any], dtype: str) -> dict[str, Any]:
    return next(c for c in run["cells"] if c["fixture"]["dtype"] == dtype)


def test_every_cell_ok_and_versions_recorded(tiny_run: dict[str, Any]) -> None:
    assert [c["outcome"]["status"] for c in tiny_run["cells"]] == ["ok"] * 4
    rt = tiny_run["runtimes"]["llama_cpp"]
    assert rt["distribution"] == "llama-cpp-python" and rt["version"]
    assert cell(tiny_run, "f32")["outcome"]["runtime_version"] == rt["version"]


def test_f32_greedy_tokens_equal_the_reference(tiny_run: dict[str, Any]) -> None:
    par = cell(tiny_run, "f32")["parity"]
    assert par["tokens_agree"] == par["tokens_compared"] == 24
    assert par["max_abs_logit_err"] < 1e-2 and par["within_tolerance"]
    assert par["deterministic_across_reps"]


@pytest.mark.parametrize("dtype", ["f16", "q8_0", "q4_0"])
def test_other_dtypes_have_parity_recorded(tiny_run: dict[str, Any], dtype: str) -> None:
    par = cell(tiny_run, dtype)["parity"]
    assert par["status"] == "measured" and par["max_abs_logit_err"] is not None
    assert par["within_tolerance"], par


def check_energy(name: str, metric: dict[str, Any]) -> None:
    """Host-independent: measured by a hardware counter (RAPL, NVML) where the host has one, else
    unavailable with a reason naming every default source; never a silent 0 or a bare None."""
    if metric["value"] is None:
        assert metric["source"] == "unavailable", (name, metric)
        reason = metric["reason"]
        assert reason.startswith("no energy source: "), (name, reason)
        for looked_for in SOURCE_NAMES:
            assert f"{looked_for}: " in reason, (name, looked_for, reason)
        return
    assert metric["source"] == "hardware-counter", (name, metric)
    assert metric.get("meter") in ("rapl", "nvml") and "resolved" in metric, (name, metric)
    assert len(metric["samples"]) == 3, (name, metric)  # counted reps only
    # a phase too short for the counter may read 0 J, but must then say it is not resolved
    assert metric["value"] > 0 or metric["resolved"] is False, (name, metric)
    if name == "energy_j" and metric["meter"] == "rapl":
        # the CPU package draws watts throughout a cell's milliseconds; RAPL steps are ~15 uJ
        assert metric["value"] > 0 and min(metric["samples"]) > 0, metric


def test_every_metric_present_with_a_source(tiny_run: dict[str, Any]) -> None:
    for c in tiny_run["cells"]:
        m = c["metrics"]
        assert set(m) == GENERATE_METRICS | REFERENCE_METRICS
        for name, metric in m.items():
            assert metric["source"] in SOURCES, name
            if name in ENERGY_METRICS:
                check_energy(name, metric)
            elif name in REFERENCE_METRICS:
                check_reference(name, metric)
            else:
                assert metric["value"] is not None, (name, metric)
        assert m["pp_tps_counter"]["source"] == "runtime-counter"
        assert m["package_size_bytes"]["value"] > 10 * 2**20  # lib/ outside the package counted
        assert len(m["tg_tps"]["samples"]) == 3  # counted reps only


def check_reference(name: str, metric: dict[str, Any]) -> None:
    """llama-bench's figure (or the ratio to it), or unavailable saying why — never 0."""
    if metric["source"] == "unavailable":
        assert metric["value"] is None and metric["reason"], (name, metric)
        return
    assert metric["value"] > 0, (name, metric)
    if name.endswith("_reference"):
        assert metric["source"] == "reference-tool" and "llama-bench" in metric["command"]
        assert metric["tool_version"] and len(metric["samples"]) == 3


def test_harness_clock_agrees_with_llama_counters(tiny_run: dict[str, Any]) -> None:
    # Consistency of two clocks over the same calls, not a performance goal. Each repetition
    # gives one harness sample and one counter sample of the same calls; on a shared machine a
    # preemption between llama_decode's return and the clock read can skew one repetition of a
    # ~0.2 ms tiny-model decode, so the best-agreeing repetition is judged.
    for c in tiny_run["cells"]:
        m = c["metrics"]
        for phase in ("pp", "tg"):
            pairs = zip(
                m[f"{phase}_tps"]["samples"], m[f"{phase}_tps_counter"]["samples"], strict=True
            )
            best = max(min(h / r, r / h) for h, r in pairs)
            assert best > 0.8, (c["key"], phase, best)


def test_evidence_shows_placement_and_system_info(tiny_run: dict[str, Any]) -> None:
    ev = cell(tiny_run, "f32")["evidence"]
    assert ev["layer_placement"]["CPU"] == 5  # 4 blocks + output layer, all on the CPU
    assert ev["system_info"].startswith("CPU :")
    assert ev["gpu_offload_supported"] is False
    facilities = ev["debug_facilities"]
    assert facilities["log_callback"]["available"] and facilities["log_callback"]["used"]
    assert facilities["perf_counters"]["available"]
    assert ev["log_lines_total"] > 50
    assert any("buffer size" in line for line in ev["log_excerpt"])


def test_bad_files_are_clean_errors_and_a_segfault_does_not_stop_the_run(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    good = prepare_fixture("tiny", "tiny", "f32", None, "gguf").path.read_bytes()
    (tmp_path / "truncated.gguf").write_bytes(good[: len(good) // 3])
    (tmp_path / "garbage.gguf").write_bytes(b"NOTAGGUF" * 512)
    (tmp_path / "empty.gguf").write_bytes(b"")
    # damaged on purpose: expect = "error" (a damaged file expected to run is refused at load)
    fixtures = "".join(
        f"[[fixtures]]\nname = '{n}'\npath = '{tmp_path / n}.gguf'\nexpect = 'error'\n"
        for n in ("truncated", "garbage", "empty")
    )
    body = (
        "[[runtimes]]\nname = 'crasher'\nadapter = 'tests.helpers.adapters:SegfaultAdapter'\n"
        "[[runtimes]]\nname = 'llama_cpp'\n" + fixtures
    )
    run = _run(tmp_path, repo, body)
    assert run["status"] == "complete" and len(run["cells"]) == 6
    for c in run["cells"]:
        if c["runtime"] == "crasher":
            assert c["outcome"]["status"] == "crash" and c["outcome"]["signal"] == "SIGSEGV"
        else:
            assert c["outcome"]["status"] == "error", c["outcome"]
            assert c["outcome"]["phase"] == "load"
            assert c["parity"]["status"] == "unavailable"
            assert c["evidence"]["log_tail"], "llama.cpp's own load log is kept as evidence"


def test_extra_buffer_types_off_is_recorded_and_given_to_llama_bench(
    tiny_run: dict[str, Any],
) -> None:
    c = cell(tiny_run, "q4_0")
    ebt = c["evidence"]["settings"]["extra_buffer_types"]
    assert ebt["requested"] is False and ebt["llama_cpp_default"] is True
    assert ebt["extra_in_use"] == []  # no CPU_REPACK / AMX model buffer when off
    assert c["evidence"]["settings"]["requested"]["extra_buffer_types"] is False
    ref = c["evidence"].get("reference_tool")
    if ref:  # the tools may be unavailable here; then the reference metrics say why
        assert all("--repack 0" in cmd for cmd in ref["commands"]), ref["commands"]
        assert ref["settings"]["repack"] is False


def test_the_default_setting_runs_or_its_crash_is_diagnosed(tmp_path: Path) -> None:
    """Host-aware: with llama.cpp's default (extra buffer types on), each quantized cell is ok,
    or — on a host where a repacking kernel path crashes (AMX on some virtualized Xeons) — a
    crash whose evidence holds llama.cpp's own lines naming that path and whose control run
    (extra buffer types off) is ok."""
    repo = Path(__file__).resolve().parents[2]
    body = (
        "[[runtimes]]\nname = 'llama_cpp'\noptions = { reference_tool = false }\n"
        "[[fixtures]]\nmodel = 'tiny'\ndtypes = ['q8_0', 'q4_0']\n"
    )
    run = _run(tmp_path, repo, body)
    for c in run["cells"]:
        status = c["outcome"]["status"]
        assert status in ("ok", "crash"), c["outcome"]
        if status == "ok":
            ebt = c["evidence"]["settings"]["extra_buffer_types"]
            assert ebt["requested"] is True and "control" not in c
            continue
        log = c["evidence"]["runtime_log_at_crash"]
        named = [ln for ln in log["matching"] if "REPACK" in ln or "AMX" in ln or "repack" in ln]
        assert named, log
        assert c["diagnosed"] is True, c.get("verdict_reason")
        assert c["control"]["outcome"]["status"] == "ok"
        assert c["control"]["options"] == {"extra_buffer_types": False}
        assert "runs with extra_buffer_types=false (control ok" in c["verdict_reason"]
