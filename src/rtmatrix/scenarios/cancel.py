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
then ``cancel_cycles`` counted ones; the leak check compares RSS after the last counted cycle with
RSS after the first (``rss_slope_bytes_per_cycle`` tells a steady leak from a one-off step).

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
from dataclasses import dataclass
from typing import Any

import psutil

from rtmatrix.adapters.base import Adapter, RuntimeUnavailable
from rtmatrix.adapters.capabilities import Abortable, StreamBackend, Streaming, missing
from rtmatrix.fixtures.model import make_prompt
from rtmatrix.names import Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job
from rtmatrix.scenarios.trace import (
    RequestTrace,
    check,
    clock,
    constant_check,
    leak_check,
    maximum,
    measured,
    trace_checks,
)

MODES = ("stop", "close")
DEFAULTS: dict[str, Any] = {
    "cancel_cycles": 20,
    "cancel_after_tokens": 8,
    "cancel_modes": list(MODES),
    "cancel_max_tokens_after": 1,
    "leak_tolerance_mb": 1.0,
    "cancel_prefill_attempts": 3,
}
_PROC = psutil.Process()


def rss() -> int:
    return int(_PROC.memory_info().rss)


def options(job: Job) -> dict[str, Any]:
    opts = {**DEFAULTS, **{k: v for k, v in job.options.items() if k in DEFAULTS}}
    bad = [m for m in opts["cancel_modes"] if m not in MODES]
    if bad:
        msg = f"options.cancel_modes: unknown {bad}; valid: {', '.join(MODES)}"
        raise ValueError(msg)
    if int(opts["cancel_cycles"]) < 2:
        msg = "options.cancel_cycles must be 2 or more (memory after N cycles vs after 1)"
        raise ValueError(msg)
    return opts


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
            rec["rss_during"] = rss()
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
        rec["rss_after_close"] = rss()
        be.release()
        tr.released = clock()
        rec["state_after_release"] = be.state()

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
    rec["rss_after_release"] = rss()
    t_cancel = tr.cancel_requested
    last = tr.tokens[-1] if tr.tokens else None
    rec |= {
        "tokens_before": sum(1 for t in tr.tokens if t <= t_cancel),
        "tokens_after": tr.tokens_after_cancel(),
        "to_last_token_s": max(0.0, last - t_cancel) if last is not None else None,
        "stop_s": tr.terminal_t - t_cancel if tr.terminal_t is not None else None,
        "release_s": tr.released - t_cancel if tr.released is not None else None,
        "terminal": tr.terminal,
    }
    return tr, rec


def run(
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Callable[[str, float], None],
) -> dict[str, Any]:
    if not isinstance(adapter, Streaming):
        raise RuntimeUnavailable(missing(adapter, Streaming, f"scenario {Scenario.CANCEL.value!r}"))
    be = adapter.stream_backend()
    opts = options(job)
    p = job.params
    n_ctx = p.n_ctx
    max_tokens = n_ctx - len(prompt) - 1
    k = int(opts["cancel_after_tokens"])
    if not 0 < k < max_tokens:
        msg = f"options.cancel_after_tokens {k} must be in 1..{max_tokens - 1} (n_ctx - prompt)"
        raise ValueError(msg)
    cycles = int(opts["cancel_cycles"])
    wait_s = max(30.0, job.timeout_s / 4)
    tol = float(opts["leak_tolerance_mb"]) * 2**20
    origin = clock()
    to_mono = time.monotonic() - origin
    be.release()
    gc.collect()
    result: dict[str, Any] = {
        "scenario": Scenario.CANCEL.value,
        "runtime": be.runtime,
        "api": be.api,
        "state_doc": be.state_doc,
        "k": k,
        "cycles": cycles,
        "max_tokens": max_tokens,
        "prompt_tokens": len(prompt),
        "leak_tolerance_bytes": tol,
        "bound_tokens_after": int(opts["cancel_max_tokens_after"]),
        "state_before": be.state(),
        "rss_before": rss(),
        "modes": {},
    }
    traces: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtmatrix-generation")
    warmup = p.warmup
    result["warmup_cycles"] = warmup
    plan = Plan(be, prompt, max_tokens, k, cycles, warmup, wait_s, pool, origin)
    try:
        for i, mode in enumerate(opts["cancel_modes"]):
            first = mark if i == 0 else None
            checks += run_mode(plan, mode, banned, result, traces, first, to_mono)
    finally:
        pool.shutdown(wait=False)
    t_pre = clock()
    result["prefill"] = prefill_probe(adapter, be, job, prompt, banned, opts)
    result["prefill"]["wall_s"] = clock() - t_pre
    checks += trace_checks(traces, need_release=True, label="cancel")
    pre = result["prefill"]
    if pre.get("attempts"):
        usable = pre.get("usable_after_abort")
        if usable is not None:
            checks.append(
                check(
                    "cancel_prefill_context_usable",
                    bool(usable),
                    "after the aborted prefill(s) the context "
                    + ("still produces the same first token" if usable else "misbehaves")
                    + f" ({pre.get('usable_detail', '')})",
                )
            )
    result["traces"] = traces
    result["checks"] = checks
    result["findings"] = findings(result)
    return result


def run_mode(
    plan: Plan,
    mode: str,
    banned: list[int],
    result: dict[str, Any],
    traces: list[dict[str, Any]],
    mark: Callable[[str, float], None] | None,
    to_mono: float,
) -> list[dict[str, Any]]:
    be = plan.be
    if mode not in be.cancel_modes:
        result["modes"][mode] = {"unavailable": be.missing_modes.get(mode, "not supported")}
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
        traces.append(tr.to_dict(plan.origin))
        if "error" in rec and rec.get("terminal") is None:
            break  # a stuck generation thread: do not start another on the same context
    result["modes"][mode] = {
        "how": be.cancel_modes[mode],
        "masked_tokens": len(masked),
        "wall_s": clock() - t_mode,
        "cycles": recs,
    }
    return mode_checks(mode, recs, result)


def findings(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    before = result.get("state_before") or {}
    for mode, data in (result.get("modes") or {}).items():
        if "unavailable" in data:
            out.append(f"mode {mode!r} unavailable: {data['unavailable']}")
            continue
        kept: list[int] = [
            v
            for r in data.get("cycles", [])
            if (v := (r.get("state_after_close") or {}).get("state_bytes")) is not None
        ]
        empty = before.get("state_bytes")
        if kept and empty is not None and min(kept) > empty:
            out.append(
                f"mode {mode!r}: after the stream stopped the runtime still held its context "
                f"state ({min(kept)}-{max(kept)} bytes vs {empty} empty) until the harness "
                "released it"
            )
    pre = result.get("prefill") or {}
    att = pre.get("attempts") or []
    if att:
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


def mode_checks(
    mode: str, recs: list[dict[str, Any]], result: dict[str, Any]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    k, max_tokens = result["k"], result["max_tokens"]
    done = [r for r in recs if r.get("terminal") is not None]
    stopped = [
        r
        for r in done
        if r["terminal"] == "cancelled" and r["tokens_before"] + r["tokens_after"] < max_tokens
    ]
    out.append(
        check(
            f"cancel_{mode}_took_effect",
            len(stopped) == len(recs) == result["cycles"] + result.get("warmup_cycles", 0),
            f"{len(stopped)}/{len(recs)} generation(s) ended as cancelled before "
            f"max_tokens {max_tokens} (cancel after k={k})"
            + "".join(f"; {r['error']}" for r in recs if "error" in r)[:300],
        )
    )
    bound = result["bound_tokens_after"]
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
        if "rss_after_release" in r and r.get("counted", True)
    ]
    out.append(leak_check(f"cancel_{mode}_rss_leak", series, result["leak_tolerance_bytes"]))
    before = result["state_before"]
    for key, empty in (("state_bytes", before.get("state_bytes")), ("kv_pos_max", -1)):
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
    opts: dict[str, Any],
) -> dict[str, Any]:
    """Cancel a running prefill (the ``Abortable`` capability): a prompt of max(prompt_tokens,
    n_ctx/2) tokens; the stop is requested half-way through the median of 3 uncancelled
    prefills of it. Two tokens streamed before and after the attempts must agree (the context
    survived the aborts)."""
    attempts_n = int(opts["cancel_prefill_attempts"])
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


def metrics(result: dict[str, Any]) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    clk, osacc, rt = Source.HARNESS_CLOCK, Source.OS_ACCOUNTING, Source.RUNTIME_COUNTER
    for mode, data in (result.get("modes") or {}).items():
        pre = f"cancel_{mode}"
        if "unavailable" in data:
            why = str(data["unavailable"])
            for key, unit in (
                ("stop_latency_s", "s"),
                ("release_latency_s", "s"),
                ("tokens_after", "tokens"),
                ("rss_growth_bytes", "bytes"),
            ):
                out[f"{pre}_{key}"] = Metric.unavailable(unit, why)
            continue
        recs = [
            r
            for r in data.get("cycles", [])
            if r.get("terminal") is not None and r.get("counted", True)
        ]
        why = "no cancel cycle finished"
        how = data.get("how")
        out[f"{pre}_to_last_token_s"] = maximum(
            [r["to_last_token_s"] for r in recs if r.get("to_last_token_s") is not None],
            "s",
            clk,
            method="cancel requested -> last token sampled (0 when none came after it)",
            why_none=why,
        )
        out[f"{pre}_stop_latency_s"] = measured(
            [r["stop_s"] for r in recs if r.get("stop_s") is not None],
            "s",
            clk,
            method="cancel requested -> the generation thread left the runtime's stream",
            how=how,
            why_none=why,
        )
        out[f"{pre}_release_latency_s"] = measured(
            [r["release_s"] for r in recs if r.get("release_s") is not None],
            "s",
            clk,
            method="cancel requested -> sequence state cleared (stream stopped, state released)",
            why_none=why,
        )
        out[f"{pre}_tokens_after"] = maximum(
            [r["tokens_after"] for r in recs],
            "tokens",
            clk,
            method="tokens the runtime sampled after the cancel was requested (max over cycles)",
            k=result.get("k"),
            why_none=why,
        )
        series = [r["rss_after_release"] for r in recs if "rss_after_release" in r]
        out[f"{pre}_rss_growth_bytes"] = (
            Metric(
                series[-1] - series[0],
                "bytes",
                osacc,
                detail={
                    "method": f"RSS after cycle {len(series)} minus after cycle 1 (gc collected)",
                    "tolerance_bytes": result.get("leak_tolerance_bytes"),
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
                osacc,
                detail={
                    "method": "least-squares slope of RSS after each counted cycle: a steady "
                    "leak shows here, a one-off allocator step hardly does"
                },
            )
            if len(series) >= 3
            else Metric.unavailable("bytes/cycle", "fewer than 3 cancel cycles finished")
        )
        for phase in ("during", "after_close", "after_release"):
            vals = [r.get(f"rss_{phase}") for r in recs if r.get(f"rss_{phase}") is not None]
            out[f"{pre}_rss_{phase}_bytes"] = measured(
                vals, "bytes", osacc, method=f"worker RSS {phase.replace('_', ' ')}", why_none=why
            )
        for key in ("state_bytes", "kv_tokens"):
            if key not in (result.get("state_before") or {}):
                continue
            unit = "bytes" if key == "state_bytes" else "tokens"
            for phase in ("during", "after_close", "after_release"):
                vals = [
                    v for r in recs if (v := (r.get(f"state_{phase}") or {}).get(key)) is not None
                ]
                out[f"{pre}_{key}_{phase}"] = measured(
                    vals,
                    unit,
                    rt,
                    method=f"the runtime's {key} {phase.replace('_', ' ')}",
                    doc=result.get("state_doc"),
                    why_none=f"the runtime reports no {key} {phase.replace('_', ' ')}",
                )
    if result.get("rss_before") is not None:
        out["cancel_rss_before_bytes"] = Metric(
            result["rss_before"], "bytes", osacc, detail={"method": "worker RSS before cycle 1"}
        )
    probe: dict[str, Any] = result.get("prefill") or {}
    aborted = [a for a in probe.get("attempts", []) if a.get("aborted")]
    if "skipped" in probe:
        out["cancel_prefill_latency_s"] = Metric.unavailable("s", str(probe["skipped"]))
    elif aborted:
        out["cancel_prefill_latency_s"] = Metric.measured(
            [a["latency_s"] for a in aborted],
            "s",
            clk,
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
    return out
