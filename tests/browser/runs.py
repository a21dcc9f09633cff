"""Run records for report tests, built from the golden run plus made-up cells: no runtime needed.

``sample_run`` has three runtime rows: llama_cpp (quantizations, context depths, failing-model
variants, one runtime error whose message is a script tag), ``fakert`` (placement fallback,
debug facilities, an artifact manifest, a modelled power value) and ``onnxruntime`` (not
installed). ``upgraded_run`` is the same matrix on a newer llama_cpp with one regression.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"
XSS = "<script>alert(1)</script>"
UNAVAILABLE_POWER = "no energy source is wired in yet"


def golden() -> dict[str, Any]:
    run: dict[str, Any] = json.loads(GOLDEN.read_text("utf-8"))
    return run


def _scale(metric: dict[str, Any], factor: float) -> dict[str, Any]:
    out = copy.deepcopy(metric)
    if isinstance(out.get("value"), int | float) and not isinstance(out["value"], bool):
        out["value"] = out["value"] * factor
        if "samples" in out:
            out["samples"] = [s * factor for s in out["samples"]]
        if "stats" in out:
            out["stats"] = {k: (v if k == "n" else v * factor) for k, v in out["stats"].items()}
    return out


def _cell(
    base: dict[str, Any],
    runtime: str,
    dtype: str,
    *,
    variant: str | None = None,
    params: dict[str, int] | None = None,
    speed: float = 1.0,
    memory: float = 1.0,
) -> dict[str, Any]:
    cell = copy.deepcopy(base)
    p = {**cell["params"], **(params or {})}
    cell["params"] = p
    cell["runtime"] = runtime
    fx = cell["fixture"]
    fx["dtype"], fx["variant"] = dtype, variant
    fx["sha256"] = f"{dtype}{variant or ''}".ljust(64, "0")[:64]
    name = f"tiny/{dtype}" + (f"+{variant}" if variant else "")
    tag = f"t{p['threads']}-c{p['n_ctx']}-p{p['prompt_tokens']}-g{p['gen_tokens']}"
    cell["key"] = f"{runtime}|{name}|{tag}"
    for k, m in cell["metrics"].items():
        if k.endswith("_tps") or k.endswith("_tps_counter"):
            cell["metrics"][k] = _scale(m, speed)
        elif k.startswith(("ttft", "tpot", "token_latency")):
            cell["metrics"][k] = _scale(m, 1 / speed)
        elif k.startswith("peak_rss"):
            cell["metrics"][k] = _scale(m, memory)
    return cell


def _failed(cell: dict[str, Any], status: str, message: str, verdict: str) -> dict[str, Any]:
    cell["outcome"] = {
        "status": status,
        "phase": "load",
        "exit_code": 1,
        "signal": None,
        "message": message,
    }
    cell["verdict"] = verdict
    cell["parity"] = {"status": "unavailable", "reason": f"cell outcome is {status}"}
    why = f"the cell ended with outcome {status} before generating"
    for k, m in cell["metrics"].items():
        if k.startswith(
            ("pp_", "tg_", "ttft", "tpot", "token_latency", "cold_start_first", "cold_start_total")
        ):
            cell["metrics"][k] = {
                "value": None,
                "unit": m["unit"],
                "source": "unavailable",
                "reason": why,
            }
    return cell


def _llama_cells(base: dict[str, Any], speed: float = 1.0) -> list[dict[str, Any]]:
    cells = [
        _cell(base, "llama_cpp", "f32", speed=speed),
        _cell(base, "llama_cpp", "q8_0", speed=speed * 1.4, memory=0.6),
        _cell(base, "llama_cpp", "q4_0", speed=speed * 1.7, memory=0.45),
        _cell(
            base,
            "llama_cpp",
            "f32",
            params={"n_ctx": 512, "prompt_tokens": 64},
            speed=speed * 0.8,
            memory=1.2,
        ),
        _cell(
            base,
            "llama_cpp",
            "f32",
            params={"n_ctx": 1024, "prompt_tokens": 256},
            speed=speed * 0.55,
            memory=1.6,
        ),
    ]
    q8 = cells[1]
    q8["parity"] |= {
        "tokens_agree": 3,
        "first_divergence": 3,
        "all_tokens_agree": False,
        "max_abs_logit_err": 0.08,
        "logit_tolerance": 0.25,
    }
    err = _cell(base, "llama_cpp", "f32", variant="nan-weights")
    err["expect"] = "error"
    cells.append(_failed(err, "error", f"llama_decode failed: {XSS}", "PASS"))
    crash = _cell(base, "llama_cpp", "f32", variant="truncated")
    crash["expect"] = "error"
    _failed(crash, "crash", "worker killed by SIGSEGV during phase 'load'", "WARN")
    crash["outcome"] |= {"signal": "SIGSEGV", "exit_code": -11}
    crash["evidence"]["stderr_tail"] = f"gguf_init: tensor data out of bounds\n{XSS}\nSegfault"
    crash["evidence"]["traceback_tail"] = "Fatal Python error: Segmentation fault"
    cells.append(crash)
    return cells


def _fakert_cells(base: dict[str, Any]) -> list[dict[str, Any]]:
    ok = _cell(base, "fakert", "f32", speed=0.7, memory=1.3)
    ok["outcome"]["runtime_version"] = "1.0.0"
    ok["metrics"]["power_w"] = {
        "value": 3.5,
        "unit": "W",
        "source": "modelled",
        "method": "TDP share by CPU time",
    }
    ok["metrics"]["license"] = {"value": "Apache-2.0", "unit": "text", "source": "package-metadata"}
    ok["evidence"] = {
        "debug_facilities": {"verbose_log": True, "profiler": "chrome-trace", "dump_ir": False},
        "devices": [{"name": "CPU", "description": "test CPU"}, {"name": "GPU0"}],
        "placement": {"requested": ["GPU"], "used": ["GPU"], "fallback": False},
        "manifest": {
            "compiler": {"name": "fakec", "version": "2.1"},
            "target": "x86_64-avx2",
            "artifacts": [{"file": "model.so", "sha256": "ab" * 32}],
        },
        "stderr_tail": "",
    }
    fb = _cell(base, "fakert", "q8_0", speed=0.5)
    fb["outcome"] |= {
        "status": "fallback",
        "message": "ran, but not where asked: requested ['GPU'], used ['CPU']",
    }
    fb["verdict"] = "FAIL"
    fb["evidence"] = ok["evidence"] | {
        "placement": {
            "requested": ["GPU"],
            "used": ["CPU"],
            "fallback": True,
            "detail": "op MatMulNBits has no GPU kernel",
        }
    }
    return [ok, fb]


def _onnx_cells(base: dict[str, Any]) -> list[dict[str, Any]]:
    cell = _cell(base, "onnxruntime", "f32")
    cell["outcome"] = {
        "status": "unavailable",
        "phase": "import",
        "exit_code": 0,
        "signal": None,
        "message": "No module named 'onnxruntime'",
        "fix": "pip install 'rtmatrix[onnxruntime]'",
    }
    cell["verdict"] = "unavailable"
    cell["parity"] = {"status": "unavailable", "reason": "cell outcome is unavailable"}
    why = "onnxruntime is not installed"
    cell["metrics"] = {
        k: {"value": None, "unit": m["unit"], "source": "unavailable", "reason": why}
        for k, m in cell["metrics"].items()
    }
    cell["evidence"] = {"stderr_tail": "ModuleNotFoundError: No module named 'onnxruntime'"}
    return [cell]


def sample_run() -> dict[str, Any]:
    run = golden()
    base = run["cells"][0]
    run["run_id"] = "20261201T000000Z-sample"
    run["runtimes"]["fakert"] = {
        "adapter": "tests.helpers.adapters:Fake",
        "distribution": "fakert",
        "version": "1.0.0",
        "extra": None,
        "container": "gguf",
    }
    run["runtimes"]["onnxruntime"] = {
        "adapter": "rtmatrix.adapters.onnxruntime:OrtAdapter",
        "distribution": "onnxruntime",
        "version": None,
        "extra": "onnxruntime",
        "container": "onnx",
    }
    run["cells"] = _llama_cells(base) + _fakert_cells(base) + _onnx_cells(base)
    run["matrix"]["n_cells"] = len(run["cells"])
    return run


def upgraded_run() -> dict[str, Any]:
    """The sample matrix on llama_cpp 0.3.40: slower TG on q8_0, a new failure on q4_0."""
    run = sample_run()
    run["run_id"] = "20261202T000000Z-upgrade"
    run["runtimes"]["llama_cpp"]["version"] = "0.3.40"
    for cell in run["cells"]:
        if cell["key"].startswith("llama_cpp|tiny/q8_0"):
            cell["metrics"]["tg_tps"] = _scale(cell["metrics"]["tg_tps"], 0.7)
        if cell["key"].startswith("llama_cpp|tiny/q4_0"):
            _failed(cell, "wrong-output", "parity broken: 0/24 tokens agree", "FAIL")
    return run
