"""The lifecycle panel's steps, each on the cells of tests.browser.runs.lifecycle_run."""

from __future__ import annotations

import copy
from typing import Any

from rtmatrix.report import lifecycle
from rtmatrix.report.views import Notes
from rtmatrix.results.columns import columns
from rtmatrix.results.records import CellRecord, RunRecord
from tests.browser.runs import lifecycle_run


def _card(run: RunRecord, scenario: str, name: str = "") -> lifecycle.Card:
    panel = lifecycle.panel(columns([run]), Notes())
    return next(c for c in panel.cards if c.scenario == scenario and name in c.label)


def _cell(run: RunRecord, scenario: str) -> CellRecord:
    name = f"tiny-{scenario}"
    return next(c for c in run["cells"] if c["fixture"]["name"] == name and c["metrics"])


def test_cancel_card_tables_then_facts() -> None:
    card = _card(lifecycle_run(), "cancel")
    assert [t.name for t in card.tables] == ["cancel modes", "memory and runtime state"]
    modes = card.tables[0]
    assert [r.data for r in modes.rows] == ["stop", "close"]
    assert modes.rows[1].cells[-1].css == "v-FAIL"  # the close mode leaks past its tolerance
    assert modes.rows[0].help == "20 counted cycles"
    assert [f.name for f in card.facts] == ["RSS before cycle 1", "mid-prefill cancel"]


def test_cancel_state_rows_name_whose_rss_and_the_prefill_probe() -> None:
    run = lifecycle_run()
    cell = _cell(run, "cancel")
    metrics: dict[str, Any] = dict(cell["metrics"])  # a metric's detail is open
    metrics["cancel_stop_rss_after_release_bytes"]["process"] = "the server (its own process)"
    probe = metrics["cancel_prefill_latency_s"]
    probe |= {"aborted": 2, "uncancelled_prefill_s": 0.2, "prefill_tokens": 256}
    card = _card(run, "cancel")
    labels = [r.label for r in card.tables[1].rows]
    assert labels[-2:] == ["server RSS · stop", "worker RSS · close"]
    (mid,) = [f.value for f in card.facts if f.name == "mid-prefill cancel"]
    assert mid.title.endswith("2 attempts aborted; uncancelled prefill 200.00 ms; 256-token prompt")


def test_cancel_without_modes_is_a_note() -> None:
    run = lifecycle_run()
    cell = _cell(run, "cancel")
    cell["metrics"] = {k: v for k, v in cell["metrics"].items() if not k.startswith("cancel_")}
    card = _card(run, "cancel")
    assert card.tables == [] and card.note == "no cancel mode recorded a measurement"
    assert [f.name for f in card.facts] == ["mid-prefill cancel"]
    assert card.facts[0].value.unavailable


def test_serve_levels_errors_and_the_abuse() -> None:
    card = _card(lifecycle_run(), "serve", "tiny-serve")
    (levels,) = card.tables
    assert [r.cells[-1].text for r in levels.rows] == ["0 of 3", "0 of 6", "1 of 12"]
    assert [r.cells[-1].css for r in levels.rows] == ["", "", "v-FAIL"]
    names = [f.name for f in card.facts]
    assert names[:2] == ["survived the abuse", "startup"] and card.facts[0].value.css == "v-PASS"
    assert "malformed: wrong types" in names and names[-1] == "server RSS after the abuse"


def test_serve_in_process_has_no_abuse_facts() -> None:
    run = lifecycle_run()
    cell = _cell(run, "serve")
    del cell["metrics"]["serve_survived"]
    card = _card(run, "serve", "tiny-serve")
    assert [f.name for f in card.facts] == ["startup"]
    levels = copy.deepcopy(cell["metrics"])
    cell["metrics"] = {k: v for k, v in levels.items() if not k.startswith("serve_c")}
    card = _card(run, "serve", "tiny-serve")
    assert card.note == "no concurrency level recorded a measurement"
