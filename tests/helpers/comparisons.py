"""Synthetic paired comparisons for unit tests of judging and reporting: no process is run.

Each record is the golden run's llama.cpp cell with its throughput and memory scaled by a known
factor (times a seeded lognormal factor per process), so the expected verdicts are known.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rtmatrix.results.comparison import Comparison, RoundRecord, build
from rtmatrix.results.records import CellRecord, MetricRecord

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"
KEY = "llama_cpp|tiny/f32|t2-c256-p16-g24"


def golden_cell() -> CellRecord:
    cell: CellRecord = json.loads(GOLDEN.read_text("utf-8"))["cells"][0]
    cell["contended"] = False
    return cell


def _scale(metric: MetricRecord, factor: float) -> None:
    value = metric.get("value")
    if isinstance(value, int | float):
        metric["value"] = value * factor
        if metric.get("samples"):
            metric["samples"] = [s * factor for s in metric["samples"]]


def record(
    key: str = KEY,
    *,
    tg: float = 1.0,
    pp: float = 1.0,
    load: float = 1.0,
    rss: float = 1.0,
    status: str = "ok",
    verdict: str = "PASS",
    contended: bool = False,
    stderr: str = "",
    evidence: dict[str, Any] | None = None,
) -> CellRecord:
    """The golden cell under ``key``; TG, PP, load time and peak RSS scaled by the factors."""
    cell = golden_cell()
    cell["key"], cell["runtime"] = key, key.split("|", 1)[0]
    m = cell["metrics"]
    for name in ("tg_tps", "tg_tps_counter"):
        _scale(m[name], tg)
    for name in ("pp_tps", "pp_tps_counter"):
        _scale(m[name], pp)
    for name in ("tpot_s", "token_latency_p50_s", "token_latency_p90_s"):
        _scale(m[name], 1 / tg)
    _scale(m["ttft_s"], 1 / pp)
    _scale(m["cold_start_load_s"], load)
    _scale(m["peak_rss_os_bytes"], rss)
    cell["outcome"] = cell["outcome"] | {"status": status}
    cell["verdict"] = verdict
    cell["contended"] = contended
    if contended:
        m["host_busy_cores"] = {"value": 1.5, "unit": "cores", "source": "os-accounting"}
    cell["evidence"] = dict(cell["evidence"], stderr_tail=stderr, **(evidence or {}))
    return cell


def rounds_of(
    k: int,
    *,
    seed: int = 0,
    sd: float = 0.03,
    key: str = KEY,
    b: dict[str, Any] | None = None,
    a: dict[str, Any] | None = None,
    b_round: dict[int, dict[str, Any]] | None = None,
) -> Iterator[RoundRecord]:
    """K rounds of one cell; ``a``/``b``: keyword arguments of :func:`record` for every round of
    that side, ``b_round``: for one round of side B; throughput spread by a lognormal ``sd``."""
    rng = np.random.default_rng(seed)
    for rnd in range(1, k + 1):
        order = ("a", "b") if rng.random() < 0.5 else ("b", "a")
        for pos, side in enumerate(order):
            noise = float(np.exp(rng.normal(0.0, sd)))
            kw = dict((a if side == "a" else b) or {})
            if side == "b" and b_round and rnd in b_round:
                kw |= b_round[rnd]
            kw["tg"] = kw.get("tg", 1.0) * noise
            kw["pp"] = kw.get("pp", 1.0) * noise
            yield RoundRecord(key, rnd, side, pos, record(key, **kw))


SIDES: dict[str, dict[str, Any]] = {
    "a": {
        "name": "a",
        "label": "llama-cpp-python 0.3.35",
        "python": "/venvs/old/bin/python",
        "adapter": None,
        "options": {},
        "environment": {
            "python": "3.11.9",
            "distributions": {"llama_cpp_python": "0.3.35", "numpy": "2.1.0", "gone": "1.0"},
        },
        "runtimes": {"llama_cpp": {"distribution": "llama-cpp-python", "version": "0.3.35"}},
    },
    "b": {
        "name": "b",
        "label": "llama-cpp-python 0.3.36",
        "python": "/venvs/new/bin/python",
        "adapter": None,
        "options": {"flash_attn": True},
        "environment": {
            "python": "3.11.9",
            "distributions": {"llama-cpp-python": "0.3.36", "numpy": "2.1.0", "new-dep": "0.1"},
        },
        "runtimes": {"llama_cpp": {"distribution": "llama-cpp-python", "version": "0.3.36"}},
    },
}


def comparison(records: list[RoundRecord], **kw: Any) -> Comparison:
    settings = {"k": max(r.round for r in records), "k_how": "K fixed by the test", "seed": 0}
    return build(records, copy.deepcopy(SIDES), settings | {"metrics": ["pp_tps", "tg_tps"]}, **kw)
