"""Request state traces and the pure logic the lifecycle checks rest on.

One :class:`RequestTrace` per request follows the control path queued -> prefill start -> first
token -> tokens -> terminal state (``completed`` | ``cancelled`` | ``failed``, plus
``interrupted`` when a server ended the stream on its own) -> resources released. Times are
``time.perf_counter()`` values while a scenario runs and seconds from the scenario's origin once
stored. Nothing here imports a runtime.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rtmatrix.outcome import Metric, Source, percentile, summarize

TERMINAL_STATES = ("completed", "cancelled", "failed", "interrupted")
QUANTILES = (50, 90, 99)

clock: Callable[[], float] = time.perf_counter


@dataclass
class RequestTrace:
    """The state trace of one request. ``None`` marks a state that was not reached (or, with a
    ``why_missing`` entry, one that cannot be observed from where the harness stands)."""

    name: str
    queued: float | None = None
    prefill_start: float | None = None
    first_token: float | None = None
    tokens: list[float] = field(default_factory=list)
    terminal: str | None = None
    terminal_t: float | None = None
    released: float | None = None
    cancel_requested: float | None = None
    why_missing: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def token(self, t: float | None = None) -> float:
        now = clock() if t is None else t
        if self.first_token is None:
            self.first_token = now
        self.tokens.append(now)
        return now

    def finish(self, state: str, t: float | None = None, **info: Any) -> None:
        if state not in TERMINAL_STATES:
            msg = f"unknown terminal state {state!r}; valid: {', '.join(TERMINAL_STATES)}"
            raise ValueError(msg)
        if self.terminal is not None:
            msg = f"request {self.name!r} already ended as {self.terminal!r}"
            raise RuntimeError(msg)
        self.terminal = state
        self.terminal_t = clock() if t is None else t
        self.info.update(info)

    def tokens_after_cancel(self) -> int:
        if self.cancel_requested is None:
            return 0
        return sum(1 for t in self.tokens if t > self.cancel_requested)

    def to_dict(self, origin: float) -> dict[str, Any]:
        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - origin, 6)

        out: dict[str, Any] = {
            "name": self.name,
            "queued": rel(self.queued),
            "prefill_start": rel(self.prefill_start),
            "first_token": rel(self.first_token),
            "tokens": [rel(t) for t in self.tokens],
            "terminal": self.terminal,
            "terminal_t": rel(self.terminal_t),
            "released": rel(self.released),
        }
        if self.cancel_requested is not None:
            out["cancel_requested"] = rel(self.cancel_requested)
            out["tokens_after_cancel"] = self.tokens_after_cancel()
        if self.why_missing:
            out["why_missing"] = dict(self.why_missing)
        if self.info:
            out["info"] = dict(self.info)
        return out


# -- numbers ---------------------------------------------------------------------------------------
def gaps(times: Sequence[float | None]) -> list[float]:
    """Intervals between consecutive timestamps (``None`` entries skipped)."""
    ts = [t for t in times if t is not None]
    return [b - a for a, b in itertools.pairwise(ts)]


def quantiles(samples: Sequence[float], qs: Iterable[int] = QUANTILES) -> dict[str, float]:
    """``{"p50": ..., "p90": ..., "p99": ...}``; empty when there are no samples."""
    if not samples:
        return {}
    return {f"p{q}": percentile(samples, q) for q in qs}


def delivery_lags(token_times: Sequence[float], chunk_times: Sequence[float]) -> list[float]:
    """For each token, the wait until the first streamed chunk at or after it was produced.

    A token produced after the last chunk (it never reached the consumer) is left out; the
    caller sees that as fewer lags than tokens."""
    chunks = sorted(chunk_times)
    out: list[float] = []
    j = 0
    for t in sorted(token_times):
        while j < len(chunks) and chunks[j] < t:
            j += 1
        if j == len(chunks):
            break
        out.append(chunks[j] - t)
    return out


def check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail}


def trace_checks(
    traces: Sequence[dict[str, Any]], *, need_release: bool, label: str
) -> list[dict[str, Any]]:
    """Every stored trace reached a terminal state (and was released, where the harness owns the
    release)."""
    missing = [t["name"] for t in traces if t.get("terminal") not in TERMINAL_STATES]
    out = [
        check(
            f"{label}_terminal_state",
            not missing and bool(traces),
            f"{len(traces) - len(missing)}/{len(traces)} request(s) reached a terminal state"
            + (f"; missing: {', '.join(missing[:8])}" if missing else ""),
        )
    ]
    if need_release:
        unreleased = [t["name"] for t in traces if t.get("released") is None]
        out.append(
            check(
                f"{label}_released",
                not unreleased and bool(traces),
                f"{len(traces) - len(unreleased)}/{len(traces)} request(s) released their state"
                + (f"; not released: {', '.join(unreleased[:8])}" if unreleased else ""),
            )
        )
    return out


def leak_check(
    name: str, after_each: Sequence[float], tolerance: float, unit: str = "bytes"
) -> dict[str, Any]:
    """Memory after N cycles vs after 1: growth must stay within ``tolerance``."""
    if len(after_each) < 2:
        return check(name, False, f"need 2+ cycles to compare, got {len(after_each)}")
    growth = after_each[-1] - after_each[0]
    ok = growth <= tolerance
    return check(
        name,
        ok,
        f"after {len(after_each)} cycles {after_each[-1]:.0f} {unit} vs after 1 cycle "
        f"{after_each[0]:.0f} {unit}: growth {growth:+.0f} {unit} (tolerance {tolerance:.0f})",
    )


def trend_leak_check(
    name: str, after_each: Sequence[float], tolerance: float, unit: str = "bytes"
) -> dict[str, Any]:
    """Memory over N cycles judged on its trend: a leak is a steady growth whose robust slope
    (Theil-Sen, scipy.stats.theilslopes), even at the low end of its 95 % confidence interval,
    adds up to more than ``tolerance`` over the cycles. A one-off step (an allocator growing
    its pool once) barely moves that slope; one pair of endpoints would take it for a leak.
    Fewer than 3 cycles: the endpoint comparison of :func:`leak_check`."""
    n = len(after_each)
    if n < 3:
        return leak_check(name, after_each, tolerance, unit)
    from scipy import stats

    fit = stats.theilslopes(list(after_each), alpha=0.95)
    lo, hi = float(fit.low_slope), float(fit.high_slope)
    steady = lo * (n - 1)
    growth = after_each[-1] - after_each[0]
    return check(
        name,
        steady <= tolerance,
        f"trend over {n} cycles: {float(fit.slope):+.0f} {unit}/cycle (95 % CI {lo:+.0f} .. "
        f"{hi:+.0f}); the low end adds up to {steady:+.0f} {unit} over the cycles (tolerance "
        f"{tolerance:.0f}); endpoints: {after_each[-1]:.0f} vs {after_each[0]:.0f} {unit}, "
        f"{growth:+.0f}",
    )


def constant_check(
    name: str, values: Sequence[float | None], expect: float, what: str
) -> dict[str, Any]:
    """Every value equals ``expect`` (runtime state that must be back to empty)."""
    bad = [(i, v) for i, v in enumerate(values) if v != expect]
    return check(
        name,
        not bad and bool(values),
        f"{what} was {expect:g} after {len(values) - len(bad)}/{len(values)} release(s)"
        + (f"; first differing: cycle {bad[0][0] + 1} -> {bad[0][1]}" if bad else ""),
    )


# -- metric helpers --------------------------------------------------------------------------------
def measured(samples: Sequence[float], unit: str, source: Source, **detail: Any) -> Metric:
    """Median of samples, or unavailable when there are none (the reason is in ``detail``)."""
    if not samples:
        return Metric.unavailable(unit, str(detail.get("why_none", "no samples")))
    detail.pop("why_none", None)
    return Metric.measured(samples, unit, source, **detail)


def maximum(samples: Sequence[float], unit: str, source: Source, **detail: Any) -> Metric:
    """The largest sample (for bounds: tokens after a cancel), samples and stats kept."""
    if not samples:
        return Metric.unavailable(unit, str(detail.get("why_none", "no samples")))
    detail.pop("why_none", None)
    vals = [float(s) for s in samples]
    return Metric(
        max(vals),
        unit,
        source,
        samples=vals,
        detail={"aggregate": "max", "stats": summarize(vals), **detail},
    )


def quantile_metrics(
    prefix: str, samples: Sequence[float], source: Source, why_none: str, **detail: Any
) -> dict[str, Metric]:
    """``<prefix>_p50_s``/``_p90_s``/``_p99_s`` from pooled samples (seconds)."""
    out: dict[str, Metric] = {}
    qs = quantiles(samples)
    for q in QUANTILES:
        key = f"{prefix}_p{q}_s"
        out[key] = (
            Metric(qs[f"p{q}"], "s", source, detail={"n": len(samples), **detail})
            if qs
            else Metric.unavailable("s", why_none)
        )
    return out
