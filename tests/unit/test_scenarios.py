"""Lifecycle scenarios without a runtime: traces, percentiles, leak checks, the cancel controller
against fake streaming backends (well-behaved, leaky, unstoppable), the SSE client against a
fake server, and scenario metrics -> cell outcome."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pytest

from rtmatrix.adapters.base import RuntimeUnavailable
from rtmatrix.outcome import Source, Status
from rtmatrix.protocol import Job, JobParams, WorkerResult
from rtmatrix.runner import CellOutcome, refine
from rtmatrix.scenarios import (
    cancel,
    require_capability,
    run_scenario,
    scenario_metrics,
    serve,
)
from rtmatrix.scenarios.trace import (
    RequestTrace,
    constant_check,
    delivery_lags,
    gaps,
    leak_check,
    maximum,
    quantiles,
    trace_checks,
)

# -- traces and numbers ------------------------------------------------------------------------


def test_trace_records_states_and_counts_tokens_after_cancel() -> None:
    tr = RequestTrace("r")
    tr.queued, tr.prefill_start = 1.0, 1.5
    for t in (2.0, 2.5, 3.0, 3.5):
        tr.token(t)
    tr.cancel_requested = 2.75
    tr.finish("cancelled", t=3.6)
    tr.released = 3.7
    d = tr.to_dict(origin=1.0)
    assert d["first_token"] == 1.0 and d["tokens"] == [1.0, 1.5, 2.0, 2.5]
    assert d["terminal"] == "cancelled" and d["terminal_t"] == pytest.approx(2.6)
    assert d["tokens_after_cancel"] == 2 and d["released"] == pytest.approx(2.7)


def test_trace_refuses_unknown_and_second_terminal_state() -> None:
    tr = RequestTrace("r")
    with pytest.raises(ValueError, match="unknown terminal state"):
        tr.finish("done")
    tr.finish("completed")
    with pytest.raises(RuntimeError, match="already ended"):
        tr.finish("failed")


def test_gaps_and_quantiles() -> None:
    assert gaps([0.0, 1.0, None, 3.0]) == [1.0, 2.0]
    assert gaps([1.0]) == []
    q = quantiles([float(i) for i in range(101)])
    assert q == {"p50": 50.0, "p90": 90.0, "p99": 99.0}
    assert quantiles([]) == {}


def test_delivery_lag_is_the_wait_for_the_next_chunk() -> None:
    # tokens at 1, 2, 3 held back until a chunk at 3.5; token 4 has its own chunk
    assert delivery_lags([1.0, 2.0, 3.0, 4.0], [3.5, 4.0]) == [2.5, 1.5, 0.5, 0.0]
    assert delivery_lags([1.0, 5.0], [2.0]) == [1.0]  # token 5 never delivered


def test_trace_checks_fail_on_missing_terminal_or_release() -> None:
    good = {"name": "a", "terminal": "completed", "released": 1.0}
    assert all(c["ok"] for c in trace_checks([good], need_release=True, label="x"))
    lost = {"name": "b", "terminal": None, "released": None}
    checks = {c["name"]: c for c in trace_checks([good, lost], need_release=True, label="x")}
    assert not checks["x_terminal_state"]["ok"] and "b" in checks["x_terminal_state"]["detail"]
    assert not checks["x_released"]["ok"]
    assert not trace_checks([], need_release=False, label="x")[0]["ok"]


def test_leak_check_compares_n_cycles_with_one() -> None:
    mib = 2**20
    assert leak_check("l", [100 * mib, 100 * mib + 512 * 1024], tolerance=mib)["ok"]
    bad = leak_check("l", [100 * mib] + [100 * mib + i * 256 * 1024 for i in range(1, 20)], mib)
    assert not bad["ok"] and "growth +" in bad["detail"]
    assert not leak_check("l", [1.0], mib)["ok"]  # one cycle compares nothing


def test_constant_check_names_the_first_differing_cycle() -> None:
    assert constant_check("c", [17, 17, 17], 17, "state")["ok"]
    bad = constant_check("c", [17, 4096, 17], 17, "state")
    assert not bad["ok"] and "cycle 2 -> 4096" in bad["detail"]


def test_maximum_keeps_samples_and_says_unavailable_without_them() -> None:
    m = maximum([0, 1, 1], "tokens", Source.HARNESS_CLOCK)
    assert m.value == 1.0 and m.samples == [0.0, 1.0, 1.0] and m.detail["aggregate"] == "max"
    assert maximum([], "tokens", Source.HARNESS_CLOCK, why_none="none ran").reason == "none ran"


# -- fake streaming backends for the cancel controller ----------------------------------------


class FakeBackend:
    """Tokens every ``step_s``; honours the stop hook and close(); state grows per token."""

    runtime = "fake"
    api = "fake stream"
    cancel_modes: ClassVar[dict[str, str]] = {"stop": "hook", "close": "close"}
    missing_modes: ClassVar[dict[str, str]] = {}
    state_doc = "tokens held"

    def __init__(self, step_s: float = 0.001, leak: bool = False, deaf: bool = False) -> None:
        self.step_s, self.leak, self.deaf = step_s, leak, deaf
        self.held = 0
        self.hoard: list[bytes] = []
        self.last: list[int] = []

    def open_stream(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        on_token: Any,
        on_prefill: Any,
    ) -> Iterator[Any]:
        self.release()
        self.last = []

        def gen() -> Iterator[Any]:
            on_prefill()
            self.held = len(prompt)
            for i in range(max_tokens):
                time.sleep(self.step_s)
                self.held += 1
                self.last.append(i)
                if on_token() and not self.deaf:
                    return
                yield str(i)

        return gen()

    def chunk_text(self, chunk: Any) -> str:
        return str(chunk)

    def byte_tokens(self) -> list[int]:
        return []

    def generated(self, n_prompt: int) -> list[int] | None:
        return list(self.last)

    def release(self) -> None:
        if self.leak:
            self.hoard.append(b"x" * 2**20)  # 1 MiB per release, never given back
        else:
            self.held = 0

    def state(self) -> dict[str, int | None]:
        return {"state_bytes": 17 + 10 * self.held, "kv_pos_max": self.held - 1}


class FakeAdapter:
    """No capability at all."""

    name = "fake"
    vocab_size = 512


class FakeStreamingAdapter(FakeAdapter):
    """Offers Streaming (``be``) and Abortable (a prefill that cannot be stopped)."""

    def __init__(self, be: FakeBackend) -> None:
        self.be = be

    def stream_backend(self) -> FakeBackend:
        return self.be

    def abort_prefill(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
        return {"aborted": False, "prefill_s": 0.001, "why": "fake prefill cannot be aborted"}


class FakeStreamingOnlyAdapter(FakeAdapter):
    """Offers Streaming but not Abortable."""

    def __init__(self, be: FakeBackend) -> None:
        self.be = be

    def stream_backend(self) -> FakeBackend:
        return self.be


def _job(warmup: int = 0, **options: Any) -> Job:
    base = {"cancel_cycles": 3, "cancel_after_tokens": 3, "cancel_prefill_attempts": 1}
    params = JobParams(
        n_ctx=64, threads=1, prompt_tokens=4, gen_tokens=8, repetitions=1, warmup=warmup
    )
    return Job(adapter="test", model_path="m", params=params, options=base | options, timeout_s=60)


def _run_cancel(be: FakeBackend, **options: Any) -> dict[str, Any]:
    marks: list[str] = []
    adapter: Any = FakeStreamingAdapter(be)
    result = run_scenario(
        "cancel", adapter, _job(**options), [1, 5, 6, 7], [2], lambda n, t: marks.append(n)
    )
    assert marks == ["first_token"]
    return result


def _checks(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["checks"]}


def test_cancel_stops_within_one_token_and_reclaims() -> None:
    result = _run_cancel(FakeBackend())
    checks = _checks(result)
    failed = {n: c["detail"] for n, c in checks.items() if not c["ok"]}
    assert failed == {}
    for mode in ("stop", "close"):
        cycles = result["modes"][mode]["cycles"]
        assert len(cycles) == 3
        assert all(c["terminal"] == "cancelled" and c["tokens_after"] <= 1 for c in cycles)
        assert all(c["tokens_before"] >= 3 for c in cycles)
        assert all(
            c["state_after_release"] == {"state_bytes": 17, "kv_pos_max": -1} for c in cycles
        )
        assert all(c["state_during"]["kv_pos_max"] >= 4 + 3 - 1 for c in cycles)
    # the trace of every cycle: queued <= prefill <= first token <= cancel <= terminal <= released
    for t in result["traces"]:
        seq = [t["queued"], t["prefill_start"], t["first_token"], t["terminal_t"], t["released"]]
        assert seq == sorted(seq) and t["terminal"] == "cancelled"
    m = scenario_metrics("cancel", result)
    assert m["cancel_stop_tokens_after"].value in (0.0, 1.0)
    assert m["cancel_stop_stop_latency_s"].source is Source.HARNESS_CLOCK
    assert len(m["cancel_stop_stop_latency_s"].samples or []) == 3
    assert m["cancel_stop_state_bytes_after_release"].value == 17
    assert m["cancel_prefill_latency_s"].reason == (
        "0/1 prefill(s) aborted; attempt 1: fake prefill cannot be aborted"
    )
    assert m["lifecycle_checks"].value == f"{len(checks)}/{len(checks)}"
    assert m["ttft_s"].value is None and "cancel_*" in (m["ttft_s"].reason or "")


def test_cancel_detects_a_runtime_that_ignores_the_stop() -> None:
    result = _run_cancel(FakeBackend(deaf=True), cancel_modes=["stop"])
    checks = _checks(result)
    assert not checks["cancel_stop_took_effect"]["ok"]
    assert not checks["cancel_stop_tokens_after_bounded"]["ok"]
    ok = CellOutcome(status=Status.OK, message="completed")
    out = refine(ok, {}, WorkerResult(status="ok", scenario=result))
    assert out.status is Status.WRONG_OUTPUT and "cancel_stop_took_effect" in out.message


def test_cancel_detects_state_not_released() -> None:
    result = _run_cancel(FakeBackend(leak=True), cancel_modes=["stop"], cancel_cycles=6)
    checks = _checks(result)
    assert not checks["cancel_stop_state_bytes_reclaimed"]["ok"]
    assert not checks["cancel_stop_kv_pos_max_reclaimed"]["ok"]
    assert not checks["cancel_stop_rss_leak"]["ok"], checks["cancel_stop_rss_leak"]
    growth = scenario_metrics("cancel", result)["cancel_stop_rss_growth_bytes"]
    assert isinstance(growth.value, int) and growth.value > 4 * 2**20
    assert growth.source is Source.OS_ACCOUNTING


def test_warmup_cycles_are_checked_but_not_counted() -> None:
    job = _job(warmup=2, cancel_modes=["stop"])
    adapter: Any = FakeStreamingAdapter(FakeBackend())
    result = cancel.run(adapter, job, [1, 5, 6, 7], [2], lambda n, t: None).to_dict()
    cycles = result["modes"]["stop"]["cycles"]
    assert [c["counted"] for c in cycles] == [False, False, True, True, True]
    assert [t["name"] for t in result["traces"]][:2] == ["stop-warmup-0", "stop-warmup-1"]
    m = scenario_metrics("cancel", result)
    assert len(m["cancel_stop_stop_latency_s"].samples or []) == 3
    assert len(m["cancel_stop_rss_growth_bytes"].detail["rss_after_each"]) == 3
    assert "5/5" in _checks(result)["cancel_stop_took_effect"]["detail"]


def test_slope_tells_a_steady_leak_from_a_step() -> None:
    assert cancel.slope([0, 10, 20, 30]) == pytest.approx(10.0)
    assert cancel.slope([0, 100, 100, 100, 100, 100, 100, 100]) < 40
    assert cancel.slope([5, 5]) == 0.0


def test_cancel_records_a_missing_mode_as_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    be = FakeBackend()
    monkeypatch.setattr(be, "cancel_modes", {"stop": "hook"})
    monkeypatch.setattr(be, "missing_modes", {"close": "no stream object to close"})
    result = _run_cancel(be)
    assert result["modes"]["close"] == {"unavailable": "no stream object to close"}
    m = scenario_metrics("cancel", result)
    assert m["cancel_close_stop_latency_s"].reason == "no stream object to close"


def test_cancel_without_abortable_skips_only_the_mid_prefill_probe() -> None:
    adapter: Any = FakeStreamingOnlyAdapter(FakeBackend())
    typed = cancel.run(adapter, _job(cancel_modes=["stop"]), [1, 5, 6, 7], [2], lambda n, t: None)
    assert typed.modes["stop"]["cycles"]
    result = typed.to_dict()
    m = scenario_metrics("cancel", result)
    assert m["cancel_stop_stop_latency_s"].value is not None
    reason = m["cancel_prefill_latency_s"].reason or ""
    assert "does not offer the Abortable capability" in reason and "abort_prefill" in reason
    assert "cancel_prefill_context_usable" not in _checks(result)


def test_cancel_options_are_validated() -> None:
    with pytest.raises(ValueError, match="cancel_modes"):
        cancel.CancelOptions.from_job(_job(cancel_modes=["yank"]))
    with pytest.raises(ValueError, match="cancel_cycles"):
        cancel.CancelOptions.from_job(_job(cancel_cycles=1))
    opts = cancel.CancelOptions.from_job(_job(leak_tolerance_mb=2))
    assert opts.leak_tolerance_mb == 2.0 and opts.cancel_modes == ["stop", "close"]
    assert cancel.CancelOptions.defaults()["cancel_cycles"] == 20


def test_stream_metrics_from_a_result() -> None:
    rep = {
        "counted": True,
        "ttft_chunk_s": 0.02,
        "first_token_s": 0.01,
        "n_tokens": 4,
        "n_chunks": 2,
        "token_gaps": [0.001, 0.002, 0.003],
        "chunk_gaps": [0.005],
        "delivery_lag_max_s": 0.004,
    }
    warm = rep | {"counted": False, "ttft_chunk_s": 9.0}
    result = {
        "api": "fake",
        "reps": [warm, rep, rep],
        "state_before": {"state_bytes": 17},
        "state_after_release": [{"state_bytes": 17}] * 3,
        "checks": [{"name": "x", "ok": True, "detail": ""}],
        "traces": [],
    }
    m = scenario_metrics("stream", result)
    assert m["stream_ttft_s"].value == 0.02 and m["stream_ttft_s"].samples == [0.02, 0.02]
    assert m["stream_token_gap_p50_s"].value == pytest.approx(0.002)
    assert m["stream_chunk_gap_p99_s"].value == pytest.approx(0.005)
    assert m["stream_state_after_release_bytes"].value == 17
    assert m["lifecycle_checks"].value == "1/1"
    empty = scenario_metrics("stream", {"reps": []})
    assert empty["stream_ttft_s"].value is None and empty["stream_token_gap_p90_s"].reason


@pytest.mark.parametrize(
    ("name", "capability"), [("stream", "Streaming"), ("cancel", "Streaming"), ("serve", "Serving")]
)
def test_a_runtime_without_the_capability_is_unavailable_and_says_which(
    name: str, capability: str
) -> None:
    """The registry checks the capability, before the load (require_capability) and at the run;
    the scenario's own run never sees an adapter without it."""
    why = rf"'{name}': runtime 'fake' .* {capability} capab"
    with pytest.raises(RuntimeUnavailable, match=why):
        require_capability(name, FakeAdapter())  # type: ignore[arg-type]
    with pytest.raises(RuntimeUnavailable, match=why):
        run_scenario(name, FakeAdapter(), _job(), [1], [], lambda n, t: None)  # type: ignore[arg-type]


def test_an_unknown_scenario_is_unavailable() -> None:
    job = _job()
    require_capability("juggle", FakeAdapter())  # type: ignore[arg-type]
    with pytest.raises(RuntimeUnavailable, match="not available"):
        run_scenario("juggle", FakeAdapter(), job, [1], [], lambda n, t: None)  # type: ignore[arg-type]
    assert scenario_metrics("juggle", {}) == {}


# -- the SSE client against a fake server -----------------------------------------------------


def _event(text: str, finish: str | None = None) -> bytes:
    body = {"choices": [{"text": text, "index": 0, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\r\n\r\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", 0))
        kind = json.loads(self.rfile.read(n) or b"{}").get("kind", "complete")
        if kind == "bad":
            self.send_response(422)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"no")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        events = [b": ping\r\n\r\n", _event("a"), _event("b")]
        if kind == "complete":
            events += [_event("", "length"), b"data: [DONE]\r\n\r\n"]
        elif kind == "interrupt":
            events += [b"data: [DONE]\r\n\r\n"]
        elif kind == "long":
            events += [_event("c")] * 50
        for e in events:
            try:
                self.wfile.write(e)
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.002)
        self.close_connection = True


@pytest.fixture(scope="module")
def sse_port() -> Iterator[int]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize(
    ("kind", "terminal", "tokens"),
    [
        ("complete", "completed", 2),
        ("interrupt", "interrupted", 2),
        ("broken", "failed", 2),
        ("bad", "failed", 0),
    ],
)
def test_sse_client_classifies_terminal_states(
    sse_port: int, kind: str, terminal: str, tokens: int
) -> None:
    tr = RequestTrace(kind)
    serve.stream(sse_port, {"kind": kind}, tr, timeout=10)
    assert tr.terminal == terminal and len(tr.tokens) == tokens
    assert tr.released is not None and tr.why_missing["prefill_start"] == serve.NO_PREFILL
    if tokens:
        assert serve.ttft(tr) is not None and serve.ttft(tr) > 0  # type: ignore[operator]


def test_sse_client_disconnects_mid_stream(sse_port: int) -> None:
    tr = RequestTrace("gone")
    serve.stream(sse_port, {"kind": "long"}, tr, timeout=10, disconnect_after=3)
    assert tr.terminal == "cancelled" and len(tr.tokens) == 3
    assert tr.cancel_requested is not None and tr.tokens_after_cancel() == 0


def test_serve_metrics_from_a_result() -> None:
    rounds = [
        {
            "ttft_s": [0.01, 0.03],
            "tpot_s": [0.002, 0.002],
            "tokens": [8, 8],
            "terminal": ["completed"] * 2,
            "wall_s": 0.1,
            "errors": 0,
        }
    ]
    result = {
        "startup_s": 1.5,
        "endpoints": {"/health": 404, "/metrics": None, "/v1/models": 200},
        "levels": {"2": rounds},
        "survival": {"ok": True},
        "rss_start": 1000,
        "rss_after_abuse": None,
        "interrupt_probe": {"interrupted": 1},
        "checks": [],
    }
    m = scenario_metrics("serve", result)
    assert m["serve_c2_ttft_p50_s"].value == pytest.approx(0.02)
    assert m["serve_c2_throughput_tps"].value == pytest.approx(160.0)
    assert m["serve_c2_errors"].value == 0 and "serve_c2_tpot_p99_s" not in m
    assert m["serve_health_status"].value == 404
    assert m["serve_metrics_status"].value is None
    assert m["serve_survived"].value == "yes"
    assert m["serve_server_rss_after_abuse_bytes"].reason
    assert m["serve_default_interrupted_streams"].value == 1
    assert (
        m["cold_start_first_token_s"].reason
        and "serve_startup_s" in m["cold_start_first_token_s"].reason
    )
    with pytest.raises(ValueError, match="serve_concurrency"):
        serve.ServeOptions.from_job(_job(serve_concurrency=[0]))


def test_every_scenario_metric_is_schema_shaped(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run_cancel(FakeBackend())
    for name, metric in scenario_metrics("cancel", result).items():
        d = metric.to_dict()
        assert d["source"] in {s.value for s in Source}, name
        assert (d["value"] is None) == (d["source"] == "unavailable"), name
        json.dumps(d)


def test_trend_leak_check_tells_a_steady_leak_from_a_one_off_step() -> None:
    from rtmatrix.scenarios.trace import trend_leak_check

    mib = 2**20
    step = [100 * mib] + [103 * mib] * 19  # the allocator grew once: 3 MiB, then flat
    assert trend_leak_check("l", step, mib)["ok"]
    assert not leak_check("l", step, mib)["ok"]  # the endpoint pair would call it a leak
    steady = [100 * mib + i * 200 * 1024 for i in range(20)]  # 200 KiB per cycle
    bad = trend_leak_check("l", steady, mib)
    assert not bad["ok"] and "trend over 20 cycles" in bad["detail"]
    assert trend_leak_check("l", [1.0, 2.0], mib)["ok"]  # 2 cycles: the endpoint comparison


def test_serve_says_when_the_server_served_prompts_from_its_cache() -> None:
    cached, fresh, other = RequestTrace("c2-r0-0"), RequestTrace("c2-r0-1"), RequestTrace("slow")
    cached.info["server_timings"] = {"cache_n": 15, "prompt_n": 1}
    fresh.info["server_timings"] = {"cache_n": 0, "prompt_n": 16}
    other.info["server_timings"] = {"cache_n": 15}
    (words,) = serve.cache_findings([cached, fresh, other])
    assert "1/2 concurrent requests" in words and "up to 15 prompt tokens" in words
    assert serve.cache_findings([fresh]) == []
