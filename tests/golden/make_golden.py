"""Derive the diff/gate golden result files from ``run-v1.json`` (a real run).

    python tests/golden/make_golden.py        # rewrites tests/golden/gate-*.json

Every file has the same three cells (the ok ones pooled from ``N_PROCESSES`` worker
processes) — ``tiny/f32`` and ``tiny/q8_0`` (expect ok, PASS) and
``tiny-truncated/f32`` (expect error: a clean ``error`` is PASS) — with 8 seeded samples (2 % noise)
per repeated metric, so the tests see realistic noise rather than identical numbers:

- ``gate-base.json``        the baseline
- ``gate-aa.json``          A/A: the same configuration run again (fresh noise)     -> gate exit 0
- ``gate-regression.json``  TG samples 20 % lower (TPOT 25 % higher), clearly apart -> gate exit 1
- ``gate-crash.json``       the truncated fixture's clean error became a crash      -> gate exit 2
- ``gate-disjoint.json``    other parameters (n_ctx 512), so no cell pairs          -> gate exit 3

The test suite checks that the checked-in files are what this script writes.
"""

from __future__ import annotations

import copy
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rtmatrix.outcome import summarize
from rtmatrix.results import save_run

HERE = Path(__file__).resolve().parent
N_SAMPLES = 8
NOISE = 0.02
#: the ok cells pool this many worker processes (``rtmatrix run --processes``), so the gate
#: judges their performance on process medians
N_PROCESSES = 6
TRUNCATED_SHA = "7d1f0b5c4e2a9f8e6d3c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e"
Q8_SHA = "a8b1c2d3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccddeeff"


def _template() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "run-v1.json").read_text("utf-8"))
    return data


def _resample(metric: dict[str, Any], rng: np.random.Generator, scale: float) -> None:
    """Replace a repeated metric's samples with N_SAMPLES seeded ones around value * scale."""
    center = float(metric["value"]) * scale
    samples = [float(v) for v in center * (1.0 + NOISE * rng.standard_normal(N_SAMPLES))]
    metric["samples"] = samples
    metric["stats"] = summarize(samples)
    per = [float(v) for v in center * (1.0 + NOISE * rng.standard_normal(N_PROCESSES))]
    metric["process_values"] = per
    metric["value"] = statistics.median(per)


def _ok_cell(template: dict[str, Any], dtype: str, sha: str, speed: float) -> dict[str, Any]:
    cell = copy.deepcopy(template)
    cell["key"] = cell["key"].replace("/f32|", f"/{dtype}|")
    cell["fixture"] |= {"dtype": dtype, "sha256": sha, "built_now": False}
    cell["fixture"]["path"] = cell["fixture"]["path"].replace("-f32-", f"-{dtype}-")
    for m in cell["metrics"].values():
        if m.get("unit") == "tokens/s" and "samples" in m:
            m["value"] *= speed
    return cell


def _error_cell(template: dict[str, Any]) -> dict[str, Any]:
    keep = ("package_size_bytes", "license")
    why = "the cell's outcome is error: nothing was measured"
    metrics = {
        name: m
        if name in keep
        else {"value": None, "unit": m["unit"], "source": "unavailable", "reason": why}
        for name, m in template["metrics"].items()
    }
    return {
        "key": template["key"].replace("|tiny/", "|tiny-truncated/"),
        "runtime": template["runtime"],
        "adapter": template["adapter"],
        "fixture": template["fixture"]
        | {
            "name": "tiny-truncated",
            "variant": "truncated",
            "sha256": TRUNCATED_SHA,
            "size_bytes": 967210,
            "built_now": False,
        },
        "params": dict(template["params"]),
        "expect": "error",
        "outcome": {
            "status": "error",
            "phase": "load",
            "exit_code": 0,
            "signal": None,
            "message": "Failed to load model from file",
            "error_type": "ValueError",
            "runtime_version": "0.3.36",
        },
        "verdict": "PASS",
        "metrics": metrics,
        "parity": {"status": "unavailable", "reason": "cell outcome is error"},
        "evidence": {},
        "wall_s": 0.41,
    }


def _run(
    seed: int, run_id: str, tweak: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    run = _template()
    template = run["cells"][0]
    template["fixture"]["built_now"] = False
    run |= {
        "run_id": run_id,
        "created_utc": "2026-11-29T10:00:00+00:00",
        "finished_utc": "2026-11-29T10:00:05+00:00",
    }
    run["matrix"]["run"]["repetitions"] = N_SAMPLES
    run["matrix"]["n_cells"] = 3
    ok = [
        _ok_cell(template, "f32", template["fixture"]["sha256"], 1.0),
        _ok_cell(template, "q8_0", Q8_SHA, 1.3),
    ]
    rng = np.random.default_rng(seed)
    for cell in ok:
        cell["processes"] = N_PROCESSES
        for m in cell["metrics"].values():
            if "samples" in m:
                _resample(m, rng, 1.0)
    run["cells"] = [*ok, _error_cell(template)]
    if tweak is not None:
        tweak(run)
    return run


def _slower_tg(run: dict[str, Any]) -> None:
    rng = np.random.default_rng(99)
    for cell in run["cells"][:2]:
        for name, scale in (("tg_tps", 0.8), ("tg_tps_counter", 0.8), ("tpot_s", 1.25)):
            _resample(cell["metrics"][name], rng, scale)


def _crash(run: dict[str, Any]) -> None:
    cell = run["cells"][2]
    cell["outcome"] = {
        "status": "crash",
        "phase": "load",
        "exit_code": -11,
        "signal": "SIGSEGV",
        "message": "worker killed by SIGSEGV during phase 'load'",
    }
    cell["verdict"] = "WARN"
    cell["parity"]["reason"] = "cell outcome is crash"


def _other_params(run: dict[str, Any]) -> None:
    for cell in run["cells"]:
        cell["params"]["n_ctx"] = 512
        cell["key"] = cell["key"].replace("-c256-", "-c512-")


def build() -> dict[str, dict[str, Any]]:
    """File name -> run record."""
    return {
        "gate-base.json": _run(1, "20261129T100000Z-base00"),
        "gate-aa.json": _run(2, "20261129T100100Z-aa0000"),
        "gate-regression.json": _run(3, "20261129T100200Z-regr00", _slower_tg),
        "gate-crash.json": _run(4, "20261129T100300Z-crash0", _crash),
        "gate-disjoint.json": _run(5, "20261129T100400Z-disj00", _other_params),
    }


def main() -> None:
    for name, run in build().items():
        save_run(run, HERE / name)
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
