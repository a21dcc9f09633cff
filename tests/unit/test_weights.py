"""metrics/weights.py: the bytes a decode step reads of a file's weights, as stored."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from rtmatrix.metrics import weights


def _gguf(*tensors: tuple[str, int]) -> list[SimpleNamespace]:
    return [SimpleNamespace(name=n, n_bytes=b) for n, b in tensors]


def test_an_untied_embedding_is_a_lookup_a_tied_one_is_the_head() -> None:
    untied = weights.gguf(_gguf(("token_embd.weight", 1000), ("blk.0.attn_q.weight", 300),
                                ("output.weight", 1000)))  # fmt: skip
    assert untied["stored_bytes"] == 2300 and untied["read_per_token_bytes"] == 1300
    assert untied["lookup_tensors"] == ["token_embd.weight"]
    tied = weights.gguf(_gguf(("token_embd.weight", 1000), ("blk.0.attn_q.weight", 300)))
    assert tied["read_per_token_bytes"] == 1300 and tied["lookup_bytes"] == 0


def _onnx_model() -> object:
    emb = numpy_helper.from_array(np.zeros((10, 4), np.float32), "token_embd.weight")
    w = numpy_helper.from_array(np.zeros((4, 4), np.int8), "w_q")
    packed = helper.make_tensor("w4", TensorProto.INT4, [4, 5], [0] * 20)
    nodes = [
        helper.make_node("Gather", ["token_embd.weight", "ids"], ["x"]),
        helper.make_node("Cast", ["w_q"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x", "wf"], ["y"]),
        helper.make_node("Identity", ["w4"], ["w4o"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT16, [1]),
         helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT16, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [emb, w, packed],
    )  # fmt: skip
    return helper.make_model(graph)


def test_onnx_sizes_come_from_dims_and_gather_only_tables_are_lookups() -> None:
    model = _onnx_model()
    out = weights.onnx(model)
    assert out["stored_bytes"] == 10 * 4 * 4 + 16 + 10  # f32 table, int8 4×4, 20 packed int4
    assert out["lookup_tensors"] == ["token_embd.weight"]
    assert out["read_per_token_bytes"] == 26
    assert weights.onnx_kv_inputs(model) == {"FLOAT16": 2}


def test_tvm_sizes_come_from_its_tensor_cache(tmp_path: Path) -> None:
    records = [{"name": "token_embd.weight", "nbytes": 800}, {"name": "rope.cos", "nbytes": 64},
               {"name": "blk.0.ffn_down.weight", "nbytes": 400},
               {"name": "output.weight", "nbytes": 800}]  # fmt: skip
    cache = {"records": [{"dataPath": "params_shard_0.bin", "records": records}]}
    (tmp_path / "tensor-cache.json").write_text(json.dumps(cache))
    out = weights.tvm(tmp_path)
    assert out["stored_bytes"] == 2064 and out["read_per_token_bytes"] == 1200
    assert out["lookup_tensors"] == ["rope.cos", "token_embd.weight"]
