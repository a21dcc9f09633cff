"""A server's own counters and slots as the serve scenario reads them, without a server."""

from __future__ import annotations

import threading
from typing import Any

from rtmatrix.outcome import Source
from rtmatrix.scenarios import serverside as ss

BEFORE = {
    ss.PREDICTED: 100.0,
    ss.PREDICTED_S: 1.0,
    ss.PROMPT: 50.0,
    ss.PROMPT_S: 0.1,
    ss.DECODES: 100.0,
    ss.BUSY_PER_DECODE: 1.0,
}


def test_level_counters_are_deltas_and_derived_rates() -> None:
    after = BEFORE | {ss.PREDICTED: 164.0, ss.PREDICTED_S: 1.5, ss.DECODES: 116.0}
    c = ss.level_counters(BEFORE, after)
    assert c["tokens_predicted"] == 64.0 and c["decode_calls"] == 16.0
    assert c["deltas"][ss.PREDICTED] == 64.0 and ss.BUSY_PER_DECODE not in c["deltas"]
    m = ss.level_metrics("4", {"counters": c, "max_busy_slots": 4}, "doc")
    assert m["serve_c4_server_tokens_per_decode"].value == 4.0
    assert m["serve_c4_server_tg_tps"].value == 128.0
    assert m["serve_c4_server_busy_slots_max"].value == 4
    assert all(v.source is Source.RUNTIME_COUNTER for v in m.values() if v.value is not None)
    assert m["serve_c4_server_pp_tps"].value is None  # no prompt tokens in the level: no rate


def test_unreadable_counters_make_the_figures_unavailable() -> None:
    c = ss.level_counters(None, BEFORE)
    m = ss.level_metrics("1", {"counters": c}, "doc")
    assert m["serve_c1_server_tokens_predicted"].value is None
    assert "could not be read" in (m["serve_c1_server_tokens_predicted"].reason or "")


class FakeDriver:
    """Slots: busy while ``busy`` is set; counters count calls."""

    counters_doc = "fake"

    def __init__(self) -> None:
        self.busy = threading.Event()
        self.scrapes = 0

    def counters(self, port: int) -> dict[str, float]:
        self.scrapes += 1
        return {ss.PREDICTED: float(self.scrapes)}

    def slots(self, port: int) -> list[dict[str, Any]]:
        phase = "decode" if self.busy.is_set() else "idle"
        return [{"id": 0, "phase": phase, "task": 1 if phase != "idle" else None}]


def test_observe_watches_the_slots_and_waits_for_idle() -> None:
    d = FakeDriver()

    def work() -> str:
        d.busy.set()
        threading.Timer(0.05, d.busy.clear).start()
        threading.Event().wait(0.03)
        return "done"

    result, rec = ss.observe(d, 0, 0.0, work)
    assert result == "done" and rec["max_busy_slots"] == 1
    assert rec["idle_after_s"] is not None and d.scrapes == 2
    phases = [t["phase"] for t in rec["slot_transitions"]]
    assert "decode" in phases and phases[-1] == "idle"
    assert rec["counters"]["tokens_predicted"] == 1.0


def test_wait_idle_gives_up() -> None:
    d = FakeDriver()
    d.busy.set()
    assert ss.wait_idle(d, 0, 0.05) is None
