from __future__ import annotations

import pytest

from rtmatrix.fixtures.vocab import FIRST_PIECE_ID, TYPE_BYTE, TYPE_CONTROL, build_vocab


def test_layout_is_sentencepiece_with_byte_fallback() -> None:
    v = build_vocab(512)
    assert len(v) == 512
    assert v.tokens[:3] == ("<unk>", "<s>", "</s>")
    assert v.types[1] == v.types[2] == TYPE_CONTROL
    assert v.tokens[3] == "<0x00>" and v.tokens[258] == "<0xFF>"
    assert set(v.types[3:FIRST_PIECE_ID]) == {TYPE_BYTE}
    assert len(set(v.tokens)) == len(v.tokens)  # a duplicated token aborts llama.cpp


def test_too_large_vocab_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot build a vocabulary"):
        build_vocab(100_000)
