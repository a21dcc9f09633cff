"""The ``stream`` scenario: token streaming through the runtime's own streaming API.

Each repetition (``[run] warmup`` + ``repetitions``) opens a fresh stream of ``gen_tokens``
tokens (option ``stream_tokens``) and records, on the harness clock: when the request was
queued, when the runtime started on the prompt, when each token was sampled (the runtime's
per-token hook) and when each chunk reached the consumer. A chunk is what the streaming API
hands the application; llama-cpp-python holds back a byte token that does not complete a UTF-8
character, so chunks and tokens are measured separately. After the last repetition the harness's
own greedy loop runs once on the same prompt: the streamed token ids must equal it. A backend
the harness has no loop over (a server: the ``UnstreamedRun`` capability) answers the same
request without streaming instead, and the streamed ids must equal that; a backend whose state
reports ``busy_slots`` must show 0 after every release.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Self, TypedDict, cast

import numpy as np

from rtmatrix.adapters.base import Adapter
from rtmatrix.adapters.capabilities import StreamBackend, Streaming, UnstreamedRun
from rtmatrix.fixtures.model import greedy_pick
from rtmatrix.names import Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job
from rtmatrix.scenarios.spec import Lifecycle, Mark, ScenarioImpl, ScenarioOptions, ScenarioResult
from rtmatrix.scenarios.trace import (
    RequestTrace,
    check,
    clock,
    constant_check,
    delivery_lags,
    gaps,
    measured,
    quantile_metrics,
    trace_checks,
)


@dataclass(frozen=True)
class StreamOptions(ScenarioOptions):
    #: tokens per stream (None: the job's ``gen_tokens``)
    stream_tokens: int | None = None

    @classmethod
    def from_job(cls, job: Job) -> Self:
        n = job.options.get("stream_tokens", job.params.gen_tokens)
        return cls(stream_tokens=int(n))


class StreamRep(TypedDict, total=False):
    """One stream repetition, on the harness clock (seconds from the stream's opening)."""

    counted: bool
    ttft_chunk_s: float | None
    first_token_s: float | None
    prefill_start_s: float | None
    n_tokens: int
    n_chunks: int
    empty_chunks: int
    token_gaps: list[float]
    chunk_gaps: list[float]
    delivery_lag_max_s: float | None
    undelivered_tokens: int


@dataclass
class StreamResult(ScenarioResult):
    """What the worker's half of ``stream`` found (its dict form crosses to the parent)."""

    scenario: str = Scenario.STREAM.value
    findings: list[str] = field(default_factory=list)
    runtime: str | None = None
    api: str | None = None
    state_doc: str | None = None
    max_tokens: int | None = None
    prompt_tokens: int | None = None
    reps: list[StreamRep] = field(default_factory=list)
    state_before: dict[str, int | None] = field(default_factory=dict)
    state_after_release: list[dict[str, int | None]] = field(default_factory=list)
    streamed_ids: list[int] | None = None
    loop_ids: list[int] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)

    def lifecycle(self) -> Lifecycle:
        return Lifecycle(self.api, self.checks, self.findings, {}, self.traces)


def greedy_loop(adapter: Adapter, prompt: list[int], n: int, banned: list[int]) -> list[int]:
    """The harness's own loop (prefill, decode, argmax with ``banned`` masked)."""
    adapter.reset()
    adapter.prefill(prompt)
    tokens = [greedy_pick(adapter.last_logits(), banned)]
    for _ in range(n - 1):
        adapter.decode(tokens[-1])
        logits = adapter.last_logits()
        if not np.isfinite(logits).all():
            break
        tokens.append(greedy_pick(logits, banned))
    adapter.reset()
    return tokens


def run(
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Mark,
) -> StreamResult:
    """``warmup + repetitions`` streams, then the reference ids and the checks. The registry
    has checked that ``adapter`` offers ``Streaming``."""
    be = cast(Streaming, adapter).stream_backend()
    p = job.params
    n_gen = int(StreamOptions.from_job(job).stream_tokens or 0)
    n_reps = p.warmup + p.repetitions
    origin = clock()
    to_mono = time.monotonic() - origin
    res = StreamResult(
        runtime=be.runtime,
        api=be.api,
        state_doc=be.state_doc,
        max_tokens=n_gen,
        prompt_tokens=len(prompt),
        state_before=be.state(),
    )
    for i in range(n_reps):
        tr, chunk_t, texts, t_open = stream_once(be, prompt, n_gen, banned, f"stream-{i}")
        if i == 0 and tr.first_token is not None:
            mark("first_token", tr.first_token + to_mono)
        if i == n_reps - 1:
            res.streamed_ids = be.generated(len(prompt))
        be.release()
        tr.released = clock()
        res.state_after_release.append(be.state())
        res.reps.append(rep_record(tr, chunk_t, texts, t_open, counted=i >= p.warmup))
        res.traces.append(tr.to_dict(origin))
    ref_name, ref_what, res.loop_ids = reference_ids(adapter, be, prompt, n_gen, banned)
    be.release()
    res.checks = trace_checks(res.traces, need_release=True, label="stream")
    if res.streamed_ids is not None:
        res.checks.append(ids_check(ref_name, ref_what, res.streamed_ids, res.loop_ids))
    res.checks += state_checks(res.state_before, res.state_after_release)
    res.findings = findings(res.reps, n_gen)
    return res


def stream_once(
    be: StreamBackend, prompt: list[int], n_gen: int, banned: list[int], name: str
) -> tuple[RequestTrace, list[float], list[str], float]:
    """One stream consumed to its end: its trace, when each chunk arrived, each chunk's text,
    when it was opened."""
    tr = RequestTrace(name)
    chunk_t: list[float] = []
    texts: list[str] = []

    def on_token(tr: RequestTrace = tr) -> bool:
        tr.token()
        return False

    def on_prefill(tr: RequestTrace = tr) -> None:
        tr.prefill_start = clock()

    tr.queued = t_open = clock()
    stream = be.open_stream(prompt, n_gen, banned, on_token, on_prefill)
    for chunk in stream:
        chunk_t.append(clock())
        texts.append(be.chunk_text(chunk))
    tr.finish("completed", n_tokens=len(tr.tokens), n_chunks=len(chunk_t))
    return tr, chunk_t, texts, t_open


def rep_record(
    tr: RequestTrace, chunk_t: list[float], texts: list[str], t_open: float, *, counted: bool
) -> StreamRep:
    lags = delivery_lags(tr.tokens, chunk_t)
    return {
        "counted": counted,
        "ttft_chunk_s": chunk_t[0] - t_open if chunk_t else None,
        "first_token_s": tr.first_token - t_open if tr.first_token is not None else None,
        "prefill_start_s": (tr.prefill_start - t_open) if tr.prefill_start else None,
        "n_tokens": len(tr.tokens),
        "n_chunks": len(chunk_t),
        "empty_chunks": sum(1 for t in texts if not t),
        "token_gaps": gaps(tr.tokens),
        "chunk_gaps": gaps(chunk_t),
        "delivery_lag_max_s": max(lags) if lags else None,
        "undelivered_tokens": len(tr.tokens) - len(lags),
    }


def reference_ids(
    adapter: Adapter, be: StreamBackend, prompt: list[int], n_gen: int, banned: list[int]
) -> tuple[str, str, list[int]]:
    """The ids the streamed ones must equal (check name, what they come from, the ids): the
    backend's unstreamed answer where it has one, else the harness's greedy loop."""
    if isinstance(be, UnstreamedRun):
        ids = be.complete(prompt, n_gen, banned)
        return "stream_tokens_equal_unstreamed", be.reference_api, ids
    ids = greedy_loop(adapter, prompt, n_gen, banned)
    return "stream_tokens_equal_greedy_loop", "the harness's greedy loop", ids


def ids_check(name: str, what: str, streamed: list[int], loop: list[int]) -> dict[str, Any]:
    n = min(len(streamed), len(loop))
    agree = next((j for j in range(n) if streamed[j] != loop[j]), n)
    return check(
        name,
        agree == n and n > 0,
        f"{agree}/{n} streamed token ids equal {what}"
        + (
            f" (first divergence at {agree}: {streamed[agree]} vs {loop[agree]})"
            if agree < n
            else ""
        ),
    )


def state_checks(
    before: dict[str, int | None], after: list[dict[str, int | None]]
) -> list[dict[str, Any]]:
    """The runtime's busy slots and state bytes back to empty after every release, where it
    reports them."""
    out = []
    if "busy_slots" in before:
        out.append(
            constant_check(
                "stream_slots_released",
                [s.get("busy_slots") for s in after],
                0.0,
                "the runtime's busy_slots",
            )
        )
    key = "state_bytes" if "state_bytes" in before else None
    if key:
        out.append(
            constant_check(
                "stream_state_reclaimed",
                [s.get(key) for s in after],
                float(before[key] or 0),
                f"the runtime's {key}",
            )
        )
    return out


def findings(reps: list[StreamRep], n_gen: int) -> list[str]:
    out = []
    counted = [r for r in reps if r["counted"]] or reps
    over = max((r["n_tokens"] - n_gen for r in counted), default=0)
    if over > 0:
        out.append(f"the stream sampled up to {over} token(s) beyond max_tokens {n_gen}")
    lag = max((r["delivery_lag_max_s"] or 0.0 for r in counted), default=0.0)
    held = max((r["undelivered_tokens"] for r in counted), default=0)
    if any(r["n_chunks"] < r["n_tokens"] for r in counted) or lag > 0.05:
        out.append(
            f"chunks lag tokens: a sampled token waited up to {lag:.3f} s for the chunk that "
            "carries it (byte tokens held back until they form UTF-8)"
        )
    if held:
        out.append(f"{held} sampled token(s) never reached the consumer as a chunk")
    return out


def metrics(res: StreamResult) -> dict[str, Metric]:
    reps = [r for r in res.reps if r.get("counted")]
    api = res.api if res.api is not None else "?"
    out = timing_metrics(reps, api, res.max_tokens)
    out |= gap_metrics(reps)
    before = res.state_before or {}
    if before.get("state_bytes") is not None:
        out["stream_state_after_release_bytes"] = state_metric(res)
    return out


NO_REPS = "no counted stream repetition"


def timing_metrics(
    reps: list[StreamRep], api: str | None, max_tokens: int | None
) -> dict[str, Metric]:
    clock_src = Source.HARNESS_CLOCK
    return {
        "stream_ttft_s": measured(
            [v for r in reps if (v := r.get("ttft_chunk_s")) is not None],
            "s",
            clock_src,
            method="stream opened -> first chunk handed to the consumer, warm",
            api=api,
            why_none=NO_REPS,
        ),
        "stream_first_token_s": measured(
            [v for r in reps if (v := r.get("first_token_s")) is not None],
            "s",
            clock_src,
            method="stream opened -> first token sampled (the runtime's per-token hook)",
            why_none=NO_REPS,
        ),
        "stream_tokens": measured(
            [r["n_tokens"] for r in reps],
            "tokens",
            clock_src,
            method="tokens sampled per stream (per-token hook count)",
            max_tokens=max_tokens,
            why_none=NO_REPS,
        ),
        "stream_chunks": measured(
            [r["n_chunks"] for r in reps],
            "chunks",
            clock_src,
            method="chunks the stream yielded (held-back byte tokens merge into one chunk)",
            why_none=NO_REPS,
        ),
        "stream_delivery_lag_max_s": measured(
            [v for r in reps if (v := r.get("delivery_lag_max_s")) is not None],
            "s",
            clock_src,
            method="per stream, the longest wait of a sampled token for the chunk that carries it",
            why_none=NO_REPS,
        ),
    }


def gap_metrics(reps: list[StreamRep]) -> dict[str, Metric]:
    token_gaps = [g for r in reps for g in r.get("token_gaps", [])]
    chunk_gaps = [g for r in reps for g in r.get("chunk_gaps", [])]
    out = quantile_metrics(
        "stream_token_gap",
        token_gaps,
        Source.HARNESS_CLOCK,
        "fewer than 2 tokens per stream",
        method="intervals between sampled tokens (runtime hook), pooled over counted reps",
    )
    out |= quantile_metrics(
        "stream_chunk_gap",
        chunk_gaps,
        Source.HARNESS_CLOCK,
        "fewer than 2 chunks per stream",
        method="intervals between chunks reaching the consumer, pooled over counted reps",
    )
    return out


def state_metric(res: StreamResult) -> Metric:
    """The runtime's state bytes after each release (the largest), against before the first."""
    after = [s.get("state_bytes") for s in res.state_after_release]
    seen = [a for a in after if a is not None]
    if not seen:
        return Metric.unavailable("bytes", "no stream was released")
    return Metric(
        max(seen),
        "bytes",
        Source.RUNTIME_COUNTER,
        detail={
            "aggregate": "max over releases",
            "before": res.state_before["state_bytes"],
            "after_each": after,
            "doc": res.state_doc,
        },
    )


IMPL = ScenarioImpl(
    name=Scenario.STREAM,
    run=run,
    metrics=metrics,
    result=StreamResult,
    options=StreamOptions,
)
