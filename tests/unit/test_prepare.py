from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtmatrix.fixtures import FixtureError, prepare_fixture, reference_for, unsupported
from rtmatrix.fixtures.prepare import reference_weights
from rtmatrix.fixtures.spec import get_spec


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
    with pytest.raises(FixtureError, match="no exporter for the 'pte' format"):
        prepare_fixture("tiny", "tiny", "f32", None, "pte")


def test_reference_is_cached_and_stable() -> None:
    a = reference_for("tiny", "q8_0", 8, 6)
    b = reference_for("tiny", "q8_0", 8, 6)
    assert a.tokens == b.tokens and len(a.tokens) == 6
    assert a.first_logits.shape == (512,)


def test_a_format_says_why_it_cannot_express_a_variant() -> None:
    why = unsupported("gguf", "f32", "fixed-shape")
    assert why is not None
    assert why.startswith("the gguf exporter cannot express variant 'fixed-shape': ")
    assert "no input shapes" in why and "per batch at run time" in why
    assert "holds no graph" in (unsupported("gguf", "f32", "data-dependent-shape") or "")
    assert unsupported("onnx", "f32", "fixed-shape") is None
    assert unsupported("onnx", "int8", "data-dependent-shape") is None


def test_reference_weights_of_a_child_computed_dtype_are_cached(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """int8 ONNX reference weights come from ORT in a child once; then from the cache (a
    crashing child afterwards is never started)."""
    pytest.importorskip("onnxruntime")
    from rtmatrix.fixtures import onnx_export as oe

    spec = get_spec("tiny")
    first = reference_weights(spec, "onnx", "int8", tmp_path)
    monkeypatch.chdir(repo)
    monkeypatch.setattr(oe, "_MODULE", "tests.helpers.child_misbehaves")
    monkeypatch.setenv("RTMATRIX_TEST_CHILD_MODE", "segv")
    again = reference_weights(spec, "onnx", "int8", tmp_path)
    assert list(again) == list(first)
    for name, w in first.items():
        np.testing.assert_array_equal(again[name], w)
    with pytest.raises(FixtureError, match=r"^fixture tiny/int8 \(onnx\): .*killed by SIGSEGV"):
        reference_weights(spec, "onnx", "int8", tmp_path / "empty")


def test_formats_without_a_child_keep_nothing_on_disk(tmp_path: Path) -> None:
    w = reference_weights(get_spec("tiny"), "gguf", "q8_0", tmp_path)
    assert "blk.0.attn_q.weight" in w and list(tmp_path.iterdir()) == []


def test_preparing_an_int8_onnx_fixture_prepares_its_reference_weights(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So a crash of that child is the cell's fixture error, never a failed parity step."""
    pytest.importorskip("onnxruntime")
    from rtmatrix.fixtures import onnx_export as oe

    prepare_fixture("tiny", "tiny", "int8", None, "onnx")
    monkeypatch.chdir(repo)
    monkeypatch.setattr(oe, "_MODULE", "tests.helpers.child_misbehaves")
    monkeypatch.setenv("RTMATRIX_TEST_CHILD_MODE", "segv")
    ref = reference_for("tiny", "int8", 8, 6, "onnx")  # no child: everything is cached
    assert len(ref.tokens) == 6
