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


def test_merge_writes_one_run_keyed_by_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    golden = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"
    out = tmp_path / "merged.json"
    assert main(["merge", f"pc={golden}", f"board={golden}", "-o", str(out)]) == 0
    assert "2 cells from 2 runs" in capsys.readouterr().out
    keys = [c["key"] for c in json.loads(out.read_text())["cells"]]
    assert keys == [
        "llama_cpp@pc|tiny/f32|t2-c256-p16-g24",
        "llama_cpp@board|tiny/f32|t2-c256-p16-g24",
    ]
    assert main(["merge", str(golden), str(golden), "-o", str(out)]) == 2
    assert "is in" in capsys.readouterr().err


def test_run_with_targets_needs_a_cluster_or_a_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = tmp_path / "m.toml"
    m.write_text("[[targets]]\nlabel = 'board'\n[[runtimes]]\nname = 'llama_cpp'\n"
                 "[[fixtures]]\nmodel = 'tiny'\n")  # fmt: skip
    assert main(["run", str(m)]) == 2
    assert "--cluster ADDRESS" in capsys.readouterr().err
    assert main(["run", str(m), "--target", "laptop"]) == 2
    assert "valid: board" in capsys.readouterr().err
    assert main(["run", str(m), "--cluster", "tcp://10.1.2.3:8786"]) == 2
    assert "TLS is required" in capsys.readouterr().err
