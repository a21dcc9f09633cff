"""What the TVM rows ran (:func:`report`), from their own evidence: the compile target as the
library's manifest and the runtime say it (``-mcpu``, vector width), the schedule rules and how
many functions they scheduled, and the numerics the compiled module has (the model's own f32
kernels, as compiled; TVM picks no precision at run time). Nothing here imports TVM."""

from __future__ import annotations

from typing import Any

from rtmatrix.numerics import Fact, Numerics, StackReport, unavailable

_MANIFEST = "the TVM library's compile manifest"


def kernels(ev: dict[str, Any]) -> dict[str, Any]:
    manifest = ev.get("manifest") or {}
    c = manifest.get("compile")
    if not c:
        return unavailable("no compile manifest recorded")
    return {
        "source": _MANIFEST,
        "schedule_rules": c.get("schedule_rules"),
        "functions_scheduled": len(c.get("prim_funcs_scheduled") or []),
        "functions_unscheduled": c.get("prim_funcs_unscheduled"),
    }


def backend(ev: dict[str, Any]) -> dict[str, Any]:
    settings = ev.get("settings") or {}
    found = settings.get("effective")
    eff: dict[str, Any] = found if isinstance(found, dict) else {}
    out: dict[str, Any] = {k: eff[k] for k in ("target", "mcpu", "vector_width_bits") if k in eff}
    if isinstance(settings.get("asked"), dict):
        out["asked"] = settings["asked"]
    return out or unavailable("the row recorded no target")


def numerics(ev: dict[str, Any], dtype: str | None) -> Numerics:
    if dtype not in ("f32", None):
        return Numerics(devices=["cpu"], unavailable=f"TVM's {dtype} kernels: precision not read")
    matmul = Fact("f32", "the model's f32 matmul kernels, compiled for the target", _MANIFEST)
    kv = Fact("f32", "the model's f32 KV-cache tensors", _MANIFEST)
    return Numerics(devices=["cpu"], matmul=matmul, kv_cache=kv)


def report(ev: dict[str, Any], dtype: str | None) -> StackReport:
    return StackReport(backend=backend(ev), kernels=kernels(ev), numerics=numerics(ev, dtype))
