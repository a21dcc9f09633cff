"""The lifecycle panel: what the ``stream``, ``cancel`` and ``serve`` scenario cells measured.

Read from the metrics ``rtmatrix.scenarios.*.metrics`` writes (``stream_*``, ``cancel_<mode>_*``,
``serve_c<N>_*``, ``serve_*``) and the ``lifecycle_checks`` metric's detail (checks, findings,
skipped phases, request state traces). Every value keeps its metric's source; a metric the cell
did not record shows as unavailable with its reason, and a cell that ended before measuring gets
one note instead of empty tables. Nothing here raises on a missing or odd-typed entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rtmatrix.names import M, Scenario
from rtmatrix.report import plots
from rtmatrix.report.views import (
    Notes,
    Part,
    Table,
    TableRow,
    Value,
    fmt_bytes,
    metric_value,
    text,
    unavailable,
)
from rtmatrix.results.columns import (
    Column,
    as_dict,
    as_list,
    fixture_label,
    params_label,
    scenario_of,
    varying_params,
)
from rtmatrix.results.records import CellRecord
from rtmatrix.scenarios import SPECS, family

MAX_TRACES = 60  # request traces listed per cell; the rest stay in the run record
#: what each lifecycle scenario measures, from the scenario registry
SCENARIO_HELP = {sc: spec.help for sc, spec in SPECS.items()}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None
    detail: str


@dataclass
class Card:
    """One scenario cell of the panel."""

    anchor: str
    runtime: str
    run_id: str
    label: str
    scenario: str
    verdict: str
    status: str
    message: str
    api: str = ""
    checks_value: Value | None = None
    facts: list[Part] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    traces: Table | None = None
    traces_total: int = 0
    note: str | None = None


@dataclass
class Panel:
    cards: list[Card]
    plots: list[plots.Plot]
    note: str | None = None

    @property
    def failed_checks(self) -> int:
        return sum(1 for c in self.cards for ch in c.checks if ch.ok is False)


def _metrics(cell: CellRecord) -> dict[str, Any]:
    return as_dict(cell.get("metrics"))


def _m(cell: CellRecord, key: str) -> dict[str, Any] | None:
    found = _metrics(cell).get(key)
    return found if isinstance(found, dict) else None


def _num(metric: dict[str, Any] | None, key: str = "value") -> float | None:
    v = (metric or {}).get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _checks(cell: CellRecord) -> list[Check]:
    out = []
    for c in as_list(as_dict(_m(cell, M.LIFECYCLE_CHECKS)).get("checks")):
        if isinstance(c, dict):
            ok = c.get("ok")
            out.append(
                Check(
                    str(c.get("name", "?")),
                    ok if isinstance(ok, bool) else None,
                    str(c.get("detail") or ""),
                )
            )
        else:
            out.append(Check(str(c), None, ""))
    return out


def _value(cell: CellRecord, key: str, notes: Notes) -> Value:
    return metric_value(_m(cell, key), notes, key)


def _flagged(v: Value, bad: bool | None, why: str) -> Value:
    """``v`` marked as failing (its check failed) with the check's words on hover."""
    if not bad:
        return v
    title = f"{why}; {v.title}" if v.title else why
    return Value(v.text, v.source, title, v.note, f"{v.css} v-FAIL".strip())


# --- stream ---------------------------------------------------------------------------------


def stream_card(cell: CellRecord, card: Card, notes: Notes) -> None:
    card.facts += [
        Part("time to first chunk", _value(cell, "stream_ttft_s", notes)),
        Part("first token sampled", _value(cell, "stream_first_token_s", notes)),
        Part("longest token → chunk wait", _value(cell, "stream_delivery_lag_max_s", notes)),
        Part("tokens per stream", _value(cell, "stream_tokens", notes)),
        Part("chunks per stream", _value(cell, "stream_chunks", notes)),
    ]
    if _m(cell, "stream_state_after_release_bytes"):
        card.facts.append(
            Part("state after release", _value(cell, "stream_state_after_release_bytes", notes))
        )
    rows = []
    for key, label, what in (
        ("stream_token_gap", "token gap", "between sampled tokens (the runtime's per-token hook)"),
        ("stream_chunk_gap", "chunk gap", "between chunks reaching the consumer"),
    ):
        cells = tuple(_value(cell, f"{key}_{q}_s", notes) for q in ("p50", "p90", "p99"))
        n = _num(_m(cell, f"{key}_p50_s"), "n")
        rows.append(TableRow(label, cells, f"{what}; n={n:g}" if n else what))
    card.tables.append(Table("stream gaps", ("interval", "p50", "p90", "p99"), tuple(rows)))


# --- cancel ---------------------------------------------------------------------------------


def cancel_modes(cell: CellRecord) -> list[str]:
    return family(Scenario.CANCEL).values(map(str, _metrics(cell)))


def _leak(cell: CellRecord, mode: str, checks: dict[str, Check], notes: Notes) -> Value:
    key = f"cancel_{mode}_rss_growth_bytes"
    metric = _m(cell, key)
    v = metric_value(metric, notes, key)
    growth, tol = _num(metric), _num(metric, "tolerance_bytes")
    check = checks.get(f"cancel_{mode}_rss_leak")
    if growth is None:
        return v
    n = len(as_list((metric or {}).get("rss_after_each")))
    words = f"+{v.text}" if growth >= 0 else v.text
    words += f" (tolerance {fmt_bytes(tol)})" if tol is not None else ""
    title = f"RSS after {n or 'N'} cycles minus after cycle 1"
    title += f"; check {check.name}: {check.detail}" if check else ""
    failed = (
        check.ok is False if check and check.ok is not None else (tol is not None and growth > tol)
    )
    css = "v-FAIL" if failed else "v-PASS" if (check and check.ok) or tol is not None else ""
    return Value(words, v.source, title, None, css)


def _mode_verdict(cell: CellRecord, mode_checks: list[Check]) -> Value:
    """One mode's checks as ``n/m ok``, each check's words on hover."""
    if not mode_checks:
        return text("—", "no checks recorded for this mode")
    failed = [c.name for c in mode_checks if c.ok is False]
    return Value(
        f"{len(mode_checks) - len(failed)}/{len(mode_checks)} ok",
        str(as_dict(_m(cell, M.LIFECYCLE_CHECKS)).get("source") or "harness-clock"),
        "; ".join(f"{c.name}: {c.detail}" for c in mode_checks),
        None,
        "v-FAIL" if failed else "v-PASS",
    )


def _mode_row(cell: CellRecord, mode: str, checks: dict[str, Check], notes: Notes) -> TableRow:
    """One cancel mode: latencies, tokens after the cancel, RSS growth and its checks."""
    pre = f"cancel_{mode}"
    took = checks.get(f"{pre}_took_effect")
    bounded = checks.get(f"{pre}_tokens_after_bounded")
    after = _value(cell, f"{pre}_tokens_after", notes)
    after = _flagged(
        after, bounded is not None and bounded.ok is False, bounded.detail if bounded else ""
    )
    stop = _value(cell, f"{pre}_stop_latency_s", notes)
    stop = _flagged(stop, took is not None and took.ok is False, took.detail if took else "")
    verdict = _mode_verdict(cell, [c for n, c in checks.items() if n.startswith(f"{pre}_")])
    cycles = _num(as_dict(as_dict(_m(cell, f"{pre}_stop_latency_s")).get("stats")), "n")
    return TableRow(
        mode,
        (
            stop,
            _value(cell, f"{pre}_release_latency_s", notes),
            _value(cell, f"{pre}_to_last_token_s", notes),
            after,
            _leak(cell, mode, checks, notes),
            _value(cell, f"{pre}_rss_slope_bytes_per_cycle", notes),
            verdict,
        ),
        f"{cycles:g} counted cycles" if cycles else "",
        data=mode,
    )


def _modes_table(cell: CellRecord, card: Card, modes: list[str], notes: Notes) -> None:
    """The per-mode table, or the card's note when no mode measured anything."""
    checks = {c.name: c for c in card.checks}
    rows = [_mode_row(cell, mode, checks, notes) for mode in modes]
    if not rows:
        card.note = card.note or "no cancel mode recorded a measurement"
        return
    card.tables.append(
        Table(
            "cancel modes",
            (
                "mode",
                "cancel → stopped",
                "cancel → released",
                "cancel → last token",
                "tokens after cancel",
                "RSS after N vs 1 cycle",
                "RSS slope",
                "checks",
            ),
            tuple(rows),
            "latencies: median over cycles; last token and tokens after the cancel: max",
        )
    )


_STATE_PHASES = ("during", "after_close", "after_release")
_STATE_KEYS = (
    ("state_bytes", "runtime state"),
    ("kv_tokens", "KV tokens"),
    ("busy_slots", "busy slots"),
)


def _state_rows(cell: CellRecord, modes: list[str], notes: Notes) -> list[TableRow]:
    """Runtime state per kind and mode, then the worker's or server's RSS per mode."""
    rows = []
    for key, label in _STATE_KEYS:
        phases = [f"cancel_{m}_{key}_{ph}" for m in modes for ph in _STATE_PHASES]
        if any(_m(cell, k) for k in phases):
            for mode in modes:
                rows.append(
                    TableRow(
                        f"{label} · {mode}",
                        tuple(
                            _value(cell, f"cancel_{mode}_{key}_{ph}", notes) for ph in _STATE_PHASES
                        ),
                    )
                )
    for mode in modes:
        if any(_m(cell, f"cancel_{mode}_rss_{ph}_bytes") for ph in ("during", "after_release")):
            whose = as_dict(_m(cell, f"cancel_{mode}_rss_after_release_bytes")).get("process")
            rows.append(
                TableRow(
                    f"{'server' if 'own process' in str(whose) else 'worker'} RSS · {mode}",
                    tuple(
                        _value(cell, f"cancel_{mode}_rss_{ph}_bytes", notes) for ph in _STATE_PHASES
                    ),
                )
            )
    return rows


def _state_table(cell: CellRecord, card: Card, modes: list[str], notes: Notes) -> None:
    rows = _state_rows(cell, modes, notes)
    if rows:
        card.tables.append(
            Table(
                "memory and runtime state",
                ("what", "during generation", "after the stream closed", "after release"),
                tuple(rows),
                "median over cycles",
            )
        )


def _cancel_facts(cell: CellRecord, card: Card, modes: list[str], notes: Notes) -> None:
    """RSS before the first cycle, tokens the client never saw, the mid-prefill cancel."""
    if _m(cell, "cancel_rss_before_bytes"):
        card.facts.append(
            Part("RSS before cycle 1", _value(cell, "cancel_rss_before_bytes", notes))
        )
    for mode in modes:
        if _m(cell, f"cancel_{mode}_runtime_tokens_unseen"):
            card.facts.append(
                Part(
                    f"tokens the runtime generated that the client never saw · {mode}",
                    _value(cell, f"cancel_{mode}_runtime_tokens_unseen", notes),
                )
            )
    if _m(cell, "cancel_prefill_released_s"):
        card.facts.append(
            Part(
                "mid-prefill cancel → released",
                _value(cell, "cancel_prefill_released_s", notes),
            )
        )
    card.facts.append(Part("mid-prefill cancel", _prefill_probe(cell, notes)))


def _prefill_probe(cell: CellRecord, notes: Notes) -> Value:
    """The mid-prefill cancel's latency, with aborted attempts and the uncancelled prefill."""
    probe = _m(cell, "cancel_prefill_latency_s")
    v = metric_value(probe, notes, "cancel_prefill_latency_s")
    if not probe or probe.get("value") is None:
        return v
    extra = [f"{probe['aborted']} attempts aborted" if probe.get("aborted") else ""]
    if _num(probe, "uncancelled_prefill_s") is not None:
        extra.append(f"uncancelled prefill {fmt_s(_num(probe, 'uncancelled_prefill_s'))}")
    if probe.get("prefill_tokens"):
        extra.append(f"{probe['prefill_tokens']}-token prompt")
    title = "; ".join(x for x in [v.title, *extra] if x)
    return Value(v.text, v.source, title, v.note, v.css)


def cancel_card(cell: CellRecord, card: Card, notes: Notes) -> None:
    modes = cancel_modes(cell)
    _modes_table(cell, card, modes, notes)
    _state_table(cell, card, modes, notes)
    _cancel_facts(cell, card, modes, notes)


def fmt_s(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 1e3:.2f} ms" if abs(value) < 1 else f"{value:.2f} s"


# --- serve ----------------------------------------------------------------------------------


def serve_levels(cell: CellRecord) -> list[int]:
    return sorted(int(v) for v in family(Scenario.SERVE).values(map(str, _metrics(cell))))


def _errors_value(cell: CellRecord, pre: str, notes: Notes) -> Value:
    """Requests that did not complete at one level, as ``n of total``."""
    err = _m(cell, f"{pre}_errors")
    ev = metric_value(err, notes, f"{pre}_errors")
    if not err or _num(err) is None:
        return ev
    total = _num(err, "requests")
    words = f"{_num(err):g}" + (f" of {total:g}" if total is not None else "")
    css = "v-FAIL" if _num(err) else ""
    return Value(words, ev.source, "requests that did not complete", None, css)


def _level_row(cell: CellRecord, n: int, notes: Notes) -> TableRow:
    pre = f"serve_c{n}"
    errors = _errors_value(cell, pre, notes)
    return TableRow(
        str(n),
        (
            _value(cell, f"{pre}_ttft_p50_s", notes),
            _value(cell, f"{pre}_ttft_p90_s", notes),
            _value(cell, f"{pre}_ttft_p99_s", notes),
            _value(cell, f"{pre}_tpot_p50_s", notes),
            _value(cell, f"{pre}_tpot_p90_s", notes),
            _value(cell, f"{pre}_throughput_tps", notes),
            errors,
        ),
        data=str(n),
    )


def _levels_table(cell: CellRecord, card: Card, notes: Notes) -> None:
    """Client-side figures per concurrency level, or the card's note when none measured."""
    rows = [_level_row(cell, n, notes) for n in serve_levels(cell)]
    if not rows:
        card.note = card.note or "no concurrency level recorded a measurement"
        return
    card.tables.append(
        Table(
            "per concurrency",
            (
                "concurrent streams",
                "TTFT p50",
                "TTFT p90",
                "TTFT p99",
                "TPOT p50",
                "TPOT p90",
                "tokens/s (all streams)",
                "errors",
            ),
            tuple(rows),
            "client side; TTFT and TPOT pooled over rounds; throughput: median over rounds",
        )
    )


def serve_card(cell: CellRecord, card: Card, notes: Notes) -> None:
    _levels_table(cell, card, notes)
    _server_counters(cell, card, notes)
    _invariance(cell, card, notes)
    if not _m(cell, "serve_survived"):  # served in process by the engine: no server to abuse
        card.facts.append(Part("startup", _value(cell, "serve_startup_s", notes)))
        return
    _abuse(cell, card, notes)
    _endpoints(cell, card, notes)


def _survived(cell: CellRecord, notes: Notes) -> Value:
    survived = _m(cell, "serve_survived")
    sv = metric_value(survived, notes, "serve_survived")
    if not survived or survived.get("value") is None:
        return sv
    css = "v-PASS" if survived.get("value") == "yes" else "v-FAIL"
    return Value(sv.text, sv.source, str(survived.get("detail") or sv.title), None, css)


def _abuse(cell: CellRecord, card: Card, notes: Notes) -> None:
    """How the server came through the abuse: disconnects, a slow consumer, startup."""
    card.facts += [
        Part("survived the abuse", _survived(cell, notes)),
        Part("startup", _value(cell, "serve_startup_s", notes)),
        Part(
            "after a client disconnect, next TTFT",
            _value(cell, "serve_disconnect_next_ttft_s", notes),
        ),
        *(
            [
                Part(
                    "after a client disconnect, slots idle again",
                    _value(cell, "serve_disconnect_slot_free_s", notes),
                )
            ]
            if _m(cell, "serve_disconnect_slot_free_s")
            else []
        ),
        Part(
            "behind a slow consumer, TTFT", _value(cell, "serve_behind_slow_consumer_ttft_s", notes)
        ),
    ]


def _endpoints(cell: CellRecord, card: Card, notes: Notes) -> None:
    """/health and /metrics, answers to malformed requests, interrupted streams, server RSS."""
    for key, label in (("serve_health_status", "/health"), ("serve_metrics_status", "/metrics")):
        if _m(cell, key):
            card.facts.append(Part(label, _status(cell, key, notes, want_ok=True)))
    for name in ("invalid_json", "wrong_types", "over_context"):
        key = f"serve_malformed_{name}_status"
        if _m(cell, key):
            card.facts.append(
                Part(
                    f"malformed: {name.replace('_', ' ')}", _status(cell, key, notes, want_ok=False)
                )
            )
    for key, label in (
        ("serve_default_interrupted_streams", "streams interrupted by the default settings"),
        ("serve_server_rss_start_bytes", "server RSS after start"),
        ("serve_server_rss_after_abuse_bytes", "server RSS after the abuse"),
    ):
        if _m(cell, key):
            card.facts.append(Part(label, _value(cell, key, notes)))


_SERVER_COLUMNS = (
    ("tokens_predicted", "tokens generated"),
    ("decode_calls", "decode calls"),
    ("tokens_per_decode", "tokens per decode"),
    ("tg_tps", "per-request TG tok/s"),
    ("busy_slots_max", "busy slots (max seen)"),
)


def _server_counters(cell: CellRecord, card: Card, notes: Notes) -> None:
    """The server's own counters per concurrency level (``serve_c<N>_server_*``)."""
    levels = [n for n in serve_levels(cell) if _m(cell, f"serve_c{n}_server_tokens_predicted")]
    if not levels:
        return
    rows = tuple(
        TableRow(
            str(n),
            (
                *(_value(cell, f"serve_c{n}_server_{k}", notes) for k, _ in _SERVER_COLUMNS),
                _value(cell, f"serve_c{n}_server_idle_after_s", notes),
            ),
            data=str(n),
        )
        for n in levels
    )
    card.tables.append(
        Table(
            "the server's own counters per concurrency",
            ("concurrent streams", *(h for _, h in _SERVER_COLUMNS), "slots idle again after"),
            rows,
            "deltas of the server's /metrics counters over each level; busy slots from /slots "
            "polled every 10 ms; tokens per decode above 1: requests shared a batch",
        )
    )


_PAIR_HEADS = (
    ("concurrent_sequential", "concurrent vs one at a time"),
    ("concurrent_reference", "concurrent vs reference"),
    ("sequential_reference", "one at a time vs reference"),
)
_BAD_KINDS = ("isolation", "mismatch", "length")


def _pair_value(v: Any, strict: bool) -> Value:
    if not isinstance(v, dict):
        return text("—", "not compared")
    kind = str(v.get("kind") or "?")
    if kind == "agree":
        return text(f"agree ({v.get('compared')})", "every token id equal", "v-PASS")
    margin = v.get("margin")
    words = f"{kind} at token {v.get('position')}"
    if isinstance(margin, int | float) and not isinstance(margin, bool):
        words += f", margin {margin:.3g}"
    css = "v-FAIL" if kind in _BAD_KINDS and strict else "v-WARN"
    return text(words, str(v.get("margin_detail") or ""), css)


def _invariance(cell: CellRecord, card: Card, notes: Notes) -> None:
    """Batch invariance and session isolation: per request, each pair of runs."""
    inv = as_dict(as_dict(_m(cell, M.LIFECYCLE_CHECKS)).get("invariance"))
    reqs = [r for r in as_list(inv.get("requests")) if isinstance(r, dict)]
    metric = _m(cell, "serve_invariance")
    if not reqs:
        if metric is not None:
            card.facts.append(Part("batch invariance", _value(cell, "serve_invariance", notes)))
        return
    strict_ref = not inv.get("reference_check")
    rows = []
    for r in reqs:
        versus = as_dict(r.get("versus"))
        errors = as_dict(r.get("errors"))
        cells = tuple(
            _pair_value(versus.get(pair), pair == "concurrent_sequential" or strict_ref)
            for pair, _ in _PAIR_HEADS
        )
        rows.append(
            TableRow(
                str(r.get("name", "?")),
                (
                    text(str(r.get("prompt_tokens", "?"))),
                    text(str(r.get("max_tokens", "?"))),
                    *cells,
                ),
                help="; ".join(f"{k}: {v}" for k, v in errors.items()),
                css="v-FAIL" if errors else "",
                data=str(r.get("name", "")),
            )
        )
    card.tables.append(
        Table(
            "batch invariance and session isolation",
            ("request", "prompt tokens", "max tokens", *(h for _, h in _PAIR_HEADS)),
            tuple(rows),
            f"greedy requests sent all at once, then one at a time, and the numpy reference; at "
            f"a divergence the margin is the logit gap between the two tokens (server: n_probs "
            f"top log-probabilities; reference: its logits): within {inv.get('tie_margin')} a "
            "near-tie flip (numerics), beyond it isolation (concurrent vs one at a time) or a "
            "mismatch (vs the reference)"
            + (f"; reference: {inv['reference_check']}" if inv.get("reference_check") else ""),
        )
    )
    card.facts.append(Part("batch invariance", _value(cell, "serve_invariance", notes)))


def _status(cell: CellRecord, key: str, notes: Notes, *, want_ok: bool) -> Value:
    """An HTTP status: an endpoint should answer < 400; a malformed request should get a 4xx."""
    metric = _m(cell, key)
    v = metric_value(metric, notes, key)
    status = _num(metric)
    if status is None:
        return v
    good = status < 400 if want_ok else 400 <= status < 500
    body = str(as_dict(metric).get("body") or as_dict(metric).get("detail") or "")[:300]
    return Value(v.text, v.source, body or v.title, None, "" if good else "v-WARN")


# --- traces ---------------------------------------------------------------------------------


def _t(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _traces(cell: CellRecord, card: Card) -> None:
    traces = [
        t
        for t in as_list(as_dict(_m(cell, M.LIFECYCLE_CHECKS)).get("traces"))
        if isinstance(t, dict)
    ]
    card.traces_total = len(traces)
    if not traces:
        return
    src = str(as_dict(_m(cell, M.LIFECYCLE_CHECKS)).get("source") or "harness-clock")
    rows = []

    def since(tr: dict[str, Any], key: str, base_key: str = "queued") -> Value:
        at, base = _t(tr.get(key)), _t(tr.get(base_key))
        if at is None or base is None:
            return text("—", f"no {key.replace('_', ' ')} recorded")
        return Value(fmt_s(at - base), src, f"{key} at {at:.6f} s")

    for tr in traces[:MAX_TRACES]:
        terminal = str(tr.get("terminal") or "none")
        css = "" if terminal in ("completed", "cancelled") else "v-WARN"
        if tr.get("terminal") is None:
            css = "v-FAIL"
        rows.append(
            TableRow(
                str(tr.get("name", "?")),
                (
                    since(tr, "prefill_start"),
                    since(tr, "first_token"),
                    Value(str(len(as_list(tr.get("tokens")))), src, "token events recorded"),
                    text(terminal, str(tr.get("error") or ""), css),
                    since(tr, "terminal_t"),
                    since(tr, "released", "terminal_t"),
                    Value(str(tr["tokens_after_cancel"]), src, "tokens sampled after the cancel")
                    if "tokens_after_cancel" in tr
                    else text(""),
                ),
            )
        )
    card.traces = Table(
        "request state traces",
        (
            "request",
            "queued → prefill",
            "queued → first token",
            "tokens",
            "terminal",
            "queued → terminal",
            "terminal → released",
            "tokens after cancel",
        ),
        tuple(rows),
    )


# --- the panel ------------------------------------------------------------------------------


def _card(col: Column, anchor: str, cell: CellRecord, vary: list[str], notes: Notes) -> Card:
    found = scenario_of(cell)
    scenario = found.value if found is not None else "?"
    outcome = as_dict(cell.get("outcome"))
    label = fixture_label(cell)
    if vary:
        label += f" {params_label(cell, vary)}"
    lc = _m(cell, M.LIFECYCLE_CHECKS)
    card = Card(
        anchor,
        col.label,
        str(col.run.get("run_id", "")),
        label,
        scenario,
        str(cell.get("verdict", "")),
        str(outcome.get("status", "?")),
        str(outcome.get("message") or ""),
        str((lc or {}).get("api") or ""),
    )
    card.checks = _checks(cell)
    if lc is not None:
        v = metric_value(lc, notes, M.LIFECYCLE_CHECKS)
        failed = any(c.ok is False for c in card.checks)
        card.checks_value = Value(
            v.text,
            v.source,
            "lifecycle checks passed",
            v.note,
            "v-FAIL" if failed else "v-PASS" if card.checks else "",
        )
        card.findings = [str(f) for f in as_list(lc.get("findings"))]
        card.skipped = [(str(k), str(v)) for k, v in as_dict(lc.get("skipped")).items()]
    measured = [k for k in _metrics(cell) if str(k).startswith(f"{scenario}_")]
    if not measured and lc is None:
        why = f"the cell ended with outcome {card.status} before the {scenario} scenario measured"
        card.note = f"no data: {why}" + (f" ({card.message})" if card.message else "")
        card.checks_value = unavailable(why, notes)
        return card
    spec = SPECS.get(found) if found is not None else None
    render = (spec.hook("report") if spec is not None else None) or _none
    render(cell, card, notes)
    _traces(cell, card)
    return card


def sample_card(cell: CellRecord, card: Card, notes: Notes) -> None:
    """The sampler panel: parameters, the order documented and found, each check's result."""
    sampler = as_dict(as_dict(_m(cell, M.LIFECYCLE_CHECKS)).get("sampler"))
    params = as_dict(sampler.get("params"))
    card.facts += [
        Part("parameters", Value(", ".join(f"{k} {v}" for k, v in params.items()), "",
                                 f"seed {sampler.get('seed')}")),
        Part("documented order", Value(str(sampler.get("order_documented")), "",
                                       str(sampler.get("order_source") or ""))),
        Part("order found", _value(cell, "sample_order_found", notes)),
        Part("fit to the documented order (p)", _value(cell, "sample_fit_p_value", notes)),
        Part("first-token draws", _value(cell, "sample_draws", notes)),
    ]  # fmt: skip
    rows = []
    for c in as_list(sampler.get("checks")):
        c = as_dict(c)
        ok = c.get("ok")
        div = as_dict(c.get("divergence"))
        where = (
            f"at {div.get('position')}: ids {div.get('tokens')}"
            + (
                f", reference logits {div['reference_logits']}"
                if div.get("reference_logits")
                else ""
            )
            if div
            else "none"
        )
        rows.append(TableRow(
            str(c.get("name", "")).removeprefix("sample_").replace("_", " "),
            (Value("pass" if ok else "fail", "", str(c.get("detail", "")), None,
                   "v-PASS" if ok else "v-FAIL"), Value(where, "")),
        ))  # fmt: skip
    if rows:
        card.tables.append(Table("sampler checks", ("check", "result", "first divergence"),
                                 tuple(rows)))  # fmt: skip


def _none(cell: CellRecord, card: Card, notes: Notes) -> None:
    card.note = f"no view for scenario {card.scenario!r}; its metrics are in the evidence"


def panel(cols: list[Column], notes: Notes) -> Panel:
    """Every scenario cell, in column then matrix order, plus the panel's plots."""
    found = [(col, a, c) for col in cols for a, c in col.cells if scenario_of(c) is not None]
    cards = []
    for col, anchor, cell in found:
        twins = [c for _, _, c in found if fixture_label(c) == fixture_label(cell)]
        cards.append(_card(col, anchor, cell, varying_params(twins), notes))
    note = None
    if not cards:
        note = (
            "no data: no cell ran a lifecycle scenario; give a fixture "
            f"scenario = {' | '.join(repr(s.value) for s in Scenario.lifecycle())} "
            "(see matrix/lifecycle.toml)"
        )
    figures = [plots.ttft_vs_concurrency(cols), plots.cancel_leak(cols)] if cards else []
    return Panel(cards, figures, note)
