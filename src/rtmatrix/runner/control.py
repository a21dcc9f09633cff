"""The control run for crashes: a cell that dies by a signal is rerun once with its row's
control setting (:class:`rtmatrix.adapters.base.CrashControl`: llama.cpp's extra buffer types
off, say), so the record tells a crash in one code path of the runtime on this host from a
crash of the model or the harness.

The cell keeps its own outcome (the default setting's truth); the control's outcome, figures and
settings go into ``control``, ``diagnosed`` says whether the control ran ok, and the cell's
``verdict_reason`` explains both in a sentence. The control's figures are never the row's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rtmatrix.matrix import Cell, options_text
from rtmatrix.names import M
from rtmatrix.outcome import Expect
from rtmatrix.runner.record import Addendum

#: generic words of a runtime's log that say what it was doing when it died
_GENERIC = r"error|fail|abort|assert|warn|buffer size"
#: figures of the control shown beside the crashed cell
HEADLINE = (M.PP_TPS, M.TG_TPS)


@dataclass(frozen=True)
class Control:
    """The options a crashed cell is rerun with, what they turn off and where it came from."""

    options: dict[str, Any]
    explains: str
    log_pattern: str
    #: "adapter" (the row's declared control), "matrix" (crash_control = {...}) or "numerics"
    #: (the options the runtime's home says force the requested precision)
    source: str

    def text(self) -> str:
        return options_text(self.options)

    def cell(self, cell: Cell) -> Cell:
        """The control cell: the same cell with the control options, and no control of its own."""
        return replace(cell, options=cell.options | self.options, crash_control=False)


def control_for(cell: Cell, info: dict[str, Any]) -> Control | None:
    """The row's control for this cell (the matrix's ``crash_control`` over the adapter's), or
    None: none declared, turned off, or the cell already runs with the control options."""
    if cell.crash_control is False:
        return None
    if isinstance(cell.crash_control, dict):
        ctl = Control(dict(cell.crash_control), "the row's crash_control options", "", "matrix")
    else:
        declared = info.get("crash_control")
        if not isinstance(declared, dict) or not declared.get("options"):
            return None
        ctl = Control(dict(declared["options"]), str(declared.get("explains", "")),
                      str(declared.get("log_pattern", "")), "adapter")  # fmt: skip
    if all(cell.options.get(k) == v for k, v in ctl.options.items()):
        return None
    return ctl


def wants_control(cell: Cell, rec: dict[str, Any]) -> bool:
    """A cell expected to run that died by a signal (not a hang, not an OOM kill)."""
    out = rec["outcome"]
    return cell.expect is Expect.OK and out["status"] == "crash" and bool(out.get("signal"))


def log_at_crash(lines: list[str], pattern: str, keep: int = 60) -> dict[str, Any]:
    """What a dead worker's runtime log says: its last lines, and the lines that name a code
    path (the row's ``log_pattern``) or an error, wherever they were."""
    rx = re.compile(f"{pattern}|{_GENERIC}" if pattern else _GENERIC, re.IGNORECASE)
    return {
        "lines_total": len(lines),
        "tail": lines[-keep:],
        "matching": [ln for ln in lines if rx.search(ln)][:80],
        "pattern": rx.pattern,
        "source": "the runtime's own log lines, appended to the worker's events.jsonl as they "
        "arrived (the worker died or was killed before it could report them)",
    }


def _named_lines(rec: Mapping[str, Any], pattern: str) -> list[str]:
    if not pattern:
        return []
    found = (rec.get("evidence") or {}).get("runtime_log_at_crash") or {}
    rx = re.compile(pattern)
    return [ln for ln in found.get("matching", []) if rx.search(ln)][:3]


def _figures(ctl: dict[str, Any]) -> str:
    parts = []
    for key, label in zip(HEADLINE, ("PP", "TG"), strict=True):
        value = (ctl["metrics"].get(key) or {}).get("value")
        if isinstance(value, int | float):
            parts.append(f"{label} {value:.0f} tok/s")
    return ", ".join(parts)


def diagnose(rec: Mapping[str, Any], control: Control, ctl: dict[str, Any]) -> Addendum:
    """The control's record for the crashed cell's, and what it shows."""
    out, c_out = rec["outcome"], ctl["outcome"]
    ok = c_out["status"] == "ok"
    what = control.explains or control.text()
    said = _named_lines(rec, control.log_pattern)
    log = f"; its log names the path: {' | '.join(s.strip() for s in said)}" if said else ""
    head = f"crashes ({out.get('signal')} in phase '{out.get('phase')}') with {what} on{log}"
    if ok:
        figs = _figures(ctl)
        tail = f"runs with {control.text()} (control ok{', ' + figs if figs else ''})"
    else:
        tail = (f"the control with {control.text()} ends {c_out['status']} too: not explained "
                "by that setting")  # fmt: skip
    fields = {"diagnosed": ok, "control": _control_record(control, ctl)}
    return Addendum(fields=fields, reasons=(f"{head}; {tail}",))


def numerics_control_for(cell: Cell, rec: dict[str, Any]) -> Control | None:
    """The numerics control for a cell expected to run: the options its runtime's home says
    force the requested precision (``evidence.stack.numerics.control``), when the cell computed
    below it and its outputs left the requested dtype's tolerance, or its parity against the
    reference failed; None when no home declared such options, the cell already runs with them,
    or only a lifecycle scenario's own checks failed."""
    if cell.expect is not Expect.OK:
        return None
    numerics = ((rec.get("evidence") or {}).get("stack") or {}).get("numerics") or {}
    options = numerics.get("control") if isinstance(numerics, dict) else None
    if not isinstance(options, dict) or not options:
        return None
    if all(cell.options.get(k) == v for k, v in options.items()):
        return None
    par = rec.get("parity") or {}
    judged = par.get("numerics") or {}
    outside = bool(judged.get("downgraded")) and judged.get("within_requested_tolerance") is False
    # parity failed (a lifecycle check's failure is its scenario's: no precision control)
    broken = par.get("status") == "measured" and par.get("within_tolerance") is False
    if not outside and not broken:
        return None
    explains = str(numerics.get("control_explains") or "")
    return Control(dict(options), explains, "", "numerics")


def _control_record(control: Control, ctl: dict[str, Any]) -> dict[str, Any]:
    return {
        "options": control.options,
        "source": control.source,
        "explains": control.explains,
        "outcome": ctl["outcome"],
        "verdict": ctl["verdict"],
        "parity": ctl["parity"],
        "metrics": ctl["metrics"],
        "numerics": ((ctl.get("evidence") or {}).get("stack") or {}).get("numerics"),
        "settings": (ctl.get("evidence") or {}).get("settings"),
        "wall_s": ctl["wall_s"],
        "note": "the same cell rerun once with these options; its figures are the control's, "
        "not the row's, and are not ranked",
    }


def diagnose_numerics(rec: Mapping[str, Any], control: Control, ctl: dict[str, Any]) -> Addendum:
    """The numerics control's record for the cell's (``numerics_control``) and what it shows:
    the precision the runtime chose, and whether the requested one holds when asked."""
    judged = (rec.get("parity") or {}).get("numerics") or {}
    ok = ctl["outcome"]["status"] == "ok"
    ctl_judged = (ctl.get("parity") or {}).get("numerics") or {}
    exact = ok and not ctl_judged.get("downgraded")
    fields = {"numerics_control": _control_record(control, ctl) | {"diagnosed": ok}}
    dtype = str(judged.get("requested") or "the requested dtype")
    if judged.get("downgraded"):
        ran = f"{judged.get('judged_as')} by default ({judged.get('reason')})"
    else:
        ran = f"{rec['outcome']['status']} with the row's settings"
    if ok:
        figs = _figures(ctl)
        held = dtype if exact else f"judged as {ctl_judged.get('judged_as')}"
        tail = f"{held} with {control.text()} (control ok{', ' + figs if figs else ''})"
        reason = f"diagnosed: {ran}; {tail}"
    else:
        reason = (f"not diagnosed: {ran}; the control with {control.text()} ends "
                  f"{ctl['outcome']['status']} too")  # fmt: skip
    return Addendum(fields=fields, reasons=(reason,))
