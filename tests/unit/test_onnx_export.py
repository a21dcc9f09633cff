from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtmatrix.fixtures import build_fixture, get_format, unsupported
from rtmatrix.fixtures import onnx_export as oe
from rtmatrix.fixtures.model import make_weights, tensor_shapes
from rtmatrix.fixtures.spec import get_spec

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402


def _load(path: Path) -> Any:
    return onnx.load(str(path))


def _inits(model: Any) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _dims(vi: Any) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def test_registered_as_the_onnx_format() -> None:
    fmt = get_format("onnx")
    assert fmt is not None and fmt.container == "onnx" and fmt.filename == "model.onnx"
    assert fmt.dtypes == ("f32", "int8")
    assert "unknown-arch" in fmt.format_variants
    assert unsupported("onnx", "q4_0", None) is not None  # a GGUF dtype is not an ONNX one


def test_f32_graph_passes_the_checker_and_has_the_kv_io(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    art = build_fixture(spec, "onnx", "f32", root=tmp_path)
    model = _load(art.path)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == oe.IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", oe.OPSET)]
    ins = {i.name: _dims(i) for i in model.graph.input}
    outs = {o.name: _dims(o) for o in model.graph.output}
    kv, hd = spec.n_head_kv, spec.head_dim
    expected_in: dict[str, list[int | str]] = {
        "input_ids": ["batch", "sequence"],
        "attention_mask": ["batch", "total_sequence"],
        "position_ids": ["batch", "sequence"],
    }
    expected_out: dict[str, list[int | str]] = {"logits": ["batch", "sequence", spec.vocab_size]}
    for i in range(spec.n_layer):
        for t in ("key", "value"):
            expected_in[f"past_key_values.{i}.{t}"] = ["batch", kv, "past_sequence", hd]
            expected_out[f"present.{i}.{t}"] = ["batch", kv, "total_sequence", hd]
    assert ins == expected_in
    assert outs == expected_out
    props = {p.key: p.value for p in model.metadata_props}
    assert props["bos_token_id"] == "1" and props["eos_token_id"] == "2"
    assert props["rtmatrix.dtype"] == "f32"


def test_genai_config_sits_beside_the_model(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    art = build_fixture(spec, "onnx", "f32", root=tmp_path)
    cfg = json.loads((art.path.parent / oe.GENAI_CONFIG).read_text("utf-8"))
    m = cfg["model"]
    assert m["type"] == "llama" and m["vocab_size"] == spec.vocab_size
    assert m["decoder"]["filename"] == "model.onnx"
    assert m["decoder"]["num_key_value_heads"] == spec.n_head_kv
    assert m["decoder"]["num_hidden_layers"] == spec.n_layer
    assert cfg["search"]["past_present_share_buffer"] is False


def test_f32_initializers_read_back_as_the_stored_weights(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    art = build_fixture(spec, "onnx", "f32", root=tmp_path)
    inits = _inits(_load(art.path))
    expected = oe.stored_weights(make_weights(spec), "f32")
    for name, shape in tensor_shapes(spec).items():
        got = inits[name].T if oe.is_matmul_weight(name) else inits[name]
        assert got.shape == shape, name
        np.testing.assert_array_equal(got, expected[name])
    cos, sin = oe.rope_tables(spec)
    np.testing.assert_array_equal(inits["rope.cos"], cos)
    np.testing.assert_array_equal(inits["rope.sin"], sin)


def test_rope_tables_match_the_reference_rotation() -> None:
    from rtmatrix.fixtures.model import _rope

    spec = get_spec("tiny")
    cos, sin = oe.rope_tables(spec)
    x = np.random.default_rng(0).standard_normal((5, 1, spec.head_dim)).astype(np.float32)
    pos = np.arange(3, 8, dtype=np.int64)
    want = _rope(x, pos, spec.rope_theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[pos][:, None, :], sin[pos][:, None, :]
    got = np.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1).reshape(x.shape)
    np.testing.assert_array_equal(got, want)


def test_int8_initializers_dequantize_to_the_stored_weights(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    spec = get_spec("tiny")
    art = build_fixture(spec, "onnx", "int8", root=tmp_path)
    model = _load(art.path)
    ops = {n.op_type for n in model.graph.node}
    assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops, ops
    inits = _inits(model)
    expected = oe.stored_weights(make_weights(spec), "int8")
    for name in tensor_shapes(spec):
        if oe.is_matmul_weight(name):
            q = inits[name + "_quantized"]
            assert q.dtype == np.int8
            deq = (q.astype(np.float32) - inits[name + "_zero_point"].astype(np.float32)) * inits[
                name + "_scale"
            ]
            np.testing.assert_array_equal(deq.T, expected[name])
        else:  # norms and the embedding stay fp32
            np.testing.assert_array_equal(inits[name], expected[name])


def test_int8_weights_differ_from_f32_but_stay_close() -> None:
    pytest.importorskip("onnxruntime")
    w = make_weights(get_spec("tiny"))
    s = oe.stored_weights(w, "int8")
    for name in ("blk.0.attn_q.weight", "output.weight"):
        err = float(np.abs(s[name] - w[name]).max())
        assert 0 < err < 0.02, (name, err)
    np.testing.assert_array_equal(s["token_embd.weight"], w["token_embd.weight"])
    np.testing.assert_array_equal(s["blk.0.attn_norm.weight"], w["blk.0.attn_norm.weight"])


def test_unchanged_spec_is_a_cache_hit_and_a_changed_one_rebuilds(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    first = build_fixture(spec, "onnx", "f32", root=tmp_path)
    mtime = first.path.stat().st_mtime_ns
    t0 = time.perf_counter()
    second = build_fixture(spec, "onnx", "f32", root=tmp_path)
    assert time.perf_counter() - t0 < 1.0
    assert first.built and not second.built
    assert second.path == first.path and second.path.stat().st_mtime_ns == mtime
    other = build_fixture(dataclasses.replace(spec, seed=99), "onnx", "f32", root=tmp_path)
    assert other.built and other.path != first.path
    assert other.manifest["sha256"] != first.manifest["sha256"]


def test_dtypes_have_distinct_cache_keys() -> None:
    spec = get_spec("tiny")
    keys = {
        json.dumps(oe.export_key(spec, d, v), sort_keys=True)
        for d in oe.DTYPES
        for v in (None, "unknown-arch")
    }
    assert len(keys) == 4


def test_missing_tensor_leaves_a_dangling_input(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    art = build_fixture(spec, "onnx", "f32", "missing-tensor", root=tmp_path)
    model = _load(art.path)
    assert "blk.0.attn_k.weight" not in _inits(model)
    assert any("blk.0.attn_k.weight" in n.input for n in model.graph.node)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)


def test_missing_tensor_int8_drops_its_quantized_initializers(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    art = build_fixture(get_spec("tiny"), "onnx", "int8", "missing-tensor", root=tmp_path)
    names = set(_inits(_load(art.path)))
    assert not any(n.startswith("blk.0.attn_k.weight") for n in names)
    assert "blk.0.attn_q.weight_quantized" in names


def test_nan_weights_survive_in_both_dtypes(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    spec = get_spec("tiny")
    f32 = _inits(_load(build_fixture(spec, "onnx", "f32", "nan-weights", root=tmp_path).path))
    assert np.isnan(f32["blk.0.attn_q.weight"]).all()
    i8 = _inits(_load(build_fixture(spec, "onnx", "int8", "nan-weights", root=tmp_path).path))
    assert np.isnan(i8["blk.0.attn_q.weight_scale"]).all()
    assert np.isfinite(i8["blk.1.attn_q.weight_scale"]).all()


def test_unknown_arch_is_a_custom_domain_op(tmp_path: Path) -> None:
    art = build_fixture(get_spec("tiny"), "onnx", "f32", "unknown-arch", root=tmp_path)
    model = _load(art.path)
    custom = [n for n in model.graph.node if n.domain == oe.UNKNOWN_DOMAIN]
    assert [n.op_type for n in custom] == [oe.UNKNOWN_OP]
    assert (oe.UNKNOWN_DOMAIN, 1) in [(o.domain, o.version) for o in model.opset_import]
    # the op sits on the path to the logits: nothing bypasses it
    consumers = [n for n in model.graph.node if custom[0].output[0] in n.input]
    assert consumers and all(n.op_type == "MatMul" for n in consumers)


def test_future_opset_declares_an_opset_nobody_has(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    oe.write_onnx(get_spec("tiny"), "f32", path, variant="future-opset")
    model = _load(path)
    assert [o.version for o in model.opset_import if o.domain == ""] == [oe.FUTURE_OPSET]


def test_unknown_dtype_and_variant_list_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid: f32, int8"):
        oe.stored_weights({}, "q4_0")
    with pytest.raises(ValueError, match="cannot express variant"):
        oe.write_onnx(get_spec("tiny"), "f32", tmp_path / "model.onnx", variant="bogus")
