"""What the grid and evidence say beyond a cell's verdict: error kinds, verdict reasons, leaked
processes, contention, reference ratios."""

from __future__ import annotations

from rtmatrix.report import cellmarks
from rtmatrix.report.views import Notes
from rtmatrix.results.records import CellRecord
from tests.browser.runs import CONTENDED_CORES, LEAKED_PID, XSS, history_run


def _cell(runtime: str, variant: str | None = None, dtype: str = "f32") -> CellRecord:
    return next(
        c
        for c in history_run(2)["cells"]
        if c["runtime"] == runtime
        and c["fixture"].get("variant") == variant
        and c["fixture"]["dtype"] == dtype
    )


def test_expected_against_observed_error_kind() -> None:
    bad = _cell("llama_cpp", "truncated")
    mk = cellmarks.marks(bad, Notes())
    assert mk.kinds == cellmarks.Kinds(("bad-file",), "unclassified", False)
    assert mk.reason.startswith("failed, but not for the expected reason: expected bad-file")
    ok = history_run(0)["cells"][-1]
    assert cellmarks.kinds(ok) == cellmarks.Kinds(("bad-file",), "bad-file", True)
    assert cellmarks.kinds(_cell("llama_cpp")) is None  # expects ok


def test_an_expected_error_that_did_not_happen() -> None:
    bad = _cell("llama_cpp", "truncated")
    bad["outcome"] = {"status": "crash", "message": "SIGSEGV"}
    assert cellmarks.kinds(bad) == cellmarks.Kinds(("bad-file",), "crash (no error)", False)
    bad["expect_kind"] = []
    bad["outcome"] = {"status": "error", "message": "x"}
    assert cellmarks.kinds(bad) == cellmarks.Kinds((), "unclassified", True)  # any error


def test_leaked_processes_are_listed() -> None:
    mk = cellmarks.marks(_cell("tvm_jit"), Notes())
    assert [p["pid"] for p in mk.leaked] == [LEAKED_PID] and mk.leaked_text == "1 leaked process"
    assert XSS in cellmarks.command_line(mk.leaked[0])
    assert mk.reason == f"1 process(es) outlived the cell: {LEAKED_PID}"
    assert cellmarks.marks(_cell("tvm_aot"), Notes()).leaked == ()


def test_contention_badge_names_the_busy_cores() -> None:
    mk = cellmarks.marks(_cell("onnxruntime"), Notes())
    assert mk.contended is not None
    assert mk.contended.text == f"contended · {CONTENDED_CORES:.2f} cores busy"
    assert "not comparable" in mk.contended.title and "threshold 0.25" in mk.contended.title
    assert cellmarks.marks(_cell("tvm_aot"), Notes()).contended is None


def test_reference_ratios_where_the_cell_has_them() -> None:
    ratios = dict(cellmarks.marks(_cell("llama_cpp"), Notes()).ratios)
    assert list(ratios) == ["PP ÷ llama-bench", "TG ÷ llama-bench"]
    assert ratios["PP ÷ llama-bench"].text == "0.86×"
    assert ratios["TG ÷ llama-bench"].text == "0.80×"
    assert "llama-bench -m model.gguf" in ratios["PP ÷ llama-bench"].title
    assert cellmarks.marks(_cell("tvm_aot"), Notes()).ratios == ()  # no reference tool
    older = next(c for c in history_run(0)["cells"] if c["runtime"] == "llama_cpp")
    assert cellmarks.ratios(older, Notes()) == ()  # recorded before the reference existed


def test_an_unavailable_reference_keeps_its_reason() -> None:
    cell = _cell("llama_cpp")
    why = "llama-bench could not be built: cmake not found"
    cell["metrics"]["pp_reference_ratio"] = {
        "value": None,
        "unit": "ratio",
        "source": "unavailable",
        "reason": why,
    }
    notes = Notes()
    value = dict(cellmarks.ratios(cell, notes))["PP ÷ llama-bench"]
    assert value.unavailable and value.title == why and why in notes.reasons
