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
from typing import Any

from rtmatrix.adapters.base import Adapter, RuntimeUnavailable
from rtmatrix.adapters.capabilities import (
    BatchEngine,
    ServerCounters,
    ServerDriver,
    Serving,
    TokenServer,
    missing,
)
from rtmatrix.names import Scenario
from rtmatrix.outcome import Metric, Source
from rtmatrix.protocol import Job
from rtmatrix.scenarios import invariance, serverside
from rtmatrix.scenarios.trace import (
    RequestTrace,
    check,
    clock,
    gaps,
    measured,
    quantile_metrics,
    quantiles,
    trace_checks,
)
from rtmatrix.serverproc import ChildServer, free_port
from rtmatrix.serverproc import request as plain_request

DEFAULTS: dict[str, Any] = {
    "serve_concurrency": [1, 2, 4],
    "serve_rounds": 2,
    "serve_tokens": None,  # default: params.gen_tokens
    "serve_slow_delay_s": 0.05,
    "serve_slow_tokens": 16,
    "serve_interrupt_requests": False,
    "serve_interrupt_probe": True,
    "serve_start_timeout_s": 90.0,
    "serve_request_timeout_s": 60.0,
    "serve_invariance": True,
    **invariance.DEFAULTS,
}
NO_PREFILL = "not observable over HTTP: the server reports no prefill start"
BIAS = -1.0e9  # JSON has no -inf; added to a logit, it masks the token


def options(job: Job) -> dict[str, Any]:
    opts = {**DEFAULTS, **{k: v for k, v in job.options.items() if k in DEFAULTS}}
    levels = opts["serve_concurrency"]
    if not (
        isinstance(levels, list)
        and levels
        and all(isinstance(n, int) and 0 < n <= 16 for n in levels)
    ):
        msg = f"options.serve_concurrency must be a list of 1..16, got {levels!r}"
        raise ValueError(msg)
    return opts


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


def ttft(tr: RequestTrace) -> float | None:
    if tr.first_token is None or tr.queued is None:
        return None
    return tr.first_token - tr.queued


def tpot(tr: RequestTrace) -> float | None:
    g = gaps(tr.tokens)
    return sum(g) / len(g) if g else None


# -- the scenario ----------------------------------------------------------------------------------
def run(
    adapter: Adapter,
    job: Job,
    prompt: list[int],
    banned: list[int],
    mark: Callable[[str, float], None],
) -> dict[str, Any]:
    if not isinstance(adapter, Serving):
        if isinstance(adapter, BatchEngine):
            from rtmatrix.scenarios import batch

            return batch.run(adapter, job, prompt, banned, mark)
        raise RuntimeUnavailable(missing(adapter, Serving, f"scenario {Scenario.SERVE.value!r}"))
    driver = adapter.server_driver()
    opts = options(job)
    p = job.params
    n_ctx = p.n_ctx
    n_tok = int(opts["serve_tokens"] or p.gen_tokens)
    timeout = float(opts["serve_request_timeout_s"])
    budget = 0.8 * job.timeout_s
    origin = clock()
    deadline = origin + budget
    text = driver.prompt_text(prompt)
    masked = sorted({*banned, *driver.byte_tokens()})
    bias = {str(t): BIAS for t in masked}

    def payload(max_tokens: int, prompt_text: str = text) -> dict[str, Any]:
        return {
            "prompt": prompt_text,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "logit_bias": bias,
        }

    res: dict[str, Any] = {
        "scenario": Scenario.SERVE.value,
        "runtime": adapter.name,
        "api": driver.api,
        "counters_doc": driver.counters_doc if isinstance(driver, ServerCounters) else None,
        "prompt_tokens": len(prompt),
        "max_tokens": n_tok,
        "masked_token_ids": len(masked),
        "skipped": {},
    }
    traces: list[RequestTrace] = []
    checks: list[dict[str, Any]] = []

    def time_left(phase: str) -> bool:
        if clock() < deadline:
            return True
        res["skipped"][phase] = f"time budget ({budget:.0f} s = 0.8 x the cell timeout) spent"
        return False

    with tempfile.TemporaryDirectory(prefix="rtmatrix-serve-") as tmp:
        srv = Server(driver, Path(tmp), "server", bool(opts["serve_interrupt_requests"]))
        res["server_settings"] = srv.settings
        res["server_argv"] = list(srv.launch.argv)
        try:
            srv.start(min(float(opts["serve_start_timeout_s"]), budget))
            res["startup_s"] = srv.startup_s
            res["endpoints"] = {
                path: request(srv.port, "GET", path)[0]
                for path in ("/health", "/metrics", "/v1/models")
            }
            res["rss_start"] = srv.rss()
            # warm-up request, not counted
            stream(srv.port, payload(4), RequestTrace("warmup"), timeout=timeout)
            res["levels"] = {}
            res["server_levels"] = {}
            for n in opts["serve_concurrency"]:

                def level(n: int = n) -> list[dict[str, Any]]:
                    rounds = []
                    for r in range(int(opts["serve_rounds"])):
                        if not time_left(f"c{n}-round{r}"):
                            break
                        names = [f"c{n}-r{r}-{i}" for i in range(n)]
                        trs = concurrent(srv.port, [payload(n_tok)] * n, names, timeout)
                        traces.extend(trs)
                        rounds.append(round_record(trs))
                    return rounds

                if isinstance(driver, ServerCounters):
                    rounds, seen = serverside.observe(driver, srv.port, origin, level)
                    res["server_levels"][str(n)] = seen
                else:
                    rounds = level()
                res["levels"][str(n)] = rounds
            if res["server_levels"]:
                checks.append(slots_released_check(res["server_levels"]))
            if (
                isinstance(driver, TokenServer)
                and opts["serve_invariance"]
                and time_left("invariance")
            ):
                res["invariance"] = invariance_phase(driver, srv.port, job, adapter, banned, opts)
                checks += invariance.checks(res["invariance"])
            elif opts["serve_invariance"] and not isinstance(driver, TokenServer):
                res["skipped"]["invariance"] = (
                    f"the {driver.program} driver does not offer the TokenServer capability "
                    "(token ids in, top log-probabilities out)"
                )
            sweep = [t for t in traces if t.name.startswith("c")]
            bad = [f"{t.name}: {t.terminal} {t.info}" for t in sweep if t.terminal != "completed"]
            checks.append(
                check(
                    "serve_requests_completed",
                    not bad and bool(sweep),
                    f"{len(sweep) - len(bad)}/{len(sweep)} concurrent streaming requests "
                    "completed" + (f"; {'; '.join(bad[:4])}"[:400] if bad else ""),
                )
            )
            if time_left("disconnect"):
                res["disconnect"] = disconnect_phase(
                    srv, driver, payload, n_ctx, len(prompt), timeout, traces
                )
                if "slot_free_s" in res["disconnect"]:
                    free = res["disconnect"]["slot_free_s"]
                    checks.append(
                        check(
                            "serve_disconnect_slot_freed",
                            free is not None,
                            "after the client disconnect every slot was idle again "
                            + (f"after {free:.4f} s" if free is not None else "never")
                            + f" (polled, within {serverside.IDLE_TIMEOUT_S:.0f} s)",
                        )
                    )
            if time_left("slow-consumer"):
                res["slow"] = slow_phase(srv, payload, n_tok, opts, timeout, traces)
            if time_left("malformed"):
                res["malformed"] = malformed_phase(
                    srv, payload, text, n_ctx, len(prompt), timeout, traces
                )
            res["rss_after_abuse"] = srv.rss()
            res["survival"] = survival(srv, timeout)
            checks.append(
                check(
                    "serve_survived",
                    res["survival"]["ok"],
                    f"after disconnect, slow consumer and malformed requests: {res['survival']}",
                )
            )
            if "disconnect" in res:
                nxt = res["disconnect"]["next"]
                checks.append(
                    check(
                        "serve_disconnect_released",
                        nxt["terminal"] == "completed",
                        "the request after a client disconnect "
                        f"{nxt['terminal']} (TTFT {nxt['ttft_s']})",
                    )
                )
        finally:
            res["stop"] = srv.stop()
            res["server_log_tail"] = srv.log_tail(1500)
        checks.append(
            check("serve_stopped", res["stop"].get("stopped") == "SIGTERM", str(res["stop"]))
        )
        if opts["serve_interrupt_probe"] and time_left("interrupt-probe"):
            res["interrupt_probe"] = interrupt_probe(
                driver, Path(tmp), payload, n_tok, timeout, traces
            )
    res["findings"] = findings(res) + cache_findings(traces)
    stored = [t.to_dict(origin) for t in traces]
    checks += trace_checks(stored, need_release=True, label="serve")
    res["traces"] = stored
    res["checks"] = checks
    return res


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


def round_record(trs: list[RequestTrace]) -> dict[str, Any]:
    t_first = min(t.queued for t in trs if t.queued is not None)
    t_last = max(t.terminal_t for t in trs if t.terminal_t is not None)
    return {
        "ttft_s": [ttft(t) for t in trs],
        "tpot_s": [tpot(t) for t in trs],
        "tokens": [len(t.tokens) for t in trs],
        "terminal": [t.terminal for t in trs],
        "wall_s": t_last - t_first,
        "errors": sum(1 for t in trs if t.terminal == "failed"),
    }


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
    opts: dict[str, Any],
) -> dict[str, Any]:
    p = job.params
    bos = adapter.special_ids.get("bos", -1)
    reqs = invariance.plan(
        int(opts["invariance_requests"]),
        p.prompt_tokens,
        p.gen_tokens,
        p.n_ctx,
        adapter.vocab_size,
        bos if bos >= 0 else 1,
    )
    return invariance.run_phase(driver, port, reqs, banned, opts)


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
    opts: dict[str, Any],
    timeout: float,
    traces: list[RequestTrace],
) -> dict[str, Any]:
    """A consumer reading one event per delay, and a normal request sent just after it."""
    delay = float(opts["serve_slow_delay_s"])
    n_slow = int(opts["serve_slow_tokens"])
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


def findings(res: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for path, status in (res.get("endpoints") or {}).items():
        if path != "/v1/models" and (status is None or status >= 400):
            out.append(f"no {path} endpoint (GET {path}: {status})")
    for name, rec in (res.get("malformed") or {}).items():
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
    probe = res.get("interrupt_probe") or {}
    if probe.get("interrupted"):
        first = probe["first"]
        out.append(
            "with the server's default interrupt_requests, a second request ended the first "
            f"stream after {first['tokens']} of {probe['max_tokens']} tokens with [DONE] and "
            "no finish_reason"
        )
    dis = res.get("disconnect") or {}
    if dis and not dis.get("server_logged_disconnect"):
        out.append("the server log does not mention the client disconnect")
    return out


# -- metrics ---------------------------------------------------------------------------------------
def metrics(result: dict[str, Any]) -> dict[str, Metric]:
    clk, osacc = Source.HARNESS_CLOCK, Source.OS_ACCOUNTING
    out: dict[str, Metric] = {}
    out["serve_startup_s"] = (
        Metric(
            result["startup_s"],
            "s",
            clk,
            detail={
                "method": result.get("startup_method") or "spawn -> /v1/models answers",
                "argv": result.get("server_argv"),
                "settings": result.get("server_settings"),
            },
        )
        if result.get("startup_s") is not None
        else Metric.unavailable(
            "s", str(result.get("startup_error") or "the server never answered")
        )
    )
    for path, status in (result.get("endpoints") or {}).items():
        key = {"/health": "serve_health_status", "/metrics": "serve_metrics_status"}.get(path)
        if key:
            out[key] = (
                Metric(
                    status,
                    "http-status",
                    clk,
                    detail={"path": path, "exists": status is not None and status < 400},
                )
                if status is not None
                else Metric.unavailable("http-status", f"GET {path} got no answer")
            )
    for n, rounds in (result.get("levels") or {}).items():
        pre = f"serve_c{n}"
        ttfts = [v for r in rounds for v in r["ttft_s"] if v is not None]
        tpots = [v for r in rounds for v in r["tpot_s"] if v is not None]
        none = f"no request at concurrency {n} produced a token"
        out |= quantile_metrics(
            f"{pre}_ttft",
            ttfts,
            clk,
            none,
            method="request sent -> first token event, client side",
            concurrency=int(n),
        )
        out |= {
            k: v
            for k, v in quantile_metrics(
                f"{pre}_tpot",
                tpots,
                clk,
                none,
                method="per request, mean interval between token events",
                concurrency=int(n),
            ).items()
            if not k.endswith("p99_s")
        }
        out[f"{pre}_throughput_tps"] = measured(
            [sum(r["tokens"]) / r["wall_s"] for r in rounds if r["wall_s"] > 0],
            "tokens/s",
            clk,
            method="token events of all concurrent requests / first sent -> last ended, per round",
            why_none=none,
        )
        out[f"{pre}_errors"] = Metric(
            sum(r["errors"] for r in rounds),
            "requests",
            clk,
            detail={
                "requests": sum(len(r["tokens"]) for r in rounds),
                "terminal": [t for r in rounds for t in r["terminal"]],
            },
        )
    doc = str(result.get("counters_doc") or "the server's own counters")
    for n, seen in (result.get("server_levels") or {}).items():
        out |= serverside.level_metrics(n, seen, doc)
        out[f"serve_c{n}_server_idle_after_s"] = (
            Metric(
                seen["idle_after_s"],
                "s",
                clk,
                detail={
                    "method": "last client request ended -> every slot idle (polled)",
                    "concurrency": int(n),
                    "slot_transitions": seen.get("slot_transitions", [])[:200],
                },
            )
            if seen.get("idle_after_s") is not None
            else Metric.unavailable("s", "the slots were not all idle within the wait")
        )
    if "invariance" in result or "invariance" in (result.get("skipped") or {}):
        why = str((result.get("skipped") or {}).get("invariance") or "the phase did not run")
        out |= invariance.metrics(result.get("invariance"), why)
    dis = result.get("disconnect")
    if dis and "slot_free_s" in dis:
        out["serve_disconnect_slot_free_s"] = (
            Metric(
                dis["slot_free_s"],
                "s",
                clk,
                detail={
                    "method": "client closed the connection mid-stream -> every slot idle "
                    "(the server's slots, polled)"
                },
            )
            if dis["slot_free_s"] is not None
            else Metric.unavailable("s", "the slots were not all idle within the wait")
        )
    if dis:
        base = quantiles(
            [
                v
                for r in (result.get("levels") or {}).get("1", [])
                for v in r["ttft_s"]
                if v is not None
            ]
        )
        nxt = dis["next"]
        out["serve_disconnect_next_ttft_s"] = (
            Metric(
                nxt["ttft_s"],
                "s",
                clk,
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
    slow = result.get("slow")
    if slow:
        b = slow["behind"]
        out["serve_behind_slow_consumer_ttft_s"] = (
            Metric(
                b["ttft_s"],
                "s",
                clk,
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
    mal = result.get("malformed")
    if mal:
        for name in ("invalid-json", "wrong-types", "over-context"):
            st = (mal.get(name) or {}).get("status")
            key = f"serve_malformed_{name.replace('-', '_')}_status"
            out[key] = (
                Metric(st, "http-status", clk, detail=dict(mal[name]))
                if st is not None
                else Metric.unavailable("http-status", f"no HTTP status: {mal.get(name)}")
            )
    surv = result.get("survival")
    if surv:
        out["serve_survived"] = Metric(
            "yes" if surv["ok"] else "no", "verdict", clk, detail=dict(surv)
        )
    rss = () if result.get("in_process") else (("rss_start", "after start"),
                                                ("rss_after_abuse", "after the abuse"))  # fmt: skip
    for key, label in rss:
        name = f"serve_server_rss_{'start' if key == 'rss_start' else 'after_abuse'}_bytes"
        out[name] = (
            Metric(result[key], "bytes", osacc, detail={"method": f"server process RSS {label}"})
            if result.get(key)
            else Metric.unavailable("bytes", "the server process was not running")
        )
    probe = result.get("interrupt_probe")
    if probe and "interrupted" in probe:
        out["serve_default_interrupted_streams"] = Metric(
            probe["interrupted"], "streams", clk, detail=dict(probe)
        )
    elif probe:
        out["serve_default_interrupted_streams"] = Metric.unavailable(
            "streams", str(probe.get("error"))
        )
    return out
