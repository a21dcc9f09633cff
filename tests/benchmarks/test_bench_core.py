"""rtmatrix's own costs, measured with pytest-benchmark (``nox -s bench``).

Figures are compared as ratios within one run (the machine is shared and noisy): the worker's
spawn against a bare interpreter start, validation and rendering per cell of a large run.
In the ordinary test run (``--benchmark-disable``) each runs once, as a smoke test.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.report import render_report
from rtmatrix.results import validate_run
from rtmatrix.runner import launch

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"
N_CELLS = 500


@pytest.fixture(scope="module")
def large_run() -> dict[str, Any]:
    run: dict[str, Any] = json.loads(GOLDEN.read_text())
    template = run["cells"][0]
    run["cells"] = []
    for i in range(N_CELLS):
        c = copy.deepcopy(template)
        c["key"] = f"{template['key']}#{i}"
        run["cells"].append(c)
    return run


def test_bare_interpreter_spawn(benchmark: Any) -> None:
    """The floor the worker's spawn is compared against."""
    benchmark.pedantic(
        lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), rounds=10
    )


def test_worker_spawn(benchmark: Any, tmp_path: Path) -> None:
    """Spawn + interpreter + rtmatrix.worker import + adapter class lookup + RSS sampling."""

    def once() -> None:
        lau = launch(["--describe", "llama_cpp"], tmp_path, 60, 0.02)
        assert lau.returncode == 0

    benchmark.pedantic(once, rounds=10)


def test_validate_large_run(benchmark: Any, large_run: dict[str, Any]) -> None:
    benchmark(validate_run, large_run)


def test_report_large_run(benchmark: Any, large_run: dict[str, Any], tmp_path: Path) -> None:
    benchmark.pedantic(render_report, args=([large_run], tmp_path), rounds=3)


def test_validate_one_new_cell_of_large_run(benchmark: Any, large_run: dict[str, Any]) -> None:
    """What the runner pays per saved cell: the envelope plus the newest cell."""
    benchmark(validate_run, large_run, "bench", N_CELLS - 1)
