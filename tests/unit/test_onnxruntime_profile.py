"""ONNX Runtime's profiling JSON without a runtime: node counts per provider, runs, time per
partition, what ORT hands each fused delegate subgraph (synthetic events)."""

from __future__ import annotations

from typing import Any

from rtmatrix.metrics.partitions import Graph, Node
from rtmatrix.runtimes.onnxruntime import graph_partitions as gp
from rtmatrix.runtimes.onnxruntime import profile
from rtmatrix.runtimes.onnxruntime.placement import CPU
from rtmatrix.runtimes.onnxruntime.profile import parse_profile

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


def _ev(name: str, provider: str, ts: int) -> dict[str, Any]:
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "args": {"provider": provider}}


def test_parse_profile_counts_nodes_and_partitions_in_execution_order() -> None:
    ov = "OpenVINOExecutionProvider"
    events = [
        {"cat": "Session", "name": "model_loading_uri", "ts": 0},
        _ev("a", ov, 10),
        _ev("b", CPU, 20),
        _ev("c", ov, 30),
        {"cat": "Node", "name": "c_fence_before", "ts": 31, "args": {"provider": ov}},
        _ev("d", CPU, 40),
        _ev("a", ov, 110),  # a second run repeats the same nodes: not counted again
    ]
    assert parse_profile(events) == ({ov: 2, CPU: 2}, 4)


# -- time per partition from profiling events ----------------------------------------------
def _events() -> list[dict[str, Any]]:
    def node(name: str, ts: float, dur: float, provider: str, op_name: str) -> dict[str, Any]:
        args = {"provider": provider, "op_name": op_name}
        return {"cat": "Node", "name": name, "ts": ts, "dur": dur, "args": args}

    run = {"cat": "Session", "name": "model_run"}
    return [
        run | {"ts": 0, "dur": 100},
        node(f"{D}_Sub-EP-subgraph_7_0_kernel_time", 5, 30, D, "Sub-EP-subgraph_7"),
        node("B_kernel_time", 40, 10, CPU, "FastGelu"),
        node(f"{D}_Sub-EP-subgraph_8_1_kernel_time", 55, 20, D, "Sub-EP-subgraph_8"),
        node("mystery_kernel_time", 80, 5, CPU, "Foo"),
        run | {"ts": 200, "dur": 50},
        node(f"{D}_Sub-EP-subgraph_7_0_kernel_time", 205, 3, D, "Sub-EP-subgraph_7"),
        node("B/SomeFusion/_kernel_time", 210, 4, CPU, "FusedOp"),
        {"cat": "Node", "name": "B_fence_before", "ts": 209, "dur": 1},
    ]


def test_partition_times_per_run() -> None:
    parts = gp.ort_partitions(chain(), [(D, ["A"]), (D, ["C"]), (CPU, ["B"])])
    ev = _events()
    runs = profile.profile_runs(ev)
    assert [len(r) for r in runs] == [4, 2]
    assert profile.run_durations(ev) == [100.0, 50.0]
    times, other, missed = profile.partition_times(runs[0], parts)
    assert times == {"P0": 30.0, "P1": 10.0, "P2": 20.0}
    assert other == 5.0 and missed == ["mystery_kernel_time"]
    assert [p.subgraph for p in parts] == ["Sub-EP-subgraph_7", None, "Sub-EP-subgraph_8"]
    times, other, _ = profile.partition_times(runs[1], parts)
    assert times == {"P0": 3.0, "P1": 4.0, "P2": 0.0} and other == 0.0


def test_fused_node_args_read_what_ort_hands_the_subgraph() -> None:
    parts = gp.ort_partitions(chain(), [(D, ["A"]), (D, ["C"]), (CPU, ["B"])])
    runs = profile.profile_runs(_events())
    profile.partition_times(runs[0], parts)  # names the subgraphs
    ev = dict(runs[0][0])
    ev["args"] = ev["args"] | {
        "input_type_shape": [{"float": [1, 4, 8]}, {"float": [8, 16]}],
        "output_type_shape": [{"float": [1, 4, 16]}],
        "parameter_size": "512",
        "activation_size": "128",
        "output_size": "256",
    }
    args = profile.fused_node_args([ev, *runs[0][1:]], parts)
    assert args["P0"] == {
        "inputs": 2,
        "outputs": 1,
        "parameter_bytes": 512,
        "activation_bytes": 128,
        "output_bytes": 256,
    }
    assert args["P2"] == {"inputs": 0, "outputs": 0}  # no sizes in that event
    assert "P1" not in args  # a CPU node, not a fused subgraph


def test_shapes_from_profile_match_node_outputs_and_skip_mismatches() -> None:
    def node(name: str, *types: dict[str, list[int]]) -> dict[str, Any]:
        return {"cat": "Node", "name": f"{name}_kernel_time", "args": {"output_type_shape": types}}

    events = [
        node("A", {"float": [1, 4, 16]}),
        node("B", {"float": [1, 4, 16]}, {"float": [1]}),  # two shapes for one output: skipped
        node("C", {"int64": [2]}),
        node("unknown", {"float": [3]}),
    ]
    for e in events:
        e["args"]["output_type_shape"] = list(e["args"]["output_type_shape"])
    assert profile.shapes_from_profile(events, chain()) == {
        "a": ("float32", (1, 4, 16)),
        "y": ("int64", (2,)),
    }
