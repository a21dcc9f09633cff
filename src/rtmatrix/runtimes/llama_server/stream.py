"""The ``stream`` and ``cancel`` paths of the llama_server row, over HTTP.

:class:`ServerStreamBackend` is the adapter's
:class:`~rtmatrix.adapters.capabilities.StreamBackend`: a streamed native ``/completion`` over
token ids; the per-token hook runs for each token id of each server-sent event, on the client's
clock (the server offers no hook inside its loop). A client stops a request only by dropping the
connection (cancel mode ``close``); *released* means ``/slots`` shows every slot idle again, polled
from the moment the client let go. :func:`abort_prefill` drops the connection while the server
works on a long prompt (the adapter's ``Abortable`` capability) and tells from the server's own
counters whether the prefill was cut short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from time import perf_counter as clock
from typing import Any

from rtmatrix.adapters.capabilities import OnPrefill, OnToken
from rtmatrix.runtimes.llama_server import client
from rtmatrix.runtimes.llama_server.client import Completion, EventStream

PREDICTED = client.PROMETHEUS_NAMES["tokens_predicted"]
PROMPT = client.PROMETHEUS_NAMES["prompt_tokens"]
POLL_S = 0.002
RELEASE_TIMEOUT_S = 30.0
PROBE_TOKENS = 4  # an uncancelled mid-prefill probe generates this many tokens, then ends


def wait_idle(port: int, timeout_s: float) -> tuple[float | None, int]:
    """Poll ``/slots`` until no slot is processing: (seconds it took, or None on timeout; polls)."""
    t0 = clock()
    polls = 0
    while clock() - t0 < timeout_s:
        polls += 1
        try:
            if client.busy(client.parse_slots(client.get_json(port, "/slots", 5.0))) == 0:
                return clock() - t0, polls
        except (client.ServerError, ValueError):
            pass
        time.sleep(POLL_S)
    return None, polls


def counters(port: int) -> dict[str, float]:
    return client.parse_prometheus(client.get_text(port, "/metrics", 5.0))


class ServerStreamBackend:
    runtime = "llama_server"
    api = (
        "llama-server POST /completion (stream, prompt = token ids, greedy: samplers [top_k], "
        "top_k 1, banned ids logit_bias false, cache_prompt false); per-token hook: each token "
        "id of each server-sent event, on the client's clock"
    )
    cancel_modes: Mapping[str, str] = {
        "close": "the client drops the HTTP connection at the next event after the cancel is "
        "requested; llama-server cancels the request's task when it notices the disconnect",
    }
    missing_modes: Mapping[str, str] = {
        "stop": "llama-server has no per-token hook a client can answer: a client stops a "
        "request only by disconnecting (mode 'close')",
    }
    state_doc = (
        "GET /slots (busy_slots: slots processing) and GET /metrics (llamacpp:"
        "tokens_predicted_total, llamacpp:prompt_tokens_total); release = /slots shows every "
        "slot idle"
    )
    reference_api = "llama-server POST /completion without streaming (same body, stream false)"

    def __init__(
        self,
        port: int,
        rss: Callable[[], int | None],
        timeout_s: float,
        byte_ids: Sequence[int],
    ) -> None:
        self._port = port
        self._rss = rss
        self._byte_ids = list(byte_ids)
        self._timeout = timeout_s
        self._last = Completion()
        self.last_release: dict[str, Any] = {}

    def open_stream(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        on_token: OnToken,
        on_prefill: OnPrefill,
    ) -> Iterator[Any]:
        """``on_prefill`` is not called: over HTTP nothing says when the server starts on the
        prompt. ``on_token`` returning True is ignored for the same reason (no hook inside the
        server); close the iterator to cancel."""
        body = client.completion_body(prompt, max_tokens, banned, stream=True)
        es = EventStream(self._port, body, self._timeout)
        self._last = last = Completion()

        def _stream() -> Iterator[Any]:
            try:
                es.send()
                for event in es.events():
                    for _ in client.event_tokens(event):
                        on_token()
                    client.absorb(last, event)
                    yield event
            finally:
                es.close()

        return _stream()

    def chunk_text(self, chunk: Any) -> str:
        return str(chunk.get("content") or "") if isinstance(chunk, dict) else ""

    def byte_tokens(self) -> list[int]:
        return list(self._byte_ids)

    def generated(self, n_prompt: int) -> list[int] | None:
        return list(self._last.tokens)

    def release(self) -> None:
        """Wait until ``/slots`` shows every slot idle (the request's slot given back)."""
        took, polls = wait_idle(self._port, RELEASE_TIMEOUT_S)
        self.last_release = {"seen_idle_s": took, "polls": polls}

    def state(self) -> dict[str, int | None]:
        try:
            slots = client.parse_slots(client.get_json(self._port, "/slots", 5.0))
            c = counters(self._port)
        except (client.ServerError, ValueError):
            return {"busy_slots": None, "tokens_predicted_total": None}
        return {
            "busy_slots": client.busy(slots),
            "tokens_predicted_total": int(c[PREDICTED]) if PREDICTED in c else None,
            "prompt_tokens_total": int(c[PROMPT]) if PROMPT in c else None,
        }

    def process_rss(self) -> int | None:
        return self._rss()

    def complete(self, prompt: Sequence[int], max_tokens: int, banned: Sequence[int]) -> list[int]:
        return client.complete(self._port, prompt, max_tokens, banned, timeout=self._timeout).tokens


def abort_prefill(port: int, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
    """Send a streamed completion of ``prompt`` (``PROBE_TOKENS`` tokens); ``delay_s`` after it
    was sent, drop the connection and poll ``/slots`` until the slot is idle. ``delay_s`` None:
    read it to the end (``prefill_s`` = sent -> first token event). Aborted = the server's
    ``tokens_predicted_total`` did not move: no token was sampled, so the prefill never
    finished (the first token is sampled right at its end)."""
    wait_idle(port, RELEASE_TIMEOUT_S)
    before = counters(port)
    es = EventStream(port, client.completion_body(prompt, PROBE_TOKENS, [], stream=True), 120.0)
    res: dict[str, Any] = {}
    t_start = clock()
    es.send()
    if delay_s is None:
        _read_all(es, res)
        prefill_s = res.get("t_first", clock()) - t_start
        t_flag = t_free = None
    else:
        res["t_flag"] = t_flag = _close_at(es, t_start + delay_s)
        took, _ = wait_idle(port, RELEASE_TIMEOUT_S)
        t_free = t_flag + took if took is not None else None
        prefill_s = (t_free or clock()) - t_start
    wait_idle(port, RELEASE_TIMEOUT_S)
    after = counters(port)
    predicted = after.get(PREDICTED, 0.0) - before.get(PREDICTED, 0.0)
    prompted = after.get(PROMPT, 0.0) - before.get(PROMPT, 0.0)
    aborted = delay_s is not None and predicted == 0
    out: dict[str, Any] = {
        "aborted": aborted,
        "prefill_s": prefill_s,
        "due_s": delay_s,
        "flag_s": t_flag - t_start if t_flag is not None else None,
        "flag_late_s": t_flag - t_start - delay_s if t_flag is not None and delay_s else None,
        "latency_s": t_free - t_flag if aborted and t_free and t_flag else None,
        "released_s": t_free - t_flag if t_free is not None and t_flag is not None else None,
        "server_tokens_predicted": predicted,
        "server_prompt_tokens": prompted,
        "prompt_tokens": len(prompt),
        "how": "the client drops the HTTP connection; the slot is seen idle in /slots",
    }
    if delay_s is not None and not aborted:
        out["why"] = (
            f"llama-server finished the {len(prompt)}-token prefill and sampled {predicted:.0f} "
            f"token(s) (its /metrics counters) before it acted on the disconnect: the "
            "request's cancel took effect only once the prefill was done"
        )
    return out


def _read_all(es: EventStream, res: dict[str, Any]) -> None:
    try:
        for _event in es.events():
            res.setdefault("t_first", clock())
    finally:
        es.close()


def _close_at(es: EventStream, t: float) -> float:
    """Drop the connection at ``t`` (from another thread's point of view: right away)."""
    done = threading.Event()
    done.wait(max(0.0, t - clock()))
    t_flag = clock()
    es.close()
    return t_flag
