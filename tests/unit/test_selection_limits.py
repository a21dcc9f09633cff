"""Hard limits: each excludes a candidate with its figure; a limit at another fixture reads the
row's cell there; failing fixtures a class requires; licences."""

from __future__ import annotations

import pytest

from rtmatrix.selection import Constraints, SelectionError, select
from tests.helpers.selection_runs import (
    TAG,
    default_run,
    failing_cell,
    labels,
    make_cell,
    make_run,
    model_in,
)


def test_a_kld_limit_excludes_the_int8_rows_and_says_so_with_their_figure() -> None:
    sel = select([default_run()], Constraints().with_overrides(["max_kld=0.01"]))
    m = model_in(sel)
    assert labels(m.excluded) == ["onnxruntime int8", "onnxruntime_genai int8"]
    for cand in m.excluded:
        (failure,) = cand.failures
        assert failure.constraint == "max_kld" and failure.figure == pytest.approx(0.0812)
        assert failure.text == "KLD 0.0812 nats > max_kld 0.01 nats"
    assert labels(m.ranked) == ["llama_cpp q8_0", "tvm_aot f32"]
    text = sel.to_markdown()
    assert "- **onnxruntime int8**: KLD 0.0812 nats > max_kld 0.01 nats." in text
    assert "| `max_kld` | 0.01 nats | flag |" in text


def test_a_package_size_limit_of_100_mib_excludes_the_297_mib_row() -> None:
    sel = select([default_run()], Constraints.from_table({"max_package_size_mib": 100}))
    (tvm,) = model_in(sel).excluded
    assert tvm.label == "tvm_aot f32"
    assert [f.text for f in tvm.failures] == ["package size 297 MiB > max_package_size_mib 100 MiB"]


def test_a_row_whose_damaged_file_fails_silently_is_excluded() -> None:
    run = make_run(0, [
        make_cell("alpha", "q8_0", tg=100), make_cell("beta", "q8_0", tg=150),
        failing_cell("alpha", "nan-weights", "wrong-output", "FAIL"),
        failing_cell("beta", "truncated", "ok", "FAIL"),
    ])  # fmt: skip
    m = model_in(select([run]))
    assert labels(m.ranked) == ["alpha q8_0"]
    (beta,) = m.excluded
    assert beta.failures[0].constraint == "must_behave"
    assert "tiny-truncated/f32 t2-c256-p16-g24 ends ok (verdict FAIL)" in beta.failures[0].text
    assert beta.failures[0].text.endswith(": truncated: ok [file]")  # the class it is required by
    assert any("tiny-nan-weights/f32" in n and "not a hard limit" in n for n in m.notes)
    strict = Constraints().with_overrides(["failing_fixtures_visible=true"])
    assert not model_in(select([run], strict)).ranked


def test_a_limit_at_another_fixture_reads_the_rows_cell_there() -> None:
    long_a = make_cell("alpha", "q8_0", tg=60, kld=None, model="tiny", name="tiny-long")
    long_b = make_cell("beta", "q8_0", tg=30, kld=None, model="tiny", name="tiny-long")
    run = make_run(
        0, [make_cell("alpha", "q8_0", tg=100), make_cell("beta", "q8_0", tg=150), long_a, long_b]
    )
    sel = select([run], Constraints().with_overrides(["min_tg_tps=50@tiny-long|*p16*"]))
    (beta,) = model_in(sel).excluded
    assert beta.failures[0].text == (
        f"TG at tiny-long/q8_0 {TAG} 30 tokens/s < min_tg_tps 50 tokens/s"
    )
    with pytest.raises(SelectionError, match="`at` matches no cell of the runs; valid: "):
        select([run], Constraints().with_overrides(["min_tg_tps=50@tiny-short"]))


def test_a_licence_outside_the_allowed_ones_excludes_the_row() -> None:
    run = make_run(0, [make_cell("alpha", "q8_0", tg=100, licence="GPL-3.0-only"),
                   make_cell("beta", "q8_0", tg=90, licence="MIT License")])  # fmt: skip
    m = model_in(select([run]))
    assert labels(m.ranked) == ["beta q8_0"]
    said = m.excluded[0].failures[0].text
    assert said.startswith("licence 'GPL-3.0-only' is not among the allowed: MIT, ")
