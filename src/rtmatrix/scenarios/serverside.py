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
from collections.abc import Callable, Mapping
from typing import Any

from rtmatrix.adapters.capabilities import CounterReading, ServerCounters
from rtmatrix.outcome import Metric, Source
from rtmatrix.scenarios.trace import clock

POLL_S = 0.01
IDLE_TIMEOUT_S = 10.0
#: the neutral name of the decode-call counter, and what the detail calls it where the driver
#: gives no word of its own (``ServerCounters.counter_labels``)
DECODE_CALLS = "decode_calls"
DECODE_CALLS_LABEL = "decode calls"


def scrape(driver: ServerCounters, port: int) -> CounterReading | None:
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


def level_counters(before: CounterReading | None, after: CounterReading | None) -> dict[str, Any]:
    """The server's own figures over one concurrency level, from its counters' deltas (the
    neutral names of :class:`~rtmatrix.adapters.capabilities.CounterReading`); ``deltas``: every
    counter the server keeps, by its own name."""
    if before is None or after is None:
        return {"error": "the server's counters could not be read before and after the level"}
    b, a = before.figures, after.figures

    def delta(key: str) -> float | None:
        return a[key] - b[key] if key in a and key in b else None

    return {
        "tokens_predicted": delta("tokens_predicted"),
        "tokens_predicted_seconds": delta("tokens_predicted_seconds"),
        "prompt_tokens": delta("prompt_tokens"),
        "prompt_seconds": delta("prompt_seconds"),
        "decode_calls": delta(DECODE_CALLS),
        "busy_slots_per_decode": a.get("busy_slots_per_decode"),
        "deltas": {k: after.raw[k] - before.raw[k] for k in sorted(after.raw) if k in before.raw},
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def level_metrics(
    n: str, rec: dict[str, Any], doc: str, labels: Mapping[str, str] | None = None
) -> dict[str, Metric]:
    """``serve_c<N>_server_*`` from one level's counter deltas (source runtime-counter);
    ``labels``: the server's words for a neutral counter (``ServerCounters.counter_labels``)."""
    rt, pre = Source.RUNTIME_COUNTER, f"serve_c{n}_server"
    c = rec.get("counters") or {}
    why = str(c.get("error") or "the server does not expose this counter")
    decodes = (labels or {}).get(DECODE_CALLS, DECODE_CALLS_LABEL)
    figures: list[tuple[str, float | None, str, str]] = [
        ("tokens_predicted", c.get("tokens_predicted"), "tokens", "generated tokens (delta)"),
        ("prompt_tokens", c.get("prompt_tokens"), "tokens", "prompt tokens processed (delta)"),
        ("decode_calls", c.get("decode_calls"), "calls", f"{decodes} (delta)"),
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
