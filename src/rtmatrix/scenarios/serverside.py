"""What a server says about itself while the ``serve`` scenario drives it: its counters before and
after each concurrency level, and its request slots sampled in the background (the
``ServerCounters`` capability of the driver). Nothing here imports a runtime.

A :class:`SlotWatcher` polls the slots every ``interval_s`` and keeps each slot's transitions
(idle -> prefill -> decode -> idle, with the server's task id and token counts) on the harness
clock: the server-side half of the request state traces, beside the client's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rtmatrix.adapters.capabilities import ServerCounters
from rtmatrix.outcome import Metric, Source
from rtmatrix.scenarios.trace import clock

POLL_S = 0.01
IDLE_TIMEOUT_S = 10.0
# the Prometheus names llama-server exposes; a driver of another server may expose others
PREDICTED = "llamacpp:tokens_predicted_total"
PREDICTED_S = "llamacpp:tokens_predicted_seconds_total"
PROMPT = "llamacpp:prompt_tokens_total"
PROMPT_S = "llamacpp:prompt_seconds_total"
DECODES = "llamacpp:n_decode_total"
BUSY_PER_DECODE = "llamacpp:n_busy_slots_per_decode"


def scrape(driver: ServerCounters, port: int) -> dict[str, float] | None:
    try:
        return driver.counters(port)
    except Exception:  # a server that cannot answer now: the level records it as missing
        return None


def slots_now(driver: ServerCounters, port: int) -> list[dict[str, Any]] | None:
    try:
        return driver.slots(port)
    except Exception:  # a poll that failed is a gap in the watcher's samples
        return None


class SlotWatcher:
    """Background polling of the slots; transitions per slot and the busiest moment."""

    def __init__(self, driver: ServerCounters, port: int, origin: float) -> None:
        self._driver, self._port, self._origin = driver, port, origin
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rtmatrix-slots", daemon=True)
        self._last: dict[int, tuple[Any, ...]] = {}
        self.transitions: list[dict[str, Any]] = []
        self.polls = 0
        self.failed_polls = 0
        self.max_busy = 0

    def __enter__(self) -> SlotWatcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(POLL_S)

    def sample(self) -> None:
        slots = slots_now(self._driver, self._port)
        t = round(clock() - self._origin, 6)
        self.polls += 1
        if slots is None:
            self.failed_polls += 1
            return
        self.max_busy = max(self.max_busy, sum(1 for s in slots if s.get("phase") != "idle"))
        for s in slots:
            key = (s.get("phase"), s.get("task"))
            sid = int(s.get("id", -1))
            if self._last.get(sid) != key:
                self._last[sid] = key
                self.transitions.append({"t": t, **s})


def wait_idle(driver: ServerCounters, port: int, timeout_s: float) -> float | None:
    """Seconds until every slot is idle (polled), None when they were not within the time."""
    t0 = clock()
    while clock() - t0 < timeout_s:
        slots = slots_now(driver, port)
        if slots is not None and all(s.get("phase") == "idle" for s in slots):
            return clock() - t0
        time.sleep(0.002)
    return None


def level_counters(
    before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, Any]:
    """The server's own figures over one concurrency level, from its counters' deltas."""
    if before is None or after is None:
        return {"error": "the server's counters could not be read before and after the level"}

    def delta(key: str) -> float | None:
        return after[key] - before[key] if key in after and key in before else None

    return {
        "tokens_predicted": delta(PREDICTED),
        "tokens_predicted_seconds": delta(PREDICTED_S),
        "prompt_tokens": delta(PROMPT),
        "prompt_seconds": delta(PROMPT_S),
        "decode_calls": delta(DECODES),
        "busy_slots_per_decode": after.get(BUSY_PER_DECODE),
        "deltas": {
            k: after[k] - before[k] for k in sorted(after) if k in before and k.endswith("_total")
        },
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def level_metrics(n: str, rec: dict[str, Any], doc: str) -> dict[str, Metric]:
    """``serve_c<N>_server_*`` from one level's counter deltas (source runtime-counter)."""
    rt, pre = Source.RUNTIME_COUNTER, f"serve_c{n}_server"
    c = rec.get("counters") or {}
    why = str(c.get("error") or "the server does not expose this counter")
    figures: list[tuple[str, float | None, str, str]] = [
        ("tokens_predicted", c.get("tokens_predicted"), "tokens", "generated tokens (delta)"),
        ("prompt_tokens", c.get("prompt_tokens"), "tokens", "prompt tokens processed (delta)"),
        ("decode_calls", c.get("decode_calls"), "calls", "llama_decode calls (delta)"),
        (
            "tokens_per_decode",
            _ratio(c.get("tokens_predicted"), c.get("decode_calls")),
            "tokens/call",
            "generated tokens per decode call: above 1, several requests shared a batch",
        ),
        (
            "tg_tps",
            _ratio(c.get("tokens_predicted"), c.get("tokens_predicted_seconds")),
            "tokens/s",
            "generated tokens / the server's generation seconds (summed over requests: a "
            "per-request rate)",
        ),
        (
            "pp_tps",
            _ratio(c.get("prompt_tokens"), c.get("prompt_seconds")),
            "tokens/s",
            "prompt tokens / the server's prompt seconds (summed over requests)",
        ),
        (
            "busy_slots_per_decode",
            c.get("busy_slots_per_decode"),
            "slots",
            "the server's running average of busy slots per decode call (gauge, after the level)",
        ),
        (
            "busy_slots_max",
            rec.get("max_busy_slots"),
            "slots",
            "most slots seen busy at once while the level ran (slots polled every 10 ms)",
        ),
    ]
    out: dict[str, Metric] = {}
    for key, value, unit, method in figures:
        out[f"{pre}_{key}"] = (
            Metric(value, unit, rt, detail={"method": method, "concurrency": int(n), "doc": doc})
            if value is not None
            else Metric.unavailable(unit, why)
        )
    return out


def observe(
    driver: ServerCounters, port: int, origin: float, work: Callable[[], Any]
) -> tuple[Any, dict[str, Any]]:
    """Run ``work`` with the counters scraped around it and the slots watched during it; after
    it, wait until every slot is idle (``idle_after_s``: the server released the requests)
    before the second scrape, so the counters of the last request are in."""
    before = scrape(driver, port)
    with SlotWatcher(driver, port, origin) as watch:
        result = work()
        idle_s = wait_idle(driver, port, IDLE_TIMEOUT_S)
    watch.sample()  # the watcher stopped: one last look, so the release is in its transitions
    after = scrape(driver, port)
    rec = {
        "idle_after_s": idle_s,
        "counters": level_counters(before, after),
        "max_busy_slots": watch.max_busy,
        "slot_polls": watch.polls,
        "slot_polls_failed": watch.failed_polls,
        "slot_transitions": watch.transitions,
    }
    return result, rec
