from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from rtmatrix.fixtures import build_fixture
from rtmatrix.fixtures import gguf_export as ge
from rtmatrix.fixtures.model import make_weights, tensor_shapes
from rtmatrix.fixtures.spec import get_spec


def test_as_shipped_needs_a_real_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'as-shipped' needs a GGUF checkpoint"):
        build_fixture(get_spec("tiny"), "gguf", "as-shipped", root=tmp_path)


@pytest.mark.parametrize("dtype", [d for d in ge.DTYPES if d != "as-shipped"])
def test_export_reads_back_with_ggufreader(tmp_path: Path, dtype: str) -> None:
    spec = get_spec("tiny")
    art = build_fixture(spec, "gguf", dtype, root=tmp_path)
    reader = gguf.GGUFReader(str(art.path))
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.embedding_length"].contents() == spec.n_embd
    assert reader.fields["llama.attention.head_count_kv"].contents() == spec.n_head_kv
    assert len(reader.fields["tokenizer.ggml.tokens"].contents()) == spec.vocab_size
    tensors = {t.name: t for t in reader.tensors}
    assert list(tensors) == list(tensor_shapes(spec))
    expected = ge.stored_weights(make_weights(spec), dtype)
    for name, t in tensors.items():
        got = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        assert got.shape == tensor_shapes(spec)[name]
        np.testing.assert_array_equal(got, expected[name])  # reference sees what the file holds


def test_quantized_weights_differ_from_f32_but_stay_close() -> None:
    w = make_weights(get_spec("tiny"))["blk.0.attn_q.weight"]
    for dtype, tol in (("f16", 1e-3), ("q8_0", 2e-2), ("q4_0", 0.3)):
        s = ge.stored_weights({"x": w}, dtype)["x"]
        err = np.abs(s - w).max()
        assert 0 < err < tol, (dtype, err)


def test_unchanged_spec_is_a_cache_hit(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    first = build_fixture(spec, "gguf", "f32", root=tmp_path)
    mtime = first.path.stat().st_mtime_ns
    t0 = time.perf_counter()
    second = build_fixture(spec, "gguf", "f32", root=tmp_path)
    assert time.perf_counter() - t0 < 1.0
    assert first.built and not second.built
    assert second.path == first.path and second.path.stat().st_mtime_ns == mtime


def test_changed_spec_rebuilds(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    a = build_fixture(spec, "gguf", "f32", root=tmp_path)
    b = build_fixture(dataclasses.replace(spec, seed=99), "gguf", "f32", root=tmp_path)
    assert b.built and b.path != a.path and b.manifest["sha256"] != a.manifest["sha256"]


def test_unknown_dtype_lists_choices() -> None:
    with pytest.raises(ValueError, match="valid: f32, f16, q8_0, q4_0"):
        ge.stored_weights({}, "q2_k")
