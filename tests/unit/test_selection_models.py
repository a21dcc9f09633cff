"""What a cell is to the selection: its model and kind, whether a limit's ``at`` names it, and
the fixture classes ``must_behave`` reads."""

from __future__ import annotations

from typing import Any, cast

from rtmatrix.results.records import CellRecord
from rtmatrix.selection.models import KINDS, classes_of, matches, model_of, tag
from tests.helpers.selection_runs import REAL, TAG, make_cell


def _cell(**fixture: Any) -> Any:
    cell = make_cell("alpha", "f32", tg=1.0, kld=None, model="tiny")
    cell["fixture"] |= fixture
    return cell


def _real() -> CellRecord:
    return cast(CellRecord, make_cell("alpha", "q8_0", tg=1.0))


def test_a_cell_is_a_real_checkpoint_an_architecture_toy_or_synthetic() -> None:
    assert model_of(_real()) == (REAL, KINDS[0])
    assert model_of(_cell(architecture="qwen3")) == ("tiny", KINDS[1])
    assert model_of(_cell()) == ("tiny", KINDS[2])


def test_at_names_a_fixture_or_a_fixture_and_its_params() -> None:
    cell = _cell(name="tiny-long")
    assert tag(cell) == TAG
    assert matches("tiny-long", cell) and matches("tiny-*", cell)
    assert matches("tiny-long|*p16*", cell) and not matches("tiny-long|*p99*", cell)


def test_fixture_classes() -> None:
    failing = _cell(variant="truncated")
    failing["expect"], failing["expect_kind"] = "error", ["out-of-memory"]
    assert classes_of(failing, None) == {"truncated", "file", "failing", "memory"}
    plain = _cell()
    assert classes_of(plain, plain["params"]) == set()
    assert classes_of(plain, {"n_ctx": 1}) == {"boundary"}
