from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.cli import main


def test_help_lists_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("run", "report", "validate", "fixtures"):
        assert cmd in out


def test_bad_matrix_is_exit_2_with_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text("[[runtimes]]\nname = 'llamacpp'\n[[fixtures]]\nmodel = 'tiny'\n")
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "m.toml: runtimes[0].name: unknown runtime 'llamacpp'" in err
    assert "Traceback" not in err


def test_bad_result_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("{}")
    assert main(["report", str(bad), "-o", str(tmp_path)]) == 2
    assert "no integer schema_version" in capsys.readouterr().err


def test_validate_and_report_golden(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden = str(Path(__file__).resolve().parent.parent / "golden" / "run-v1.json")
    assert main(["validate", golden]) == 0
    assert main(["report", golden, "-o", str(tmp_path)]) == 0
    assert (tmp_path / "index.html").exists()
    assert main(["validate", "--schema"]) == 0
    assert capsys.readouterr().out.strip().endswith("schema.json")


def test_report_over_a_results_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rtmatrix.results import save_run
    from tests.browser.runs import history_runs, schema_valid

    results = tmp_path / "results"
    results.mkdir()
    for run in history_runs():
        save_run(schema_valid(run), results / f"{run['run_id']}.json")
    (results / "diff.json").write_text('{"format": "rtmatrix-diff"}')
    out = tmp_path / "reports"
    assert main(["report", str(results), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and "diff.json" in err  # not a run record: said, not fatal
    html = (out / "index.html").read_text("utf-8")
    assert html.count('<article class="history"') == 5
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty), "-o", str(out)]) == 2
    assert "no run records in" in capsys.readouterr().err


def test_fixtures_list_and_build(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RTMATRIX_CACHE_DIR", str(tmp_path))
    assert main(["fixtures", "list"]) == 0
    assert main(["fixtures", "build", "--model", "tiny", "--dtype", "q4_0"]) == 0
    assert main(["fixtures", "build", "--model", "tiny", "--dtype", "q4_0"]) == 0
    out = capsys.readouterr().out
    assert "built in" in out and "(cached)" in out
    assert main(["fixtures", "build", "--model", "huge"]) == 2
