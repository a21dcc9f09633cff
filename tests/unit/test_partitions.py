"""Partitions, boundary tensors and bytes per token on small hand-built graphs; delegate-on vs
control pairing; the OpenVINO row's pure helpers; the partition fixtures. (ORT's profiling events:
``test_onnxruntime_profile.py``.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtmatrix.metrics import partitions as pt
from rtmatrix.metrics.partitions import Graph, Node
from rtmatrix.runtimes.onnxruntime import graph_partitions as gp
from rtmatrix.runtimes.onnxruntime.placement import CPU
from rtmatrix.runtimes.onnxruntime_openvino.adapter import OV, ov_entry, precision_record

D = "DelegateEP"


def chain() -> Graph:
    """x -> A (MatMul) -> a -> B (Gelu) -> b -> C (MatMul) -> y; W is an initializer."""
    return Graph(
        nodes=(
            Node("A", "MatMul", ("x", "W"), ("a",)),
            Node("B", "FastGelu", ("a",), ("b",), "com.microsoft"),
            Node("C", "MatMul", ("b", "W2"), ("y",)),
        ),
        inputs=("x",),
        outputs=("y",),
        initializers=frozenset({"W", "W2"}),
    )


def f32(*dims: int) -> pt.Shape:
    return ("float32", tuple(dims))


def test_one_delegate_subgraph_is_one_partition_with_no_boundary() -> None:
    g = chain()
    parts = gp.ort_partitions(g, [(D, ["A", "B", "C"])])
    assert [(p.id, p.ep, p.nodes) for p in parts] == [("P0", D, ["A", "B", "C"])]
    cross = pt.crossings(g, parts)
    assert pt.boundary_tensors(cross) == []
    assert {(c.tensor, c.kind) for c in cross} == {("x", "graph-input"), ("y", "graph-output")}


def test_an_unsupported_op_in_the_middle_makes_three_partitions() -> None:
    g = chain()
    parts = gp.ort_partitions(g, [(D, ["A"]), (D, ["C"]), (CPU, ["B"])])
    assert [(p.id, p.ep, p.nodes, p.ep_index) for p in parts] == [
        ("P0", D, ["A"], 0),
        ("P1", CPU, ["B"], None),
        ("P2", D, ["C"], 1),
    ]
    cross = [c for c in pt.crossings(g, parts) if c.kind == "partition"]
    assert [(c.tensor, c.src, c.dst) for c in cross] == [("a", "P0", "P1"), ("b", "P1", "P2")]


def test_only_the_named_providers_are_grouped_into_components() -> None:
    g = chain()
    record = [(D, ["A"]), ("Fallback", ["B"]), ("Fallback", ["C"])]
    merged = pt.build_partitions(g, record, ["Fallback"])
    assert [(p.ep, p.nodes, p.ep_index) for p in merged] == [
        (D, ["A"], 0),
        ("Fallback", ["B", "C"], None),
    ]
    one_by_one = pt.build_partitions(g, record, ())
    assert [(p.ep, p.nodes, p.ep_index) for p in one_by_one] == [
        (D, ["A"], 0),
        ("Fallback", ["B"], 0),
        ("Fallback", ["C"], 1),
    ]
    assert gp.ort_partitions(g, [(D, ["A"]), (CPU, ["B"]), (CPU, ["C"])])[1].nodes == ["B", "C"]


def test_boundary_bytes_and_bytes_per_token_from_the_shapes() -> None:
    g = chain()
    parts = gp.ort_partitions(g, [(D, ["A"]), (D, ["C"]), (CPU, ["B"])])
    shapes = {
        "prefill": {"x": f32(1, 4, 8), "a": f32(1, 4, 16), "b": f32(1, 4, 16), "y": f32(1, 4, 8)},
        "decode": {"x": f32(1, 1, 8), "a": f32(1, 1, 16), "b": f32(1, 1, 16), "y": f32(1, 1, 8)},
    }
    s = pt.summarize(g, parts, D, shapes, {"prefill": 4, "decode": 1})
    assert s["partitions"] == 3 and s["delegate_partitions"] == 2
    assert s["boundary_tensors"] == 2 and s["crossings"] == 2
    assert s["boundary_bytes"] == {"prefill": 2 * 4 * 16 * 4, "decode": 2 * 16 * 4}
    assert s["boundary_bytes_per_token"] == {"prefill": 128.0, "decode": 128.0}
    assert s["graph_io_bytes"] == {"prefill": 2 * 4 * 8 * 4, "decode": 2 * 8 * 4}
    assert s["coverage"] == {"nodes_total": 3, "nodes_on_delegate": 2, "pct": 66.67}
    p0, p1, p2 = s["per_partition"]
    assert p0["in_bytes"]["prefill"] == {"from_partitions": 0, "from_graph_inputs": 128}
    assert p0["out_bytes"]["prefill"] == {"to_partitions": 256, "to_graph_outputs": 0}
    assert p1["in_bytes"]["decode"] == {"from_partitions": 64, "from_graph_inputs": 0}
    assert p2["out_bytes"]["decode"] == {"to_partitions": 0, "to_graph_outputs": 32}
    a = next(t for t in s["tensors"] if t["tensor"] == "a")
    assert a == {
        "tensor": "a",
        "from": "P0",
        "to": ["P1"],
        "dtype": "float32",
        "shape": {"prefill": [1, 4, 16], "decode": [1, 1, 16]},
        "bytes": {"prefill": 256, "decode": 64},
        "bytes_per_token": {"prefill": 64.0, "decode": 64.0},
    }


def test_a_tensor_read_by_two_other_partitions_crosses_twice() -> None:
    g = Graph(
        nodes=(
            Node("A", "MatMul", ("x", "W"), ("a",)),
            Node("B", "Rot", ("a",), ("b",)),
            Node("C", "Add", ("a", "b"), ("c",)),
            Node("E", "Rot", ("c",), ("e",)),
            Node("F", "Add", ("a", "e"), ("y",)),
        ),
        inputs=("x",),
        outputs=("y",),
        initializers=frozenset({"W"}),
    )
    # B and E are not connected to each other: two CPU partitions
    parts = gp.ort_partitions(g, [(D, ["A"]), (D, ["C"]), (D, ["F"]), (CPU, ["B", "E"])])
    assert [(p.ep, p.nodes) for p in parts] == [
        (D, ["A"]),
        (CPU, ["B"]),
        (D, ["C"]),
        (CPU, ["E"]),
        (D, ["F"]),
    ]
    shapes = {"prefill": {t: f32(1, 2, 8) for t in ("x", "a", "b", "c", "e", "y")}}
    s = pt.summarize(g, parts, D, shapes, {"prefill": 2})
    a = next(t for t in s["tensors"] if t["tensor"] == "a")
    assert a["to"] == ["P1", "P2", "P4"] and a["bytes"]["prefill"] == 3 * 64
    assert s["crossings"] == 3 + 1 + 1 + 1  # a x3, b, c, e
    assert s["boundary_bytes"]["prefill"] == 6 * 64


def test_connected_cpu_nodes_form_one_partition() -> None:
    g = Graph(
        nodes=(
            Node("A", "MatMul", ("x", "W"), ("a",)),
            Node("B", "Rot", ("a",), ("b",)),
            Node("B2", "Rot", ("b",), ("b2",)),
            Node("C", "MatMul", ("b2", "W"), ("y",)),
        ),
        inputs=("x",),
        outputs=("y",),
        initializers=frozenset({"W"}),
    )
    parts = gp.ort_partitions(g, [(D, ["A", "C"]), (CPU, ["B"]), (CPU, ["B2"])])
    assert [(p.ep, p.nodes) for p in parts] == [(D, ["A", "C"]), (CPU, ["B", "B2"])]


def test_unassigned_nodes_are_grouped_and_visible() -> None:
    parts = gp.ort_partitions(chain(), [(D, ["A"])])
    assert [(p.ep, p.nodes) for p in parts] == [(D, ["A"]), (pt.UNASSIGNED, ["B", "C"])]


def test_initializers_and_omitted_inputs_are_not_traffic() -> None:
    g = Graph(
        nodes=(
            Node("A", "MatMul", ("x", "W"), ("a",)),
            Node("B", "Clip", ("a", "", "W"), ("y",)),
        ),
        inputs=("x",),
        outputs=("y",),
        initializers=frozenset({"W"}),
    )
    parts = gp.ort_partitions(g, [(D, ["A"]), (CPU, ["B"])])
    assert [(c.tensor, c.src, c.dst) for c in pt.crossings(g, parts)] == [
        ("x", pt.GRAPH_INPUT, "P0"),
        ("a", "P0", "P1"),
        ("y", "P1", pt.GRAPH_OUTPUT),
    ]


def test_unknown_shape_or_dtype_leaves_bytes_unknown_not_zero() -> None:
    g = chain()
    parts = gp.ort_partitions(g, [(D, ["A"]), (D, ["C"]), (CPU, ["B"])])
    s = pt.summarize(g, parts, D, {"prefill": {"a": f32(1, 2, 16)}}, {"prefill": 2})
    assert s["boundary_bytes"] == {"prefill": None}
    assert pt.tensor_bytes(("complex128", (2,))) is None
    assert pt.tensor_bytes(("float16", (3, 5))) == 30
    assert pt.tensor_bytes(("int64", ())) == 8


def test_control_has_no_delegate_and_zero_coverage() -> None:
    g = chain()
    parts = gp.ort_partitions(g, [(CPU, ["A"]), (CPU, ["B"]), (CPU, ["C"])])
    s = pt.summarize(g, parts, None, {"prefill": {}}, {"prefill": 1})
    assert s["role"] == "control" and s["partitions"] == 1
    assert s["coverage"]["pct"] == 0.0 and s["boundary_bytes"] == {"prefill": 0}


# -- a real ONNX graph: the same computation from onnx.helper, shapes bound from value_info ---
def _onnx_chain(extra_consumer: bool) -> Any:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="A"),
        helper.make_node("FastGelu", ["a"], ["b"], name="B", domain="com.microsoft"),
        helper.make_node("MatMul", ["b", "W2"], ["c"], name="C"),
    ]
    if extra_consumer:  # the last partition also reads the first one's output
        nodes.append(helper.make_node("Add", ["c", "a"], ["y"], name="E"))
    else:
        nodes.append(helper.make_node("Identity", ["c"], ["y"], name="E"))
    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*dims, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*dims, 16])],
        [
            numpy_helper.from_array(np.zeros((8, 16), np.float32), "W"),
            numpy_helper.from_array(np.zeros((16, 16), np.float32), "W2"),
        ],
        value_info=[
            helper.make_tensor_value_info(t, TensorProto.FLOAT, [*dims, 16]) for t in "abc"
        ],
    )
    return onnx.helper.make_model(graph)


@pytest.mark.parametrize("extra_consumer", [False, True])
def test_boundary_bytes_follow_the_onnx_graph(extra_consumer: bool) -> None:
    model = _onnx_chain(extra_consumer)
    g = gp.graph_from_onnx(model)
    assert g.initializers == {"W", "W2"} and g.inputs == ("x",)
    parts = gp.ort_partitions(g, [(D, ["A"]), (CPU, ["B"]), (D, ["C", "E"])])
    shapes = {"prefill": gp.declared_shapes(model, {"batch": 1, "sequence": 5})}
    assert shapes["prefill"]["a"] == ("float32", (1, 5, 16))
    s = pt.summarize(g, parts, D, shapes, {"prefill": 5})
    per_tensor = 5 * 16 * 4
    crossings = 3 if extra_consumer else 2  # a -> P1 (and -> P2), b -> P2
    assert s["boundary_bytes"]["prefill"] == crossings * per_tensor
    assert s["boundary_bytes_per_token"]["prefill"] == crossings * 16 * 4


def test_declared_shapes_skip_unbound_symbols() -> None:
    model = _onnx_chain(False)
    assert "a" not in gp.declared_shapes(model, {"batch": 1})


def test_summarize_reports_time_inside_and_outside_partitions() -> None:
    g = chain()
    parts = gp.ort_partitions(g, [(D, ["A"]), (D, ["C"]), (CPU, ["B"])])
    times = {"prefill": {"P0": 30.0, "P1": 10.0, "P2": 20.0}}
    s = pt.summarize(g, parts, D, {"prefill": {}}, {"prefill": 1}, times, {"prefill": 100.0})
    assert s["time_us"]["prefill"] == {
        "in_partitions": 60.0,
        "on_delegate": 50.0,
        "run": 100.0,
        "outside_partitions": 40.0,
    }
    assert [p["time_us"]["prefill"] for p in s["per_partition"]] == [30.0, 10.0, 20.0]


# -- delegate on vs off --------------------------------------------------------------------------
def _cell(runtime: str, role: str, pp: float, tg: float, variant: str | None) -> dict[str, Any]:
    def metric(v: float) -> dict[str, Any]:
        return {"value": v, "stats": {"min": v * 0.9, "max": v * 1.1}}

    return {
        "runtime": runtime,
        "fixture": {"name": f"small-{variant}", "dtype": "f32", "variant": variant},
        "params": {"threads": 2, "prompt_tokens": 128},
        "outcome": {"status": "ok"},
        "metrics": {"pp_tps": metric(pp), "tg_tps": metric(tg)},
        "evidence": {"partitions": {"role": role, "partitions": 3, "coverage": {"pct": 90.0}}},
    }


def test_delegate_vs_control_pairs_by_fixture_and_flags_a_slower_delegate() -> None:
    cells = [
        _cell("ov", "delegate", 200.0, 50.0, "end"),
        _cell("ov", "delegate", 100.0, 10.0, "every"),
        _cell("cpu", "control", 100.0, 40.0, "end"),
        _cell("cpu", "control", 150.0, 40.0, "every"),
        _cell("ov", "delegate", 1.0, 1.0, "orphan"),
    ]
    rows = {r["variant"]: r for r in pt.delegate_vs_control(cells)}
    assert rows["end"]["pp_ratio"] == 2.0 and rows["end"]["tg_ratio"] == 1.25
    assert rows["end"]["delegate_slower"] == {"pp": False, "tg": False}
    assert rows["every"]["pp_ratio"] == 0.667 and rows["every"]["tg_ratio"] == 0.25
    assert rows["every"]["delegate_slower"] == {"pp": True, "tg": True}
    # PP ranges (90-110 vs 135-165) do not overlap; TG (9-11 vs 36-44) neither
    assert rows["every"]["slower_beyond_spread"] == {"pp": True, "tg": True}
    assert rows["every"]["control_runtime"] == "cpu" and rows["every"]["coverage_pct"] == 90.0
    assert rows["orphan"]["pp_ratio"] is None and "no ok control" in rows["orphan"]["reason"]
    assert "paired" not in rows["end"]
    cells[0]["evidence"]["partitions"]["paired_control"] = {
        "pp_ratio_median": 0.8,
        "tg_ratio_median": 0.5,
        "delegate_slower": {"pp": True, "tg": True},
        "rounds": 3,
    }
    rows = {r["variant"]: r for r in pt.delegate_vs_control(cells)}
    assert rows["end"]["paired"]["tg_ratio_median"] == 0.5  # in-cell A/B beside the cross-cell


# -- adapter helpers that need no runtime --------------------------------------------------------
def test_ov_entry_adds_threads_and_stringifies_options() -> None:
    assert ov_entry(OV, 2) == [OV, {"num_of_threads": "2"}]
    assert ov_entry([OV, {"precision": "FP32", "num_of_threads": 4}], 2) == [
        OV,
        {"precision": "FP32", "num_of_threads": "4"},
    ]
    assert ov_entry(CPU, 2) == CPU


def test_precision_record_reads_the_load_config_hint() -> None:
    cfg = '{"CPU": {"INFERENCE_PRECISION_HINT": "bf16"}}'
    rec = precision_record({"load_config": cfg}, {"CPU": {"INFERENCE_PRECISION_HINT": "bf16"}})
    assert rec["load_config_inference_precision_hint"] == "bf16"
    assert rec["ovep_precision_option"] is None and "FP32" in rec["ovep_precision_used"]
    assert precision_record({"precision": "ACCURACY"}, {})["ovep_precision_used"] == "ACCURACY"
    assert precision_record(None, {}) == {"delegate": None}


def test_without_the_openvino_build_the_row_is_unavailable_with_the_fix() -> None:
    ort = pytest.importorskip("onnxruntime")
    if OV in ort.get_available_providers():
        pytest.skip("this venv has onnxruntime-openvino")
    from rtmatrix.adapters.base import RuntimeUnavailable
    from rtmatrix.runtimes.onnxruntime_openvino.adapter import OrtOpenVinoAdapter

    with pytest.raises(RuntimeUnavailable, match=r"rtmatrix\[onnxruntime-openvino\]"):
        OrtOpenVinoAdapter().import_runtime()


# -- the partition fixtures ----------------------------------------------------------------------
def _ops(path: Path) -> list[tuple[str, str, str]]:
    onnx = pytest.importorskip("onnx")
    m = onnx.load(str(path))
    return [(n.domain, n.op_type, n.name) for n in m.graph.node]


def test_partition_fixtures_interleave_contrib_ops(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    from rtmatrix.fixtures import build_fixture, unsupported
    from rtmatrix.fixtures import onnx_export as oe
    from rtmatrix.fixtures.spec import get_spec

    spec = get_spec("tiny")
    for variant in oe.PARTITION_VARIANTS:
        assert unsupported("onnx", "f32", variant) is None
        assert unsupported("gguf", "f32", variant) is not None  # other formats skip it
    end = build_fixture(spec, "onnx", "f32", "partition-end", root=tmp_path)
    every = build_fixture(spec, "onnx", "f32", "partition-every-layer", root=tmp_path)
    clean = build_fixture(spec, "onnx", "f32", root=tmp_path)
    contrib = {
        label: [o for o in _ops(art.path) if o[0] == oe.MS_DOMAIN]
        for label, art in (("end", end), ("every", every), ("clean", clean))
    }
    assert contrib["clean"] == []
    assert contrib["end"] == [(oe.MS_DOMAIN, "TransposeMatMul", "logits")]
    assert _ops(end.path)[-1][1] == "TransposeMatMul"  # the very last node
    assert [op for _, op, _ in contrib["every"]] == ["RotaryEmbedding"] * (2 * spec.n_layer)
    onnx = pytest.importorskip("onnx")
    for art in (end, every):
        m = onnx.load(str(art.path))
        assert m.ir_version == oe.IR_VERSION <= 13  # onnxruntime-openvino 1.24 reads IR <= 13
        assert (oe.MS_DOMAIN, 1) in [(o.domain, o.version) for o in m.opset_import]
        onnx.checker.check_model(m)
    with pytest.raises(ValueError, match="f32 only"):
        oe.write_onnx(spec, "int8", tmp_path / "x.onnx", variant="partition-end")


def test_partition_fixtures_compute_the_same_logits_on_the_cpu_ep(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from rtmatrix.fixtures import build_fixture
    from rtmatrix.fixtures.spec import get_spec

    spec = get_spec("tiny")
    n = 6
    feeds: dict[str, Any] = {
        "input_ids": (np.arange(n, dtype=np.int64)[None] * 37 + 5) % spec.vocab_size,
        "position_ids": np.arange(3, 3 + n, dtype=np.int64)[None],  # past of 3
        "attention_mask": np.ones((1, 3 + n), np.int64),
    }
    rng = np.random.default_rng(0)
    for i in range(spec.n_layer):
        for kv in ("key", "value"):
            shape = (1, spec.n_head_kv, 3, spec.head_dim)
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal(shape).astype(np.float32)
    outs = {}
    for variant in (None, "partition-end", "partition-every-layer"):
        art = build_fixture(spec, "onnx", "f32", variant, root=tmp_path)
        sess = ort.InferenceSession(str(art.path), providers=["CPUExecutionProvider"])
        outs[variant] = sess.run(None, feeds)
    for variant in ("partition-end", "partition-every-layer"):
        for a, b in zip(outs[None], outs[variant], strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)
