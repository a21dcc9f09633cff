from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtmatrix.fixtures import FixtureError, build_fixture, get_format, unsupported
from rtmatrix.fixtures import onnx_export as oe
from rtmatrix.fixtures.model import make_weights, tensor_shapes
from rtmatrix.fixtures.spec import get_spec
from rtmatrix.fixtures.variants import FIXED_SHAPE_PROMPT_TOKENS

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
    assert fmt.dtypes == ("f32", "int8", "int8w", "int4w")
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
    assert len(keys) == 2 * len(oe.DTYPES)


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


# -- shape variants ----------------------------------------------------------------------------
def _fixed_dims(spec: Any) -> tuple[dict[str, list[int | str]], dict[str, list[int | str]]]:
    n = FIXED_SHAPE_PROMPT_TOKENS
    kv, hd = spec.n_head_kv, spec.head_dim
    ins: dict[str, list[int | str]] = {
        "input_ids": [1, n],
        "attention_mask": [1, n],
        "position_ids": [1, n],
    }
    outs: dict[str, list[int | str]] = {"logits": [1, n, spec.vocab_size]}
    for i in range(spec.n_layer):
        for t in ("key", "value"):
            ins[f"past_key_values.{i}.{t}"] = [1, kv, 0, hd]
            outs[f"present.{i}.{t}"] = [1, kv, n, hd]
    return ins, outs


@pytest.mark.parametrize("dtype", ["f32", "int8"])
def test_fixed_shape_declares_the_traced_prefill_dims(tmp_path: Path, dtype: str) -> None:
    if dtype == "int8":
        pytest.importorskip("onnxruntime")  # the quantizer (in a child process)
    spec = get_spec("tiny")
    model = _load(build_fixture(spec, "onnx", dtype, "fixed-shape", root=tmp_path).path)
    onnx.checker.check_model(model, full_check=True)
    ins, outs = _fixed_dims(spec)
    assert {i.name: _dims(i) for i in model.graph.input} == ins
    assert {o.name: _dims(o) for o in model.graph.output} == outs
    props = {p.key: p.value for p in model.metadata_props}
    assert props["rtmatrix.fixed_prompt_tokens"] == str(FIXED_SHAPE_PROMPT_TOKENS)
    assert props["rtmatrix.dtype"] == dtype


def test_fixed_shape_leaves_the_graph_itself_alone(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    plain = _load(build_fixture(spec, "onnx", "f32", root=tmp_path).path)
    fixed = _load(build_fixture(spec, "onnx", "f32", "fixed-shape", root=tmp_path).path)
    assert [n.SerializeToString() for n in fixed.graph.node] == [
        n.SerializeToString() for n in plain.graph.node
    ]


def test_fix_dims_refuses_a_dimension_it_has_no_value_for() -> None:
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["beam", 4])
    model = helper.make_model(helper.make_graph([], "g", [vi], []))
    with pytest.raises(ValueError, match="no value for dimension 'beam' of 'x'"):
        oe.fix_dims(model)


def test_data_dependent_shape_takes_key_positions_from_nonzero(tmp_path: Path) -> None:
    spec = get_spec("tiny")
    model = _load(build_fixture(spec, "onnx", "f32", "data-dependent-shape", root=tmp_path).path)
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert "NonZero" in ops and "Range" not in ops
    kidx = next(n for n in model.graph.node if n.output[0] == "mask.kidx")
    assert kidx.op_type == "Squeeze" and kidx.input[0] == "mask.nonzero"
    # the inputs stay symbolic: the data, not the declared shape, sets NonZero's output length
    assert _dims(model.graph.input[1]) == ["batch", "total_sequence"]


def test_data_dependent_shape_computes_the_same_logits(tmp_path: Path) -> None:
    """onnx's own reference evaluator (pure Python, no runtime): both graphs, same logits."""
    from onnx.reference import ReferenceEvaluator

    spec = get_spec("tiny")
    n = 5
    feeds: dict[str, np.ndarray] = {
        "input_ids": np.array([[1, 70, 80, 90, 100]], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "position_ids": np.arange(n, dtype=np.int64).reshape(1, n),
    }
    for i in range(spec.n_layer):
        for t in ("key", "value"):
            feeds[f"past_key_values.{i}.{t}"] = np.zeros(
                (1, spec.n_head_kv, 0, spec.head_dim), np.float32
            )
    logits: dict[str | None, np.ndarray] = {}
    for variant in (None, "data-dependent-shape"):
        path = build_fixture(spec, "onnx", "f32", variant, root=tmp_path).path
        out: Any = ReferenceEvaluator(str(path)).run(["logits"], feeds)
        logits[variant] = np.asarray(out[0])
    np.testing.assert_array_equal(logits["data-dependent-shape"], logits[None])
    assert logits[None].shape == (1, n, spec.vocab_size)


def test_shape_variants_have_their_own_cache_keys() -> None:
    spec = get_spec("tiny")
    keys = {
        json.dumps(oe.export_key(spec, "f32", v), sort_keys=True)
        for v in (None, "fixed-shape", "data-dependent-shape")
    }
    assert len(keys) == 3


# -- ORT runs in a child process -------------------------------------------------------------
CHILD = "tests.helpers.child_misbehaves"


@pytest.fixture
def crashing_quantizer(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ORT call of the exporter goes to a child that dies of SIGSEGV."""
    monkeypatch.chdir(repo)
    monkeypatch.setattr(oe, "_MODULE", CHILD)
    monkeypatch.setenv("RTMATRIX_TEST_CHILD_MODE", "segv")


@pytest.mark.usefixtures("crashing_quantizer")
def test_a_quantizer_crash_is_a_fixture_error_naming_the_fixture(tmp_path: Path) -> None:
    with pytest.raises(FixtureError) as info:
        build_fixture(get_spec("tiny"), "onnx", "int8", root=tmp_path)
    msg = str(info.value)
    assert "ONNX fixture tiny/int8 failed in its child process (killed by SIGSEGV)" in msg
    left = [p.name for p in tmp_path.iterdir() if p.suffix != ".lock"]  # builders' turn locks
    assert left == []  # no half-built entry left in the cache


@pytest.mark.usefixtures("crashing_quantizer")
def test_a_crash_computing_the_int8_reference_weights_is_a_fixture_error() -> None:
    with pytest.raises(FixtureError, match=r"quantize_data.*\(killed by SIGSEGV\)"):
        oe.stored_weights(make_weights(get_spec("tiny")), "int8")


def test_f32_stored_weights_start_no_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oe, "run_child", None)  # would raise TypeError if called
    w = make_weights(get_spec("tiny"))
    assert oe.stored_weights(w, "f32") is w


def test_int8_of_non_finite_weights_needs_no_quantizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NaN matrix is all NaN (its scale is NaN); only the finite ones go to the child."""
    sent: list[list[str]] = []

    def record(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        sent.append(list(w))
        return {}

    monkeypatch.setattr(oe, "_dequantize_in_child", record)
    w = make_weights(get_spec("tiny"))
    w["blk.0.attn_q.weight"] = np.full_like(w["blk.0.attn_q.weight"], np.nan)
    out = oe.stored_weights(w, "int8")
    assert np.isnan(out["blk.0.attn_q.weight"]).all()
    assert "blk.0.attn_q.weight" not in sent[0] and "blk.1.attn_q.weight" in sent[0]
    assert "token_embd.weight" not in sent[0]  # not a MatMul weight: stays fp32


def test_weight_only_int8_has_a_symmetric_scale_per_output_column() -> None:
    w = np.array([[1.0, -0.5], [-2.0, 0.25], [0.5, 0.0]], np.float32)  # (in 3, out 2)
    q, scale, block = oe.weight_only_quantize(w, 8)
    assert block == 0 and q.dtype == np.int8
    np.testing.assert_allclose(scale, [2.0 / 127, 0.5 / 127])
    assert q[1, 0] == -127 and q[0, 1] == -127 and q[2, 1] == 0
    np.testing.assert_allclose(q * scale, w, atol=scale.max() / 2)


def test_weight_only_int4_has_a_scale_per_block_of_input_rows() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2 * oe.INT4_BLOCK, 3)).astype(np.float32)
    w[: oe.INT4_BLOCK, 2] = 0.0  # an all-zero block: scale 1, not a division by zero
    q, scale, block = oe.weight_only_quantize(w, 4)
    assert block == oe.INT4_BLOCK and scale.shape == (2, 3)
    assert q.min() >= -8 and q.max() <= 7
    assert scale[0, 2] == 1.0 and not q[: oe.INT4_BLOCK, 2].any()
    np.testing.assert_allclose(scale[1, 0], np.abs(w[oe.INT4_BLOCK :, 0]).max() / 7, rtol=1e-6)


def test_weight_only_of_non_finite_weights_is_a_nan_scale() -> None:
    w = np.ones((oe.INT4_BLOCK, 2), np.float32)
    w[3, 1] = np.nan
    for bits in (8, 4):
        q, scale, _ = oe.weight_only_quantize(w, bits)
        assert not q.any() and np.isnan(scale).all()
        assert np.isnan(oe.weight_only_dequantized(w.T, bits)).all()


@pytest.mark.parametrize("dtype", ["int8w", "int4w"])
def test_weight_only_files_dequantize_to_the_stored_weights(tmp_path: Path, dtype: str) -> None:
    spec = get_spec("tiny")
    art = build_fixture(spec, "onnx", dtype, root=tmp_path)
    model = _load(art.path)
    onnx.checker.check_model(model)
    assert model.ir_version == oe.WEIGHT_ONLY_IR_VERSION
    assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} == {21}
    dq = {n.output[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"}
    inits = _inits(model)
    expected = oe.stored_weights(make_weights(spec), dtype)
    for name in tensor_shapes(spec):
        if not oe.is_matmul_weight(name):
            np.testing.assert_array_equal(inits[name], expected[name])
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in dq[name].attribute}
        q, scale = inits[name + "_q"].astype(np.float32), inits[name + "_scale"]
        if dtype == "int8w":
            assert attrs == {"axis": 1} and inits[name + "_q"].dtype == np.int8
            deq = q * scale
        else:
            assert attrs["axis"] == 0 and attrs["block_size"] == oe.INT4_BLOCK
            deq = q * np.repeat(scale, oe.INT4_BLOCK, axis=0)
        np.testing.assert_array_equal(deq.T, expected[name])
