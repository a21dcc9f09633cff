"""ONNX Runtime's placement evidence without a runtime: the "Node placements" log, contiguous
partitions, the fallback rule."""

from __future__ import annotations

from rtmatrix.runtimes.onnxruntime.placement import (
    CPU,
    count_partitions,
    judge_fallback,
    parse_placement_log,
)

CUDA = "CUDAExecutionProvider"


def test_parse_placement_log_reads_every_provider() -> None:
    lines = [
        "2026-11-29 [V:onnxruntime:, session_state.cc:1598] Node placements",
        "2026-11-29 [V:onnxruntime:, session_state.cc:1601]  Node(s) placed on "
        "[OpenVINOExecutionProvider]. Number of nodes: 4",
        "2026-11-29 [V:onnxruntime:, session_state.cc:1604]   OpenVINO-EP-subgraph_1 (...)",
        "2026-11-29 [V:onnxruntime:, session_state.cc:1601]  Node(s) placed on "
        "[CPUExecutionProvider]. Number of nodes: 4",
    ]
    assert parse_placement_log(lines) == {"OpenVINOExecutionProvider": 4, CPU: 4}
    one = ["[V:onnxruntime:] All nodes placed on [CPUExecutionProvider]. Number of nodes: 302"]
    assert parse_placement_log(one) == {CPU: 302}
    assert parse_placement_log(["nothing here"]) == {}


def test_count_partitions_counts_runs_of_one_provider() -> None:
    assert count_partitions([CPU, "OV", "OV", CPU]) == 3
    assert count_partitions([CPU, CPU, CPU]) == 1
    assert count_partitions([]) == 0


def test_judge_fallback() -> None:
    # explicit request dropped by the session
    assert judge_fallback([CUDA, CPU], [CPU], {CPU: 5}, explicit=True)[0] is True
    # registered but given no node
    fb, why = judge_fallback(
        ["AzureExecutionProvider", CPU], ["AzureExecutionProvider", CPU], {CPU: 5}, explicit=True
    )
    assert fb is True and "assigned no node" in why[0]
    # the default list is "whatever is there": not a fallback
    assert (
        judge_fallback(
            ["AzureExecutionProvider", CPU],
            ["AzureExecutionProvider", CPU],
            {CPU: 5},
            explicit=False,
        )[0]
        is False
    )
    # CPU asked, CPU used
    assert judge_fallback([CPU], [CPU], {CPU: 5}, explicit=True) == (False, [])
