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

from rtmatrix.outcome import summarize
from rtmatrix.report import render_report
from rtmatrix.results import validate_run
from rtmatrix.results.diff import diff_runs
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


def _with_samples(run: dict[str, Any], n_of: Any, scale: float) -> dict[str, Any]:
    """A copy whose repeated metrics have ``n_of(i)`` samples in cell ``i``, TG scaled."""
    out = copy.deepcopy(run)
    for i, cell in enumerate(out["cells"]):
        for name, m in cell["metrics"].items():
            if "samples" not in m:
                continue
            s = scale if name in ("tg_tps", "tg_tps_counter") else 1.0
            samples = [m["value"] * s * (1 + 0.01 * ((j * 7 + i) % 5 - 2)) for j in range(n_of(i))]
            m["samples"], m["stats"] = samples, summarize(samples)
            m["value"] = m["stats"]["median"]
    return out


@pytest.fixture(scope="module")
def large_pair(large_run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Half the cells with 5 samples a side (Mann–Whitney), half with 3 (bootstrap); TG 20 %
    lower in the candidate, so every cell needs its tests run."""
    n_of = lambda i: 5 if i % 2 else 3  # noqa: E731
    return _with_samples(large_run, n_of, 1.0), _with_samples(large_run, n_of, 0.8)


def test_diff_large_run(benchmark: Any, large_pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """``rtmatrix diff`` of two 500-cell runs where every cell regressed (the expensive case)."""
    diff = benchmark.pedantic(diff_runs, args=large_pair, rounds=3)
    assert diff.counts()["-"] == N_CELLS
