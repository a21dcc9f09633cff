"""Two runs of the same code, made minutes apart, gated against each other: never a regression
(exit 1) — with one process per cell performance is not judged; with ``--processes 3`` it is,
on process medians, and an A/A pair still passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.cli import main

pytestmark = pytest.mark.integration
pytest.importorskip("onnxruntime")

MATRIX = """
[run]
repetitions = 5
warmup = 1
[params]
threads = 1
n_ctx = 64
prompt_tokens = 16
gen_tokens = 16
[[runtimes]]
name = "onnxruntime"
[[fixtures]]
model = "tiny"
"""


@pytest.mark.parametrize("processes", [1, 3])
def test_an_aa_pair_of_runs_never_exits_1(tmp_path: Path, processes: int) -> None:
    m = tmp_path / "m.toml"
    m.write_text(MATRIX, "utf-8")
    runs = []
    for side in ("a", "b"):
        out = tmp_path / side
        code = main(["run", str(m), "--results", str(out), "--no-report",
                     "--processes", str(processes)])  # fmt: skip
        assert code == 0
        runs.append(str(next(out.glob("*.json"))))
    code = main(["gate", *runs, "-q"])
    assert code in (0, 3), code
    import json

    rec = json.loads(Path(runs[1]).read_text("utf-8"))["cells"][0]
    assert rec.get("processes", 1) == processes
    if processes > 1:
        assert len(rec["metrics"]["tg_tps"]["process_values"]) == processes
