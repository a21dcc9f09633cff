from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.fixtures import FixtureError, prepare_fixture, reference_for


def test_canonical_fixture_is_built_and_hashed() -> None:
    fx = prepare_fixture("tiny", "tiny", "f32", None, "gguf")
    assert fx.path.is_file() and fx.size_bytes == fx.path.stat().st_size
    assert len(fx.sha256) == 64 and fx.spec_sha256


def test_user_model_file(tmp_path: Path) -> None:
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    fx = prepare_fixture("mine", None, None, model, "gguf")
    assert fx.model is None and fx.size_bytes == 64


def test_missing_user_model_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match=r"mine.gguf does not exist; fix 'path'"):
        prepare_fixture("mine", None, None, tmp_path / "mine.gguf", "gguf")


def test_container_without_exporter_is_named() -> None:
    with pytest.raises(FixtureError, match="no exporter for the 'tflite' format"):
        prepare_fixture("tiny", "tiny", "f32", None, "tflite")


def test_reference_is_cached_and_stable() -> None:
    a = reference_for("tiny", "q8_0", 8, 6)
    b = reference_for("tiny", "q8_0", 8, 6)
    assert a.tokens == b.tokens and len(a.tokens) == 6
    assert a.first_logits.shape == (512,)
