"""How many bytes of a model file's weights one decode step reads, from the tensors as stored.

The format layer (:mod:`rtmatrix.metrics.stack`) calls these with the file it has open; the result
is its ``weights`` entry: every tensor's stored size, summed, less the **lookup-only** tables a
step reads one row of (an untied token embedding — the output head is then a tensor of its own —
and rotary cos/sin tables). A tied embedding is the output head: it is read whole, so it counts.

- GGUF: each tensor's ``n_bytes`` (its quantized blocks as stored); ``token_embd.weight`` is
  lookup-only where an ``output.weight`` exists.
- ONNX: each initializer's dims × its element's bits (external data included, 4-bit types
  packed); lookup-only are the initializers whose every consumer is a ``Gather``. Also the
  element types of the graph's KV-cache inputs (``past*`` / ``*cache*``): the precision a
  runtime that feeds the cache as graph inputs keeps it in.
- TVM: the tensor cache's ``nbytes`` per parameter (``tensor-cache.json``); lookup-only as GGUF
  names them, plus ``rope.cos`` / ``rope.sin``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: ONNX element types stored packed below a byte
_PACKED_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2}
_KV_WORDS = ("past", "cache")


def summary(sizes: Mapping[str, int], lookups: Iterable[str], how: str) -> dict[str, Any]:
    """The ``weights`` entry: stored bytes, lookup-only bytes and what a decode step reads."""
    looked = sorted(n for n in set(lookups) if n in sizes)
    stored = sum(sizes.values())
    lookup = sum(sizes[n] for n in looked)
    return {"stored_bytes": stored, "lookup_bytes": lookup, "read_per_token_bytes": stored - lookup,
            "tensors": len(sizes), "lookup_tensors": looked, "how": how}  # fmt: skip


def _llama_lookups(names: Iterable[str]) -> set[str]:
    found = set(names)
    out = {"rope.cos", "rope.sin", "rope_freqs.weight"} & found
    if "output.weight" in found:  # an untied head: the embedding is gathered, one row a step
        out.add("token_embd.weight")
    return out


def gguf(tensors: Iterable[Any]) -> dict[str, Any]:
    """From ``gguf.GGUFReader.tensors`` (``name``, ``n_bytes``)."""
    sizes = {str(t.name): int(t.n_bytes) for t in tensors}
    how = "GGUF tensors' n_bytes as stored, less lookup-only tables (an untied token_embd)"
    return summary(sizes, _llama_lookups(sizes), how)


def _onnx_bytes(tensor: Any) -> int:
    from onnx import TensorProto, helper

    kind = TensorProto.DataType.Name(tensor.data_type)
    count = 1
    for d in tensor.dims:
        count *= int(d)
    if kind in _PACKED_BITS:
        return (count * _PACKED_BITS[kind] + 7) // 8
    if kind == "STRING":
        return sum(len(s) for s in tensor.string_data)
    return count * int(helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize)


def onnx(model: Any) -> dict[str, Any]:
    """From an ``onnx.ModelProto`` (external data not loaded: sizes come from the dims)."""
    sizes = {t.name: _onnx_bytes(t) for t in model.graph.initializer}
    users: dict[str, set[str]] = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name in sizes:
                users.setdefault(name, set()).add("Gather" if node.op_type == "Gather" and i == 0
                                                  else node.op_type)  # fmt: skip
    lookups = {n for n, ops in users.items() if ops == {"Gather"}}
    how = ("ONNX initializers' dims × element size as stored, less lookup-only tables (those "
           "only a Gather reads)")  # fmt: skip
    return summary(sizes, lookups, how)


def onnx_kv_inputs(model: Any) -> dict[str, int]:
    """The element types of the graph's KV-cache inputs, counted (e.g. ``{"FLOAT": 60}``)."""
    from onnx import TensorProto

    inits = {t.name for t in model.graph.initializer}
    kinds = Counter(
        TensorProto.DataType.Name(i.type.tensor_type.elem_type)
        for i in model.graph.input
        if i.name not in inits and any(w in i.name.lower() for w in _KV_WORDS)
    )
    return dict(kinds)


def tvm(folder: Path) -> dict[str, Any]:
    """From the TVM fixture's ``tensor-cache.json`` (each parameter's ``nbytes``)."""
    cache = json.loads((folder / "tensor-cache.json").read_text("utf-8"))
    sizes = {str(r["name"]): int(r["nbytes"]) for shard in cache.get("records", [])
             for r in shard.get("records", [])}  # fmt: skip
    how = "the TVM tensor cache's nbytes per parameter, less lookup-only tables"
    return summary(sizes, _llama_lookups(sizes), how)
