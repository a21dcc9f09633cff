"""Constraints and priorities: defaults, the [selection] table, KEY=VALUE flags, and refusals
that name the key, the value and the valid choices."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rtmatrix.selection.constraints import (
    DEFAULT_LICENSES,
    DEFAULT_MUST_BEHAVE,
    DEFAULT_PRIORITIES,
    KEYS,
    LIMITS,
    Constraints,
    Limit,
    SelectionError,
    license_allowed,
    parse_override,
    spdx_id,
)


def _refused(table: dict[str, Any]) -> SelectionError:
    with pytest.raises(SelectionError) as info:
        Constraints.from_table(table)
    return info.value


def test_defaults_are_on_device_limits_and_every_one_is_reported() -> None:
    c = Constraints()
    assert c.max_kld == Limit(0.1)
    assert c.max_peak_memory_mib == Limit(2048.0)
    assert c.max_package_size_mib == Limit(512.0)
    assert c.min_tg_tps == Limit(10.0) and c.max_ttft_s == Limit(1.0)
    assert c.min_pp_tps is None and c.min_same_top_pct is None
    assert c.licenses == DEFAULT_LICENSES and "MIT" in DEFAULT_LICENSES
    assert "nan-weights" not in c.must_behave and "file" in c.must_behave
    assert c.priorities == DEFAULT_PRIORITIES and c.priorities[0] == "quality"
    lines = c.lines()
    keys = [k for k, *_ in lines]
    assert keys[: len(LIMITS)] == [s.key for s in LIMITS]
    assert set(keys) == set(KEYS) - {"failing_fixtures_visible"}
    assert all(origin == "default" and why for _, _, origin, why in lines)
    assert lines[4][:2] == ("min_pp_tps", "off")
    json.dumps(c.to_dict(), allow_nan=False)


def test_a_selection_table_sets_its_keys_and_says_where_they_came_from() -> None:
    c = Constraints.from_table(
        {
            "max_kld": 0.01,
            "min_tg_tps": {"value": 20, "at": "small-long-context|*p1984*"},
            "max_ttft_s": "0.5@small",
            "licenses": ["MIT", "Apache-2.0"],
            "must_behave": ["failing"],
            "priorities": ["tg", "memory"],
            "min_same_top_pct": 90,
            "max_package_size_mib": "off",
            "consistency_rule": False,
            "max_tg_cv_pct": 5,
            "negligible_kld": 0.001,
        }
    )
    assert c.max_kld == Limit(0.01)
    assert c.min_tg_tps == Limit(20.0, "small-long-context|*p1984*")
    assert c.max_ttft_s == Limit(0.5, "small")
    assert c.licenses == ("MIT", "Apache-2.0") and c.must_behave == ("failing",)
    assert c.priorities[:2] == ("tg", "memory") and set(c.priorities) == set(DEFAULT_PRIORITIES)
    assert c.min_same_top_pct == Limit(90.0) and c.max_package_size_mib is None
    assert not c.consistency_rule and c.max_tg_cv_pct == 5 and c.negligible_kld == 0.001
    shown = {k: (v, o) for k, v, o, _ in c.lines()}
    assert shown["min_tg_tps"] == ("20 tokens/s at small-long-context|*p1984*", "matrix")
    assert shown["max_package_size_mib"] == ("off", "matrix")
    assert shown["max_peak_memory_mib"] == ("2048 MiB", "default")


def test_flags_override_the_table_as_toml_values_or_strings() -> None:
    c = Constraints.from_table({"max_kld": 0.05}).with_overrides(
        [
            "max_kld=0.01",
            'licenses=["MIT"]',
            "priorities=memory,tg",
            "min_tg_tps=15@small",
            "max_peak_memory_mib=off",
            "failing_fixtures_visible=true",
        ]
    )
    assert c.max_kld == Limit(0.01) and c.licenses == ("MIT",)
    assert c.priorities[:2] == ("memory", "tg") and c.min_tg_tps == Limit(15.0, "small")
    assert c.max_peak_memory_mib is None
    assert c.must_behave == ("failing", *DEFAULT_MUST_BEHAVE)
    origin = {k: o for k, _, o, _ in c.lines()}
    assert origin["max_kld"] == "flag" and origin["must_behave"] == "flag"
    assert parse_override("licenses=MIT, Apache-2.0") == ("licenses", "MIT, Apache-2.0")
    assert Constraints().with_overrides(["licenses=MIT, Apache-2.0"]).licenses == (
        "MIT",
        "Apache-2.0",
    )
    assert Constraints().with_overrides(["licenses=any"]).licenses is None
    off = Constraints().with_overrides(["failing_fixtures_visible=false"]).must_behave
    assert off == ("boundary", "lifecycle")


def test_an_unknown_key_names_the_closest_and_every_valid_one() -> None:
    err = _refused({"max_kdl": 0.1})
    assert err.key == "max_kdl" and err.value == 0.1
    assert "unknown key; did you mean 'max_kld'? valid: max_peak_memory_mib" in str(err)
    assert str(err).startswith("selection.max_kdl = 0.1: ")


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        ({"max_kld": "abc"}, "max_kld", 'expected a number of nats ≥ 0, "N@FIXTURE|TAG"'),
        ({"max_kld": -1}, "max_kld", "expected a number of nats"),
        ({"min_tg_tps": True}, "min_tg_tps", "expected a number of tokens/s"),
        ({"min_tg_tps": {"value": 5, "where": "x"}}, "min_tg_tps", "{ value = N, at ="),
        ({"min_same_top_pct": 120}, "min_same_top_pct", "expected at most 100 %"),
        ({"max_package_size_mib": "5@small"}, "max_package_size_mib", "per-row figure"),
        ({"licenses": ["MIT License"]}, "licenses", "did you mean 'MIT'? valid: 0BSD"),
        ({"licenses": ["mit"]}, "licenses", "did you mean 'MIT'?"),
        ({"licenses": ["GPL-3"]}, "licenses", "did you mean 'GPL-3.0-only'?"),
        ({"licenses": 3}, "licenses", "expected a list of names"),
        ({"must_behave": ["nan-weight"]}, "must_behave", "did you mean 'nan-weights'? valid:"),
        ({"priorities": ["tg", "speed"]}, "priorities", "unknown criterion 'speed'; valid:"),
        ({"priorities": ["tg", "tg"]}, "priorities", "listed twice: tg"),
        ({"failing_fixtures_visible": "yes"}, "failing_fixtures_visible", "expected true"),
        ({"consistency_rule": 1}, "consistency_rule", "expected true or false"),
        ({"max_tg_cv_pct": 0}, "max_tg_cv_pct", "expected a percentage > 0"),
    ],
)
def test_a_bad_value_names_the_key_the_value_and_the_choices(
    table: dict[str, Any], key: str, says: str
) -> None:
    err = _refused(table)
    assert err.key == key and err.value == table[key]
    assert says in str(err) and f"selection.{key} = " in str(err)


def test_a_flag_without_equals_is_refused() -> None:
    with pytest.raises(SelectionError, match=r"expected KEY=VALUE, e\.g\. max_kld=0\.01"):
        Constraints().with_overrides(["max_kld"])
    with pytest.raises(SelectionError, match="expected a table of constraints"):
        Constraints.from_table([])  # type: ignore[arg-type]


def test_licences_from_package_metadata_are_read_as_spdx_expressions() -> None:
    assert spdx_id("MIT License") == "MIT" and spdx_id("apache-2.0") == "Apache-2.0"
    assert spdx_id("Some License") is None
    allowed = ("MIT", "Apache-2.0")
    assert license_allowed("MIT License", allowed)
    assert license_allowed("Apache Software License", allowed)
    assert license_allowed("MIT OR GPL-3.0-only", allowed)
    assert license_allowed("(Apache-2.0 WITH LLVM-exception)", allowed)
    assert not license_allowed("Apache-2.0 AND GPL-3.0-only", allowed)
    assert not license_allowed("Some License", allowed)
    assert license_allowed("LicenseRef-Vendor", ("LicenseRef-Vendor",))
