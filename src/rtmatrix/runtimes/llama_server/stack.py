"""What the llama-server row ran (:func:`report`): the server's own log lines read with the
llama.cpp home's readers (KV-cache types, attention path, model buffers), the tensor types from
the GGUF file. Nothing here imports a runtime or starts a process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rtmatrix.numerics import StackReport
from rtmatrix.runtimes.llama_cpp import stack as llama_stack


def as_llama_evidence(ev: dict[str, Any], lines: Sequence[str], kv_asked: dict[str, str]) -> Any:
    """The server's evidence in the shape the llama.cpp home reads (its ``settings``)."""
    kv = next(((m, ln) for ln in lines if (m := llama_stack.KV_LINE.search(ln))), None)
    fa = ev.get("flash_attn") or {}
    resolved = fa.get("resolved") if fa.get("resolved") in ("enabled", "disabled") else None
    buffers = {m.group(1): m.group(2) for ln in lines if (m := llama_stack.BUFFER_LINE.search(ln))}
    ebt = ev.get("extra_buffer_types") or {}
    return {
        "log_source": "llama-server's own log (its stderr)",
        "system_info": next((ln for ln in lines if "system_info" in ln), ""),
        "settings": {
            "requested": {"flash_attn": fa.get("requested")},
            "effective": {"flash_attn": fa.get("requested"), "flash_attn_resolved": resolved}
            if resolved
            else {"flash_attn": fa.get("requested")},
            "model_buffers": buffers,
            "extra_buffer_types": {
                "requested": ebt.get("requested", True),
                "extra_in_use": sorted(b for b in buffers if b not in ("CPU", "CPU_Mapped")),
            },
            "kv_cache": {
                "type_k": kv[0].group(1),
                "type_v": kv[0].group(2),
                "line": kv[1].strip(),
                "requested": kv_asked,
            }
            if kv
            else {
                "unavailable": "no KV-cache line in llama-server's log (it logs it from "
                "verbosity 4: server_args = ['--log-verbosity', '4'])"
            },
        },
    }


def report(
    ev: dict[str, Any], lines: Sequence[str], dtype: str | None, types: dict[str, int],
    kv_asked: dict[str, str],
) -> StackReport:  # fmt: skip
    return llama_stack.report(as_llama_evidence(ev, lines, kv_asked), dtype, types)
