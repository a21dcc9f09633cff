"""The .tflite exporter: registered as a format, static signatures read back with the schema's
own classes, the int8 weights' per-channel scales, the failure variants, the config beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtmatrix.fixtures import build_fixture, get_format, unsupported
from rtmatrix.fixtures import tflite_export as te
from rtmatrix.fixtures.model import make_weights
from rtmatrix.fixtures.spec import get_spec

tflite = pytest.importorskip("tflite")
SPEC = get_spec("tiny")


def test_registered_as_the_tflite_format() -> None:
    fmt = get_format("tflite")
    assert fmt is not None and fmt.filename == "model.tflite" and fmt.dtypes == ("f32", "int8")
    assert unsupported("tflite", "f32", "unknown-arch") is None
    why = unsupported("tflite", "f32", "fixed-shape")
    assert why is not None and "static-shape" in why


def _model(path: Path) -> Any:
    return tflite.Model.GetRootAsModel(path.read_bytes(), 0)


def test_two_static_signatures_with_the_cache_in_and_out(tmp_path: Path) -> None:
    art = build_fixture(SPEC, "tflite", "f32", root=tmp_path)
    m = _model(art.path)
    sigs = {m.SignatureDefs(i).SignatureKey().decode(): m.SignatureDefs(i)
            for i in range(m.SignatureDefsLength())}  # fmt: skip
    assert set(sigs) == {"prefill", "decode"}
    ctx = te.max_ctx(SPEC)
    for name, n in (("prefill", te.PREFILL_CHUNK), ("decode", 1)):
        sg = m.Subgraphs(sigs[name].SubgraphIndex())
        ins = {sigs[name].Inputs(j).Name().decode(): sg.Tensors(sigs[name].Inputs(j).TensorIndex())
               for j in range(sigs[name].InputsLength())}  # fmt: skip
        assert ins["input_ids"].ShapeAsNumpy().tolist() == [1, n]
        assert ins["mask"].ShapeAsNumpy().tolist() == [1, 1, n, ctx]
        kv = [1, SPEC.n_head_kv, ctx, SPEC.head_dim]
        assert ins["k_cache_0"].ShapeAsNumpy().tolist() == kv
        outs = {sigs[name].Outputs(j).Name().decode() for j in range(sigs[name].OutputsLength())}
        assert {"logits", "k_cache_0", "v_cache_0"} <= outs
    config = json.loads(art.path.with_name(te.CONFIG).read_text("utf-8"))
    assert config["prefill_chunk"] == te.PREFILL_CHUNK and config["max_ctx"] == ctx
    assert config["eos_token_id"] == SPEC.eos_id


def test_int8_weights_are_per_output_channel_and_the_reference_uses_them() -> None:
    w = make_weights(SPEC)
    stored = te.stored_weights(w, "int8")
    name = "blk.0.attn_q.weight"
    q, scale = te.quantize_per_channel(w[name])
    assert q.dtype == np.int8 and scale.shape == (w[name].shape[0],)
    np.testing.assert_array_equal(stored[name], q.astype(np.float32) * scale[:, None])
    np.testing.assert_array_equal(stored["token_embd.weight"], w["token_embd.weight"])


def test_unknown_arch_is_a_custom_op_and_missing_tensor_a_weight_without_data(
    tmp_path: Path,
) -> None:
    m = _model(build_fixture(SPEC, "tflite", "f32", "unknown-arch", root=tmp_path).path)
    codes = {m.OperatorCodes(i).CustomCode() for i in range(m.OperatorCodesLength())}
    assert te.UNKNOWN_CUSTOM_OP.encode() in codes
    m = _model(build_fixture(SPEC, "tflite", "f32", "missing-tensor", root=tmp_path).path)
    sg = m.Subgraphs(0)
    t = next(sg.Tensors(i) for i in range(sg.TensorsLength())
             if sg.Tensors(i).Name() == b"blk.0.attn_k.weight")  # fmt: skip
    assert m.Buffers(t.Buffer()).DataLength() == 0


def test_the_mask_hides_the_future_and_the_padding() -> None:
    mask = te.causal_mask(4, 3, 10, n_valid=2)[0, 0]
    visible = mask == 0
    assert visible[0].tolist() == [True] * 5 + [False] * 5  # position 4 sees 0..4
    assert visible[1, 5] and not visible[1, 6]
    assert visible[2, 5] and visible[2, 6] and not visible[2, 7]
    assert te.causal_mask(0, 1, 4)[0, 0, 0].tolist() == [0.0, te.MASK_NEG, te.MASK_NEG, te.MASK_NEG]
