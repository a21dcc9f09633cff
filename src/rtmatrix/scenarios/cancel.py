"""The ``cancel`` scenario: start a long generation, cancel it after k tokens, measure how it
stops and whether it gives its memory back; repeat; then try to cancel a running prefill.

A generation thread consumes the runtime's stream (as an app's worker thread would); the
controller waits until the runtime has sampled ``k`` tokens, requests the cancel (``t_cancel``)
and joins. Per cycle, on the harness clock: cancel -> last token, cancel -> stream stopped
(the generation thread left the runtime's stream), cancel -> resources released (sequence state
cleared and read back); tokens sampled after ``t_cancel``; RSS and the runtime's own context
state before, during (at token k, read between runtime calls on the generation thread), after
the stream stopped and after the release. Modes (option ``cancel_modes``): ``stop`` (the
runtime's per-token stop hook) and ``close`` (the consumer closes the stream iterator at the
next chunk). ``close`` masks the byte-fallback tokens: llama-cpp-python holds back a byte token
that does not complete a UTF-8 character, and on the fixtures' random bytes that can hold back
the rest of the generation, so the consumer would get no chunk to close at (the ``stream``
scenario measures that hold-back as ``stream_delivery_lag_max_s``).

Cycles: ``[run] warmup`` uncounted ones first (checked, not in the leak series or the figures),
then ``cancel_cycles`` counted ones; the leak check is judged on the trend of RSS over the counted
cycles (:func:`rtmatrix.scenarios.trace.trend_leak_check`: a steady growth, not a one-off step;
``rss_growth_bytes`` keeps the endpoint pair). Where the runtime works in another process (a
server, the backend's ``ProcessMemory`` capability) that process's RSS is the one measured; a
backend whose state reports ``busy_slots`` must show 0 after every release.

Options: ``cancel_cycles`` (20), ``cancel_after_tokens`` (k, 8), ``cancel_modes``
(["stop", "close"]), ``cancel_max_tokens_after`` (tokens sampled after the cancel, 1: the token
in flight), ``leak_tolerance_mb`` (RSS growth allowed from cycle 1 to cycle N, 1),
``cancel_prefill_attempts`` (3; 0 skips the mid-prefill probe).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from typing import Any, Self, cast

import psutil

from rtmatrix.adapters.base import Adapter
from rtmatrix.adapters.capabilities import (
    Abortable,
    ProcessMemory,
    StreamBackend,
    Streaming,
    missing,
)
from rtmatrix.fixtures.model import make_prompt
from rtmatrix.names import Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job
from rtmatrix.scenarios.spec import Lifecycle, Mark, ScenarioImpl, ScenarioOptions, ScenarioResult
from rtmatrix.scenarios.trace import (
    RequestTrace,
    check,
    clock,
    constant_check,
    maximum,
    measured,
    trace_checks,
    trend_leak_check,
)

MODES = ("stop", "close")
_PROC = psutil.Process()


def rss() -> int:
    return int(_PROC.memory_info().rss)


@dataclass(frozen=True)
class CancelOptions(ScenarioOptions):
    cancel_cycles: int = 20
    #: k: the cancel is requested once the runtime has sampled this many tokens
    cancel_after_tokens: int = 8
    cancel_modes: list[str] = field(default_factory=lambda: list(MODES))
    #: tokens allowed after the cancel (1: the token in flight)
    cancel_max_tokens_after: int = 1
    #: RSS growth allowed from cycle 1 to cycle N
    leak_tolerance_mb: float = 1.0
    #: 0 skips the mid-prefill probe
    cancel_prefill_attempts: int = 3

    @classmethod
    def from_job(cls, job: Job) -> Self:
        opts = {**cls.defaults(), **{k: v for k, v in job.options.items() if k in cls.defaults()}}
        bad = [m for m in opts["cancel_modes"] if m not in MODES]
        if bad:
            msg = f"options.cancel_modes: unknown {bad}; valid: {', '.join(MODES)}"
            raise ValueError(msg)
        if int(opts["cancel_cycles"]) < 2:
            msg = "options.cancel_cycles must be 2 or more (memory after N cycles vs after 1)"
            raise ValueError(msg)
        return cls(
            cancel_cycles=int(opts["cancel_cycles"]),
            cancel_after_tokens=int(opts["cancel_after_tokens"]),
            cancel_modes=list(opts["cancel_modes"]),
            cancel_max_tokens_after=int(opts["cancel_max_tokens_after"]),
            leak_tolerance_mb=float(opts["leak_tolerance_mb"]),
            cancel_prefill_attempts=int(opts["cancel_prefill_attempts"]),
        )


@dataclass
class CancelResult(ScenarioResult):
    """What the worker's half of ``cancel`` found (its dict form crosses to the parent).
    ``modes``: per mode, ``{"unavailable": why}`` or ``{"how", "masked_tokens", "wall_s",
    "cycles": [one record per cycle]}``; ``prefill``: the mid-prefill probe."""

    scenario: str = Scenario.CANCEL.value
    runtime: str | None = None
    api: str | None = None
    state_doc: str | None = None
    k: int | None = None
    cycles: int = 0
    max_tokens: int = 0
    prompt_tokens: int | None = None
    leak_tolerance_bytes: float | None = None
    bound_tokens_after: int = 0
    state_before: dict[str, int | None] = field(default_factory=dict)
    rss_before: int | None = None
    rss_process: str | None = None
    modes: dict[str, dict[str, Any]] = field(default_factory=dict)
    warmup_cycles: int = 0
    prefill: dict[str, Any] = field(default_factory=dict)
    traces: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)

    def lifecycle(self) -> Lifecycle:
        return Lifecycle(self.api, self.checks, self.findings, {}, self.traces)


@dataclass(frozen=True)
class Plan:
    """What every cancel cycle shares. ``pool`` has one long-lived generation thread: every
    runtime call happens there (a thread per cycle would measure the C allocator's per-thread
    arenas, not the runtime)."""

    be: StreamBackend
    prompt: list[int]
    max_tokens: int
    k: int
    cycles: int
    warmup: int
    wait_s: float
    pool: ThreadPoolExecutor
    origin: float
    #: RSS of the process the runtime works in (the worker's own, or the backend's server)
    rss: Callable[[], int | None] = rss


def one_cycle(
    plan: Plan, banned: list[int], mode: str, name: str
) -> tuple[RequestTrace, dict[str, Any]]:
    """One generation cancelled after ``k`` tokens."""
    be, k, wait_s = plan.be, plan.k, plan.wait_s
    tr = RequestTrace(name)
    cancel = threading.Event()
    reached = threading.Event()
    # the token stamp and the flag read (hook), and the cancel stamp and the flag write
    # (controller), each happen together: a token stamped after t_cancel saw the flag
    order = threading.Lock()
    rec: dict[str, Any] = {"mode": mode}

    def on_token() -> bool:
        with order:
            tr.token()
            stop = mode == "stop" and cancel.is_set()
        if len(tr.tokens) == k:
            rec["state_during"] = be.state()
            rec["rss_during"] = plan.rss()
            reached.set()
        return stop

    def on_prefill() -> None:
        tr.prefill_start = clock()

    def generate() -> None:
        chunks = 0
        try:
            stream = be.open_stream(plan.prompt, plan.max_tokens, banned, on_token, on_prefill)
            for _ in stream:
                chunks += 1
                if mode == "close" and cancel.is_set():
                    close = getattr(stream, "close", None)
                    if close is not None:
                        close()
                    break
            state = "cancelled" if cancel.is_set() else "completed"
            tr.finish(state, chunks=chunks)
        except Exception as exc:  # the terminal state is recorded either way
            tr.finish("failed", error=f"{type(exc).__name__}: {exc}")
            rec["error"] = tr.info["error"]
        finally:
            reached.set()
        rec["state_after_close"] = be.state()
        rec["rss_after_close"] = plan.rss()
        be.release()
        tr.released = clock()
        rec["state_after_release"] = be.state()

    rec["state_at_open"] = be.state()
    tr.queued = clock()
    done = plan.pool.submit(generate)
    reached.wait(wait_s)
    with order:
        tr.cancel_requested = clock()
        cancel.set()
    try:
        done.result(wait_s)
    except FuturesTimeout:
        rec["error"] = f"the generation thread did not stop within {wait_s:.0f} s of the cancel"
        return tr, rec
    gc.collect()
    rec["rss_after_release"] = plan.rss()
    return tr, rec | cycle_figures(tr, rec)


def cycle_figures(tr: RequestTrace, rec: dict[str, Any]) -> dict[str, Any]:
    """A finished cycle's figures, from its trace (seconds from the cancel request) and the
    runtime's token counter around it."""
    t_cancel = tr.cancel_requested or 0.0
    last = tr.tokens[-1] if tr.tokens else None
    out: dict[str, Any] = {
        "tokens_before": sum(1 for t in tr.tokens if t <= t_cancel),
        "tokens_after": tr.tokens_after_cancel(),
        "to_last_token_s": max(0.0, last - t_cancel) if last is not None else None,
        "stop_s": tr.terminal_t - t_cancel if tr.terminal_t is not None else None,
        "release_s": tr.released - t_cancel if tr.released is not None else None,
        "terminal": tr.terminal,
    }
    served = _delta(rec, "tokens_predicted_total")
    if served is not None:
        # the runtime's own count of what it generated, against what reached the client
        out["runtime_tokens"] = served
        out["runtime_tokens_unseen"] = served - len(tr.tokens)
    return out


def _delta(rec: dict[str, Any], key: str) -> int | None:
    a = (rec.get("state_at_open") or {}).get(key)
    b = (rec.get("state_after_release") or {}).get(key)
    return int(b) - int(a) if isinstance(a, int) and isinstance(b, int) else None


def run(
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Mark,
) -> CancelResult:
    """Every mode's cycles, then the mid-prefill probe. The registry has checked that
    ``adapter`` offers ``Streaming``."""
    be = cast(Streaming, adapter).stream_backend()
    opts = CancelOptions.from_job(job)
    p = job.params
    max_tokens = p.n_ctx - len(prompt) - 1
    k = opts.cancel_after_tokens
    if not 0 < k < max_tokens:
        msg = f"options.cancel_after_tokens {k} must be in 1..{max_tokens - 1} (n_ctx - prompt)"
        raise ValueError(msg)
    wait_s = max(30.0, job.timeout_s / 4)
    origin = clock()
    to_mono = time.monotonic() - origin
    be.release()
    gc.collect()
    rss_of: Callable[[], int | None] = be.process_rss if isinstance(be, ProcessMemory) else rss
    res = CancelResult(
        runtime=be.runtime,
        api=be.api,
        state_doc=be.state_doc,
        k=k,
        cycles=opts.cancel_cycles,
        max_tokens=max_tokens,
        prompt_tokens=len(prompt),
        leak_tolerance_bytes=opts.leak_tolerance_mb * 2**20,
        bound_tokens_after=opts.cancel_max_tokens_after,
        state_before=be.state(),
        rss_before=rss_of(),
        rss_process="the runtime's own process (ProcessMemory)"
        if isinstance(be, ProcessMemory)
        else "the worker process",
        warmup_cycles=p.warmup,
    )
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtmatrix-generation")
    plan = Plan(be, prompt, max_tokens, k, opts.cancel_cycles, p.warmup, wait_s, pool, origin,
                rss_of)  # fmt: skip
    try:
        for i, mode in enumerate(opts.cancel_modes):
            first = mark if i == 0 else None
            res.checks += run_mode(plan, mode, banned, res, first, to_mono)
    finally:
        pool.shutdown(wait=False)
    t_pre = clock()
    res.prefill = prefill_probe(adapter, be, job, prompt, banned, opts.cancel_prefill_attempts)
    res.prefill["wall_s"] = clock() - t_pre
    res.checks += trace_checks(res.traces, need_release=True, label="cancel")
    res.checks += prefill_checks(res.prefill)
    res.findings = findings(res)
    return res


def prefill_checks(pre: dict[str, Any]) -> list[dict[str, Any]]:
    """The context still gives the same first token after the aborted prefill(s)."""
    usable = pre.get("usable_after_abort")
    if not pre.get("attempts") or usable is None:
        return []
    return [
        check(
            "cancel_prefill_context_usable",
            bool(usable),
            "after the aborted prefill(s) the context "
            + ("still produces the same first token" if usable else "misbehaves")
            + f" ({pre.get('usable_detail', '')})",
        )
    ]


def run_mode(
    plan: Plan,
    mode: str,
    banned: list[int],
    res: CancelResult,
    mark: Mark | None,
    to_mono: float,
) -> list[dict[str, Any]]:
    be = plan.be
    if mode not in be.cancel_modes:
        res.modes[mode] = {"unavailable": be.missing_modes.get(mode, "not supported")}
        return []
    recs: list[dict[str, Any]] = []
    # 'close' acts at chunks: mask the byte-fallback tokens so that every token is a chunk
    # (a held-back byte token would delay the close; the stream scenario measures that)
    masked = sorted({*banned, *be.byte_tokens()}) if mode == "close" else banned
    t_mode = clock()
    for c in range(plan.warmup + plan.cycles):
        counted = c >= plan.warmup
        tr, rec = one_cycle(plan, masked, mode, f"{mode}-{c}" if counted else f"{mode}-warmup-{c}")
        if c == 0 and mark is not None and tr.first_token is not None:
            mark("first_token", tr.first_token + to_mono)
        rec["counted"] = counted
        recs.append(rec)
        res.traces.append(tr.to_dict(plan.origin))
        if "error" in rec and rec.get("terminal") is None:
            break  # a stuck generation thread: do not start another on the same context
    res.modes[mode] = {
        "how": be.cancel_modes[mode],
        "masked_tokens": len(masked),
        "wall_s": clock() - t_mode,
        "cycles": recs,
    }
    return mode_checks(mode, recs, res)


def findings(res: CancelResult) -> list[str]:
    out: list[str] = []
    empty = (res.state_before or {}).get("state_bytes")
    for mode, data in (res.modes or {}).items():
        if "unavailable" in data:
            out.append(f"mode {mode!r} unavailable: {data['unavailable']}")
            continue
        kept: list[int] = [
            v
            for r in data.get("cycles", [])
            if (v := (r.get("state_after_close") or {}).get("state_bytes")) is not None
        ]
        if kept and empty is not None and min(kept) > empty:
            out.append(
                f"mode {mode!r}: after the stream stopped the runtime still held its context "
                f"state ({min(kept)}-{max(kept)} bytes vs {empty} empty) until the harness "
                "released it"
            )
    return out + prefill_findings(res.prefill or {})


def prefill_findings(pre: dict[str, Any]) -> list[str]:
    out: list[str] = []
    att = pre.get("attempts") or []
    if not att:
        return out
    n = sum(1 for a in att if a.get("aborted"))
    out.append(
        f"mid-prefill cancel: {n}/{len(att)} attempt(s) aborted a {pre.get('prompt_tokens')}"
        f"-token prefill ({pre.get('how')})"
        + (f"; attempt 1: {att[0].get('why')}" if not n else "")
    )
    late = max((a.get("flag_late_s") or 0.0 for a in att), default=0.0)
    if late > 0.001:
        out.append(
            f"mid-prefill cancel: the cancelling thread ran up to {late:.4f} s later than due "
            f"(due {att[0].get('due_s') or 0.0:.4f} s into the prefill): the runtime call "
            "kept it from running"
        )
    return out


def mode_checks(mode: str, recs: list[dict[str, Any]], res: CancelResult) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    k, max_tokens = res.k, res.max_tokens
    done = [r for r in recs if r.get("terminal") is not None]
    stopped = [
        r
        for r in done
        if r["terminal"] == "cancelled" and r["tokens_before"] + r["tokens_after"] < max_tokens
    ]
    out.append(
        check(
            f"cancel_{mode}_took_effect",
            len(stopped) == len(recs) == res.cycles + res.warmup_cycles,
            f"{len(stopped)}/{len(recs)} generation(s) ended as cancelled before "
            f"max_tokens {max_tokens} (cancel after k={k})"
            + "".join(f"; {r['error']}" for r in recs if "error" in r)[:300],
        )
    )
    bound = res.bound_tokens_after
    worst = max((r["tokens_after"] for r in done), default=0)
    out.append(
        check(
            f"cancel_{mode}_tokens_after_bounded",
            worst <= bound and bool(done),
            f"at most {worst} token(s) sampled after the cancel (bound {bound})",
        )
    )
    series = [
        float(r["rss_after_release"])
        for r in recs
        if r.get("rss_after_release") is not None and r.get("counted", True)
    ]
    tol = float(res.leak_tolerance_bytes or 0.0)
    out.append(trend_leak_check(f"cancel_{mode}_rss_leak", series, tol))
    return out + reclaimed_checks(mode, recs, res.state_before)


def reclaimed_checks(
    mode: str, recs: list[dict[str, Any]], before: dict[str, int | None]
) -> list[dict[str, Any]]:
    """The runtime's own state back to empty after every release, where it reports it."""
    out: list[dict[str, Any]] = []
    for key, empty in (
        ("state_bytes", before.get("state_bytes")),
        ("kv_pos_max", -1),
        ("busy_slots", 0),
    ):
        if empty is None or key not in before:
            continue
        out.append(
            constant_check(
                f"cancel_{mode}_{key}_reclaimed",
                [r.get("state_after_release", {}).get(key) for r in recs],
                float(empty),
                f"the runtime's {key}",
            )
        )
    return out


def prefill_probe(
    adapter: Adapter,
    be: StreamBackend,
    job: Job,
    prompt: list[int],
    banned: list[int],
    attempts_n: int,
) -> dict[str, Any]:
    """Cancel a running prefill (the ``Abortable`` capability): a prompt of max(prompt_tokens,
    n_ctx/2) tokens; the stop is requested half-way through the median of 3 uncancelled
    prefills of it. Two tokens streamed before and after the attempts must agree (the context
    survived the aborts)."""
    if attempts_n <= 0:
        return {"skipped": "options.cancel_prefill_attempts = 0"}
    if not isinstance(adapter, Abortable):
        return {"skipped": missing(adapter, Abortable, "mid-prefill cancel")}
    n_ctx = job.params.n_ctx
    n = min(n_ctx - 1, max(len(prompt), n_ctx // 2))
    long_prompt = make_prompt(n, adapter.vocab_size, prompt[0])
    ids_before = _stream_ids(be, prompt, banned)
    full = [adapter.abort_prefill(long_prompt, delay_s=None) for _ in range(3)]
    times = sorted(float(f.get("prefill_s") or 0.0) for f in full)
    out: dict[str, Any] = {
        "prompt_tokens": n,
        "uncancelled_s": times[1],
        "uncancelled_samples_s": times,
        "how": full[0].get("how"),
        "attempts": [],
    }
    delay = 0.5 * times[1]  # half-way through the median uncancelled prefill
    for _ in range(attempts_n):
        out["attempts"].append(adapter.abort_prefill(long_prompt, delay_s=delay))
    ids_after = _stream_ids(be, prompt, banned)
    if ids_before is not None and ids_after is not None:
        out["usable_after_abort"] = ids_before == ids_after
        out["usable_detail"] = f"2 streamed tokens before {ids_before} / after {ids_after}"
    if not any(a.get("aborted") for a in out["attempts"]):
        whys = [str(a.get("why")) for a in out["attempts"]]
        out["unavailable"] = f"0/{len(whys)} prefill(s) aborted; attempt 1: {whys[0]}"
    return out


def _stream_ids(be: StreamBackend, prompt: list[int], banned: list[int]) -> list[int] | None:
    stream = be.open_stream(prompt, 2, banned, lambda: False, lambda: None)
    for _chunk in stream:
        pass
    ids = be.generated(len(prompt))
    be.release()
    return ids


def slope(ys: list[float] | list[int]) -> float:
    """Least-squares slope of ``ys`` against 0, 1, 2, ..."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    den = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / den if den else 0.0


CLK, OSACC, RT = Source.HARNESS_CLOCK, Source.OS_ACCOUNTING, Source.RUNTIME_COUNTER
NO_CYCLE = "no cancel cycle finished"
PHASES = ("during", "after_close", "after_release")


def metrics(res: CancelResult) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for mode, data in (res.modes or {}).items():
        pre = f"cancel_{mode}"
        if "unavailable" in data:
            out |= unavailable_mode(pre, str(data["unavailable"]))
            continue
        recs = [
            r
            for r in data.get("cycles", [])
            if r.get("terminal") is not None and r.get("counted", True)
        ]
        out |= latency_metrics(pre, recs, data.get("how"), res)
        out |= rss_metrics(pre, recs, res)
        out |= state_metrics(pre, recs, res)
    if res.rss_before is not None:
        out["cancel_rss_before_bytes"] = Metric(
            res.rss_before, "bytes", OSACC, detail={"method": "worker RSS before cycle 1"}
        )
    return out | prefill_metrics(res.prefill or {})


def unavailable_mode(pre: str, why: str) -> dict[str, Metric]:
    return {
        f"{pre}_{key}": Metric.unavailable(unit, why)
        for key, unit in (
            ("stop_latency_s", "s"),
            ("release_latency_s", "s"),
            ("tokens_after", "tokens"),
            ("rss_growth_bytes", "bytes"),
        )
    }


def latency_metrics(
    pre: str, recs: list[dict[str, Any]], how: Any, res: CancelResult
) -> dict[str, Metric]:
    """How fast the cancel took effect, and how many tokens came after it."""
    out: dict[str, Metric] = {}
    out[f"{pre}_to_last_token_s"] = maximum(
        [r["to_last_token_s"] for r in recs if r.get("to_last_token_s") is not None],
        "s",
        CLK,
        method="cancel requested -> last token sampled (0 when none came after it)",
        why_none=NO_CYCLE,
    )
    out[f"{pre}_stop_latency_s"] = measured(
        [r["stop_s"] for r in recs if r.get("stop_s") is not None],
        "s",
        CLK,
        method="cancel requested -> the generation thread left the runtime's stream",
        how=how,
        why_none=NO_CYCLE,
    )
    out[f"{pre}_release_latency_s"] = measured(
        [r["release_s"] for r in recs if r.get("release_s") is not None],
        "s",
        CLK,
        method="cancel requested -> sequence state cleared (stream stopped, state released)",
        released_when=res.state_doc,
        why_none=NO_CYCLE,
    )
    unseen = [r["runtime_tokens_unseen"] for r in recs if "runtime_tokens_unseen" in r]
    if unseen:
        out[f"{pre}_runtime_tokens_unseen"] = maximum(
            unseen,
            "tokens",
            RT,
            method="tokens the runtime's own counter says it generated in a cycle, minus "
            "those the client received (generated after the client let go; max over cycles)",
            doc=res.state_doc,
        )
    out[f"{pre}_tokens_after"] = maximum(
        [r["tokens_after"] for r in recs],
        "tokens",
        CLK,
        method="tokens the runtime sampled after the cancel was requested (max over cycles)",
        k=res.k,
        why_none=NO_CYCLE,
    )
    return out


def rss_metrics(pre: str, recs: list[dict[str, Any]], res: CancelResult) -> dict[str, Metric]:
    """RSS after each release (growth and slope over the cycles) and at each phase."""
    series = [r["rss_after_release"] for r in recs if r.get("rss_after_release") is not None]
    whose = str(res.rss_process or "the worker process")
    out: dict[str, Metric] = {}
    out[f"{pre}_rss_growth_bytes"] = (
        Metric(
            series[-1] - series[0],
            "bytes",
            OSACC,
            detail={
                "method": f"RSS after cycle {len(series)} minus after cycle 1 (gc collected)",
                "process": whose,
                "tolerance_bytes": res.leak_tolerance_bytes,
                "rss_after_each": series,
            },
        )
        if len(series) >= 2
        else Metric.unavailable("bytes", "fewer than 2 cancel cycles finished")
    )
    out[f"{pre}_rss_slope_bytes_per_cycle"] = (
        Metric(
            slope(series),
            "bytes/cycle",
            OSACC,
            detail={
                "method": "least-squares slope of RSS after each counted cycle: a steady "
                "leak shows here, a one-off allocator step hardly does"
            },
        )
        if len(series) >= 3
        else Metric.unavailable("bytes/cycle", "fewer than 3 cancel cycles finished")
    )
    for phase in PHASES:
        vals = [v for r in recs if (v := r.get(f"rss_{phase}")) is not None]
        out[f"{pre}_rss_{phase}_bytes"] = measured(
            vals,
            "bytes",
            OSACC,
            method=f"RSS {phase.replace('_', ' ')}",
            process=whose,
            why_none=NO_CYCLE,
        )
    return out


def state_metrics(pre: str, recs: list[dict[str, Any]], res: CancelResult) -> dict[str, Metric]:
    """The runtime's own state figures at each phase, where it reports them."""
    out: dict[str, Metric] = {}
    for key in ("state_bytes", "kv_tokens", "busy_slots"):
        if key not in (res.state_before or {}):
            continue
        unit = {"state_bytes": "bytes", "kv_tokens": "tokens"}.get(key, "slots")
        for phase in PHASES:
            vals = [v for r in recs if (v := (r.get(f"state_{phase}") or {}).get(key)) is not None]
            out[f"{pre}_{key}_{phase}"] = measured(
                vals,
                unit,
                RT,
                method=f"the runtime's {key} {phase.replace('_', ' ')}",
                doc=res.state_doc,
                why_none=f"the runtime reports no {key} {phase.replace('_', ' ')}",
            )
    return out


def prefill_metrics(probe: dict[str, Any]) -> dict[str, Metric]:
    """The mid-prefill probe: stop requested -> the prefill returned, and -> state released."""
    out: dict[str, Metric] = {}
    aborted = [a for a in probe.get("attempts", []) if a.get("aborted")]
    if "skipped" in probe:
        out["cancel_prefill_latency_s"] = Metric.unavailable("s", str(probe["skipped"]))
    elif aborted:
        out["cancel_prefill_latency_s"] = Metric.measured(
            [a["latency_s"] for a in aborted],
            "s",
            CLK,
            method="stop requested mid-prefill -> the prefill call returned (aborted)",
            how=probe.get("how"),
            aborted=f"{len(aborted)}/{len(probe['attempts'])}",
            prefill_tokens=probe.get("prompt_tokens"),
            uncancelled_prefill_s=probe.get("uncancelled_s"),
            flag_late_max_s=max(
                (a["flag_late_s"] for a in probe["attempts"] if a.get("flag_late_s") is not None),
                default=None,
            ),
            attempts=probe.get("attempts"),
        )
    else:
        out["cancel_prefill_latency_s"] = Metric.unavailable(
            "s", str(probe.get("unavailable") or "no prefill cancel attempt")
        )
    released = [
        a["released_s"] for a in probe.get("attempts", []) if a.get("released_s") is not None
    ]
    if released:
        out["cancel_prefill_released_s"] = Metric.measured(
            released,
            "s",
            CLK,
            method="stop requested mid-prefill -> the runtime shows the request's state released "
            "(aborted or not)",
            how=probe.get("how"),
            aborted=f"{len(aborted)}/{len(probe['attempts'])}",
            prefill_tokens=probe.get("prompt_tokens"),
        )
    return out


IMPL = ScenarioImpl(
    name=Scenario.CANCEL,
    run=run,
    metrics=metrics,
    result=CancelResult,
    options=CancelOptions,
)
