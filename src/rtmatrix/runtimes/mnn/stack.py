"""What the MNN row ran (:func:`report`), from its own evidence: the converter's flags and
output, and whether a quantized file's weights were folded back to f32 by the converter (a
kernel-level fallback: the converted file is more than twice the source). MNN's module API
names no kernel and reports no precision: said. Nothing here imports MNN."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rtmatrix.numerics import QUANTIZED, Numerics, StackReport, unavailable


def kernels(ev: dict[str, Any], dtype: str | None, source_bytes: int | None) -> dict[str, Any]:
    conv = ev.get("conversion") or {}
    out: dict[str, Any] = unavailable("MNN's module API names no kernel")
    size = conv.get("size_bytes")
    if dtype in QUANTIZED and size and source_bytes and size > 2 * source_bytes:
        out |= {
            "fallback": True,
            "fallback_reason": f"MNN's converter wrote {size} bytes from a {source_bytes}-byte "
            f"{dtype} file: the quantized weights were folded back to f32",
        }
    return out


def source_size(model_path: Path) -> int | None:
    """Bytes of the file (or folder) the converter read."""
    try:
        if model_path.is_dir():
            return sum(p.stat().st_size for p in model_path.rglob("*") if p.is_file())
        return model_path.stat().st_size
    except OSError:
        return None


def report(ev: dict[str, Any], dtype: str | None, source_bytes: int | None) -> StackReport:
    asked = (ev.get("settings") or {}).get("asked") or {}
    num = Numerics(devices=["cpu"], unavailable=f"MNN's module API reports no precision (asked: "
                   f"{asked or 'MNN defaults'})")  # fmt: skip
    return StackReport(backend={"asked": asked} if asked else unavailable("no settings"),
                       kernels=kernels(ev, dtype, source_bytes), numerics=num)  # fmt: skip
