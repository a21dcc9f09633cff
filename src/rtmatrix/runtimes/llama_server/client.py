"""What an HTTP client of llama-server needs: plain requests on loopback, its native
``/completion`` with token ids (greedy, ``n_probs`` for the top log-probabilities of every
generated position), its server-sent events, ``/slots`` and the Prometheus text of ``/metrics``.

Everything here is pure or plain ``http.client``; nothing imports the binding.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rtmatrix.adapters.capabilities import CounterReading
from rtmatrix.serverproc import HOST, request

# one sample line of the Prometheus text exposition format: name{labels} value [timestamp]
_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)


class ServerError(RuntimeError):
    """A request llama-server did not answer as expected (status, body or connection)."""


# -- plain requests: rtmatrix.serverproc.request ------------------------------------------
def get_json(port: int, path: str, timeout: float = 10.0) -> Any:
    status, body = request(port, "GET", path, timeout=timeout)
    if status != 200:
        msg = f"GET {path}: {status} {body[:200].decode('utf-8', errors='replace')}"
        raise ServerError(msg)
    return json.loads(body)


def get_text(port: int, path: str, timeout: float = 10.0) -> str:
    status, body = request(port, "GET", path, timeout=timeout)
    if status != 200:
        msg = f"GET {path}: {status} {body[:200].decode('utf-8', errors='replace')}"
        raise ServerError(msg)
    return body.decode("utf-8", errors="replace")


def post_json(port: int, path: str, payload: dict[str, Any], timeout: float = 60.0) -> Any:
    status, body = request(port, "POST", path, json.dumps(payload).encode(), timeout)
    if status != 200:
        msg = f"POST {path}: {status} {body[:300].decode('utf-8', errors='replace')}"
        raise ServerError(msg)
    return json.loads(body)


# -- /metrics ----------------------------------------------------------------------------------
def parse_prometheus(text: str) -> dict[str, float]:
    """Samples of Prometheus text (``# HELP``/``# TYPE`` and blank lines skipped): name -> value;
    a labelled sample is keyed ``name{labels}``. A value that is not a number is left out."""
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        found = _SAMPLE.match(line)
        if found is None:
            continue
        try:
            value = float(found.group("value"))
        except ValueError:
            continue
        labels = found.group("labels")
        out[f"{found.group('name')}{{{labels}}}" if labels else found.group("name")] = value
    return out


def counter_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """``after - before`` of every ``*_total`` counter both scrapes have."""
    return {k: after[k] - before[k] for k in sorted(after) if k.endswith("_total") and k in before}


#: llama-server's Prometheus names of the neutral counters a ``ServerCounters`` driver hands the
#: ``serve`` scenario (:class:`rtmatrix.adapters.capabilities.CounterReading`)
PROMETHEUS_NAMES: dict[str, str] = {
    "tokens_predicted": "llamacpp:tokens_predicted_total",
    "tokens_predicted_seconds": "llamacpp:tokens_predicted_seconds_total",
    "prompt_tokens": "llamacpp:prompt_tokens_total",
    "prompt_seconds": "llamacpp:prompt_seconds_total",
    "decode_calls": "llamacpp:n_decode_total",
    "busy_slots_per_decode": "llamacpp:n_busy_slots_per_decode",
}


def counter_reading(samples: dict[str, float]) -> CounterReading:
    """One scrape of ``/metrics`` in neutral names (those it has), and every ``*_total``
    counter by its own name."""
    figures = {k: samples[name] for k, name in PROMETHEUS_NAMES.items() if name in samples}
    return CounterReading(figures, {k: v for k, v in samples.items() if k.endswith("_total")})


# -- /slots ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SlotState:
    """One slot as ``/slots`` shows it. An idle slot carries only its id and ``n_ctx``."""

    id: int
    n_ctx: int | None
    processing: bool
    task: int | None = None
    n_prompt: int | None = None
    n_prompt_processed: int | None = None
    n_decoded: int | None = None

    @property
    def phase(self) -> str:
        """``idle`` | ``prefill`` (busy, nothing decoded yet) | ``decode``."""
        if not self.processing:
            return "idle"
        return "decode" if (self.n_decoded or 0) > 0 else "prefill"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "phase": self.phase,
            "task": self.task,
            "n_prompt": self.n_prompt,
            "n_prompt_processed": self.n_prompt_processed,
            "n_decoded": self.n_decoded,
        }


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def parse_slots(data: Any) -> list[SlotState]:
    """``/slots`` JSON -> slot states; raises :class:`ServerError` on another shape."""
    if not isinstance(data, list):
        msg = f"/slots: expected a JSON list, got {type(data).__name__}"
        raise ServerError(msg)
    out = []
    for item in data:
        if not isinstance(item, dict) or _int(item.get("id")) is None:
            msg = f"/slots: an entry without an id: {str(item)[:120]}"
            raise ServerError(msg)
        nxt = item.get("next_token")
        first = nxt[0] if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict) else {}
        if isinstance(nxt, dict):
            first = nxt
        out.append(
            SlotState(
                id=int(item["id"]),
                n_ctx=_int(item.get("n_ctx")),
                processing=bool(item.get("is_processing")),
                task=_int(item.get("id_task")),
                n_prompt=_int(item.get("n_prompt_tokens")),
                n_prompt_processed=_int(item.get("n_prompt_tokens_processed")),
                n_decoded=_int(first.get("n_decoded")),
            )
        )
    return out


def busy(slots: Sequence[SlotState]) -> int:
    return sum(1 for s in slots if s.processing)


# -- /completion -------------------------------------------------------------------------------
def completion_body(
    prompt: Sequence[int],
    max_tokens: int,
    banned: Sequence[int],
    *,
    stream: bool,
    n_probs: int = 0,
) -> dict[str, Any]:
    """A greedy native completion over token ids: the ``top_k`` sampler alone with k = 1,
    ``banned`` ids never sampled (``logit_bias`` false), the generated ids in every answer,
    no prompt cache (every request is a fresh prefill)."""
    body: dict[str, Any] = {
        "prompt": [int(t) for t in prompt],
        "n_predict": int(max_tokens),
        "samplers": ["top_k"],
        "top_k": 1,
        "return_tokens": True,
        "cache_prompt": False,
        "logit_bias": [[int(t), False] for t in banned],
        "stream": stream,
    }
    if n_probs:
        body["n_probs"] = int(n_probs)
    return body


Top = list[tuple[int, float]]


@dataclass
class Completion:
    """Generated ids and, per position, the server's top ``n_probs`` (id, log-probability)
    pairs computed before sampling; ``slot`` and ``timings`` as the server reports them."""

    tokens: list[int] = field(default_factory=list)
    top: list[Top] = field(default_factory=list)
    slot: int | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    stop_type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": list(self.tokens),
            "top": [[[i, lp] for i, lp in pos] for pos in self.top],
            "slot": self.slot,
            "timings": dict(self.timings),
            "stop_type": self.stop_type,
        }


def event_tokens(event: dict[str, Any]) -> list[int]:
    toks = event.get("tokens")
    return [int(t) for t in toks] if isinstance(toks, list) else []


def event_top(event: dict[str, Any]) -> list[Top]:
    """The per-position top log-probabilities of one answer or event (``n_probs``)."""
    out: list[Top] = []
    for pos in event.get("completion_probabilities") or []:
        if not isinstance(pos, dict):
            continue
        pairs = []
        for cand in pos.get("top_logprobs") or []:
            if isinstance(cand, dict) and "id" in cand and "logprob" in cand:
                pairs.append((int(cand["id"]), float(cand["logprob"])))
        out.append(pairs)
    return out


def absorb(c: Completion, event: dict[str, Any]) -> None:
    """Add one answer (or stream event) to ``c``."""
    c.tokens += event_tokens(event)
    c.top += event_top(event)
    if _int(event.get("id_slot")) is not None and int(event["id_slot"]) >= 0:
        c.slot = int(event["id_slot"])
    if isinstance(event.get("timings"), dict):
        c.timings = dict(event["timings"])
    if event.get("stop_type"):
        c.stop_type = str(event["stop_type"])


def complete(
    port: int,
    prompt: Sequence[int],
    max_tokens: int,
    banned: Sequence[int],
    n_probs: int = 0,
    timeout: float = 120.0,
) -> Completion:
    """One non-streamed greedy completion (:func:`completion_body`)."""
    body = completion_body(prompt, max_tokens, banned, stream=False, n_probs=n_probs)
    answer = post_json(port, "/completion", body, timeout)
    if not isinstance(answer, dict):
        msg = f"/completion: expected a JSON object, got {type(answer).__name__}"
        raise ServerError(msg)
    c = Completion()
    absorb(c, answer)
    return c


#: the sampler order this row sends (llama-server's default chain minus the stages it turns off:
#: dry, top_n_sigma, typ_p, xtc): truncations before the temperature
SAMPLERS = ["penalties", "top_k", "top_p", "min_p", "temperature"]


def sample_body(
    prompt: Sequence[int], max_tokens: int, params: dict[str, Any], seed: int, **extra: Any
) -> dict[str, Any]:
    """A seeded, sampled native completion over token ids with the row's stage order
    (``SAMPLERS``), end-of-sequence ignored so every answer has ``max_tokens`` ids."""
    return {
        "prompt": [int(t) for t in prompt],
        "n_predict": int(max_tokens),
        "samplers": list(SAMPLERS),
        "temperature": float(params.get("temperature", 1.0)),
        "top_k": int(params.get("top_k", 0) or 0),
        "top_p": float(params.get("top_p", 1.0)),
        "min_p": float(params.get("min_p", 0.0)),
        "repeat_penalty": float(params.get("repeat_penalty", 1.0)),
        "seed": int(seed),
        "ignore_eos": True,
        "return_tokens": True,
        "cache_prompt": False,
        "stream": False,
        **extra,
    }


def sample(
    port: int,
    prompt: Sequence[int],
    max_tokens: int,
    params: dict[str, Any],
    seed: int,
    timeout: float = 120.0,
    **extra: Any,
) -> Completion:
    """One sampled completion (:func:`sample_body`)."""
    answer = post_json(port, "/completion", sample_body(prompt, max_tokens, params, seed, **extra),
                       timeout)  # fmt: skip
    if not isinstance(answer, dict):
        msg = f"/completion: expected a JSON object, got {type(answer).__name__}"
        raise ServerError(msg)
    c = Completion()
    absorb(c, answer)
    return c


# -- server-sent events ------------------------------------------------------------------------
class EventStream:
    """A streamed ``/completion``: iterate for its JSON events; :meth:`close` drops the
    connection (a client disconnect). ``status`` is the HTTP status once the headers came."""

    def __init__(self, port: int, payload: dict[str, Any], timeout: float) -> None:
        self._conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        self._resp: http.client.HTTPResponse | None = None
        self._body = json.dumps(payload).encode()
        self.status: int | None = None
        self.closed = False

    def send(self) -> None:
        """Send the request (the server queues it) without waiting for an answer."""
        self._conn.request(
            "POST", "/completion", body=self._body, headers={"Content-Type": "application/json"}
        )

    def events(self) -> Iterator[dict[str, Any]]:
        resp = self._conn.getresponse()
        self._resp = resp
        self.status = resp.status
        if resp.status != 200:
            msg = f"/completion: {resp.status} {resp.read()[:300].decode(errors='replace')}"
            raise ServerError(msg)
        while not self.closed:
            line = resp.readline()
            if not line:
                return
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            event = json.loads(data)
            if not isinstance(event, dict):
                continue
            if "error" in event:
                msg = f"/completion stream error: {str(event['error'])[:300]}"
                raise ServerError(msg)
            yield event
            if event.get("stop"):
                return

    def close(self) -> None:
        """Drop the connection at once (shutdown, then close): the server sees the client go."""
        self.closed = True
        with contextlib.suppress(OSError):
            if self._conn.sock is not None:
                self._conn.sock.shutdown(socket.SHUT_RDWR)
        if self._resp is not None:
            with contextlib.suppress(OSError, http.client.HTTPException):
                self._resp.close()
        self._conn.close()
