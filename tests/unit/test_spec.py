from __future__ import annotations

import dataclasses

import pytest

from rtmatrix.fixtures.spec import SpecError, builtin_specs, get_spec, spec_from_dict


def test_builtin_specs_have_tiny_and_small_sizes() -> None:
    specs = builtin_specs()
    assert 0.5e6 < specs["tiny"].n_params < 2e6
    assert 10e6 < specs["small"].n_params < 100e6
    assert specs["small"].n_head_kv < specs["small"].n_head  # grouped-query attention exercised


def test_hash_changes_with_weights_but_not_description() -> None:
    tiny = get_spec("tiny")
    assert dataclasses.replace(tiny, description="x").content_hash() == tiny.content_hash()
    assert dataclasses.replace(tiny, seed=tiny.seed + 1).content_hash() != tiny.content_hash()


def test_inconsistent_spec_is_refused() -> None:
    data = get_spec("tiny").content() | {"n_head": 3}
    with pytest.raises(SpecError, match="not a multiple of n_head"):
        spec_from_dict("bad", data)


def test_unknown_key_lists_valid_keys() -> None:
    data = get_spec("tiny").content() | {"n_layers": 2}
    with pytest.raises(SpecError, match=r"unknown \['n_layers'\].*valid keys: vocab_size"):
        spec_from_dict("bad", data)


def test_unknown_spec_name_lists_choices() -> None:
    with pytest.raises(SpecError, match="valid: small, tiny"):
        get_spec("huge")
