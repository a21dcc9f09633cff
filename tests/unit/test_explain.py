"""Explanations of a flagged cell: packages, settings, placement, phases, one-sided log lines."""

from __future__ import annotations

import pandas as pd

from rtmatrix.results.changes import flatten
from rtmatrix.results.explain import (
    explain,
    normalize,
    one_side_lines,
    package_differences,
    phases_from_records,
    phases_from_rounds,
    settings_differences,
)
from tests.helpers.comparisons import KEY, SIDES, record, rounds_of


def test_package_differences_changed_first_names_compared_canonically() -> None:
    a = {"llama_cpp_python": "0.3.35", "numpy": "2.1", "Old.Pkg": "1", "same": "1"}
    b = {"llama-cpp-python": "0.3.36", "numpy": "2.2", "new": "0.1", "same": "1"}
    diff = package_differences(a, b)
    assert [(p.name, p.kind) for p in diff] == [
        ("llama-cpp-python", "changed"),
        ("numpy", "changed"),
        ("Old.Pkg", "only in A"),
        ("new", "only in B"),
    ]
    assert package_differences(a, a) == []


def test_normalize_drops_numbers_addresses_and_temp_paths() -> None:
    one = normalize("load took 12.5 ms at 0x7ffd1234 from /tmp/rtmatrix-cell-ab12/job.json")
    two = normalize("load  took 3 ms at 0xdeadbeef from /tmp/rtmatrix-cell-zz99/job.json")
    assert one == two == "load took # ms at <addr> from <tmp>"


def test_one_side_lines_are_those_never_seen_on_the_other_side() -> None:
    a = [record(stderr="common 1\nonly a: 5 threads"), record(stderr="common 2")]
    b = [record(stderr="common 3\nwarning: flash attention enabled\n")]
    assert one_side_lines(a, b) == ["only a: # threads"]
    assert one_side_lines(b, a) == ["warning: flash attention enabled"]


def test_settings_differences_name_options_and_evidence() -> None:
    ra = record(evidence={"system_info": "AVX2 = 1", "session": {"threads": 2}})
    rb = record(evidence={"system_info": "AVX2 = 1", "session": {"threads": 4}})
    changed, compared = settings_differences(ra, rb, SIDES["a"], SIDES["b"])
    names = {c.name: (c.a, c.b) for c in changed}
    assert names == {"options.flash_attn": (None, "true"), "evidence.session.threads": ("2", "4")}
    assert compared > len(changed)  # system_info compared, the same
    assert flatten({"x": {"y": {"z": 1}}, "w": [], "e": {}}) == {"x.y.z": 1, "w": []}


def test_phases_from_rounds_say_which_phase_moved() -> None:
    from rtmatrix.results.comparison import rounds_table

    frame = rounds_table(rounds_of(12, b={"load": 1.4}))
    phases = {p.phase: p for p in phases_from_rounds(frame, 0.01)}
    assert phases["load"].moved and phases["load"].ratio is not None
    assert phases["load"].ratio > 1.3
    assert not phases["decode"].moved and not phases["prefill"].moved
    assert phases_from_rounds(frame[frame["metric"] == "license"], 0.01) == []


def test_a_phase_the_comparison_judged_keeps_the_comparisons_verdict() -> None:
    from dataclasses import replace

    from rtmatrix.results.comparison import rounds_table
    from rtmatrix.results.paired import PairedVerdict

    frame = rounds_table(rounds_of(12, b={"load": 1.4}))
    own = {p.metric: p for p in phases_from_rounds(frame, 0.01)}
    assert not own["tg_tps"].moved  # its own family: decode did not move
    # the comparison judged tg_tps (e.g. alone, at a looser alpha) and found a regression:
    # the explanation of that regression must say decode moved, not the opposite
    from rtmatrix.results.paired import decide

    tg = decide(frame[frame["metric"] == "tg_tps"]).checks[0]
    judged = {"tg_tps": replace(tg, verdict=PairedVerdict.REGRESSION)}
    phases = {p.phase: p for p in phases_from_rounds(frame, 0.01, judged)}
    assert phases["decode"].moved and phases["decode"].verdict == "regression"
    assert phases["load"].moved  # the rest is still judged in its own family


def test_a_cell_that_failed_is_explained_from_its_records() -> None:
    a = [record()]
    b = [record(status="error", verdict="FAIL", stderr="unknown model architecture: 'x'")]
    why = explain(
        KEY, a, b, pd.DataFrame(columns=["cell", "metric", "round", "a", "b"]), SIDES, 0.01
    )
    assert why.phases_from == "records"
    assert why.ended["a"].startswith("ok") and why.ended["b"].startswith("error")
    titles = [t for t, _ in why.sections()]
    assert titles == [
        "stack (format, runtime, backend, kernels)", "phases", "ended", "packages", "settings",
        "placement", "log lines on one side only",
    ]  # fmt: skip
    logs = dict(why.sections())["log lines on one side only"]
    assert "B: unknown model architecture: 'x'" in logs
    assert phases_from_records(a, b)[0].a is not None
    assert dict(why.sections())["placement"][0].startswith("same on both sides")


def test_a_kernel_choice_that_changed_is_the_first_explanation() -> None:
    a, b = record(), record()
    a["evidence"]["stack"] = {"kernels": {"matmul_kernels": {"CPU": {"MatMulNBits": 8}}},
                              "format": {"container": "ONNX"}}  # fmt: skip
    b["evidence"]["stack"] = {"kernels": {"matmul_kernels": {"CPU": {"DequantizeLinear": 8,
                                                                     "MatMul": 8}}},
                              "format": {"container": "ONNX"}}  # fmt: skip
    why = explain(
        KEY, [a], [b], pd.DataFrame(columns=["cell", "metric", "round", "a", "b"]), SIDES, 0.01
    )
    title, lines = why.sections()[0]
    assert title.startswith("stack")
    assert lines[0].startswith("kernels.matmul_kernels.CPU."), lines
    assert all(line.startswith("kernels.") for line in lines), lines
    assert not any(s.name.startswith("evidence.stack") for s in why.settings)
    assert why.to_dict()["stack"][0]["name"].startswith("kernels.")
