"""Golden runs for the selection tests (the golden cell, edited): real-model rows with the
figures the default run had (issue 43), histories, failing fixtures."""

from __future__ import annotations

import copy
from typing import Any

from rtmatrix.results.records import RunRecord
from rtmatrix.selection import Candidate, ModelSelection, Selection
from tests.browser.runs import as_run, golden

MIB = 2**20
REAL = "smollm2-135m"
TAG = "t2-c256-p16-g24"
SPREAD = (-1.2, -0.6, 0.0, 0.6, 1.2)  # five repetitions around the median, in units of cv


def make_metric(value: Any, unit: str, samples: list[float] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"value": value, "unit": unit, "source": "harness-clock"}
    return out | ({"samples": samples} if samples else {})


def make_cell(
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
    m["tg_tps"] = make_metric(tg, "tokens/s", samples or [tg * (1 + cv * o) for o in SPREAD])
    m["peak_rss_os_bytes"] = make_metric(int(rss_mib * MIB), "bytes")
    m["package_size_bytes"] = make_metric(int(pkg_mib * MIB), "bytes")
    m["license"] = make_metric(licence, "text")
    if kld is not None:
        m["kld_mean"] = make_metric(kld, "nats")
        m["same_top_pct"] = make_metric(95.0, "%")
    return cell


def make_run(index: int, cells: list[dict[str, Any]]) -> RunRecord:
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


def default_run() -> RunRecord:
    """The default run's real-model rows, as their figures were (issue 43)."""
    return make_run(0, [
        make_cell("llama_cpp", "q8_0", tg=111.3, kld=0.0038, rss_mib=508, pkg_mib=51.8),
        make_cell("onnxruntime", "int8", tg=20.6, kld=0.0812, rss_mib=695, pkg_mib=76.5),
        make_cell("onnxruntime_genai", "int8", tg=36.5, kld=0.0812, rss_mib=727, pkg_mib=36.0),
        make_cell("tvm_aot", "f32", tg=40.3, kld=3.6e-11, rss_mib=1026, pkg_mib=297.0,
              licence="Apache-2.0"),
    ])  # fmt: skip


def model_in(sel: Selection, model: str = REAL) -> ModelSelection:
    return next(m for m in sel.models if m.model == model)


def labels(cands: tuple[Candidate, ...]) -> list[str]:
    return [c.label for c in cands]


def by_label(cands: tuple[Candidate, ...], label: str) -> Candidate:
    return next(c for c in cands if c.label == label)


def make_history(alpha: list[float], beta: list[float], versions: list[str]) -> list[RunRecord]:
    return [
        make_run(i, [make_cell("alpha", "q8_0", tg=a, version=v), make_cell("beta", "q8_0", tg=b)])
        for i, (a, b, v) in enumerate(zip(alpha, beta, versions, strict=True))
    ]


def failing_cell(runtime: str, variant: str, status: str, verdict: str) -> dict[str, Any]:
    cell = make_cell(runtime, "f32", tg=1.0, kld=None, model="tiny", name=f"tiny-{variant}")
    cell["fixture"]["variant"] = variant
    cell["expect"] = "error"
    cell["outcome"] |= {"status": status, "message": f"{variant}: {status}"}
    cell["verdict"] = verdict
    return cell
