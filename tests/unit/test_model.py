from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rtmatrix.fixtures import model as m
from rtmatrix.fixtures.spec import get_spec


@pytest.fixture(scope="module")
def tiny_ref() -> m.Reference:
    spec = get_spec("tiny")
    return m.Reference(spec, m.make_weights(spec))


def test_weights_are_deterministic_and_shaped() -> None:
    spec = get_spec("tiny")
    a, b = m.make_weights(spec), m.make_weights(spec)
    assert list(a) == list(m.tensor_shapes(spec))
    for name, shape in m.tensor_shapes(spec).items():
        assert a[name].shape == shape
        np.testing.assert_array_equal(a[name], b[name])
    other = m.make_weights(dataclasses.replace(spec, seed=spec.seed + 1))
    assert not np.allclose(other["output.weight"], a["output.weight"])


def test_token_by_token_decode_equals_one_prefill(tiny_ref: m.Reference) -> None:
    prompt = m.make_prompt(12, tiny_ref.spec.vocab_size)
    full = tiny_ref.forward(prompt, tiny_ref.new_cache())
    cache = tiny_ref.new_cache()
    steps = np.stack([tiny_ref.forward([t], cache)[-1] for t in prompt])
    np.testing.assert_allclose(steps, full, atol=2e-4)
    assert cache.length == len(prompt)


def test_split_prefill_equals_full_prefill(tiny_ref: m.Reference) -> None:
    prompt = m.make_prompt(10, tiny_ref.spec.vocab_size)
    cache = tiny_ref.new_cache()
    tiny_ref.forward(prompt[:6], cache)
    tail = tiny_ref.forward(prompt[6:], cache)
    np.testing.assert_allclose(tail, tiny_ref.forward(prompt, tiny_ref.new_cache())[6:], atol=2e-4)


def test_position_matters_rope_is_applied(tiny_ref: m.Reference) -> None:
    a = tiny_ref.forward([1, 300, 301], tiny_ref.new_cache())[-1]
    b = tiny_ref.forward([1, 301, 300], tiny_ref.new_cache())[-1]
    assert np.abs(a - b).max() > 1e-2


def test_rope_rotates_adjacent_pairs() -> None:
    x = np.zeros((1, 1, 4), dtype=np.float32)
    x[0, 0, 0] = 1.0  # first element of the first pair
    out = m._rope(x, np.array([1]), 10000.0)
    # pair (0, 1) rotated by 1 rad; pair (2, 3) untouched
    np.testing.assert_allclose(out[0, 0], [np.cos(1.0), np.sin(1.0), 0.0, 0.0], atol=1e-6)


def test_logits_are_peaky_enough_for_parity(tiny_ref: m.Reference) -> None:
    run = m.reference_generate(tiny_ref, m.make_prompt(8, tiny_ref.spec.vocab_size), 16)
    assert len(set(run.tokens)) > 4  # does not collapse to one repeated token
    top2 = np.sort(run.first_logits)[-2:]
    assert top2[1] - top2[0] > 1e-3


def test_greedy_pick_masks_eos() -> None:
    logits = np.array([0.0, 1.0, 5.0, 2.0], dtype=np.float32)
    assert m.greedy_pick(logits) == 3
    assert m.greedy_pick(logits, banned=()) == 2


def test_prompt_is_deterministic_and_exact_length() -> None:
    p = m.make_prompt(5, 512)
    assert p == m.make_prompt(5, 512) and len(p) == 5 and p[0] == 1
    assert all(259 <= t < 512 for t in p[1:])
    with pytest.raises(ValueError, match="at least 1 token"):
        m.make_prompt(0, 512)
