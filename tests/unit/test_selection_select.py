"""The selection verdict on golden runs made here (the golden cell, edited): eligible or
excluded with the figure, the Pareto front then the priorities, ties within noise, and over a
history the chapter's rule — a consistent second place beats a noisy one-time winner."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from rtmatrix.results.records import RunRecord
from rtmatrix.selection import (
    Constraints,
    Limit,
    Selection,
    SelectionError,
    constraints_for,
    select,
)
from rtmatrix.selection.select import EXIT_ELIGIBLE, EXIT_NONE, KINDS, RULE, Candidate
from tests.browser.runs import as_run, golden

MIB = 2**20
REAL = "smollm2-135m"
TAG = "t2-c256-p16-g24"
SPREAD = (-1.2, -0.6, 0.0, 0.6, 1.2)  # five repetitions around the median, in units of cv


def _metric(value: Any, unit: str, samples: list[float] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"value": value, "unit": unit, "source": "harness-clock"}
    return out | ({"samples": samples} if samples else {})


def _cell(
    runtime: str,
    dtype: str,
    *,
    tg: float,
    kld: float | None = 0.004,
    rss_mib: float = 500.0,
    pkg_mib: float = 50.0,
    licence: str = "MIT",
    cv: float = 0.01,
    model: str = REAL,
    name: str | None = None,
    version: str = "1.0",
    samples: list[float] | None = None,
) -> dict[str, Any]:
    cell: dict[str, Any] = copy.deepcopy(golden()["cells"][0])
    name = name or model
    cell["runtime"] = runtime
    cell["key"] = f"{runtime}|{name}/{dtype}|{TAG}"
    fx = cell["fixture"]
    fx |= {"name": name, "model": model, "dtype": dtype, "variant": None}
    fx["sha256"] = f"{name}{dtype}".ljust(64, "0")[:64]
    if model == REAL:
        fx["source"] = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    cell["outcome"]["runtime_version"] = version
    m = cell["metrics"]
    m["tg_tps"] = _metric(tg, "tokens/s", samples or [tg * (1 + cv * o) for o in SPREAD])
    m["peak_rss_os_bytes"] = _metric(int(rss_mib * MIB), "bytes")
    m["package_size_bytes"] = _metric(int(pkg_mib * MIB), "bytes")
    m["license"] = _metric(licence, "text")
    if kld is not None:
        m["kld_mean"] = _metric(kld, "nats")
        m["same_top_pct"] = _metric(95.0, "%")
    return cell


def _run(index: int, cells: list[dict[str, Any]]) -> RunRecord:
    run: dict[str, Any] = golden()
    run["run_id"] = f"2026120{index + 1}T000000Z-select{index}"
    run["created_utc"] = f"2026-12-0{index + 1}T00:00:00+00:00"
    run["runtimes"] = {
        c["runtime"]: {
            "adapter": f"tests.helpers.adapters:{c['runtime']}",
            "options": {},
            "distribution": c["runtime"],
            "version": c["outcome"]["runtime_version"],
            "container": "gguf",
        }
        for c in cells
    }
    run["cells"] = cells
    run["matrix"]["n_cells"] = len(cells)
    return as_run(run)


def _default_run() -> RunRecord:
    """The default run's real-model rows, as their figures were (issue 43)."""
    return _run(0, [
        _cell("llama_cpp", "q8_0", tg=111.3, kld=0.0038, rss_mib=508, pkg_mib=51.8),
        _cell("onnxruntime", "int8", tg=20.6, kld=0.0812, rss_mib=695, pkg_mib=76.5),
        _cell("onnxruntime_genai", "int8", tg=36.5, kld=0.0812, rss_mib=727, pkg_mib=36.0),
        _cell("tvm_aot", "f32", tg=40.3, kld=3.6e-11, rss_mib=1026, pkg_mib=297.0,
              licence="Apache-2.0"),
    ])  # fmt: skip


def _model(sel: Selection, model: str = REAL) -> Any:
    return next(m for m in sel.models if m.model == model)


def _labels(cands: tuple[Candidate, ...]) -> list[str]:
    return [c.label for c in cands]


def _by_label(cands: tuple[Candidate, ...], label: str) -> Candidate:
    return next(c for c in cands if c.label == label)


def test_the_defaults_leave_every_real_row_eligible_front_first() -> None:
    sel = select([_default_run()])
    m = _model(sel)
    assert m.kind == KINDS[0] and not m.excluded and sel.exit_code == EXIT_ELIGIBLE
    assert _labels(m.ranked)[0] == "llama_cpp q8_0"
    first = m.ranked[0]
    assert first.place == 1 and first.layer == 1 and not first.tied_with
    assert "on the Pareto front" in first.reasons[1]
    tvm = _by_label(m.ranked, "tvm_aot f32")
    # both KLDs are negligible, so llama.cpp is as good on quality and better on speed, memory
    assert tvm.layer == 2 and "llama_cpp q8_0 is as good on quality" in "; ".join(tvm.reasons)


def test_a_kld_limit_excludes_the_int8_rows_and_says_so_with_their_figure() -> None:
    sel = select([_default_run()], Constraints().with_overrides(["max_kld=0.01"]))
    m = _model(sel)
    assert _labels(m.excluded) == ["onnxruntime int8", "onnxruntime_genai int8"]
    for cand in m.excluded:
        (failure,) = cand.failures
        assert failure.constraint == "max_kld" and failure.figure == pytest.approx(0.0812)
        assert failure.text == "KLD 0.0812 nats > max_kld 0.01 nats"
    assert _labels(m.ranked) == ["llama_cpp q8_0", "tvm_aot f32"]
    text = sel.to_markdown()
    assert "- **onnxruntime int8**: KLD 0.0812 nats > max_kld 0.01 nats." in text
    assert "| `max_kld` | 0.01 nats | flag |" in text


def test_a_package_size_limit_of_100_mib_excludes_the_297_mib_row() -> None:
    sel = select([_default_run()], Constraints.from_table({"max_package_size_mib": 100}))
    (tvm,) = _model(sel).excluded
    assert tvm.label == "tvm_aot f32"
    assert [f.text for f in tvm.failures] == ["package size 297 MiB > max_package_size_mib 100 MiB"]


def test_no_eligible_candidate_for_the_first_model_exits_1() -> None:
    sel = select([_default_run()], Constraints().with_overrides(["min_tg_tps=500"]))
    m = _model(sel)
    assert not m.ranked and len(m.excluded) == 4 and sel.exit_code == EXIT_NONE
    assert "TG 111 tokens/s < min_tg_tps 500 tokens/s" in m.excluded[0].failures[0].text
    assert "No candidate meets the constraints." in sel.to_markdown()


def test_pareto_front_first_then_the_priorities() -> None:
    run = _run(0, [
        _cell("alpha", "q8_0", tg=100, kld=0.004, rss_mib=500),
        _cell("beta", "q4_0", tg=80, kld=0.05, rss_mib=300),
        _cell("gamma", "f32", tg=40, kld=0.0, rss_mib=900),
    ])  # fmt: skip
    m = _model(select([run]))
    assert _labels(m.ranked) == ["alpha q8_0", "beta q4_0", "gamma f32"]
    assert [c.layer for c in m.ranked] == [1, 1, 2]
    assert "ahead of beta q4_0 on quality: KLD 0.004 nats vs 0.05 nats" in m.ranked[0].reasons
    swapped = Constraints().with_overrides(["priorities=memory"])
    assert _labels(_model(select([run], swapped)).ranked)[:2] == ["beta q4_0", "alpha q8_0"]


def test_candidates_within_noise_of_each_other_are_tied() -> None:
    run = _run(0, [
        _cell("alpha", "q8_0", tg=101, samples=[100, 103, 98, 101, 99], rss_mib=500),
        _cell("beta", "q8_0", tg=99, samples=[98, 101, 96, 99, 100], rss_mib=510),
        _cell("gamma", "q8_0", tg=60, rss_mib=500),
    ])  # fmt: skip
    m = _model(select([run]))
    alpha, beta, gamma = m.ranked
    assert (alpha.place, beta.place, gamma.place) == (1, 1, 3)
    assert alpha.tied_with == ("beta q8_0",) and beta.tied_with == ("alpha q8_0",)
    assert not gamma.tied_with
    assert "tied with beta q8_0: within noise on every priority" in alpha.reasons
    assert "=1. **beta q8_0**, because" in select([run]).to_markdown()


def _history(alpha: list[float], beta: list[float], versions: list[str]) -> list[RunRecord]:
    return [
        _run(i, [_cell("alpha", "q8_0", tg=a, version=v), _cell("beta", "q8_0", tg=b)])
        for i, (a, b, v) in enumerate(zip(alpha, beta, versions, strict=True))
    ]


def test_a_consistent_second_place_beats_a_noisy_one_time_winner() -> None:
    runs = _history([100, 101, 99], [95, 60, 130], ["1.0"] * 3)
    newest_alone = _model(select([runs[-1]]))
    assert _labels(newest_alone.ranked) == ["beta q8_0", "alpha q8_0"]  # the one-time winner
    sel = select(list(reversed(runs)))  # any order: the newest decides, the rest is history
    m = _model(sel)
    assert m.runs == 3 and m.run_id == runs[-1]["run_id"]
    alpha, beta = m.ranked
    assert (alpha.label, beta.label) == ("alpha q8_0", "beta q8_0")
    assert alpha.consistency is not None and beta.consistency is not None
    assert alpha.consistency.consistent and alpha.consistency.places == (1, 1, 2)
    assert alpha.consistency.held == (1, 2)
    assert beta.consistency.consistent is False and beta.consistency.places == (2, 2, 1)
    assert beta.consistency.tg_cv is not None and beta.consistency.tg_cv > 0.3
    (reg,) = beta.consistency.regressions
    assert reg.run_id == runs[1]["run_id"] and not reg.explained and "tg_tps -" in reg.text
    why = "; ".join(beta.reasons)
    assert "ranked below the consistent candidates" in why and RULE in why
    assert "unexplained: nothing recorded changed" in why
    assert any(r.startswith("consistent over 3 runs: TG spread ±1.0%") for r in alpha.reasons)
    # without the rule, their TG run medians are within noise of each other: tied
    off = _model(select(runs, Constraints().with_overrides(["consistency_rule=false"])))
    assert [c.place for c in off.ranked] == [1, 1] and off.ranked[0].tied_with == ("beta q8_0",)


def test_a_regression_an_upgrade_explains_keeps_a_candidate_consistent() -> None:
    runs = _history([100, 100, 85], [100, 100, 85], ["1.0", "1.0", "2.0"])
    m = _model(select(runs))
    alpha, beta = m.ranked
    assert alpha.label == "alpha q8_0" and alpha.consistency is not None
    (reg,) = alpha.consistency.regressions
    assert reg.explained and reg.because == "alpha 1.0 → 2.0"
    assert alpha.consistency.consistent
    assert beta.consistency is not None and beta.consistency.consistent is False


def test_real_checkpoints_come_first_and_a_limit_without_figures_does_not_apply() -> None:
    run = _run(0, [
        _cell("alpha", "f32", tg=500, kld=None, model="tiny"),
        _cell("alpha", "q8_0", tg=100),
    ])  # fmt: skip
    sel = select([run])
    assert [(m.model, m.kind) for m in sel.models] == [(REAL, KINDS[0]), ("tiny", KINDS[2])]
    tiny = _model(sel, "tiny")
    assert tiny.ranked and "max_kld does not apply: no candidate has a KLD figure" in tiny.notes


def _failing(runtime: str, variant: str, status: str, verdict: str) -> dict[str, Any]:
    cell = _cell(runtime, "f32", tg=1.0, kld=None, model="tiny", name=f"tiny-{variant}")
    cell["fixture"]["variant"] = variant
    cell["expect"] = "error"
    cell["outcome"] |= {"status": status, "message": f"{variant}: {status}"}
    cell["verdict"] = verdict
    return cell


def test_a_row_whose_damaged_file_fails_silently_is_excluded() -> None:
    run = _run(0, [
        _cell("alpha", "q8_0", tg=100), _cell("beta", "q8_0", tg=150),
        _failing("alpha", "nan-weights", "wrong-output", "FAIL"),
        _failing("beta", "truncated", "ok", "FAIL"),
    ])  # fmt: skip
    m = _model(select([run]))
    assert _labels(m.ranked) == ["alpha q8_0"]
    (beta,) = m.excluded
    assert beta.failures[0].constraint == "must_behave"
    assert "tiny-truncated/f32 t2-c256-p16-g24 ends ok (verdict FAIL)" in beta.failures[0].text
    assert beta.failures[0].text.endswith(": truncated: ok [file]")  # the class it is required by
    assert any("tiny-nan-weights/f32" in n and "not a hard limit" in n for n in m.notes)
    strict = Constraints().with_overrides(["failing_fixtures_visible=true"])
    assert not _model(select([run], strict)).ranked


def test_a_limit_at_another_fixture_reads_the_rows_cell_there() -> None:
    long_a = _cell("alpha", "q8_0", tg=60, kld=None, model="tiny", name="tiny-long")
    long_b = _cell("beta", "q8_0", tg=30, kld=None, model="tiny", name="tiny-long")
    run = _run(0, [_cell("alpha", "q8_0", tg=100), _cell("beta", "q8_0", tg=150), long_a, long_b])
    sel = select([run], Constraints().with_overrides(["min_tg_tps=50@tiny-long|*p16*"]))
    (beta,) = _model(sel).excluded
    assert beta.failures[0].text == (
        f"TG at tiny-long/q8_0 {TAG} 30 tokens/s < min_tg_tps 50 tokens/s"
    )
    with pytest.raises(SelectionError, match="`at` matches no cell of the runs; valid: "):
        select([run], Constraints().with_overrides(["min_tg_tps=50@tiny-short"]))


def test_a_crash_its_control_setting_rescued_is_a_candidate_with_that_setting() -> None:
    crashed = _cell("gamma", "q8_0", tg=1.0)
    figures = copy.deepcopy(crashed["metrics"]) | {"tg_tps": _metric(90.0, "tokens/s")}
    crashed["outcome"] |= {"status": "crash", "signal": "SIGSEGV", "message": "killed"}
    crashed["verdict"] = "FAIL"
    crashed["control"] = {"options": {"extra_buffer_types": False}, "outcome": {"status": "ok"},
                          "verdict": "PASS", "metrics": figures, "diagnosed": True}  # fmt: skip
    broken = _cell("delta", "q8_0", tg=1.0)
    broken["outcome"] |= {"status": "wrong-output", "message": "parity broken"}
    broken["verdict"] = "FAIL"
    m = _model(select([_run(0, [crashed, broken])]))
    (gamma,) = m.ranked
    assert gamma.label == "gamma q8_0 (extra_buffer_types=false)"
    assert gamma.figures["tg_tps"].value == 90.0
    assert any("runs with extra_buffer_types=false" in r for r in gamma.reasons)
    (delta,) = m.excluded
    assert delta.failures[0].text == "ends wrong-output (verdict FAIL): parity broken"


def test_a_licence_outside_the_allowed_ones_excludes_the_row() -> None:
    run = _run(0, [_cell("alpha", "q8_0", tg=100, licence="GPL-3.0-only"),
                   _cell("beta", "q8_0", tg=90, licence="MIT License")])  # fmt: skip
    m = _model(select([run]))
    assert _labels(m.ranked) == ["beta q8_0"]
    said = m.excluded[0].failures[0].text
    assert said.startswith("licence 'GPL-3.0-only' is not among the allowed: MIT, ")


def test_the_verdict_as_json_and_markdown() -> None:
    sel = select([_default_run()])
    doc = sel.to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["format"] == "rtmatrix-select" and doc["exit_code"] == 0
    first = doc["models"][0]["ranked"][0]
    assert first["label"] == "llama_cpp q8_0" and first["place"] == 1
    assert first["figures"]["kld_mean"]["value"] == 0.0038
    assert {ln["key"] for ln in doc["constraint_lines"]} >= {"max_kld", "licenses"}
    text = sel.to_markdown()
    assert text.startswith("## Selection\n\nConstraints: peak memory ≤ 2048 MiB; ")
    assert "\n\nFor **smollm2-135m** (real checkpoint) on " in text
    assert "under these constraints:\n\n1. **llama_cpp q8_0**, because KLD 0.0038 nats" in text
    assert "| `max_kld` | 0.1 nats | default |" in text


def test_constraints_come_from_the_newest_runs_selection_table_then_the_flags() -> None:
    old = _default_run()
    new: dict[str, Any] = copy.deepcopy(dict(old))
    new["run_id"], new["created_utc"] = "newer", "2026-12-09T00:00:00+00:00"
    new["matrix"]["selection"] = {"max_kld": 0.01, "priorities": ["tg"]}
    c = constraints_for([as_run(new), old], ["priorities=memory"])
    assert c.max_kld == Limit(0.01) and c.priorities[0] == "memory"
    assert c.origin == {"max_kld": "matrix", "priorities": "flag"}
    assert constraints_for([old]) == Constraints()
