"""The ONNX Runtime side of the partition evidence: the graph ORT partitioned, read from an ONNX
``ModelProto``; the shapes it declares; and partitions built from ORT's EP graph-assignment record,
in which the CPU EP lists its nodes one by one (so they are grouped into connected components).

The graph arithmetic itself (partitions, crossings, bytes, the evidence block) is runtime-neutral:
:mod:`rtmatrix.metrics.partitions`. Nothing here imports a runtime at module level (``onnx`` only
inside :func:`shape_from_value_info`), so the report and the unit tests may import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rtmatrix.metrics.partitions import Graph, Node, Partition, Shape, build_partitions
from rtmatrix.runtimes.onnxruntime.placement import CPU

#: providers whose nodes ORT's assignment record names one by one (grouped into components)
MERGED_EPS: tuple[str, ...] = (CPU,)


def graph_from_onnx(model: Any) -> Graph:
    """A ``Graph`` from an ``onnx.ModelProto`` (duck-typed: needs ``.graph``)."""
    g = model.graph
    inits = frozenset(t.name for t in g.initializer)
    nodes = tuple(
        Node(
            n.name or f"{n.op_type}:{i}",
            n.op_type,
            tuple(n.input),
            tuple(n.output),
            n.domain,
        )
        for i, n in enumerate(g.node)
    )
    inputs = tuple(i.name for i in g.input if i.name not in inits)
    return Graph(nodes, inputs, tuple(o.name for o in g.output), inits)


def ort_partitions(
    graph: Graph, assignment: Sequence[tuple[str, Sequence[str]]]
) -> list[Partition]:
    """Partitions from ORT's assignment record (``session.get_provider_graph_assignment_info()``):
    one per delegate subgraph, the CPU EP's nodes grouped into connected components."""
    return build_partitions(graph, assignment, MERGED_EPS)


def shape_from_value_info(value_info: Any, bindings: Mapping[str, int]) -> Shape | None:
    """(dtype, dims) of an ONNX ``ValueInfoProto`` with symbolic dims bound by ``bindings``;
    None when its type or a dim is unknown."""
    from onnx import helper

    tt = value_info.type.tensor_type
    if not tt.elem_type or not tt.HasField("shape"):
        return None
    dims: list[int] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.dim_param in bindings:
            dims.append(int(bindings[d.dim_param]))
        else:
            return None
    dtype = str(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return dtype, tuple(dims)


def declared_shapes(model: Any, bindings: Mapping[str, int]) -> dict[str, Shape]:
    """Shapes the model declares (inputs, outputs, value_info), symbolic dims bound."""
    g = model.graph
    out: dict[str, Shape] = {}
    for vi in [*g.input, *g.output, *g.value_info]:
        s = shape_from_value_info(vi, bindings)
        if s is not None:
            out[vi.name] = s
    return out
