"""The architecture view: each converted checkpoint (architecture) × runtime row, with what the
row's own converter and runtime made of it: exact / runs but differs from transformers (how much)
/ converter refused (its own message) / runtime failed / no converter — with the converter's and
the runtime's versions. Read from the cells' records only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the views read a cell's state from here; this module reads their columns
    from rtmatrix.results.columns import Column

#: the states a cell of the view can be in, in the order a reader scans for them
STATES = ("exact", "differs", "refused", "failed", "no-converter", "not-judged")


@dataclass(frozen=True)
class ArchCell:
    state: str  # one of STATES
    text: str  # what the cell says
    title: str = ""  # the detail on hover: messages, versions, figures
    anchor: str | None = None  # the cell's evidence anchor


@dataclass
class ArchRow:
    model: str
    architecture: str
    cells: dict[str, ArchCell] = field(default_factory=dict)  # column label -> cell


@dataclass(frozen=True)
class ArchView:
    columns: list[str]
    rows: list[ArchRow]


def _model_of(fixture: Mapping[str, Any]) -> str:
    return str(fixture.get("model") or fixture.get("name") or "?")


def _conversion_text(cell: Mapping[str, Any]) -> str:
    conv = (cell.get("fixture") or {}).get("conversion") or {}
    if not conv:
        return ""
    return f"{conv.get('tool')} ({conv.get('distribution')} {conv.get('version')})"


def _ran(cell: Mapping[str, Any]) -> ArchCell | None:
    """A cell whose conversion ran: exact, differs, or not judged."""
    par = cell.get("parity") or {}
    conv = par.get("conversion") or {}
    dtype = (cell.get("fixture") or {}).get("dtype")
    made_by = _conversion_text(cell)
    if not conv:
        status = (cell.get("outcome") or {}).get("status")
        agree, compared = par.get("tokens_agree"), par.get("tokens_compared")
        if par.get("status") == "measured" and isinstance(compared, int) and compared:
            # an engine's own loop: its greedy ids against transformers', no logits to judge
            ids = f"greedy ids {agree}/{compared} agree with transformers' (no logits)"
            state = "exact" if par.get("all_tokens_agree") and status == "ok" else "not-judged"
            return ArchCell(state, f"{dtype}: {status}, {ids}",
                            f"{made_by}; {par.get('judged_on') or 'greedy ids only'}")  # fmt: skip
        return ArchCell("not-judged", f"{dtype}: {status}, not judged against transformers",
                        f"{made_by}; {par.get('reason') or 'no teacher-forced pass'}")  # fmt: skip
    figures = f"top-1 {conv.get('top1_agree')}/{conv.get('top1_positions')}"
    worst = conv.get("max_abs_logit_diff")
    figures += f", max|Δlogit| {worst:.3g}" if isinstance(worst, int | float) else ""
    tol = conv.get("logit_tolerance")
    title = f"{made_by}; judged as {conv.get('judged_as')} (tolerance {tol})"
    if conv.get("changed_the_model"):
        pos = conv.get("first_divergence_position")
        where = f"; first clear flip at position {pos}" if pos is not None else ""
        feats = conv.get("config_features") or {}
        if feats:
            title += "; the checkpoint's settings to check first: " + ", ".join(
                f"{k} = {v}" for k, v in feats.items()
            )
        return ArchCell("differs", f"{dtype}: runs but differs ({figures}{where})", title)
    outcome = cell.get("outcome") or {}
    if outcome.get("status") != "ok":  # the conversion held, the runtime's output did not
        return ArchCell("failed", f"{dtype}: {outcome.get('status')} ({figures})",
                        f"{title}; {outcome.get('message')}")  # fmt: skip
    return ArchCell("exact", f"{dtype}: agrees ({figures})", title)


def cell_state(cell: Mapping[str, Any]) -> ArchCell:
    outcome = cell.get("outcome") or {}
    dtype = (cell.get("fixture") or {}).get("dtype")
    if outcome.get("charged_to") == "converter" and outcome.get("phase") == "convert":
        return ArchCell("refused", f"{dtype}: converter refused", str(outcome.get("message")))
    if outcome.get("status") in ("ok", "wrong-output"):
        ran = _ran(cell)
        if ran is not None:
            return ran
    version = outcome.get("runtime_version") or ""
    return ArchCell("failed", f"{dtype}: {outcome.get('status')}",
                    f"{_conversion_text(cell)} {version}: {outcome.get('message')}")  # fmt: skip


def _merge(old: ArchCell | None, new: ArchCell) -> ArchCell:
    """Several dtypes of one model on one row: one cell, worst state first."""
    if old is None:
        return new
    first, second = sorted((old, new), key=lambda c: STATES.index(c.state), reverse=True)
    return ArchCell(first.state, f"{first.text}; {second.text}",
                    f"{first.title}\n{second.title}", first.anchor or second.anchor)  # fmt: skip


def view(cols: list[Column]) -> ArchView | None:
    """The architecture × row table of the converted checkpoints in ``cols``; None when no
    cell ran one."""
    rows: dict[str, ArchRow] = {}
    labels: list[str] = []
    for col in cols:
        label = col.runtime if len(cols) == len({c.runtime for c in cols}) else (
            f"{col.runtime} (run {col.run_index + 1})")  # fmt: skip
        for anchor, cell in col.cells:
            fixture = cell.get("fixture") or {}
            arch = fixture.get("architecture")
            if not arch:
                continue
            model = _model_of(fixture)
            row = rows.setdefault(model, ArchRow(model, str(arch)))
            got = cell_state(cell)
            row.cells[label] = _merge(row.cells.get(label), ArchCell(got.state, got.text,
                                                                     got.title, anchor))
            if label not in labels:
                labels.append(label)
    for col in cols:  # rows that could not take a model: the reason it was not run
        label = col.runtime if len(cols) == len({c.runtime for c in cols}) else (
            f"{col.runtime} (run {col.run_index + 1})")  # fmt: skip
        for skip in col.run.get("skipped") or []:
            runtime, _, rest = str(skip.get("key", "")).partition("|")
            model = rest.split("/", 1)[0]
            if runtime == col.runtime and model in rows:
                none = ArchCell("no-converter", "not run", str(skip.get("reason")))
                rows[model].cells[label] = _merge(rows[model].cells.get(label), none)
                if label not in labels:
                    labels.append(label)
    if not rows:
        return None
    return ArchView(labels, list(rows.values()))
