"""The ``serve`` scenario: the runtime's own OpenAI-compatible server on loopback, driven by a
real HTTP client (``http.client``, one connection per request).

The runtime offers it through the ``Serving`` capability
(:class:`rtmatrix.adapters.capabilities.Serving`): its driver says how to start the server on
127.0.0.1 and a free port (llama.cpp: ``python -m llama_cpp.server --config_file ...``,
:mod:`rtmatrix.runtimes.llama_cpp.server`); the worker starts it as its own child (so it is in
the worker's process group: a killed cell takes it down) and stops it at the end (SIGTERM, then
SIGKILL). Phases, each bounded in requests and time:

1. endpoints: ``/health``, ``/metrics``, ``/v1/models`` (status codes recorded);
2. concurrency: N = 1, 2, 4 concurrent streaming ``/v1/completions`` (``serve_rounds`` rounds
   each): TTFT (request sent -> first token event), TPOT (mean gap between token events),
   throughput, errors; where the driver reads the server's own counters and slots
   (``ServerCounters``), their deltas over each level (``serve_c<N>_server_*``, source
   ``runtime-counter``), the slots' transitions polled in the background and the time until
   every slot is idle again (:mod:`rtmatrix.scenarios.serverside`);
   then, where the driver takes token ids and returns top log-probabilities (``TokenServer``),
   batch invariance and session isolation (:mod:`rtmatrix.scenarios.invariance`);
3. a client that disconnects after 2 token events of a long request, then a normal request
   (its TTFT says whether the server stopped the abandoned generation; with ``ServerCounters``,
   the time from the disconnect until the slots show idle);
4. a slow consumer (reads one event per ``serve_slow_delay_s``) with a normal request behind it;
5. malformed requests (invalid JSON, wrong types, a prompt beyond the context);
6. survival: the process is alive, ``/v1/models`` answers, a small completion succeeds;
7. optionally a second server with the server's *default* ``interrupt_requests`` (true), where a
   second request is sent while the first streams: is the first one cut short?

The driver serves the model with the adapter's own load settings; everything else is the
server's default. The main server runs with ``interrupt_requests = false`` (option
``serve_interrupt_requests``): with the default, every new request ends the stream in
progress, and TTFT against concurrency would measure interruptions, not queueing. Requests are
greedy (temperature 0) and carry a ``logit_bias`` that masks end-of-sequence and the
byte-fallback tokens, so each server-sent event carries exactly one token (a byte token that does
not complete a UTF-8 character is held back and merged into a later event).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from rtmatrix.adapters.base import Adapter
from rtmatrix.adapters.capabilities import (
    ServerCounters,
    ServerDriver,
    Serving,
    TokenServer,
)
from rtmatrix.names import Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job
from rtmatrix.scenarios import invariance, serverside
from rtmatrix.scenarios.serve_result import (
    ServeOptions,
    ServeResult,
    ServeRound,
    ServeRun,
    completed_check,
    round_record,
    ttft,
)
from rtmatrix.scenarios.spec import Mark, ScenarioImpl
from rtmatrix.scenarios.trace import (
    RequestTrace,
    check,
    clock,
    measured,
    quantile_metrics,
    quantiles,
)
from rtmatrix.serverproc import ChildServer, free_port
from rtmatrix.serverproc import request as plain_request

__all__ = ["IMPL", "ServeOptions", "ServeResult", "ServeRound", "metrics", "run", "ttft"]

NO_PREFILL = "not observable over HTTP: the server reports no prefill start"
BIAS = -1.0e9  # JSON has no -inf; added to a logit, it masks the token


class Server(ChildServer):
    """One server process of the runtime's on 127.0.0.1, started as the driver says."""

    def __init__(self, driver: ServerDriver, workdir: Path, name: str, interrupt: bool | None):
        port = free_port()
        self.launch = driver.launch(workdir, name, port, interrupt)
        self.settings = self.launch.settings
        super().__init__(
            self.launch.argv,
            self.launch.env,
            workdir / f"{name}.log",
            port,
            program=driver.program,
            ready_path="/v1/models",
            poll_s=0.1,
        )


# -- HTTP client -----------------------------------------------------------------------------------
def request(
    port: int, method: str, path: str, body: bytes | None = None, timeout: float = 10.0
) -> tuple[int | None, str]:
    """One plain request; (status, first 300 characters of the body), or (None, error)."""
    status, data = plain_request(port, method, path, body, timeout)
    return status, data[:300].decode("utf-8", errors="replace")


def stream(
    port: int,
    payload: dict[str, Any] | bytes,
    tr: RequestTrace,
    *,
    timeout: float,
    disconnect_after: int | None = None,
    read_delay_s: float = 0.0,
) -> None:
    """A streaming completion, traced: queued (request sent) -> first token event -> each token
    event -> completed ([DONE] after a finish_reason) | interrupted ([DONE] without one) |
    failed (HTTP error, broken stream, timeout) | cancelled (we disconnected)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    tr.why_missing["prefill_start"] = NO_PREFILL
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    finish: str | None = None
    resp: http.client.HTTPResponse | None = None
    try:
        tr.queued = clock()
        conn.request(
            "POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        tr.info["status"] = resp.status
        tr.info["headers_s"] = clock() - tr.queued
        if resp.status != 200:
            tr.finish("failed", body=resp.read()[:300].decode("utf-8", errors="replace"))
            return
        while True:
            line = resp.readline()
            if not line:
                tr.finish("failed", error="the stream ended without [DONE]")
                return
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, ': ping' comments
            data = line[5:].strip()
            if data == b"[DONE]":
                tr.finish("completed" if finish else "interrupted", finish_reason=finish)
                return
            event = json.loads(data)
            choice = (event.get("choices") or [{}])[0]
            if choice.get("text"):
                tr.token()
            if choice.get("finish_reason"):
                finish = str(choice["finish_reason"])
            if isinstance(event.get("timings"), dict):
                # the server's own account of the request (llama-server): its prefill and
                # decode time, prompt tokens taken from its cache
                tr.info["server_timings"] = dict(event["timings"])
            if "error" in event:
                tr.finish("failed", error=str(event["error"])[:300])
                return
            if disconnect_after is not None and len(tr.tokens) >= disconnect_after:
                tr.cancel_requested = clock()
                with contextlib.suppress(OSError):
                    if conn.sock is not None:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                tr.finish("cancelled", how="client closed the connection mid-stream")
                return
            if read_delay_s:
                time.sleep(read_delay_s)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if tr.terminal is None:
            tr.finish("failed", error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        if resp is not None:
            resp.close()
        conn.close()
        tr.released = clock()


def concurrent(
    port: int, payloads: list[dict[str, Any]], names: list[str], timeout: float
) -> list[RequestTrace]:
    traces = [RequestTrace(n) for n in names]
    barrier = threading.Barrier(len(payloads))

    def go(i: int) -> None:
        barrier.wait()
        stream(port, payloads[i], traces[i], timeout=timeout)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(payloads))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return traces


# -- the scenario ----------------------------------------------------------------------------------
def run(
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Mark,
) -> ServeResult:
    """The main server's phases, then the default-settings probe. The registry has checked that
    ``adapter`` offers ``Serving`` (a ``BatchEngine`` is served by :mod:`.batch` instead)."""
    driver = cast(Serving, adapter).server_driver()
    ctx = ServeRun.of(job)
    ctx.text = driver.prompt_text(prompt)
    masked = sorted({*banned, *driver.byte_tokens()})
    ctx.bias = {str(t): BIAS for t in masked}
    counted = driver if isinstance(driver, ServerCounters) else None
    ctx.res = ServeResult(
        runtime=adapter.name,
        api=driver.api,
        counters_doc=counted.counters_doc if counted else None,
        counter_labels=dict(counted.counter_labels) if counted else None,
        prompt_tokens=len(prompt),
        max_tokens=ctx.n_tok,
        masked_token_ids=len(masked),
    )
    with tempfile.TemporaryDirectory(prefix="rtmatrix-serve-") as tmp:
        srv = Server(driver, Path(tmp), "server", ctx.opts.serve_interrupt_requests)
        ctx.res.server_settings = srv.settings
        ctx.res.server_argv = list(srv.launch.argv)
        try:
            main_phases(ctx, driver, srv, adapter, prompt, banned)
        finally:
            ctx.res.stop = stop = srv.stop()
            ctx.res.server_log_tail = srv.log_tail(1500)
        ctx.checks.append(check("serve_stopped", stop.get("stopped") == "SIGTERM", str(stop)))
        if ctx.opts.serve_interrupt_probe and ctx.time_left("interrupt-probe"):
            ctx.res.interrupt_probe = interrupt_probe(
                driver, Path(tmp), ctx.payload, ctx.n_tok, ctx.timeout, ctx.traces
            )
    return ctx.finish(findings(ctx.res) + cache_findings(ctx.traces))


def main_phases(
    ctx: ServeRun,
    driver: ServerDriver,
    srv: Server,
    adapter: Adapter,
    prompt: list[int],
    banned: list[int],
) -> None:
    """Phases 1-6 on the main server: start-up and endpoints, concurrency, invariance, the
    abuse (disconnect, slow consumer, malformed requests) and survival."""
    res, n_ctx = ctx.res, ctx.job.params.n_ctx
    srv.start(min(ctx.opts.serve_start_timeout_s, ctx.budget))
    res.startup_s = srv.startup_s
    res.endpoints = {
        path: request(srv.port, "GET", path)[0] for path in ("/health", "/metrics", "/v1/models")
    }
    res.rss_start = srv.rss()
    # warm-up request, not counted
    stream(srv.port, ctx.payload(4), RequestTrace("warmup"), timeout=ctx.timeout)
    concurrency_phase(ctx, driver, srv.port)
    invariance_step(ctx, driver, srv.port, adapter, banned)
    ctx.checks.append(completed_check(ctx.traces, "concurrent streaming requests completed"))
    if ctx.time_left("disconnect"):
        res.disconnect = disconnect_phase(
            srv, driver, ctx.payload, n_ctx, len(prompt), ctx.timeout, ctx.traces
        )
        ctx.checks += slot_freed_checks(res.disconnect)
    if ctx.time_left("slow-consumer"):
        res.slow = slow_phase(srv, ctx.payload, ctx.n_tok, ctx.opts, ctx.timeout, ctx.traces)
    if ctx.time_left("malformed"):
        res.malformed = malformed_phase(
            srv, ctx.payload, ctx.text, n_ctx, len(prompt), ctx.timeout, ctx.traces
        )
    res.rss_after_abuse = srv.rss()
    res.survival = survival(srv, ctx.timeout)
    ctx.checks.append(
        check(
            "serve_survived",
            res.survival["ok"],
            f"after disconnect, slow consumer and malformed requests: {res.survival}",
        )
    )
    if res.disconnect is not None:
        nxt = res.disconnect["next"]
        ctx.checks.append(
            check(
                "serve_disconnect_released",
                nxt["terminal"] == "completed",
                f"the request after a client disconnect {nxt['terminal']} (TTFT {nxt['ttft_s']})",
            )
        )


def concurrency_phase(ctx: ServeRun, driver: ServerDriver, port: int) -> None:
    """N concurrent streaming requests per level, ``serve_rounds`` rounds each; with
    ``ServerCounters``, what the server said about each level."""
    res = ctx.res
    res.levels, res.server_levels = {}, {}
    for n in ctx.opts.serve_concurrency:

        def level(n: int = n) -> list[ServeRound]:
            rounds = []
            for r in range(ctx.opts.serve_rounds):
                if not ctx.time_left(f"c{n}-round{r}"):
                    break
                names = [f"c{n}-r{r}-{i}" for i in range(n)]
                trs = concurrent(port, [ctx.payload(ctx.n_tok)] * n, names, ctx.timeout)
                ctx.traces.extend(trs)
                rounds.append(round_record(trs))
            return rounds

        if isinstance(driver, ServerCounters):
            rounds, seen = serverside.observe(driver, port, ctx.origin, level)
            res.server_levels[str(n)] = seen
        else:
            rounds = level()
        res.levels[str(n)] = rounds
    if res.server_levels:
        ctx.checks.append(slots_released_check(res.server_levels))


def invariance_step(
    ctx: ServeRun, driver: ServerDriver, port: int, adapter: Adapter, banned: list[int]
) -> None:
    """Batch invariance where the driver offers ``TokenServer`` (else skipped, saying why)."""
    on = ctx.opts.serve_invariance
    if isinstance(driver, TokenServer) and on and ctx.time_left("invariance"):
        ctx.res.invariance = invariance_phase(driver, port, ctx.job, adapter, banned, ctx.opts)
        ctx.checks += invariance.checks(ctx.res.invariance)
    elif on and not isinstance(driver, TokenServer):
        ctx.res.skipped["invariance"] = (
            f"the {driver.program} driver does not offer the TokenServer capability "
            "(token ids in, top log-probabilities out)"
        )


def slot_freed_checks(dis: dict[str, Any]) -> list[dict[str, Any]]:
    """After the client disconnect every slot was idle again (``ServerCounters``)."""
    if "slot_free_s" not in dis:
        return []
    free = dis["slot_free_s"]
    return [
        check(
            "serve_disconnect_slot_freed",
            free is not None,
            "after the client disconnect every slot was idle again "
            + (f"after {free:.4f} s" if free is not None else "never")
            + f" (polled, within {serverside.IDLE_TIMEOUT_S:.0f} s)",
        )
    ]


def cache_findings(traces: list[RequestTrace]) -> list[str]:
    """What the server's own per-request timings say about its prompt cache."""
    sweep = [t for t in traces if t.name.startswith("c")]
    told = [t.info["server_timings"] for t in sweep if "server_timings" in t.info]
    cached = [x for x in told if (x.get("cache_n") or 0) > 0]
    if not cached:
        return []
    return [
        f"the server served {len(cached)}/{len(told)} concurrent requests' prompts from its "
        f"prompt cache (its default; every request sends the same prompt; up to "
        f"{max(x['cache_n'] for x in cached)} prompt tokens reused): their TTFT is a cached "
        "prefill"
    ]


def slots_released_check(levels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """After every concurrency level the server showed all its slots idle again."""
    stuck = [n for n, rec in levels.items() if rec.get("idle_after_s") is None]
    return check(
        "serve_slots_released",
        not stuck,
        f"all slots idle again after {len(levels) - len(stuck)}/{len(levels)} concurrency "
        "level(s) (the server's slots, polled)" + (f"; still busy after c{stuck}" if stuck else ""),
    )


def invariance_phase(
    driver: TokenServer,
    port: int,
    job: Job,
    adapter: Adapter,
    banned: list[int],
    opts: ServeOptions,
) -> dict[str, Any]:
    p = job.params
    bos = adapter.special_ids.get("bos", -1)
    reqs = invariance.plan(
        opts.invariance_requests,
        p.prompt_tokens,
        p.gen_tokens,
        p.n_ctx,
        adapter.vocab_size,
        bos if bos >= 0 else 1,
    )
    return invariance.run_phase(driver, port, reqs, banned, opts.to_dict())


def disconnect_phase(
    srv: Server,
    driver: ServerDriver,
    payload: Callable[[int], dict[str, Any]],
    n_ctx: int,
    n_prompt: int,
    timeout: float,
    traces: list[RequestTrace],
) -> dict[str, Any]:
    """A long request abandoned after 2 token events; then a normal one."""
    long_tokens = max(8, n_ctx - n_prompt - 8)
    gone = RequestTrace("disconnect")
    stream(srv.port, payload(long_tokens), gone, timeout=timeout, disconnect_after=2)
    free: dict[str, Any] = {}
    if isinstance(driver, ServerCounters):
        # the client's clock from the disconnect to the server's slots all idle again
        free["slot_free_s"] = serverside.wait_idle(driver, srv.port, serverside.IDLE_TIMEOUT_S)
        if free["slot_free_s"] is not None and gone.released and gone.cancel_requested:
            free["slot_free_s"] += gone.released - gone.cancel_requested
    nxt = RequestTrace("after-disconnect")
    stream(srv.port, payload(8), nxt, timeout=timeout)
    traces += [gone, nxt]
    log = srv.log_tail(20000)
    return {
        "abandoned_max_tokens": long_tokens,
        "tokens_read": len(gone.tokens),
        "next": {"terminal": nxt.terminal, "ttft_s": ttft(nxt), "tokens": len(nxt.tokens)},
        "server_logged_disconnect": driver.logged_disconnect(log),
        "alive": srv.alive(),
        **free,
    }


def slow_phase(
    srv: Server,
    payload: Callable[[int], dict[str, Any]],
    n_tok: int,
    opts: ServeOptions,
    timeout: float,
    traces: list[RequestTrace],
) -> dict[str, Any]:
    """A consumer reading one event per delay, and a normal request sent just after it."""
    delay = opts.serve_slow_delay_s
    n_slow = opts.serve_slow_tokens
    slow, fast = RequestTrace("slow-consumer"), RequestTrace("behind-slow")

    def run_slow() -> None:
        stream(srv.port, payload(n_slow), slow, timeout=timeout, read_delay_s=delay)

    th = threading.Thread(target=run_slow)
    th.start()
    while slow.first_token is None and th.is_alive():
        time.sleep(0.002)
    stream(srv.port, payload(n_tok), fast, timeout=timeout)
    th.join()
    traces += [slow, fast]
    return {
        "delay_s": delay,
        "slow": {
            "terminal": slow.terminal,
            "tokens": len(slow.tokens),
            "duration_s": (slow.terminal_t or 0.0) - (slow.queued or 0.0),
        },
        "behind": {"terminal": fast.terminal, "ttft_s": ttft(fast), "tokens": len(fast.tokens)},
        "alive": srv.alive(),
    }


def malformed_phase(
    srv: Server,
    payload: Callable[..., dict[str, Any]],
    text: str,
    n_ctx: int,
    n_prompt: int,
    timeout: float,
    traces: list[RequestTrace],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, body in (
        ("invalid-json", b'{"prompt": "x", "max_tokens": '),
        ("wrong-types", json.dumps({"prompt": 123, "max_tokens": "many"}).encode()),
    ):
        status, snippet = request(srv.port, "POST", "/v1/completions", body, timeout)
        out[name] = {"status": status, "body": snippet[:200]}
    reps = 2 * n_ctx // max(1, n_prompt) + 1
    over = RequestTrace("over-context")
    stream(srv.port, payload(4, " ".join([text] * reps)), over, timeout=timeout)
    traces.append(over)
    out["over-context"] = {
        "status": over.info.get("status"),
        "terminal": over.terminal,
        "detail": str(over.info.get("body") or over.info.get("error") or "")[:200],
    }
    out["alive"] = srv.alive()
    return out


def survival(srv: Server, timeout: float) -> dict[str, Any]:
    models, _ = request(srv.port, "GET", "/v1/models", timeout=timeout)
    body = json.dumps({"prompt": "a", "max_tokens": 4, "temperature": 0.0}).encode()
    comp, snippet = request(srv.port, "POST", "/v1/completions", body, timeout)
    alive = srv.alive()
    return {
        "alive": alive,
        "models_status": models,
        "completion_status": comp,
        "ok": alive and models == 200 and comp == 200,
        "detail": snippet[:120] if comp != 200 else "",
    }


def interrupt_probe(
    driver: ServerDriver,
    workdir: Path,
    payload: Callable[[int], dict[str, Any]],
    n_tok: int,
    timeout: float,
    traces: list[RequestTrace],
) -> dict[str, Any]:
    """With the server's default settings: a second request while the first streams."""
    srv = Server(driver, workdir, "server-defaults", None)
    try:
        srv.start(60.0)
        first, second = RequestTrace("default-first"), RequestTrace("default-second")
        th = threading.Thread(
            target=stream, args=(srv.port, payload(n_tok), first), kwargs={"timeout": timeout}
        )
        th.start()
        while first.first_token is None and th.is_alive():
            time.sleep(0.002)
        stream(srv.port, payload(n_tok), second, timeout=timeout)
        th.join()
        traces += [first, second]
        return {
            "settings": "server defaults (interrupt_requests not set)",
            "first": {"terminal": first.terminal, "tokens": len(first.tokens)},
            "second": {"terminal": second.terminal, "tokens": len(second.tokens)},
            "max_tokens": n_tok,
            "interrupted": sum(1 for t in (first, second) if t.terminal == "interrupted"),
        }
    except RuntimeError as exc:
        return {"error": str(exc)[:300]}
    finally:
        srv.stop()


def findings(res: ServeResult) -> list[str]:
    out: list[str] = []
    for path, status in (res.endpoints or {}).items():
        if path != "/v1/models" and (status is None or status >= 400):
            out.append(f"no {path} endpoint (GET {path}: {status})")
    for name, rec in (res.malformed or {}).items():
        if not isinstance(rec, dict):
            continue
        st = rec.get("status")
        if name == "over-context" and st == 200:
            out.append(
                "a prompt beyond the context got HTTP 200, then a stream that ends without "
                "[DONE] or an error event (the error is only in the server log)"
            )
        elif st is not None and st >= 500:
            out.append(f"malformed request {name!r} answered {st} (a server error, not 4xx)")
    probe = res.interrupt_probe or {}
    if probe.get("interrupted"):
        first = probe["first"]
        out.append(
            "with the server's default interrupt_requests, a second request ended the first "
            f"stream after {first['tokens']} of {probe['max_tokens']} tokens with [DONE] and "
            "no finish_reason"
        )
    dis = res.disconnect or {}
    if dis and not dis.get("server_logged_disconnect"):
        out.append("the server log does not mention the client disconnect")
    return out


# -- metrics ---------------------------------------------------------------------------------------
CLK = Source.HARNESS_CLOCK
NOT_IDLE = "the slots were not all idle within the wait"


def metrics(res: ServeResult) -> dict[str, Metric]:
    out = startup_metrics(res) | endpoint_metrics(res.endpoints or {})
    for n, rounds in (res.levels or {}).items():
        out |= level_metrics(n, rounds)
    labels = res.counter_labels or {}
    doc = str(res.counters_doc or "the server's own counters")
    for n, seen in (res.server_levels or {}).items():
        out |= serverside.level_metrics(n, seen, doc, labels)
        out[f"serve_c{n}_server_idle_after_s"] = idle_after_metric(n, seen)
    if res.invariance is not None or "invariance" in (res.skipped or {}):
        why = str((res.skipped or {}).get("invariance") or "the phase did not run")
        out |= invariance.metrics(res.invariance, why)
    out |= disconnect_metrics(res)
    out |= abuse_metrics(res)
    out |= rss_metrics(res)
    probe = res.interrupt_probe
    if probe and "interrupted" in probe:
        out["serve_default_interrupted_streams"] = Metric(
            probe["interrupted"], "streams", CLK, detail=dict(probe)
        )
    elif probe:
        out["serve_default_interrupted_streams"] = Metric.unavailable(
            "streams", str(probe.get("error"))
        )
    return out


def startup_metrics(res: ServeResult) -> dict[str, Metric]:
    if res.startup_s is None:
        why = str(res.startup_error or "the server never answered")
        return {"serve_startup_s": Metric.unavailable("s", why)}
    detail = {
        "method": res.startup_method or "spawn -> /v1/models answers",
        "argv": res.server_argv,
        "settings": res.server_settings,
    }
    return {"serve_startup_s": Metric(res.startup_s, "s", CLK, detail=detail)}


def endpoint_metrics(endpoints: dict[str, int | None]) -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for path, status in endpoints.items():
        key = {"/health": "serve_health_status", "/metrics": "serve_metrics_status"}.get(path)
        if key:
            out[key] = (
                Metric(
                    status,
                    "http-status",
                    CLK,
                    detail={"path": path, "exists": status is not None and status < 400},
                )
                if status is not None
                else Metric.unavailable("http-status", f"GET {path} got no answer")
            )
    return out


def level_metrics(n: str, rounds: list[ServeRound]) -> dict[str, Metric]:
    """``serve_c<N>_*``: the client's TTFT and TPOT quantiles, throughput and errors."""
    pre = f"serve_c{n}"
    ttfts = [v for r in rounds for v in r["ttft_s"] if v is not None]
    tpots = [v for r in rounds for v in r["tpot_s"] if v is not None]
    none = f"no request at concurrency {n} produced a token"
    out = quantile_metrics(
        f"{pre}_ttft",
        ttfts,
        CLK,
        none,
        method="request sent -> first token event, client side",
        concurrency=int(n),
    )
    out |= {
        k: v
        for k, v in quantile_metrics(
            f"{pre}_tpot",
            tpots,
            CLK,
            none,
            method="per request, mean interval between token events",
            concurrency=int(n),
        ).items()
        if not k.endswith("p99_s")
    }
    out[f"{pre}_throughput_tps"] = measured(
        [sum(r["tokens"]) / r["wall_s"] for r in rounds if r["wall_s"] > 0],
        "tokens/s",
        CLK,
        method="token events of all concurrent requests / first sent -> last ended, per round",
        why_none=none,
    )
    out[f"{pre}_errors"] = Metric(
        sum(r["errors"] for r in rounds),
        "requests",
        CLK,
        detail={
            "requests": sum(len(r["tokens"]) for r in rounds),
            "terminal": [t for r in rounds for t in r["terminal"]],
        },
    )
    return out


def idle_after_metric(n: str, seen: dict[str, Any]) -> Metric:
    if seen.get("idle_after_s") is None:
        return Metric.unavailable("s", NOT_IDLE)
    return Metric(
        seen["idle_after_s"],
        "s",
        CLK,
        detail={
            "method": "last client request ended -> every slot idle (polled)",
            "concurrency": int(n),
            "slot_transitions": seen.get("slot_transitions", [])[:200],
        },
    )


def disconnect_metrics(res: ServeResult) -> dict[str, Metric]:
    """After a client dropped a long stream: when the slots were free, and the next TTFT."""
    dis = res.disconnect
    if not dis:
        return {}
    out: dict[str, Metric] = {}
    if "slot_free_s" in dis:
        out["serve_disconnect_slot_free_s"] = (
            Metric(
                dis["slot_free_s"],
                "s",
                CLK,
                detail={
                    "method": "client closed the connection mid-stream -> every slot idle "
                    "(the server's slots, polled)"
                },
            )
            if dis["slot_free_s"] is not None
            else Metric.unavailable("s", NOT_IDLE)
        )
    base = quantiles(
        [v for r in (res.levels or {}).get("1", []) for v in r["ttft_s"] if v is not None]
    )
    nxt = dis["next"]
    out["serve_disconnect_next_ttft_s"] = (
        Metric(
            nxt["ttft_s"],
            "s",
            CLK,
            detail={
                "method": "TTFT of the request sent right after a client dropped a long stream",
                "baseline_c1_ttft_p50_s": base.get("p50"),
                "abandoned_max_tokens": dis["abandoned_max_tokens"],
                "server_logged_disconnect": dis["server_logged_disconnect"],
            },
        )
        if nxt.get("ttft_s") is not None
        else Metric.unavailable("s", f"the request after the disconnect {nxt['terminal']}")
    )
    return out


def abuse_metrics(res: ServeResult) -> dict[str, Metric]:
    """Behind a slow consumer, the malformed requests' statuses, and whether it survived."""
    out: dict[str, Metric] = {}
    slow = res.slow
    if slow:
        b = slow["behind"]
        out["serve_behind_slow_consumer_ttft_s"] = (
            Metric(
                b["ttft_s"],
                "s",
                CLK,
                detail={
                    "method": "TTFT of a request sent while a slow consumer reads its stream",
                    "slow_read_delay_s": slow["delay_s"],
                    "slow_duration_s": slow["slow"]["duration_s"],
                    "slow_terminal": slow["slow"]["terminal"],
                },
            )
            if b.get("ttft_s") is not None
            else Metric.unavailable("s", f"the request behind the slow consumer {b['terminal']}")
        )
    mal = res.malformed
    if mal:
        for name in ("invalid-json", "wrong-types", "over-context"):
            st = (mal.get(name) or {}).get("status")
            key = f"serve_malformed_{name.replace('-', '_')}_status"
            out[key] = (
                Metric(st, "http-status", CLK, detail=dict(mal[name]))
                if st is not None
                else Metric.unavailable("http-status", f"no HTTP status: {mal.get(name)}")
            )
    surv = res.survival
    if surv:
        out["serve_survived"] = Metric(
            "yes" if surv["ok"] else "no", "verdict", CLK, detail=dict(surv)
        )
    return out


def rss_metrics(res: ServeResult) -> dict[str, Metric]:
    """The server process's RSS after start and after the abuse (none in process)."""
    if res.in_process:
        return {}
    out: dict[str, Metric] = {}
    for value, name, label in (
        (res.rss_start, "start", "after start"),
        (res.rss_after_abuse, "after_abuse", "after the abuse"),
    ):
        out[f"serve_server_rss_{name}_bytes"] = (
            Metric(
                value,
                "bytes",
                Source.OS_ACCOUNTING,
                detail={"method": f"server process RSS {label}"},
            )
            if value
            else Metric.unavailable("bytes", "the server process was not running")
        )
    return out


IMPL = ScenarioImpl(
    name=Scenario.SERVE,
    run=run,
    metrics=metrics,
    result=ServeResult,
    options=ServeOptions,
)
