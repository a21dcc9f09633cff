from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtmatrix.metrics.contention import ContentionReading
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import QualityPass, ReferenceFigures, WorkerResult
from rtmatrix.runner.record import Addendum, complete, reference_metrics


def _rec() -> dict[str, Any]:
    tps = {"unit": "tokens/s", "source": "harness-clock"}
    return {
        "metrics": {"pp_tps": tps | {"value": 900.0}, "tg_tps": tps | {"value": 90.0}},
        "evidence": {},
        "contended": False,
    }


def _ref() -> WorkerResult:
    evidence = {"tool": "llama-bench", "command": "llama-bench -m f", "tool_version": "v"}
    data = ReferenceFigures([1000.0, 1000.0], [100.0, 100.0], evidence)
    return WorkerResult(status="ok", reference=data)


def _busy(cores: float) -> ContentionReading:
    return ContentionReading(cores, 0.0, cores > 0.25, 0.25, 0.0, 1.0)


def test_reference_figures_and_ratios_carry_source_and_the_reference_runs_load() -> None:
    rec = complete(_rec(), [reference_metrics(_rec(), _ref(), _busy(0.01))])
    m = rec["metrics"]
    assert m["tg_tps_reference"]["source"] == "reference-tool"
    assert m["tg_tps_reference"]["value"] == 100.0 and m["tg_reference_ratio"]["value"] == 0.9
    assert m["pp_reference_ratio"]["contended"] is False
    assert m["tg_reference_ratio"]["reference_host_busy_cores"] == 0.01
    assert rec["evidence"]["reference_tool"]["tool"] == "llama-bench"


def test_a_busy_reference_run_marks_its_ratio_contended() -> None:
    rec = complete(_rec(), [reference_metrics(_rec(), _ref(), _busy(1.2))])
    assert rec["metrics"]["tg_reference_ratio"]["contended"] is True
    assert rec["metrics"]["tg_tps_reference"]["contended"] is True


def test_a_failed_reference_is_unavailable_with_its_reason() -> None:
    failed = WorkerResult(status="unavailable", message="not built")
    rec = complete(_rec(), [reference_metrics(_rec(), failed, None)])
    for key in ("pp_tps_reference", "tg_tps_reference", "pp_reference_ratio"):
        assert rec["metrics"][key]["value"] is None
        assert rec["metrics"][key]["reason"] == "not built"


def test_a_failed_quality_pass_is_unavailable_with_its_reason(tmp_path: Path) -> None:
    from rtmatrix.matrix import parse_matrix
    from rtmatrix.metrics.quality import QualityPlan
    from rtmatrix.names import M
    from rtmatrix.outcome import Status
    from rtmatrix.runner.classify import CellOutcome
    from rtmatrix.runner.record import Finished, quality_for

    cell = parse_matrix(
        "[[runtimes]]\nname = 'llama_cpp'\n[[fixtures]]\nmodel = 'tiny'\n", tmp_path / "m.toml"
    ).cells()[0]
    plan = QualityPlan("m", "quality.txt", "t", [1, 2, 3], 2)
    result = WorkerResult(status="ok", quality=QualityPass(error="RuntimeError: decode failed"))
    ok = CellOutcome(Status.OK, "completed")
    fin = Finished(cell, ok, result=result, job_dir=tmp_path, quality=plan)
    out = quality_for(fin, plan)
    assert out[M.KLD_MEAN].value is None
    assert out[M.KLD_MEAN].reason == "the teacher-forced pass failed: RuntimeError: decode failed"


def _with_quality(tool: dict[str, Any]) -> tuple[dict[str, Any], ReferenceFigures]:
    rec = _rec()
    window = {"n_ctx": 354, "positions": [177, 352], "kld_mean": 0.11, "same_top_pct": 80.0}
    kld = Metric(0.1, "nats", Source.HARNESS_COMPARISON, detail={"anchor_window": window})
    rec["metrics"]["kld_mean"] = kld.to_dict()
    ref = _ref()
    assert ref.reference is not None
    ref.reference.quality = tool
    rec = complete(rec, [reference_metrics(rec, ref, None)])
    return rec["metrics"], ref.reference


def test_the_quality_tools_figures_are_anchored_over_the_same_positions() -> None:
    tool = {"kld_mean": 0.1, "kld_mean_uncertainty": 0.01, "same_top_pct": 81.0,
            "same_top_pct_uncertainty": 3.0,
            "evidence": {"tool": "llama-perplexity", "n_ctx": 354}}  # fmt: skip
    m, _ = _with_quality(tool)
    assert m["kld_reference"]["value"] == 0.1 and m["kld_reference"]["source"] == "reference-tool"
    assert m["kld_reference"]["uncertainty"] == 0.01
    # the harness's 0.11 over positions 177..352 against the tool's 0.1 there (not its 0.1 mean
    # over the whole pass)
    assert m["kld_reference_ratio"]["value"] == pytest.approx(1.1)
    assert m["same_top_reference_diff"]["value"] == pytest.approx(-1.0)
    assert m["kld_reference_ratio"]["positions"] == [177, 352]


def test_a_tool_over_other_positions_or_unavailable_gives_no_ratio() -> None:
    other = {"kld_mean": 0.1, "same_top_pct": 81.0, "evidence": {"n_ctx": 256}}
    m, _ = _with_quality(other)
    assert m["kld_reference"]["value"] == 0.1
    assert m["kld_reference_ratio"]["value"] is None
    assert "same positions" not in str(m["kld_reference_ratio"]["reason"])
    m, _ = _with_quality({"unavailable": "the tool build has no llama-perplexity"})
    for key in ("kld_reference", "same_top_reference", "kld_reference_ratio"):
        assert m[key]["value"] is None and "no llama-perplexity" in str(m[key]["reason"])


def test_the_progress_line_names_a_real_models_kld_and_its_anchor() -> None:
    from rtmatrix.runner.record import _quality_text

    m = {"kld_mean": {"value": 0.0039}, "same_top_pct": {"value": 94.9}}
    assert _quality_text(m) == "  KLD 0.0039 same-top 95%"
    m["kld_reference_ratio"] = {"value": 1.02}
    assert _quality_text(m) == "  KLD 0.0039 (÷ tool 1.02) same-top 95%"
    assert _quality_text({"kld_mean": {"value": None, "reason": "x"}}) == ""


def test_a_tool_kld_below_its_printed_resolution_gives_no_ratio() -> None:
    tool = {"kld_mean": 6e-06, "same_top_pct": 100.0, "evidence": {"n_ctx": 354}}
    m, _ = _with_quality(tool)
    assert m["kld_reference"]["value"] == 6e-06
    assert m["kld_reference_ratio"]["value"] is None
    assert "prints 6 decimals" in m["kld_reference_ratio"]["reason"]
    assert m["same_top_reference_diff"]["value"] == pytest.approx(-20.0)


def test_complete_merges_addenda_once_without_changing_the_record() -> None:
    rec = _rec() | {"verdict_reason": "first"}
    before = {k: (dict(v) if isinstance(v, dict) else v) for k, v in rec.items()}
    out = complete(
        rec,
        [
            Addendum(fields={"attempts": {"n": 2}}, reasons=("second",)),
            Addendum(metrics={"x": {"value": 1}}, evidence={"tool": "t"}, reasons=("third",)),
        ],
    )
    assert rec == before  # the record the decisions read is not written
    assert out["attempts"] == {"n": 2} and out["metrics"]["x"] == {"value": 1}
    assert out["evidence"]["tool"] == "t"
    assert out["verdict_reason"] == "first; second; third"
    assert complete(rec, []) == rec
