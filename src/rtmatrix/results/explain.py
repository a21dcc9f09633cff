"""What differs between the two sides of a flagged cell (a regression or a new failure).

Every part comes from what was recorded, nothing is guessed:

- **packages**: the two environments' installed distributions (``importlib.metadata`` in each
  side's interpreter), changed versions first, then those only on one side;
- **settings**: the side's adapter and options, the runtime version the worker reported, and the
  runtime's own recorded settings and system info (the records' ``evidence``: ``system_info``,
  ``session``, ``debug_facilities``, …), flattened to dotted keys, differing ones listed;
- **placement**: ``evidence.placement`` / ``layer_placement`` / ``devices`` of each side;
- **phases**: which of process start, import, load, prefill, first token and decode moved — from
  the paired rounds (``cold_start_*``, ``pp_tps``, ``ttft_s``, ``tg_tps``) judged as their own
  family with :func:`rtmatrix.results.paired.decide`, or, for a cell that did not run on both
  sides, where each side ended and the cold-start marks it reached;
- **logs**: lines present on one side only (stderr tails and the runtime's log excerpts), after
  numbers, hex addresses and temporary paths are normalized away.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rtmatrix.results.changes import (
    SettingChange,
    _short,
    flatten,
    stack_differences,
)
from rtmatrix.results.diff import outcome_rank
from rtmatrix.results.paired import PairedCheck, PairedVerdict, decide
from rtmatrix.results.records import CellRecord, evidence_of, value_of

# phase -> the metric that times it (the order is the cell's own order)
PHASES: tuple[tuple[str, str], ...] = (
    ("process start", "cold_start_process_s"),
    ("import", "cold_start_import_s"),
    ("load", "cold_start_load_s"),
    ("prefill", "pp_tps"),
    ("first token", "ttft_s"),
    ("decode", "tg_tps"),
)
# evidence that is not a setting: logs (compared apart), placement (apart), process bookkeeping
NOT_SETTINGS = frozenset(
    {
        "stderr_tail",
        "stdout_tail",
        "traceback_tail",
        "log_tail",
        "log_excerpt",
        "warnings",
        "log_lines_total",
        "placement",
        "layer_placement",
        "devices",
        "process_tracking",
        "leaked_processes",
        "memory_cgroup",
        "partitions",
        "paired_control",
        "stack",
    }
)
LOG_KEYS = ("stderr_tail", "traceback_tail", "log_tail", "log_excerpt", "warnings")
MAX_LOG_LINES = 12
MAX_PACKAGES = 15
MAX_STACK_LINES = 20
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_TMP = re.compile(r"(?:/tmp|/var/tmp|/var/folders|/private/var)/\S+")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class PackageChange:
    name: str
    a: str | None
    b: str | None

    @property
    def kind(self) -> str:
        if self.a is None:
            return "only in B"
        return "only in A" if self.b is None else "changed"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "a": self.a, "b": self.b, "kind": self.kind}


def package_differences(a: Mapping[str, str], b: Mapping[str, str]) -> list[PackageChange]:
    """Distributions whose version differs (names compared canonically): changed first, then
    only in A, then only in B; by name within each group."""
    ca = {_canonical(k): (k, v) for k, v in a.items()}
    cb = {_canonical(k): (k, v) for k, v in b.items()}
    out = []
    for key in sorted(set(ca) | set(cb)):
        name = (cb.get(key) or ca[key])[0]
        va, vb = (ca.get(key) or (None, None))[1], (cb.get(key) or (None, None))[1]
        if va != vb:
            out.append(PackageChange(name, va, vb))
    order = {"changed": 0, "only in A": 1, "only in B": 2}
    return sorted(out, key=lambda p: (order[p.kind], _canonical(p.name)))


# --------------------------------------------------------------------------- settings





def _settings_of(record: CellRecord | None, side: Mapping[str, Any]) -> dict[str, Any]:
    adapter = record.get("adapter") if record else None
    out: dict[str, Any] = {"adapter": side.get("adapter") or adapter}
    out |= flatten({"options": dict(side.get("options") or {})})
    if record is not None:
        out["runtime_version"] = record["outcome"].get("runtime_version")
        evidence = record.get("evidence") or {}
        out |= flatten({"evidence": {k: v for k, v in evidence.items() if k not in NOT_SETTINGS}})
    return out


def settings_differences(
    rec_a: CellRecord | None,
    rec_b: CellRecord | None,
    side_a: Mapping[str, Any],
    side_b: Mapping[str, Any],
) -> tuple[list[SettingChange], int]:
    """(the settings that differ, how many were compared)."""
    sa, sb = _settings_of(rec_a, side_a), _settings_of(rec_b, side_b)
    names = sorted(set(sa) | set(sb))
    changed = [
        SettingChange(
            n,
            None if sa.get(n) is None else _short(sa[n]),
            None if sb.get(n) is None else _short(sb[n]),
        )
        for n in names
        if sa.get(n) != sb.get(n)
    ]
    return changed, len(names)


#: the layers of ``evidence.stack`` in the order their differences are listed: the kernel
#: choice first (the explanation a user most needs), then backend, runtime, format
def placement_of(record: CellRecord | None) -> dict[str, Any]:
    ev = evidence_of(record)
    return {k: ev[k] for k in ("placement", "layer_placement", "devices") if ev.get(k)}


# --------------------------------------------------------------------------- phases


@dataclass(frozen=True)
class PhaseChange:
    phase: str
    metric: str
    ratio: float | None = None  # b / a (geometric mean over the paired rounds)
    ci: tuple[float, float] | None = None
    verdict: str | None = None  # a PairedVerdict, for phases judged from paired rounds
    a: float | None = None  # the sides' median values, when not judged from rounds
    b: float | None = None
    k: int = 0

    @property
    def moved(self) -> bool:
        return self.verdict in (PairedVerdict.REGRESSION, PairedVerdict.IMPROVED)

    def text(self) -> str:
        if self.ratio is not None:
            ci = f" (90% CI {_pct(self.ci[0])}..{_pct(self.ci[1])})" if self.ci else ""
            tag = f" — {self.verdict}" if self.moved else ""
            return f"{self.phase} ({self.metric}) {_pct(self.ratio)}{ci}{tag}"
        return f"{self.phase} ({self.metric}) A {_num(self.a)}, B {_num(self.b)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "metric": self.metric,
            "ratio": self.ratio,
            "ci": list(self.ci) if self.ci else None,
            "verdict": self.verdict,
            "moved": self.moved,
            "a": self.a,
            "b": self.b,
            "k": self.k,
        }


def _pct(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100:+.1f}%"


def _num(x: float | None) -> str:
    return "unavailable" if x is None else f"{x:.4g}"


def phases_from_rounds(
    rounds: pd.DataFrame, alpha: float, judged: Mapping[str, PairedCheck] | None = None
) -> list[PhaseChange]:
    """The phase metrics of one cell's usable paired rounds, judged as their own family; a
    metric the comparison itself judged (``judged``: e.g. ``tg_tps`` for decode) keeps the
    comparison's decision, so the explanation never contradicts the verdict it explains."""
    wanted = [m for _, m in PHASES]
    rows = rounds[rounds["metric"].isin(wanted)]
    if rows.empty:
        return []
    checks = {c.metric: c for c in decide(rows, alpha=alpha).checks} | dict(judged or {})
    out = []
    for phase, metric in PHASES:
        c = checks.get(metric)
        if c is not None:
            out.append(PhaseChange(phase, metric, c.ratio, c.ci, str(c.verdict), k=c.k))
    return out


def _median(values: Iterable[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return float(pd.Series(nums).median()) if nums else None


def phases_from_records(
    recs_a: Sequence[CellRecord], recs_b: Sequence[CellRecord]
) -> list[PhaseChange]:
    """Each phase metric's median per side over its records (a cell not ok on both sides)."""
    out = []
    for phase, metric in PHASES:
        a = _median(value_of(r["metrics"].get(metric)) for r in recs_a)
        b = _median(value_of(r["metrics"].get(metric)) for r in recs_b)
        if a is not None or b is not None:
            out.append(PhaseChange(phase, metric, a=a, b=b))
    return out


def ended(record: CellRecord | None) -> str:
    """Where a side's cell ended: its outcome, signal and last phase."""
    if record is None:
        return "did not run"
    out = record["outcome"]
    sig = f" ({out['signal']})" if out.get("signal") else ""
    where = f" in {out['phase']}" if out.get("phase") and out["status"] != "ok" else ""
    return f"{out['status']}{sig}{where}, verdict {record['verdict']}"


# --------------------------------------------------------------------------- logs


def normalize(line: str) -> str:
    """A log line without what changes from run to run: numbers, addresses, temp paths."""
    line = _TMP.sub("<tmp>", line)
    line = _HEX.sub("<addr>", line)
    line = _NUMBER.sub("#", line)
    return _SPACE.sub(" ", line).strip()


def log_lines(record: CellRecord) -> list[str]:
    ev = record.get("evidence") or {}
    lines: list[str] = []
    for key in LOG_KEYS:
        value = ev.get(key)
        if isinstance(value, str):
            lines += value.splitlines()
        elif isinstance(value, list):
            lines += [str(v) for v in value]
    return lines


def one_side_lines(mine: Sequence[CellRecord], theirs: Sequence[CellRecord]) -> list[str]:
    """Normalized lines of ``mine`` (any round) never seen in ``theirs``, first seen first."""
    seen = {normalize(ln) for r in theirs for ln in log_lines(r)}
    out: dict[str, None] = {}
    for r in mine:
        for ln in log_lines(r):
            norm = normalize(ln)
            if norm and norm not in seen:
                out.setdefault(norm, None)
    return list(out)


# --------------------------------------------------------------------------- all of it


@dataclass(frozen=True)
class Explanation:
    key: str
    packages: list[PackageChange]
    settings: list[SettingChange]
    settings_compared: int
    placement: dict[str, dict[str, Any]]
    phases: list[PhaseChange]
    phases_from: str  # "paired rounds" or "records"
    ended: dict[str, str]
    logs: dict[str, list[str]] = field(default_factory=dict)
    stack: list[SettingChange] = field(default_factory=list)

    @property
    def moved(self) -> list[str]:
        return [p.phase for p in self.phases if p.moved]

    def sections(self) -> list[tuple[str, list[str]]]:
        """The explanation as titled lists of lines, for the Markdown summary and the report:
        the four layers' differences first (a kernel choice that changed explains most)."""
        out = [("stack (format, runtime, backend, kernels)", self._stack_lines())]
        out.append(("phases", self._phase_lines()))
        if any(not e.startswith("ok,") for e in self.ended.values()):
            out.append(("ended", [f"{s.upper()}: {e}" for s, e in self.ended.items()]))
        out += [
            ("packages", self._package_lines()),
            ("settings", self._setting_lines()),
            ("placement", self._placement_lines()),
            ("log lines on one side only", self._log_lines()),
        ]
        return out

    def _stack_lines(self) -> list[str]:
        if not self.stack:
            return ["the same on both sides (or not recorded)"]
        return [f"{s.name}: {s.a or '—'} → {s.b or '—'}" for s in self.stack[:MAX_STACK_LINES]]

    def _phase_lines(self) -> list[str]:
        if not self.phases:
            return ["no phase was timed on either side"]
        if self.phases_from == "records":
            head = "no usable paired round (not ok on both sides): each side's median time"
        elif self.moved:
            head = "moved: " + ", ".join(self.moved)
        else:
            head = "no phase moved beyond its min effect"
        return [head, *(p.text() for p in self.phases)]

    def _package_lines(self) -> list[str]:
        if not self.packages:
            return ["the same distributions and versions on both sides"]
        lines = [
            f"{p.name} {p.a} → {p.b}" if p.kind == "changed" else f"{p.kind}: {p.name} {p.a or p.b}"
            for p in self.packages[:MAX_PACKAGES]
        ]
        more = len(self.packages) - MAX_PACKAGES
        return lines + ([f"… {more} more (see the JSON)"] if more > 0 else [])

    def _setting_lines(self) -> list[str]:
        if not self.settings:
            return [f"{self.settings_compared} compared, none differ"]
        return [f"{s.name}: {s.a or '—'} → {s.b or '—'}" for s in self.settings]

    def _placement_lines(self) -> list[str]:
        a, b = self.placement.get("a"), self.placement.get("b")
        if not a and not b:
            return ["none recorded"]
        if a == b:
            return [f"same on both sides: {_short(a)}"]
        return [f"A: {_short(a) if a else 'none'}", f"B: {_short(b) if b else 'none'}"]

    def _log_lines(self) -> list[str]:
        lines = [f"{s.upper()}: {ln}" for s in ("a", "b") for ln in self.logs.get(s, [])]
        return lines or ["none (after numbers, addresses and temporary paths are normalized)"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "stack": [c.to_dict() for c in self.stack],
            "packages": [p.to_dict() for p in self.packages],
            "settings": [s.to_dict() for s in self.settings],
            "settings_compared": self.settings_compared,
            "placement": self.placement,
            "placement_same": self.placement.get("a") == self.placement.get("b"),
            "phases": [p.to_dict() for p in self.phases],
            "phases_from": self.phases_from,
            "moved": self.moved,
            "ended": self.ended,
            "logs": self.logs,
            "sections": [[title, lines] for title, lines in self.sections()],
        }


def explain(
    key: str,
    recs_a: Sequence[CellRecord],
    recs_b: Sequence[CellRecord],
    rounds: pd.DataFrame,
    sides: Mapping[str, Mapping[str, Any]],
    alpha: float,
    judged: Mapping[str, PairedCheck] | None = None,
) -> Explanation:
    """Explain one cell from its records on each side (every round), its usable paired rounds
    (``rounds``: this cell's rows, all metrics) and the sides' descriptions (``adapter``,
    ``options``, ``environment.distributions``)."""
    first_a = next(
        (r for r in recs_a if r["outcome"]["status"] == "ok"), recs_a[0] if recs_a else None
    )
    first_b = next(
        (r for r in recs_b if r["outcome"]["status"] == "ok"), recs_b[0] if recs_b else None
    )
    dists = {s: dict((sides[s].get("environment") or {}).get("distributions") or {}) for s in "ab"}
    settings, compared = settings_differences(first_a, first_b, sides["a"], sides["b"])
    phases = phases_from_rounds(rounds, alpha, judged)
    worst_a = max(recs_a, key=outcome_rank) if recs_a else None
    worst_b = max(recs_b, key=outcome_rank) if recs_b else None
    return Explanation(
        key=key,
        packages=package_differences(dists["a"], dists["b"]),
        settings=settings,
        settings_compared=compared,
        placement={"a": placement_of(first_a), "b": placement_of(first_b)},
        phases=phases or phases_from_records(recs_a, recs_b),
        phases_from="paired rounds" if phases else "records",
        ended={"a": ended(worst_a), "b": ended(worst_b)},
        logs={
            "a": one_side_lines(recs_a, recs_b)[:MAX_LOG_LINES],
            "b": one_side_lines(recs_b, recs_a)[:MAX_LOG_LINES],
        },
        stack=stack_differences(first_a, first_b),
    )
