"""The OpenVINO row's pure parts: the compile properties it asks for, how read-back values are
kept, and OpenVINO's own messages (as 2026.4 prints them) -> error kinds."""

from __future__ import annotations

import pytest

from rtmatrix.adapters.base import LoadParams
from rtmatrix.errorkinds import classify_error
from rtmatrix.runtimes.openvino.adapter import OpenVinoAdapter, _plain
from rtmatrix.runtimes.openvino.errors import ERROR_PATTERNS


def test_the_row_asks_for_the_matrix_threads_and_latency_and_passes_options() -> None:
    cfg = OpenVinoAdapter()._config(LoadParams(n_ctx=64, threads=2))
    assert cfg == {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY"}
    opts = {"performance_hint": "THROUGHPUT", "inference_precision": "bf16", "num_streams": 2,
            "properties": {"ENABLE_CPU_PINNING": False}}  # fmt: skip
    cfg = OpenVinoAdapter()._config(LoadParams(n_ctx=64, threads=1, options=opts))
    assert cfg["PERFORMANCE_HINT"] == "THROUGHPUT" and cfg["INFERENCE_PRECISION_HINT"] == "bf16"
    assert cfg["NUM_STREAMS"] == "2" and cfg["ENABLE_CPU_PINNING"] is False
    kv = OpenVinoAdapter()._config(LoadParams(n_ctx=64, threads=1,
                                              options={"kv_cache_precision": "f32"}))  # fmt: skip
    assert kv["KV_CACHE_PRECISION"] == "f32"  # a stateful IR's cache (OpenVINO's exporter)


def test_read_back_values_become_json() -> None:
    class Hint:
        def __str__(self) -> str:
            return "LATENCY"

    assert _plain(Hint()) == "LATENCY"
    assert _plain(["CPU", 2, Hint()]) == ["CPU", 2, "LATENCY"]
    assert _plain(True) is True and _plain(None) is None


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Exception from src/inference/src/cpp/infer_request.cpp:224: Check 'is_dynamic || "
         "port.get_shape() == tensor->get_shape()' failed at src/plugins/intel_cpu/src/"
         "infer_request.cpp:669: The input tensor size is not equal to the model input type: "
         "got [1,128] expecting [1,32].", "dynamic-shape"),
        ("Model wasn't fully converted. | Summary: | -- No conversion rule found for operations: "
         "ai.rtmatrix.unknown.RtmatrixUnknownOp", "unsupported-op"),
        ("Check 'false' failed at src/frontends/common/src/frontend.cpp:47: Loading input model | "
         'Input tensor isn\'t found for node "blk.0.attn_k.weight"', "missing-tensor"),
        ("graph_iterator_proto.cpp:563: FrontEnd API failed with GeneralFailure: Model can't be "
         "parsed", "bad-file"),
        ('Unable to read the model: "x.onnx" Please check that model format: ".onnx" is '
         "supported and the model is correct.", "bad-file"),
    ],
)  # fmt: skip
def test_openvino_messages_map_to_kinds(message: str, kind: str) -> None:
    assert classify_error("RuntimeError", message, "", ERROR_PATTERNS) == kind
