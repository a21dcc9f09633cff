"""What the fixture grid and the evidence panels say about one cell beyond its verdict: the
expected against the observed error kind, why the verdict is not what the outcome alone gives
(``verdict_reason``), processes that outlived the cell, contention, and the reference ratios."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtmatrix.names import M
from rtmatrix.options import options_text
from rtmatrix.report.views import (
    PP_REFERENCE_RATIO,
    TG_REFERENCE_RATIO,
    Badge,
    Notes,
    Value,
    contention_badge,
    ratio_value,
    reference_tool,
)
from rtmatrix.results.columns import as_dict, as_list
from rtmatrix.results.records import CellRecord

RATIOS = (
    ("PP", PP_REFERENCE_RATIO, M.PP_TPS_REFERENCE, M.PP_TPS),
    ("TG", TG_REFERENCE_RATIO, M.TG_TPS_REFERENCE, M.TG_TPS),
)


@dataclass(frozen=True)
class Kinds:
    """The error kinds an expected failure may have, and the one it had."""

    expected: tuple[str, ...]  # empty: any error passes
    observed: str  # the outcome's error_kind, or what happened instead of an error
    ok: bool  # observed is one of the expected (or any error, where none is named)


@dataclass(frozen=True)
class CellMarks:
    kinds: Kinds | None  # for cells that expect an error
    reason: str  # verdict_reason
    leaked: tuple[dict[str, Any], ...]  # evidence.leaked_processes
    contended: Badge | None
    ratios: tuple[tuple[str, Value], ...]  # ("PP ÷ llama-bench", 0.86×)
    #: a crashed cell's control run: "diagnosed: runs with extra_buffer_types=false", or ""
    control: str = ""
    diagnosed: bool = False
    #: the names of the cell's failed self-checks ("timed_ids, prompt_cache"), or ""
    self_check: str = ""

    @property
    def leaked_text(self) -> str:
        n = len(self.leaked)
        return f"{n} leaked process{'es' if n != 1 else ''}" if n else ""


def kinds(cell: CellRecord) -> Kinds | None:
    if cell.get("expect") != "error":
        return None
    expected = tuple(str(k) for k in as_list(cell.get("expect_kind")))
    outcome = cell["outcome"]
    kind = outcome.get("error_kind")
    if outcome["status"] == "error":
        observed = str(kind or "unclassified")
        return Kinds(expected, observed, not expected or observed in expected)
    said = f"{outcome['status']} (no error)" if not kind else f"{kind} ({outcome['status']})"
    return Kinds(expected, said, False)


def leaked(cell: CellRecord) -> tuple[dict[str, Any], ...]:
    """Processes that outlived the cell, as the runner lists them (pid, cmdline, ...)."""
    found = as_list(as_dict(cell.get("evidence")).get("leaked_processes"))
    return tuple(p if isinstance(p, dict) else {"process": p} for p in found)


def ratios(cell: CellRecord, notes: Notes) -> tuple[tuple[str, Value], ...]:
    metrics = as_dict(cell.get("metrics"))
    tool = reference_tool(cell)
    return tuple(
        (f"{label} ÷ {tool}", ratio_value(cell, key, ref, own, notes))
        for label, key, ref, own in RATIOS
        if key in metrics
    )


def control_text(cell: CellRecord) -> str:
    """What a crashed cell's control run showed, in a few words ("" when none ran)."""
    ctl = as_dict(cell.get("control"))
    if not ctl:
        return ""
    opts = options_text(as_dict(ctl.get("options")))
    status = as_dict(ctl.get("outcome")).get("status")
    if cell.get("diagnosed"):
        return f"diagnosed: runs with {opts}"
    return f"control with {opts}: {status}"


def failed_self_checks(cell: CellRecord) -> str:
    """The names of the cell's failed self-checks (``self_checks``), "" when none failed or
    the record has none (older records)."""
    checks = as_dict(cell.get("self_checks"))
    return ", ".join(n for n, c in checks.items() if as_dict(c).get("status") == "failed")


def marks(cell: CellRecord, notes: Notes) -> CellMarks:
    return CellMarks(
        kinds(cell),
        str(cell.get("verdict_reason") or ""),
        leaked(cell),
        contention_badge(cell),
        ratios(cell, notes),
        control_text(cell),
        bool(cell.get("diagnosed")),
        failed_self_checks(cell),
    )


def command_line(process: dict[str, Any]) -> str:
    """A leaked process's command line for people."""
    cmd = process.get("cmdline")
    return " ".join(str(a) for a in cmd) if isinstance(cmd, list) else str(cmd or "")
