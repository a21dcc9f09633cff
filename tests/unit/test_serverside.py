"""A server's own counters and slots as the serve scenario reads them, without a server."""

from __future__ import annotations

import threading
from typing import Any

from rtmatrix.adapters.capabilities import SERVER_COUNTERS, SERVER_GAUGES, CounterReading
from rtmatrix.outcome import Source
from rtmatrix.scenarios import serverside as ss

FIGURES = {
    "tokens_predicted": 100.0,
    "tokens_predicted_seconds": 1.0,
    "prompt_tokens": 50.0,
    "prompt_seconds": 0.1,
    "decode_calls": 100.0,
    "busy_slots_per_decode": 1.0,
}
BEFORE = CounterReading(FIGURES, {"srv:generated_total": 100.0, "srv:requests_total": 3.0})


def test_the_neutral_names_are_the_capabilitys() -> None:
    assert set(FIGURES) == set(SERVER_COUNTERS) | set(SERVER_GAUGES)


def test_level_counters_are_deltas_and_derived_rates() -> None:
    figures = {"tokens_predicted": 164.0, "tokens_predicted_seconds": 1.5, "decode_calls": 116.0}
    after = CounterReading(FIGURES | figures, {"srv:generated_total": 164.0, "srv:new_total": 1.0})
    c = ss.level_counters(BEFORE, after)
    assert c["tokens_predicted"] == 64.0 and c["decode_calls"] == 16.0
    assert c["busy_slots_per_decode"] == 1.0
    assert c["deltas"] == {"srv:generated_total": 64.0}  # the server's own names, both scrapes
    m = ss.level_metrics("4", {"counters": c, "max_busy_slots": 4}, "doc")
    assert m["serve_c4_server_tokens_per_decode"].value == 4.0
    assert m["serve_c4_server_tg_tps"].value == 128.0
    assert m["serve_c4_server_busy_slots_max"].value == 4
    assert all(v.source is Source.RUNTIME_COUNTER for v in m.values() if v.value is not None)
    assert m["serve_c4_server_pp_tps"].value is None  # no prompt tokens in the level: no rate
    assert m["serve_c4_server_decode_calls"].detail["method"] == "decode calls (delta)"
    labelled = ss.level_metrics("4", {"counters": c}, "doc", {"decode_calls": "server decodes"})
    assert labelled["serve_c4_server_decode_calls"].detail["method"] == "server decodes (delta)"


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

    counter_labels: dict[str, str] = {}  # noqa: RUF012

    def counters(self, port: int) -> CounterReading:
        self.scrapes += 1
        return CounterReading({"tokens_predicted": float(self.scrapes)}, {})

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
