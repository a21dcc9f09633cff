"""The four layers of a cell, written down separately (``evidence.stack``): the **format** the
file is in, the **runtime** that read it, the **backend** it handed the work to, and the
**kernels** that computed the matmuls — each with what the runtime itself said, or
``unavailable`` with the reason — and the cell's effective **numerics** (devices, precisions:
:mod:`rtmatrix.numerics`).

Built in the parent from the cell's record: the format from the file itself (format libraries
only: ``gguf``, ``onnx``, the TVM manifest, ``tflite``; read once per file and cached by its
sha256), the runtime from the distribution and version the worker reported; the backend, the
kernels and the numerics are what the runtime's own home reported in the worker
(:class:`rtmatrix.adapters.capabilities.StackReporting`, typed: :class:`StackReport`). This
module knows no runtime and imports none.

**Kernel-level fallback**: a home marks a quantized cell whose matmul weights were turned back
into f32 (``kernels.fallback: true`` with the reason); the runner makes such a cell's outcome
``fallback``, as a placement fallback.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from rtmatrix.metrics import weights
from rtmatrix.numerics import StackReport, unavailable


# -- format ----------------------------------------------------------------------------------
@cache
def _read_format(container: str, path: str, sha256: str) -> dict[str, Any]:
    p = Path(path)
    try:
        if container == "gguf":
            return _gguf(p)
        if container == "onnx":
            return _onnx(p)
        if container == "tvm":
            return _tvm(p)
        if container == "tflite":
            return _tflite(p)
    except Exception as exc:  # a damaged file is a fixture variant: say what the reader said
        return unavailable(f"{container} reader: {type(exc).__name__}: {exc}"[:300])
    return unavailable(f"rtmatrix reads no {container!r} files")


def _weights(read: Callable[[Any], dict[str, Any]], source: Any) -> dict[str, Any]:
    """The file's weights as stored (:mod:`rtmatrix.metrics.weights`), or why not: a reader's
    failure here never costs the rest of the format layer."""
    try:
        return read(source)
    except Exception as exc:  # a damaged or unusual file: say what the reader said
        return unavailable(f"weights not read: {type(exc).__name__}: {exc}"[:300])


def _gguf(p: Path) -> dict[str, Any]:
    from gguf import GGUFReader

    r = GGUFReader(str(p))
    arch_field = r.fields.get("general.architecture")
    arch = bytes(arch_field.parts[-1]).decode() if arch_field else None
    version_field = r.fields.get("GGUF.version")
    version = int(version_field.parts[-1][0]) if version_field else None
    types = Counter(t.tensor_type.name for t in r.tensors)
    return {
        "container": "GGUF",
        "version": version,
        "architecture": arch,
        "tensor_types": dict(types),
        "tensors": len(r.tensors),
        "weights": _weights(weights.gguf, r.tensors),
    }


def _onnx(p: Path) -> dict[str, Any]:
    import onnx

    m = onnx.load(str(p), load_external_data=False)
    ops = Counter(
        (f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type
        for n in m.graph.node
    )
    opsets = {o.domain or "ai.onnx": int(o.version) for o in m.opset_import}
    weight_types = Counter(onnx.TensorProto.DataType.Name(t.data_type) for t in m.graph.initializer)
    return {
        "container": "ONNX",
        "ir_version": int(m.ir_version),
        "opsets": opsets,
        "op_types": dict(ops),
        "initializer_types": dict(weight_types),
        "producer": f"{m.producer_name} {m.producer_version}".strip(),
        "weights": _weights(weights.onnx, m),
        "kv_cache_inputs": _weights(weights.onnx_kv_inputs, m),
    }


def _tvm(p: Path) -> dict[str, Any]:
    folder = p if p.is_dir() else p.parent
    man = json.loads((folder / "tvm-manifest.json").read_text("utf-8"))
    return {
        "container": "TVM library + tensor cache",
        "manifest_version": man.get("manifest_version"),
        "tvm": (man.get("tvm") or {}).get("version"),
        "target": (man.get("target") or {}).get("json"),
        "param_mode": (man.get("compile") or {}).get("param_mode"),
        "weights": _weights(weights.tvm, folder),
    }


def _tflite(p: Path) -> dict[str, Any]:
    import tflite

    m = tflite.Model.GetRootAsModel(p.read_bytes(), 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    codes = []
    for i in range(m.OperatorCodesLength()):
        oc = m.OperatorCodes(i)
        codes.append(oc.CustomCode().decode() if oc.CustomCode() else names.get(oc.BuiltinCode()))
    sigs = [m.SignatureDefs(i).SignatureKey().decode() for i in range(m.SignatureDefsLength())]
    return {
        "container": "TFLite flatbuffer",
        "schema_version": int(m.Version()),
        "operator_codes": codes,
        "signatures": sigs,
        "subgraphs": m.SubgraphsLength(),
    }


def format_layer(fixture: dict[str, Any]) -> dict[str, Any]:
    path, sha = fixture.get("path"), fixture.get("sha256")
    if not path or not Path(str(path)).exists():
        return unavailable("no model file recorded for this cell")
    out = dict(_read_format(str(fixture.get("container")), str(path), str(sha)))
    out["dtype"] = fixture.get("dtype")
    conv = fixture.get("conversion")
    if conv:  # written by the runtime's own converter: which, how, and its log
        out["converted_by"] = {k: conv.get(k) for k in (
            "tool", "distribution", "version", "options", "command", "wall_s", "offline",
            "network_attempts", "log_tail")}  # fmt: skip
    return out


def build(
    record: dict[str, Any],
    runtime_info: dict[str, Any],
    report: StackReport | None = None,
    why: str | None = None,
) -> dict[str, Any]:
    """The four layers of one cell's record, and its effective numerics: the format and the
    runtime read here, the rest as the runtime's home reported them (``report``), or
    ``unavailable`` with ``why``."""
    fixture = record.get("fixture") or {}
    fmt = format_layer(fixture)
    runtime = {
        "row": record.get("runtime"),
        "distribution": runtime_info.get("distribution"),
        "version": (record.get("outcome") or {}).get("runtime_version")
        or runtime_info.get("version"),
    }
    return {
        "format": fmt,
        "runtime": runtime,
        **_reported(report, why or "the worker sent no stack report"),
    }


def _reported(report: StackReport | None, why: str) -> dict[str, Any]:
    if report is None:
        return {"backend": unavailable(why), "kernels": unavailable(why),
                "numerics": unavailable(why)}  # fmt: skip
    numerics = report.numerics.to_dict() | {"host_changed": report.numerics.host_changed()}
    return {"backend": report.backend or unavailable("the runtime's home reported no backend"),
            "kernels": report.kernels or unavailable("the runtime's home reported no kernels"),
            "numerics": numerics}  # fmt: skip
