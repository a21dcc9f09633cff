"""The ``stream`` scenario: token streaming through the runtime's own streaming API.

Each repetition (``[run] warmup`` + ``repetitions``) opens a fresh stream of ``gen_tokens``
tokens (option ``stream_tokens``) and records, on the harness clock: when the request was
queued, when the runtime started on the prompt, when each token was sampled (the runtime's
per-token hook) and when each chunk reached the consumer. A chunk is what the streaming API
hands the application; llama-cpp-python holds back a byte token that does not complete a UTF-8
character, so chunks and tokens are measured separately. After the last repetition the harness's
own greedy loop runs once on the same prompt: the streamed token ids must equal it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rtmatrix.adapters.base import Adapter, RuntimeUnavailable
from rtmatrix.adapters.capabilities import Streaming, missing
from rtmatrix.fixtures.model import greedy_pick
from rtmatrix.names import Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job
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
    mark: Callable[[str, float], None],
) -> dict[str, Any]:
    if not isinstance(adapter, Streaming):
        raise RuntimeUnavailable(missing(adapter, Streaming, f"scenario {Scenario.STREAM.value!r}"))
    be = adapter.stream_backend()
    p = job.params
    opts = job.options
    n_gen = int(opts.get("stream_tokens", p.gen_tokens))
    n_reps = p.warmup + p.repetitions
    origin = clock()
    to_mono = time.monotonic() - origin
    state_before = be.state()
    reps: list[dict[str, Any]] = []
    traces: list[dict[str, Any]] = []
    states_after: list[dict[str, int | None]] = []
    streamed_ids: list[int] | None = None
    for i in range(n_reps):
        tr = RequestTrace(f"stream-{i}")
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
        if i == 0 and tr.first_token is not None:
            mark("first_token", tr.first_token + to_mono)
        if i == n_reps - 1:
            streamed_ids = be.generated(len(prompt))
        be.release()
        tr.released = clock()
        states_after.append(be.state())
        lags = delivery_lags(tr.tokens, chunk_t)
        reps.append(
            {
                "counted": i >= p.warmup,
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
        )
        traces.append(tr.to_dict(origin))
    loop_ids = greedy_loop(adapter, prompt, n_gen, banned)
    be.release()
    checks = trace_checks(traces, need_release=True, label="stream")
    if streamed_ids is not None:
        n = min(len(streamed_ids), len(loop_ids))
        agree = next((j for j in range(n) if streamed_ids[j] != loop_ids[j]), n)
        checks.append(
            check(
                "stream_tokens_equal_greedy_loop",
                agree == n and n > 0,
                f"{agree}/{n} streamed token ids equal the harness's greedy loop"
                + (
                    f" (first divergence at {agree}: {streamed_ids[agree]} vs {loop_ids[agree]})"
                    if agree < n
                    else ""
                ),
            )
        )
    key = "state_bytes" if "state_bytes" in state_before else None
    if key:
        checks.append(
            constant_check(
                "stream_state_reclaimed",
                [s.get(key) for s in states_after],
                float(state_before[key] or 0),
                f"the runtime's {key}",
            )
        )
    findings = []
    counted = [r for r in reps if r["counted"]] or reps
    over = max((r["n_tokens"] - n_gen for r in counted), default=0)
    if over > 0:
        findings.append(f"the stream sampled up to {over} token(s) beyond max_tokens {n_gen}")
    lag = max((r["delivery_lag_max_s"] or 0.0 for r in counted), default=0.0)
    held = max((r["undelivered_tokens"] for r in counted), default=0)
    if any(r["n_chunks"] < r["n_tokens"] for r in counted) or lag > 0.05:
        findings.append(
            f"chunks lag tokens: a sampled token waited up to {lag:.3f} s for the chunk that "
            "carries it (byte tokens held back until they form UTF-8)"
        )
    if held:
        findings.append(f"{held} sampled token(s) never reached the consumer as a chunk")
    return {
        "scenario": Scenario.STREAM.value,
        "findings": findings,
        "runtime": be.runtime,
        "api": be.api,
        "state_doc": be.state_doc,
        "max_tokens": n_gen,
        "prompt_tokens": len(prompt),
        "reps": reps,
        "state_before": state_before,
        "state_after_release": states_after,
        "streamed_ids": streamed_ids,
        "loop_ids": loop_ids,
        "traces": traces,
        "checks": checks,
    }


def metrics(result: dict[str, Any]) -> dict[str, Metric]:
    reps = [r for r in result.get("reps", []) if r.get("counted")]
    api = result.get("api", "?")
    clock_src = Source.HARNESS_CLOCK
    none = "no counted stream repetition"
    out: dict[str, Metric] = {
        "stream_ttft_s": measured(
            [r["ttft_chunk_s"] for r in reps if r.get("ttft_chunk_s") is not None],
            "s",
            clock_src,
            method="stream opened -> first chunk handed to the consumer, warm",
            api=api,
            why_none=none,
        ),
        "stream_first_token_s": measured(
            [r["first_token_s"] for r in reps if r.get("first_token_s") is not None],
            "s",
            clock_src,
            method="stream opened -> first token sampled (the runtime's per-token hook)",
            why_none=none,
        ),
        "stream_tokens": measured(
            [r["n_tokens"] for r in reps],
            "tokens",
            clock_src,
            method="tokens sampled per stream (per-token hook count)",
            max_tokens=result.get("max_tokens"),
            why_none=none,
        ),
        "stream_chunks": measured(
            [r["n_chunks"] for r in reps],
            "chunks",
            clock_src,
            method="chunks the stream yielded (held-back byte tokens merge into one chunk)",
            why_none=none,
        ),
        "stream_delivery_lag_max_s": measured(
            [r["delivery_lag_max_s"] for r in reps if r.get("delivery_lag_max_s") is not None],
            "s",
            clock_src,
            method="per stream, the longest wait of a sampled token for the chunk that carries it",
            why_none=none,
        ),
    }
    token_gaps = [g for r in reps for g in r.get("token_gaps", [])]
    chunk_gaps = [g for r in reps for g in r.get("chunk_gaps", [])]
    out |= quantile_metrics(
        "stream_token_gap",
        token_gaps,
        clock_src,
        "fewer than 2 tokens per stream",
        method="intervals between sampled tokens (runtime hook), pooled over counted reps",
    )
    out |= quantile_metrics(
        "stream_chunk_gap",
        chunk_gaps,
        clock_src,
        "fewer than 2 chunks per stream",
        method="intervals between chunks reaching the consumer, pooled over counted reps",
    )
    before = result.get("state_before") or {}
    if before.get("state_bytes") is not None:
        after = [s.get("state_bytes") for s in result.get("state_after_release", [])]
        seen = [a for a in after if a is not None]
        out["stream_state_after_release_bytes"] = (
            Metric(
                max(seen),
                "bytes",
                Source.RUNTIME_COUNTER,
                detail={
                    "aggregate": "max over releases",
                    "before": before["state_bytes"],
                    "after_each": after,
                    "doc": result.get("state_doc"),
                },
            )
            if seen
            else Metric.unavailable("bytes", "no stream was released")
        )
    return out
