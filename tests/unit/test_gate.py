from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rtmatrix.cli import main
from rtmatrix.outcome import summarize
from rtmatrix.results import load_run, save_run
from rtmatrix.results.diff import diff_runs, parse_checks
from rtmatrix.results.gate import (
    EXIT_NEW_FAILURE,
    EXIT_NOTHING_COMPARABLE,
    EXIT_PASS,
    EXIT_REGRESSION,
    Kind,
    evaluate,
    junit_xml,
    markdown,
)
from rtmatrix.results.gate import render_text as gate_text
from rtmatrix.results.records import MetricRecord, RunRecord
from tests.golden.make_golden import build

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
BASE = str(GOLDEN / "gate-base.json")
CASES = [
    ("gate-aa.json", EXIT_PASS, "PASS: 3 cell(s) compared"),
    ("gate-regression.json", EXIT_REGRESSION, "FAIL: 2 significant regression(s)"),
    ("gate-crash.json", EXIT_NEW_FAILURE, "FAIL: 1 new failure(s)"),
    ("gate-disjoint.json", EXIT_NOTHING_COMPARABLE, "NOTHING COMPARABLE: no shared cells"),
]


@pytest.fixture(scope="module")
def base_run() -> RunRecord:
    return load_run(Path(BASE))


@pytest.fixture
def base(base_run: RunRecord) -> RunRecord:
    return copy.deepcopy(base_run)


def _sampled(samples: list[float]) -> MetricRecord:
    stats = summarize(samples)
    return {"value": stats["median"], "unit": "tokens/s", "source": "harness-clock",
            "samples": samples, "stats": stats}  # fmt: skip


def _save(tmp_path: Path, run: RunRecord, name: str = "cand.json") -> str:
    save_run(run, tmp_path / name)
    return str(tmp_path / name)


def test_golden_files_are_what_make_golden_writes() -> None:
    for name, run in build().items():
        on_disk = json.loads((GOLDEN / name).read_text("utf-8"))
        assert on_disk == json.loads(json.dumps(run)), f"rerun tests/golden/make_golden.py: {name}"


@pytest.mark.parametrize(("name", "code", "headline"), CASES)
def test_gate_exit_codes_on_golden_files(
    base_run: RunRecord, name: str, code: int, headline: str
) -> None:
    result = evaluate(diff_runs(base_run, load_run(GOLDEN / name)))
    assert result.code == code
    assert result.headline.startswith(headline)


@pytest.mark.parametrize(("name", "code", "headline"), CASES)
def test_gate_command_writes_artifacts_then_exits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, code: int, headline: str
) -> None:
    junit, md, js = tmp_path / "out" / "gate.xml", tmp_path / "gate.md", tmp_path / "diff.json"
    argv = ["gate", BASE, str(GOLDEN / name), "--junit", str(junit), "--markdown", str(md)]
    assert main([*argv, "--json", str(js)]) == code
    out = capsys.readouterr().out
    assert f"rtmatrix gate: {headline}" in out and f"(exit {code})" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert suite.get("tests") == "3"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["exit_code"] == str(code)
    assert headline in md.read_text("utf-8")
    assert json.loads(js.read_text("utf-8"))["format"] == "rtmatrix-diff"


def test_junit_failures_and_errors(base_run: RunRecord) -> None:
    diff = diff_runs(base_run, load_run(GOLDEN / "gate-regression.json"))
    root = ET.fromstring(junit_xml(diff, evaluate(diff)))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "2", "0")
    failures = [f.get("message", "") for f in root.iter("failure")]
    assert len(failures) == 2 and all(f.startswith("tg_tps ") for f in failures)
    disjoint = diff_runs(base_run, load_run(GOLDEN / "gate-disjoint.json"))
    suite = ET.fromstring(junit_xml(disjoint, evaluate(disjoint))).find("testsuite")
    assert suite is not None and suite.get("errors") == "3"


def test_markdown_escapes_pipes_in_keys(base_run: RunRecord) -> None:
    diff = diff_runs(base_run, load_run(GOLDEN / "gate-crash.json"))
    text = markdown(diff, evaluate(diff))
    assert text.startswith("## ❌ rtmatrix gate: FAIL: 1 new failure(s)")
    assert "| `!` | `llama_cpp\\|tiny-truncated/f32\\|t2-c256-p16-g24` | PASS → WARN |" in text
    assert "llama-cpp-python 0.3.36 → 0.3.36" in text


def test_one_process_per_side_is_not_judged_on_performance(base_run: RunRecord) -> None:
    """Two runs of one process per cell: a 20 % slower candidate is a diff mark, not a gate
    regression; the gate judges outcomes and verdicts and says why not performance."""
    from tests.unit.test_diff import one_process

    diff = diff_runs(one_process(base_run), one_process(load_run(GOLDEN / "gate-regression.json")))
    result = evaluate(diff)
    assert result.code == EXIT_PASS
    assert any(c.mark.value == "-" for c in diff.cells)  # the diff still shows the move
    note = next(n for n in result.notes if n.startswith("performance not judged in 2 cell(s)"))
    assert "--processes 5" in note
    assert f"note: {note}" in gate_text(result)
    assert f"- {note}" in markdown(diff, result)
    assert not result.findings


def test_pooled_processes_are_judged_on_their_medians(base_run: RunRecord) -> None:
    result = evaluate(diff_runs(base_run, load_run(GOLDEN / "gate-regression.json")))
    assert result.code == EXIT_REGRESSION
    assert not any(n.startswith("performance not judged") for n in result.notes)


def test_noise_alone_never_fails(base: RunRecord) -> None:
    cand = copy.deepcopy(base)
    # 15 % lower median, but the samples overlap: within noise
    base["cells"][0]["metrics"]["tg_tps"] = _sampled([100, 101, 99, 100.5, 99.5, 100.2])
    cand["cells"][0]["metrics"]["tg_tps"] = _sampled([70, 130, 95, 75, 105, 72])
    # 20 % lower, apart, but two samples a side cannot separate a change from noise
    base["cells"][1]["metrics"]["tg_tps"] = _sampled([100, 101])
    cand["cells"][1]["metrics"]["tg_tps"] = _sampled([80, 81])
    result = evaluate(diff_runs(base, cand))
    assert result.code == EXIT_PASS
    assert any("too few samples" in n for n in result.notes)
    assert any(n.startswith("within noise: llama_cpp|tiny/f32") for n in result.notes)


def test_new_failure_wins_over_regression(base_run: RunRecord) -> None:
    cand = load_run(GOLDEN / "gate-regression.json")
    crash = load_run(GOLDEN / "gate-crash.json")
    cand["cells"][2] = crash["cells"][2]
    result = evaluate(diff_runs(base_run, cand))
    assert result.code == EXIT_NEW_FAILURE
    assert [f.kind for f in result.findings] == [Kind.REGRESSION, Kind.REGRESSION, Kind.NEW_FAILURE]


def test_thresholds_from_flags_change_the_verdict(base_run: RunRecord) -> None:
    cand = load_run(GOLDEN / "gate-regression.json")
    for specs, code in (
        (["tg_tps:off"], EXIT_PASS),
        (["tg_tps:30%"], EXIT_PASS),
        (["tg_tps:off", "tg_tps_counter:5%"], EXIT_REGRESSION),
        (["tg_tps:off", "tpot_s:20%"], EXIT_REGRESSION),
    ):
        assert evaluate(diff_runs(base_run, cand, parse_checks(specs))).code == code, specs


def test_machine_difference_is_nothing_comparable(base: RunRecord) -> None:
    cand = copy.deepcopy(base)
    cand["machine"]["arch"] = "aarch64"
    result = evaluate(diff_runs(base, cand))
    assert result.code == EXIT_NOTHING_COMPARABLE
    assert result.headline == "NOTHING COMPARABLE: arch: 'x86_64' -> 'aarch64'"


def test_missing_data(base: RunRecord) -> None:
    cand = copy.deepcopy(base)
    cand["cells"].pop(1)
    result = evaluate(diff_runs(base, cand))
    assert result.code == EXIT_NOTHING_COMPARABLE
    assert result.headline.startswith("MISSING DATA: 1 ")
    cand = copy.deepcopy(base)
    cand["cells"][0]["metrics"]["tg_tps"] = {
        "value": None, "unit": "tokens/s", "source": "unavailable", "reason": "no decode",
    }  # fmt: skip
    result = evaluate(diff_runs(base, cand))
    assert result.code == EXIT_NOTHING_COMPARABLE
    assert result.findings[0].metric == "tg_tps"
    assert "unavailable in the candidate: no decode" in result.findings[0].message


def test_extra_cells_in_the_candidate_pass(base: RunRecord) -> None:
    cand = copy.deepcopy(base)
    extra = copy.deepcopy(cand["cells"][0])
    extra["key"] = extra["key"].replace("t2-", "t1-")
    cand["cells"].append(extra)
    assert evaluate(diff_runs(base, cand)).code == EXIT_PASS


def test_gate_bad_input_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    regr = str(GOLDEN / "gate-regression.json")
    assert main(["gate", BASE, regr, "--fail", "peak_rss:10%", "--fail", "tg_tps:5"]) == 4
    err = capsys.readouterr().err
    assert "unknown metric 'peak_rss'; did you mean peak_rss_os_bytes" in err
    assert "--fail 'tg_tps:5': threshold '5' must be" in err
    assert "valid metric names: " in err
    assert main(["gate", BASE, str(tmp_path / "nope.json")]) == 4
    assert "cannot read result file" in capsys.readouterr().err
    assert main(["gate", BASE, regr, "--alpha", "2"]) == 4
    with pytest.raises(SystemExit) as exc:
        main(["gate", BASE])
    assert exc.value.code == 4


def test_gate_flags_and_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    regr = str(GOLDEN / "gate-regression.json")
    assert main(["gate", BASE, regr, "-q", "--fail", "tg_tps:30%"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rtmatrix gate: PASS") and "machine:" not in out


def test_diff_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    regr = str(GOLDEN / "gate-regression.json")
    assert main(["diff", BASE, regr]) == 0  # a diff reports; only the gate judges
    assert "- tg_tps: " in capsys.readouterr().out
    assert main(["diff", BASE, regr, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["counts"]["-"] == 2
    assert main(["diff", BASE, regr, "--json", "-o", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text("utf-8"))["counts"]["-"] == 2
    assert main(["diff", BASE, regr, "--fail", "tg_tps"]) == 4
    assert main(["diff", BASE, str(tmp_path / "missing.json")]) == 4


def test_checks_from_the_candidate_matrix(
    tmp_path: Path, base_run: RunRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = load_run(GOLDEN / "gate-regression.json")
    cand["matrix"]["gate"] = {"fail": ["tg_tps:30%"]}
    path = _save(tmp_path, cand)
    assert main(["gate", BASE, path, "-q"]) == 0
    assert main(["gate", BASE, path, "-q", "--fail", "tg_tps:5%"]) == 1  # flags come last
    cand["matrix"]["gate"] = {"fail": "tg_tps:30%"}
    assert main(["gate", BASE, _save(tmp_path, cand), "-q"]) == 4
    assert "matrix.gate.fail must be a list" in capsys.readouterr().err


def test_unwritable_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    regr = str(GOLDEN / "gate-regression.json")
    assert main(["gate", BASE, regr, "-q", "--junit", str(blocker / "g.xml")]) == 4
    assert main(["diff", BASE, regr, "-o", str(blocker / "d.txt")]) == 4
    assert capsys.readouterr().err.count("cannot write") == 2
