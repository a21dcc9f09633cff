from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rtmatrix.outcome import summarize
from rtmatrix.results import load_run
from rtmatrix.results.diff import (
    KNOWN_METRICS,
    Check,
    CheckError,
    Direction,
    Mark,
    compare_cells,
    compare_metric,
    default_checks,
    diff_runs,
    direction_of,
    parse_check,
    parse_checks,
    render_text,
)
from rtmatrix.results.records import CellRecord, MetricRecord, RunRecord
from rtmatrix.results.stats import Method

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


@pytest.fixture(scope="module")
def base_run() -> RunRecord:
    return load_run(GOLDEN / "gate-base.json")


@pytest.fixture
def base(base_run: RunRecord) -> RunRecord:
    return copy.deepcopy(base_run)


def sampled(samples: list[float], unit: str = "tokens/s") -> MetricRecord:
    stats = summarize(samples)
    return {"value": stats["median"], "unit": unit, "source": "harness-clock",
            "samples": samples, "stats": stats}  # fmt: skip


def single(value: float, unit: str = "bytes") -> MetricRecord:
    return {"value": value, "unit": unit, "source": "os-accounting"}


def number(metric: MetricRecord) -> float:
    """A measured metric's value (a number in the golden files)."""
    value = metric["value"]
    assert isinstance(value, int | float)
    return value


TG = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
TG_SLOW = [80.0, 81.0, 79.0, 80.5, 79.5, 80.2]
TG_FAST = [120.0, 121.0, 119.0, 120.5, 119.5, 120.2]
TG_WIDE = [70.0, 130.0, 95.0, 75.0, 105.0, 72.0]  # median 85: 15 % lower, but within noise


# ----------------------------------------------------------------------------- metrics


@pytest.mark.parametrize(
    ("name", "b", "c", "mark"),
    [
        ("tg_tps", sampled(TG), sampled(TG_SLOW), Mark.WORSE),
        ("tg_tps", sampled(TG), sampled(TG_FAST), Mark.BETTER),
        ("tg_tps", sampled(TG), sampled([x * 1.03 for x in TG]), Mark.SAME),
        ("tg_tps", sampled(TG), sampled(TG_WIDE), Mark.NOISE),
        ("tg_tps", sampled(TG[:2]), sampled(TG_SLOW[:2]), Mark.NOISE),  # too few samples
        ("tg_tps", sampled(TG[:3]), sampled(TG_SLOW[:3]), Mark.WORSE),  # bootstrap
        ("tpot_s", sampled([1.0, 1.01, 0.99, 1.0, 1.02], "s"), sampled([1.3] * 5, "s"), Mark.WORSE),
        ("peak_rss_os_bytes", single(100e6), single(120e6), Mark.WORSE),  # threshold only
        ("peak_rss_os_bytes", single(100e6), single(105e6), Mark.SAME),
        ("package_size_bytes", single(50e6), single(30e6), Mark.BETTER),
        ("custom_tps", single(10.0), single(5.0), Mark.WORSE),  # direction from the suffix
    ],
)
def test_metric_marks(name: str, b: MetricRecord, c: MetricRecord, mark: Mark) -> None:
    assert compare_metric(name, b, c, default_checks().get(name)).mark is mark


def test_metric_detail_fields() -> None:
    m = compare_metric("tg_tps", sampled(TG), sampled(TG_SLOW), Check("tg_tps", 0.05))
    assert m.test is Method.MANN_WHITNEY and m.p_value is not None and m.p_value < 0.01
    assert m.change == pytest.approx(-0.2, abs=0.01)
    assert (m.n_base, m.n_candidate, m.threshold, m.gate) == (6, 6, 0.05, True)
    few = compare_metric("tg_tps", sampled(TG[:2]), sampled(TG_SLOW[:2]))
    assert few.test is Method.TOO_FEW and "too few samples (2 vs 2)" in few.note
    boot = compare_metric("tg_tps", sampled(TG[:3]), sampled(TG_SLOW[:3]))
    assert boot.test is Method.BOOTSTRAP and boot.ci is not None and boot.ci[1] < 1.0


def test_threshold_is_strictly_exceeded() -> None:
    m = compare_metric("peak_rss_os_bytes", single(100.0), single(110.0), Check("x", 0.10))
    assert m.mark is Mark.SAME
    m = compare_metric("peak_rss_os_bytes", single(100.0), single(110.5), Check("x", 0.10))
    assert m.mark is Mark.WORSE


def test_missing_and_unavailable_metrics() -> None:
    gone: MetricRecord = {
        "value": None,
        "unit": "s",
        "source": "unavailable",
        "reason": "no counter",
    }
    m = compare_metric("ttft_s", sampled(TG, "s"), gone)
    assert m.mark is Mark.NOT_COMPARABLE and m.missing_in == "candidate"
    assert "no counter" in m.note
    assert compare_metric("ttft_s", None, sampled(TG, "s")).missing_in == "base"
    assert compare_metric("energy_j", gone, gone).mark is Mark.SAME


def test_text_metric_change_is_reported_not_judged() -> None:
    b: MetricRecord = {"value": "MIT", "unit": "text", "source": "package-metadata"}
    m = compare_metric("license", b, b | {"value": "GPL-3.0"})
    assert m.mark is Mark.NOISE and "'MIT' -> 'GPL-3.0'" in m.note


def test_change_from_zero_is_infinite_but_serializable() -> None:
    m = compare_metric("peak_rss_os_bytes", single(0), single(10))
    assert m.mark is Mark.WORSE
    assert m.to_dict()["change"] is None
    json.dumps(m.to_dict(), allow_nan=False)


def test_directions() -> None:
    assert direction_of("tg_tps") is Direction.HIGHER
    assert direction_of("peak_rss_os_bytes") is Direction.LOWER
    assert direction_of("cold_start_total_s") is Direction.LOWER
    assert direction_of("new_thing_tps") is Direction.HIGHER
    assert direction_of("license") is None


# ----------------------------------------------------------------------------- cells


def _cell(run: RunRecord, i: int) -> CellRecord:
    return copy.deepcopy(run["cells"][i])


def _with_outcome(cell: CellRecord, verdict: str, status: str) -> CellRecord:
    return cell | {"verdict": verdict, "outcome": cell["outcome"] | {"status": status}}


@pytest.mark.parametrize(
    ("before", "after", "mark"),
    [
        (("PASS", "ok"), ("FAIL", "crash"), Mark.NEW_FAILURE),
        (("PASS", "error"), ("WARN", "crash"), Mark.NEW_FAILURE),
        (("WARN", "crash"), ("FAIL", "hang"), Mark.NEW_FAILURE),
        (("FAIL", "error"), ("FAIL", "crash"), Mark.NEW_FAILURE),  # error -> crash, same verdict
        (("FAIL", "fallback"), ("FAIL", "error"), Mark.NEW_FAILURE),
        (("FAIL", "crash"), ("PASS", "ok"), Mark.FIXED),
        (("WARN", "crash"), ("PASS", "error"), Mark.FIXED),
        (("FAIL", "crash"), ("FAIL", "error"), Mark.FIXED),
        (("FAIL", "crash"), ("FAIL", "hang"), Mark.SAME),  # as bad as before
    ],
)
def test_outcome_changes(
    base: RunRecord, before: tuple[str, str], after: tuple[str, str], mark: Mark
) -> None:
    b = _with_outcome(_cell(base, 2), *before)
    c = _with_outcome(_cell(base, 2), *after)
    diff = compare_cells(b, c, default_checks())
    assert diff.mark is mark
    if mark is not Mark.SAME:
        assert f"{before[1]} -> {after[1]}" in diff.reasons[0]


def test_not_comparable_reasons(base: RunRecord) -> None:
    b = _cell(base, 0)
    c = _cell(base, 0)
    c["fixture"]["sha256"] = "0" * 64
    c["params"]["threads"] = 1
    diff = compare_cells(b, c, default_checks(), machine=["cpu_model: 'A' -> 'B'"])
    assert diff.mark is Mark.NOT_COMPARABLE
    assert diff.reasons[0] == "machine differs: cpu_model: 'A' -> 'B'"
    assert diff.reasons[1].startswith("fixture content differs (sha256 ded9633b7eec -> 000000")
    assert diff.reasons[2] == "params differ: threads 2 -> 1"
    assert diff.metrics == []


def test_unavailable_side_is_not_comparable(base: RunRecord) -> None:
    c = _with_outcome(_cell(base, 0), "unavailable", "unavailable")
    c["outcome"]["message"] = "pip install 'rtmatrix[llama-cpp]'"
    diff = compare_cells(_cell(base, 0), c, default_checks())
    assert diff.mark is Mark.NOT_COMPARABLE
    assert diff.reasons == ["unavailable in the candidate: pip install 'rtmatrix[llama-cpp]'"]


def test_unchecked_metric_does_not_set_the_cell_mark(base: RunRecord) -> None:
    b, c = _cell(base, 0), _cell(base, 0)
    c["metrics"]["cold_start_total_s"]["value"] = number(c["metrics"]["cold_start_total_s"]) * 3
    diff = compare_cells(b, c, default_checks())
    assert diff.mark is Mark.SAME
    cold = next(m for m in diff.metrics if m.name == "cold_start_total_s")
    assert cold.mark is Mark.WORSE and not cold.gate
    checks = parse_checks(["cold_start_total_s:50%"])
    assert compare_cells(b, c, checks).mark is Mark.WORSE


def test_worse_beats_better_in_the_cell_mark(base: RunRecord) -> None:
    b, c = _cell(base, 0), _cell(base, 0)
    b["metrics"]["tg_tps"] = sampled(TG)
    c["metrics"]["tg_tps"] = sampled(TG_SLOW)
    b["metrics"]["pp_tps"] = sampled(TG)
    c["metrics"]["pp_tps"] = sampled(TG_FAST)
    assert compare_cells(b, c, default_checks()).mark is Mark.WORSE


# ----------------------------------------------------------------------------- runs


def test_aa_golden_is_all_unchanged(base_run: RunRecord) -> None:
    diff = diff_runs(base_run, load_run(GOLDEN / "gate-aa.json"))
    assert [c.mark for c in diff.cells] == [Mark.SAME] * 3
    assert diff.counts()["="] == 3 and not diff.only_base and not diff.only_candidate


def test_identical_runs_have_no_change(base_run: RunRecord) -> None:
    diff = diff_runs(base_run, base_run)
    assert all(m.change in (0.0, None) for c in diff.cells for m in c.metrics)


def test_regression_golden(base_run: RunRecord) -> None:
    diff = diff_runs(base_run, load_run(GOLDEN / "gate-regression.json"))
    assert [c.mark for c in diff.cells] == [Mark.WORSE, Mark.WORSE, Mark.SAME]
    tg = next(m for m in diff.cells[0].metrics if m.name == "tg_tps")
    assert tg.mark is Mark.WORSE and tg.change is not None and -0.25 < tg.change < -0.15


def test_machine_difference_marks_every_cell(base: RunRecord) -> None:
    cand = copy.deepcopy(base)
    cand["machine"]["cpu_model"] = "Intel Xeon"
    cand["machine"]["cores_logical"] = 8
    diff = diff_runs(base, cand)
    assert diff.machine_differences == [
        "cpu_model: 'AMD EPYC' -> 'Intel Xeon'",
        "cores_logical: 2 -> 8",
    ]
    assert {c.mark for c in diff.cells} == {Mark.NOT_COMPARABLE}
    assert not diff.comparable


def test_cells_on_one_side(base: RunRecord) -> None:
    cand = copy.deepcopy(base)
    dropped = cand["cells"].pop(1)
    extra = copy.deepcopy(cand["cells"][0])
    extra["key"] = extra["key"].replace("t2-", "t4-")
    cand["cells"].append(extra)
    diff = diff_runs(base, cand)
    assert [o["key"] for o in diff.only_base] == [dropped["key"]]
    assert [o["key"] for o in diff.only_candidate] == [extra["key"]]
    assert len(diff.cells) == 2


def test_json_shape(base_run: RunRecord) -> None:
    cand = load_run(GOLDEN / "gate-regression.json")
    cand["runtimes"]["llama_cpp"]["version"] = "0.3.37"
    data = json.loads(json.dumps(diff_runs(base_run, cand).to_dict(), allow_nan=False))
    assert data["format"] == "rtmatrix-diff" and data["version"] == 1
    assert set(data) == {
        "format", "version", "alpha", "base", "candidate", "machine_differences",
        "runtime_versions", "checks", "counts", "notes", "cells", "only_base", "only_candidate",
    }  # fmt: skip
    assert data["runtime_versions"]["llama_cpp"] == {
        "distribution": "llama-cpp-python",
        "base": "0.3.36",
        "candidate": "0.3.37",
    }
    assert data["counts"] == {"!": 0, "*": 0, "x": 0, "-": 2, "+": 0, "~": 0, "=": 1}
    cell = data["cells"][0]
    assert set(cell) == {
        "key", "runtime", "mark", "reasons", "processes", "replication", "base", "candidate",
        "metrics", "stack",
    }  # fmt: skip
    tg = next(m for m in cell["metrics"] if m["name"] == "tg_tps")
    # 6 process medians a side: Mann-Whitney on them (the gate needs >= 5 processes a side)
    assert tg["mark"] == "-" and tg["test"] == "mann-whitney" and tg["direction"] == "higher"
    assert cell["processes"] == {"base": 6, "candidate": 6}
    assert {c["metric"] for c in data["checks"] if c["gate"]} == {
        "pp_tps", "tg_tps", "peak_rss_os_bytes", "package_size_bytes",
    }  # fmt: skip


def test_text_output(base_run: RunRecord) -> None:
    text = render_text(diff_runs(base_run, load_run(GOLDEN / "gate-regression.json")))
    assert "- llama_cpp|tiny/f32|t2-c256-p16-g24  [PASS]" in text
    assert "    - tg_tps: 4,688 tok/s -> 3,846 tok/s -18.0%" in text
    assert "= llama_cpp|tiny-truncated/f32|t2-c256-p16-g24  [PASS]" in text
    assert "machine: same (AMD EPYC, 2 cores, x86_64)" in text
    assert "3 paired cells: 2 -, 1 =" in text
    assert "pp_tps_counter" not in text  # unchanged metrics are listed only with verbose
    assert "pp_tps_counter" in render_text(diff_runs(base_run, base_run), verbose=True)


def one_process(run: RunRecord) -> RunRecord:
    """The run as ``rtmatrix run`` writes it without ``--processes``: one worker per cell."""
    out = copy.deepcopy(run)
    for c in out["cells"]:
        c.pop("processes", None)
        for m in c["metrics"].values():
            m.pop("process_values", None)
    return out


def test_one_process_per_side_is_said_without_changing_marks(base_run: RunRecord) -> None:
    diff = diff_runs(one_process(base_run), one_process(load_run(GOLDEN / "gate-regression.json")))
    assert [c.mark for c in diff.cells] == [Mark.WORSE, Mark.WORSE, Mark.SAME]
    first, _, error = diff.cells
    assert first.processes == (1, 1)
    assert first.replication == (
        "samples from one process per side: within-process repetitions only; "
        "between-process variation not seen"
    )
    assert error.replication is None  # a clean error: no repeated samples were compared
    (note,) = diff.notes()
    assert note.startswith("2 of 3 paired cell(s): samples from one process per side")
    assert f"note: {note}" in render_text(diff)
    data = diff.to_dict()
    assert data["notes"] == [note]
    assert data["cells"][0]["processes"] == {"base": 1, "candidate": 1}
    tg = next(m for m in first.metrics if m.name == "tg_tps")
    assert tg.note.endswith("; samples from one process per side")


def test_pooled_processes_are_not_flagged(base: RunRecord) -> None:
    cand = load_run(GOLDEN / "gate-regression.json")
    for cell in [*base["cells"], *cand["cells"]]:
        cell["processes"] = 8
    diff = diff_runs(base, cand)
    assert [c.mark for c in diff.cells] == [Mark.WORSE, Mark.WORSE, Mark.SAME]
    assert diff.notes() == [] and all(c.replication is None for c in diff.cells)
    cand["cells"][0]["processes"] = 1
    one = diff_runs(base, cand).cells[0]
    assert one.replication is not None and "one process in the candidate" in one.replication


def test_too_few_samples_note(base: RunRecord) -> None:
    cand = copy.deepcopy(base)
    base["cells"][0]["metrics"]["tg_tps"] = sampled(TG[:2])
    cand["cells"][0]["metrics"]["tg_tps"] = sampled(TG_SLOW[:2])
    diff = diff_runs(base, cand)
    assert diff.cells[0].mark is Mark.NOISE
    assert "too few samples to test" in render_text(diff)


# ----------------------------------------------------------------------------- checks


def test_parse_check_forms() -> None:
    valid = set(KNOWN_METRICS)
    assert parse_check("tg_tps:5%", valid) == Check("tg_tps", 0.05, gate=True)
    assert parse_check(" peak_rss_os_bytes : 12.5% ", valid) == Check(
        "peak_rss_os_bytes", 0.125, gate=True
    )
    assert parse_check("tg_tps:off", valid) == Check("tg_tps", 0.10, gate=False)
    assert parse_check("cold_start_total_s:0%", valid).threshold == 0.0


def test_parse_checks_overrides_defaults_and_adds() -> None:
    checks = parse_checks(["tg_tps:5%", "pp_tps:off", "ttft_s:15%", "x_tps:20%"], ["x_tps"])
    assert checks["tg_tps"] == Check("tg_tps", 0.05)
    assert not checks["pp_tps"].gate
    assert checks["ttft_s"] == Check("ttft_s", 0.15)
    assert checks["x_tps"] == Check("x_tps", 0.20)
    assert checks["peak_rss_os_bytes"] == Check("peak_rss_os_bytes", 0.10)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tg_tps", "--fail 'tg_tps': expected METRIC:PERCENT, e.g. tg_tps:5%"),
        ("tg_tps:5", "threshold '5' must be a non-negative percentage like 5% (or off)"),
        ("tg_tps:-5%", "must be a non-negative percentage"),
        ("tg_tps:fast%", "must be a non-negative percentage"),
        (
            "peak_rss:10%",
            "unknown metric 'peak_rss'; did you mean peak_rss_os_bytes, peak_rss_sampled_bytes?",
        ),
        ("tgtps:5%", "unknown metric 'tgtps'; did you mean tg_tps"),
        ("license:5%", "'license' has no known direction"),
    ],
)
def test_parse_check_errors(spec: str, message: str) -> None:
    with pytest.raises(CheckError, match="valid metric names: cold_start_first_token_s") as exc:
        parse_checks([spec], ["license"])
    assert message in str(exc.value)


def test_parse_checks_reports_every_bad_spec_at_once() -> None:
    with pytest.raises(CheckError) as exc:
        parse_checks(["tg_tps:5", "nope:1%", "pp_tps:5%"])
    lines = str(exc.value).splitlines()
    assert lines[0].startswith("--fail 'tg_tps:5'")
    assert lines[1].startswith("--fail 'nope:1%': unknown metric 'nope'")
    assert lines[2].startswith("valid metric names: ")
    assert "tg_tps" in lines[2] and "package_size_bytes" in lines[2]


def test_metric_without_a_direction_is_reported_not_judged() -> None:
    m = compare_metric("widgets", single(1.0, "n"), single(2.0, "n"))
    assert m.mark is Mark.NOISE and m.direction is None
    assert m.note.startswith("changed, direction unknown")


def test_a_contended_side_is_not_comparable(base: RunRecord) -> None:
    b, c = _cell(base, 0), _cell(base, 0)
    c["metrics"]["tg_tps"] = sampled([v * 0.5 for v in c["metrics"]["tg_tps"]["samples"]])
    c["contended"] = True
    c["metrics"]["host_busy_cores"] = {"value": 1.2, "unit": "cores", "source": "os-accounting"}
    diff = compare_cells(b, c, default_checks())
    assert diff.mark is Mark.NOT_COMPARABLE and diff.metrics == []
    assert diff.reasons == [
        "contended: candidate had 1.20 cores busy outside the cell during its run"
    ]
    c["contended"] = False
    assert compare_cells(b, c, default_checks()).mark is Mark.WORSE


def test_figures_of_cells_not_ok_on_both_sides_are_not_judged(base: RunRecord) -> None:
    b = _with_outcome(_cell(base, 0), "WARN", "oom-killed")
    c = _with_outcome(_cell(base, 0), "WARN", "oom-killed")
    c["metrics"]["peak_rss_os_bytes"] = single(10 * number(b["metrics"]["peak_rss_os_bytes"]))
    diff = compare_cells(b, c, default_checks())
    assert diff.mark is Mark.SAME and diff.metrics == []
    assert "judged on ok cells" in diff.reasons[0]


def test_a_change_of_error_kind_is_a_transition(base: RunRecord) -> None:
    def failed(kind: str, verdict: str) -> CellRecord:
        cell = _with_outcome(_cell(base, 2), verdict, "error")
        cell["outcome"]["error_kind"] = kind
        return cell

    diff = compare_cells(failed("out-of-memory", "WARN"), failed("unclassified", "WARN"), {})
    assert diff.mark is Mark.NEW_FAILURE
    assert diff.reasons == ["error kind out-of-memory -> unclassified (verdict WARN on both sides)"]
    assert diff.candidate.to_dict()["kind"] == "unclassified"
    accepted = compare_cells(failed("unknown-arch", "PASS"), failed("unsupported-op", "PASS"), {})
    assert accepted.mark is Mark.SAME and "both accepted" in accepted.reasons[0]


def test_a_host_lost_side_is_not_comparable(base: RunRecord) -> None:
    c = _with_outcome(_cell(base, 0), "FAIL", "host-lost")
    c["outcome"]["message"] = "host lost mid-cell: worker tls://10.0.0.5:4000 (rk3588)"
    diff = compare_cells(_cell(base, 0), c, default_checks())
    assert diff.mark is Mark.NOT_COMPARABLE  # an infrastructure fault, not a new failure
    assert diff.reasons == ["host lost in the candidate: " + c["outcome"]["message"]]


def test_fleet_cells_are_compared_on_their_own_hosts(base: RunRecord) -> None:
    """Cells that ran on fleet hosts carry host.machine: a pair is judged on those."""
    cand = copy.deepcopy(base)
    cand["machine"]["cpu_model"] = "the coordinator's CPU"  # not where the cells ran
    for b_cell, c_cell in zip(base["cells"], cand["cells"], strict=True):
        b_cell["host"] = {"machine": dict(base["machine"])}
        c_cell["host"] = {"machine": dict(base["machine"])}
    cand["cells"][0]["host"]["machine"]["arch"] = "aarch64"
    diff = diff_runs(base, cand)
    marks = [c.mark for c in diff.cells]
    assert (
        marks[0] is Mark.NOT_COMPARABLE
        and "arch: 'x86_64' -> 'aarch64'" in (diff.cells[0].reasons[0])
    )
    assert Mark.NOT_COMPARABLE not in marks[1:]
