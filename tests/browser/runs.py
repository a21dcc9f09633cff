"""Run records for report tests, built from the golden run plus made-up cells: no runtime needed.

``sample_run`` has three runtime rows: llama_cpp (quantizations, context depths, failing-model
variants, one runtime error whose message is a script tag), ``fakert`` (placement fallback,
debug facilities, an artifact manifest, a modelled power value) and ``onnxruntime`` (not
installed). ``upgraded_run`` is the same matrix on a newer llama_cpp with one regression.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from rtmatrix.results.records import RunRecord

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "run-v1.json"
XSS = "<script>alert(1)</script>"
UNAVAILABLE_POWER = "no energy source is wired in yet"


def golden() -> dict[str, Any]:
    run: dict[str, Any] = json.loads(GOLDEN.read_text("utf-8"))
    return run


def as_run(run: Mapping[str, Any]) -> RunRecord:
    """A run made up here (the golden run with made-up cells) as the report reads it."""
    return cast(RunRecord, run)


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
    ok["evidence"]["stack"] = {
        "format": {"container": "GGUF", "version": 3, "tensor_types": {"F32": 75}},
        "runtime": {"row": "fakert", "distribution": "fakert", "version": "1.0.0"},
        "backend": {"used": ["GPU"], "said": f"GPU0 {XSS}"},
        "kernels": {"matmul_kernels": {"GPU": {"MatMul": 73}}, "source": "fake"},
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
        },
        "stack": ok["evidence"]["stack"]
        | {
            "kernels": {
                "matmul_kernels": {"CPU": {"DequantizeLinear": 57, "MatMul": 73}},
                "fallback": True,
                "fallback_reason": "57 DequantizeLinear node(s)",
            }
        },
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


def sample_run() -> RunRecord:
    return as_run(_sample_run())


def _sample_run() -> dict[str, Any]:
    run = golden()
    base = run["cells"][0]
    run["run_id"] = "20261201T000000Z-sample"
    run["created_utc"] = "2026-12-01T00:00:00+00:00"
    run["runtimes"]["fakert"] = {
        "adapter": "tests.helpers.adapters:Fake",
        "distribution": "fakert",
        "version": "1.0.0",
        "extra": None,
        "container": "gguf",
    }
    run["runtimes"]["onnxruntime"] = {
        "adapter": "rtmatrix.runtimes.onnxruntime.adapter:OrtAdapter",
        "distribution": "onnxruntime",
        "version": None,
        "extra": "onnxruntime",
        "container": "onnx",
    }
    run["cells"] = _llama_cells(base) + _fakert_cells(base) + _onnx_cells(base)
    run["matrix"]["n_cells"] = len(run["cells"])
    return run


def upgraded_run() -> RunRecord:
    """The sample matrix on llama_cpp 0.3.40: slower TG on q8_0, a new failure on q4_0."""
    run = _sample_run()
    run["run_id"] = "20261202T000000Z-upgrade"
    run["created_utc"] = "2026-12-02T00:00:00+00:00"
    run["runtimes"]["llama_cpp"]["version"] = "0.3.40"
    for cell in run["cells"]:
        if cell["key"].startswith("llama_cpp|tiny/q8_0"):
            cell["metrics"]["tg_tps"] = _scale(cell["metrics"]["tg_tps"], 0.7)
        if cell["key"].startswith("llama_cpp|tiny/q4_0"):
            _failed(cell, "wrong-output", "parity broken: 0/24 tokens agree", "FAIL")
    return as_run(run)


# --- lifecycle scenario cells ---------------------------------------------------------------
# Their metrics come from the scenarios' own ``scenario_metrics`` on made-up scenario results, so
# a renamed metric breaks these tests rather than silently emptying the lifecycle panel.

LEAK_TOLERANCE = 1024 * 1024


def _scenario_cell(base: dict[str, Any], name: str, scenario: str, result: dict[str, Any]) -> Any:
    from rtmatrix.scenarios import scenario_metrics

    cell = _cell(base, "llama_cpp", "f32")
    cell["fixture"]["name"] = name
    cell["key"] = cell["key"].replace("tiny/f32", f"{name}/f32")
    kept = {k: m for k, m in cell["metrics"].items() if k.startswith(("package", "license"))}
    cell["metrics"] = kept | {k: m.to_dict() for k, m in scenario_metrics(scenario, result).items()}
    cell["parity"] = {"status": "unavailable", "reason": "no counted generation to compare"}
    failed = [c for c in result.get("checks", []) if not c["ok"]]
    if failed:
        cell["outcome"] |= {"status": "wrong-output", "message": f"check failed: {failed[0]}"}
        cell["verdict"] = "FAIL"
    return cell


def _trace(name: str, t0: float, n: int, terminal: str, **extra: Any) -> dict[str, Any]:
    toks = [t0 + 0.02 + 0.01 * i for i in range(n)]
    return {
        "name": name,
        "queued": t0,
        "prefill_start": t0 + 0.001,
        "first_token": toks[0] if toks else None,
        "tokens": toks,
        "terminal": terminal,
        "terminal_t": (toks[-1] if toks else t0) + 0.001,
        "released": (toks[-1] if toks else t0) + 0.002,
        **extra,
    }


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail}


def stream_result() -> dict[str, Any]:
    reps = [
        {
            "counted": True,
            "ttft_chunk_s": 0.030 + 0.002 * i,
            "first_token_s": 0.021 + 0.001 * i,
            "n_tokens": 24,
            "n_chunks": 24,
            "delivery_lag_max_s": 0.0004,
            "token_gaps": [0.010 + 0.0005 * j for j in range(23)],
            "chunk_gaps": [0.010 + 0.0004 * j for j in range(23)],
        }
        for i in range(3)
    ]
    return {
        "api": "Llama.create_completion(stream=True)",
        "max_tokens": 24,
        "reps": reps,
        "state_before": {"state_bytes": 17},
        "state_after_release": [{"state_bytes": 17}] * 3,
        "traces": [_trace(f"stream-{i}", i * 1.0, 24, "completed") for i in range(3)],
        "checks": [
            _check("stream_terminal_state", True, "3/3 request(s) reached a terminal state")
        ],
        "findings": ["the stream sampled no token beyond max_tokens"],
    }


def cancel_result(leak_close: bool = True) -> dict[str, Any]:
    modes = {}
    checks = []
    for mode, step in (("stop", 4096), ("close", 200_000 if leak_close else 1024)):
        cycles = [
            {
                "terminal": "cancelled",
                "counted": True,
                "to_last_token_s": 0.002,
                "stop_s": 0.004 + 0.0001 * c,
                "release_s": 0.005 + 0.0001 * c,
                "tokens_after": 1,
                "rss_during": 60_000_000 + step * c,
                "rss_after_close": 60_000_000 + step * c,
                "rss_after_release": 60_000_000 + step * c,
                "state_during": {"state_bytes": 140_000, "kv_tokens": 24},
                "state_after_close": {"state_bytes": 140_000, "kv_tokens": 24},
                "state_after_release": {"state_bytes": 17, "kv_tokens": 0},
            }
            for c in range(20)
        ]
        modes[mode] = {"cycles": cycles, "how": f"{mode} hook"}
        growth = step * 19
        checks += [
            _check(f"cancel_{mode}_took_effect", True, "20/20 generation(s) ended as cancelled"),
            _check(
                f"cancel_{mode}_rss_leak",
                growth <= LEAK_TOLERANCE,
                f"growth +{growth} bytes (tolerance {LEAK_TOLERANCE})",
            ),
        ]
    return {
        "api": "Llama.create_completion(stream=True) + StoppingCriteria",
        "k": 8,
        "leak_tolerance_bytes": float(LEAK_TOLERANCE),
        "modes": modes,
        "state_before": {"state_bytes": 17, "kv_tokens": 0},
        "rss_before": 58_000_000,
        "prefill": {
            "how": "llama_set_abort_callback",
            "prompt_tokens": 256,
            "uncancelled_s": 0.2,
            "attempts": [{"aborted": True, "latency_s": 0.0015, "flag_late_s": 0.0001}],
        },
        "traces": [
            _trace(
                f"{m}-{i}",
                i * 0.5,
                9,
                "cancelled",
                cancel_requested=i * 0.5 + 0.09,
                tokens_after_cancel=1,
            )
            for m in modes
            for i in range(4)
        ]
        + [{"name": "close-lost", "queued": 9.0, "tokens": [], "terminal": None}],
        "checks": checks,
        "findings": [
            "mode 'stop': the runtime held its context state until the harness released it"
        ],
    }


def serve_result() -> dict[str, Any]:
    levels = {
        str(n): [
            {
                "ttft_s": [0.02 * n + 0.005 * i for i in range(n)],
                "tpot_s": [0.008 + 0.001 * n] * n,
                "tokens": [24] * n,
                "wall_s": 0.3 + 0.1 * n,
                "errors": 1 if n == 4 and r == 0 else 0,
                "terminal": ["completed"] * n,
            }
            for r in range(3)
        ]
        for n in (1, 2, 4)
    }
    return {
        "api": "llama_cpp.server (OpenAI-compatible /v1/completions)",
        "startup_s": 1.3,
        "endpoints": {"/health": 404, "/metrics": 404},
        "levels": levels,
        "disconnect": {
            "next": {"terminal": "completed", "ttft_s": 0.007, "tokens": 24},
            "abandoned_max_tokens": 376,
            "server_logged_disconnect": True,
        },
        "slow": {
            "delay_s": 0.05,
            "slow": {"duration_s": 0.9, "terminal": "completed"},
            "behind": {"terminal": "completed", "ttft_s": 0.027, "tokens": 24},
        },
        "malformed": {
            "invalid-json": {"status": 500, "body": "Internal Server Error"},
            "wrong-types": {"status": 422, "body": "validation error"},
            "over-context": {"status": 200, "detail": "the stream ended without [DONE]"},
        },
        "survival": {"ok": True, "alive": True},
        "rss_start": 81_000_000,
        "rss_after_abuse": 89_000_000,
        "traces": [_trace(f"c1-r{i}", i * 1.0, 24, "completed") for i in range(3)],
        "checks": [_check("serve_survived", True, "the server answered after the abuse")],
        "findings": ["no /health endpoint (GET /health: 404)"],
    }


def lifecycle_run() -> RunRecord:
    """llama_cpp stream, cancel (the close mode leaks past its tolerance: FAIL) and serve cells,
    one plain cell, and a serve cell on fakert that was unavailable before measuring."""
    run = golden()
    base = run["cells"][0]
    run["run_id"] = "20261203T000000Z-lifecycle"
    run["runtimes"]["fakert"] = {
        "adapter": "tests.helpers.adapters:Fake",
        "distribution": "fakert",
        "version": "1.0.0",
        "extra": None,
        "container": "gguf",
    }
    gone = _cell(base, "fakert", "f32")
    gone["fixture"]["name"] = "tiny-serve"
    gone["key"] = gone["key"].replace("tiny/f32", "tiny-serve/f32")
    gone["outcome"] = {
        "status": "unavailable",
        "phase": "scenario",
        "exit_code": 0,
        "signal": None,
        "message": "scenario 'serve': runtime 'fakert' does not offer the Serving capability "
        "(rtmatrix.adapters.capabilities.Serving: server_driver())",
    }
    gone["verdict"] = "unavailable"
    gone["metrics"] = {}
    gone["scenario"] = "serve"  # every cell records its scenario
    run["cells"] = [
        _cell(base, "llama_cpp", "f32"),
        _scenario_cell(base, "tiny-stream", "stream", stream_result()),
        _scenario_cell(base, "tiny-cancel", "cancel", cancel_result()),
        _scenario_cell(base, "tiny-serve", "serve", serve_result()),
        gone,
    ]
    run["matrix"]["n_cells"] = len(run["cells"])
    return as_run(run)


# --- partition cells ------------------------------------------------------------------------
# evidence.partitions as rtmatrix.metrics.partitions.summarize writes it (trimmed from a real
# onnxruntime-openvino run), and a placement-only delegate cell as the plain ORT adapter writes.

OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"


def _partitions(delegate: bool, every_layer: bool) -> dict[str, Any]:
    n_parts = 5 if delegate and every_layer else 1
    per: list[dict[str, Any]] = []
    for i in range(n_parts):
        ep = OV if delegate and i % 2 == 0 else CPU
        per.append(
            {
                "id": f"P{i}",
                "ep": ep,
                "subgraph": f"OpenVINO-EP-subgraph_{i // 2 + 1}" if ep == OV else None,
                "nodes": 40 if ep == OV else 1,
                "ops": {"MatMul": 8, "Mul": 6} if ep == OV else {"RotaryEmbedding": 1},
                "first_node": f"n{i}",
                "last_node": f"n{i}x",
                "in_bytes": {
                    "prefill": {"from_partitions": 131072 * (i > 0), "from_graph_inputs": 64},
                    "decode": {"from_partitions": 1024 * (i > 0), "from_graph_inputs": 8},
                },
                "out_bytes": {
                    "prefill": {"to_partitions": 131072, "to_graph_outputs": 0},
                    "decode": {"to_partitions": 1024, "to_graph_outputs": 0},
                },
                "time_us": {"prefill": 900.0 if ep == OV else 50.0, "decode": 90.0},
            }
        )
    nodes = sum(p["nodes"] for p in per)
    on = sum(p["nodes"] for p in per if p["ep"] == OV)
    crossings = n_parts - 1
    run_pre = sum(p["time_us"]["prefill"] for p in per)
    on_pre = sum(p["time_us"]["prefill"] for p in per if p["ep"] == OV)
    return {
        "role": "delegate" if delegate else "control",
        "delegate": OV if delegate else None,
        "partitions": n_parts,
        "delegate_partitions": sum(1 for p in per if p["ep"] == OV),
        "coverage": {
            "nodes_total": nodes,
            "nodes_on_delegate": on,
            "pct": round(100 * on / nodes, 2),
        },
        "nodes_by_ep": {OV: on, CPU: nodes - on} if delegate else {CPU: nodes},
        "tokens": {"prefill": 128, "decode": 1},
        "boundary_tensors": crossings,
        "crossings": crossings,
        "boundary_bytes": {"prefill": 131072 * crossings, "decode": 1024 * crossings},
        "boundary_bytes_per_token": {"prefill": 1024.0 * crossings, "decode": 1024.0 * crossings},
        "graph_io_bytes": {"prefill": 2_600_000, "decode": 4_200_000},
        "per_partition": per,
        "tensors": [
            {
                "tensor": f"blk.{i}.k.matmul",
                "from": f"P{i}",
                "to": [f"P{i + 1}"],
                "dtype": "float32",
                "shape": {"prefill": [1, 128, 256], "decode": [1, 1, 256]},
                "bytes": {"prefill": 131072, "decode": 1024},
                "bytes_per_token": {"prefill": 1024.0, "decode": 1024.0},
            }
            for i in range(crossings)
        ],
        "time_us": {
            "prefill": {
                "in_partitions": run_pre,
                "run": run_pre + 100.0,
                "outside_partitions": 100.0,
            }
            | ({"on_delegate": on_pre} if delegate else {}),
            "decode": {"in_partitions": 90.0 * n_parts, "run": 90.0 * n_parts + 20.0}
            | ({"on_delegate": 90.0 * ((n_parts + 1) // 2)} if delegate else {}),
        },
        "sources": {"time": "profiling JSON", "shapes": "measured", "assignment": "EP API"},
    }


def _ort_cell(
    base: dict[str, Any], runtime: str, variant: str | None, speed: float, providers: list[str]
) -> dict[str, Any]:
    cell = _cell(base, runtime, "f32", variant=variant, speed=speed)
    if variant:
        cell["expect"] = "ok"
        cell["fixture"]["name"] = f"tiny-{variant}"
        cell["key"] = cell["key"].replace(f"tiny/f32+{variant}", f"tiny-{variant}/f32")
    delegate = providers[0] != CPU
    cell["evidence"] = {
        "placement": {
            "requested": providers,
            "used": providers,
            "fallback": False,
            "nodes_by_provider": {OV: 120, CPU: 2} if delegate else {CPU: 122},
            "partitions": 5 if delegate and variant else 1,
            "source": "ep-graph-assignment-api",
        },
        "partitions": _partitions(delegate, bool(variant)),
    }
    return cell


def partition_run() -> RunRecord:
    """ort_ov (OpenVINO EP first) against ort_cpu (CPU EP only) on the clean and the
    every-layer fixture (the delegate is slower there), plus a placement-only delegate cell
    without evidence.partitions and without a control."""
    run = golden()
    base = run["cells"][0]
    run["run_id"] = "20261204T000000Z-partitions"
    run["runtimes"] = {
        name: {
            "adapter": "rtmatrix.runtimes.onnxruntime_openvino.adapter:OrtOpenVinoAdapter",
            "distribution": "onnxruntime-openvino",
            "version": "1.24.1",
            "extra": "onnxruntime-openvino",
            "container": "onnx",
        }
        for name in ("ort_ov", "ort_cpu")
    }
    every = "partition-every-layer"
    lonely = _ort_cell(base, "ort_ov", "partition-end", 1.0, [OV, CPU])
    del lonely["evidence"]["partitions"]
    run["cells"] = [
        _ort_cell(base, "ort_ov", None, 1.3, [OV, CPU]),
        _ort_cell(base, "ort_ov", every, 0.6, [OV, CPU]),
        lonely,
        _ort_cell(base, "ort_cpu", None, 1.0, [CPU]),
        _ort_cell(base, "ort_cpu", every, 1.0, [CPU]),
    ]
    run["matrix"]["n_cells"] = len(run["cells"])
    return as_run(run)


# --- history: several runs of one matrix with five runtime rows ----------------------------
# What `rtmatrix run` records now (contended, host_busy_cores, leaked_processes, verdict_reason,
# expect_kind, error_kind) and soon (reference-tool figures and ratios for llama.cpp cells).

HISTORY_MATRIX = "matrix/default.toml"
FIVE_ROWS = {
    # name: (distribution, versions per run, container, PP speed, noise as a fraction)
    "llama_cpp": ("llama-cpp-python", ("0.3.36", "0.3.36", "0.3.40"), "gguf", 1.0, 0.01),
    "onnxruntime": ("onnxruntime", ("1.22.0",) * 3, "onnx", 0.8, 0.01),
    "onnxruntime_genai": ("onnxruntime-genai", ("0.8.0",) * 3, "onnx", 0.99, 0.01),
    "tvm_aot": ("apache-tvm", ("0.27.0",) * 3, "tvm", 0.6, 0.08),
    "tvm_jit": ("apache-tvm", ("0.27.0",) * 3, "tvm", 0.585, 0.01),
}
CONTENDED_CORES = 1.4
LEAKED_PID = 4242


def _noisy(metric: dict[str, Any], median: float, cv: float, seed: int, n: int = 5) -> None:
    """Give ``metric`` ``n`` samples around ``median`` with coefficient of variation ``cv``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    samples = [float(x) for x in median * (1.0 + cv * rng.standard_normal(n))]
    metric["samples"] = samples
    arr = np.asarray(samples)
    metric["value"] = float(np.median(arr))
    metric["stats"] = {
        "n": n,
        "mean": float(arr.mean()),
        "sd": float(arr.std(ddof=1)),
        "median": float(np.median(arr)),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }


def _busy(cell: dict[str, Any], cores: float) -> None:
    contended = cores > 0.25
    cell["contended"] = contended
    cell["metrics"]["host_busy_cores"] = {
        "value": cores,
        "unit": "cores",
        "source": "os-accounting",
        "method": "system-wide CPU time minus the cell's tree and rtmatrix's parent, per second",
        "contended": contended,
        "threshold_cores": 0.25,
        "steal_cores": 0.0,
    }
    cell["metrics"]["host_steal_cores"] = {"value": 0.0, "unit": "cores", "source": "os-accounting"}
    cell["evidence"]["leaked_processes"] = []
    cell["evidence"]["process_tracking"] = {
        "nets": ["process-group", "env-marker"],
        "seen": 2,
        "cgroup_unavailable": "no writable cgroup v2 hierarchy",
    }


def _figures(cell: dict[str, Any], speed: float, cv: float, seed: int) -> None:
    m = cell["metrics"]
    _noisy(m["pp_tps"], 3000.0 * speed, cv, seed)
    _noisy(m["tg_tps"], 800.0 * speed, cv, seed + 1)
    _noisy(m["ttft_s"], 0.005 / speed, cv, seed + 2)
    _noisy(m["tpot_s"], 0.00125 / speed, cv, seed + 3)


def _reference(cell: dict[str, Any]) -> None:
    """llama-bench's figures for the cell and rtmatrix ÷ llama-bench (issue 14)."""
    m = cell["metrics"]
    for key, own in (("pp", m["pp_tps"]["value"]), ("tg", m["tg_tps"]["value"])):
        ref = own / (0.86 if key == "pp" else 0.80)
        m[f"{key}_tps_reference"] = {
            "value": ref,
            "unit": "tokens/s",
            "source": "reference-tool",
            "tool": "llama-bench",
            "tool_version": "b6000",
            "command": f"llama-bench -m model.gguf -t 2 -p 128 -n 64 -fa 0 -o json ({XSS})",
        }
        m[f"{key}_reference_ratio"] = {  # as runner.record.reference_metrics writes it
            "value": own / ref,
            "unit": "ratio",
            "source": "harness-clock",
            "method": f"{key}_tps median / {key}_tps_reference median",
        }


def _history_cells(base: dict[str, Any], run: int) -> list[dict[str, Any]]:
    cells = []
    for ri, (name, (_, _, container, speed, cv)) in enumerate(FIVE_ROWS.items()):
        cell = _cell(base, name, "f32", speed=speed)
        cell["fixture"]["container"] = container
        _busy(cell, 0.05)
        _figures(cell, speed, cv, seed=100 * run + 10 * ri)
        cells.append(cell)
    return cells


def _llama_extras(base: dict[str, Any], run: int) -> list[dict[str, Any]]:
    q8 = _cell(base, "llama_cpp", "q8_0", speed=1.4, memory=0.6)
    _busy(q8, 0.05)
    _figures(q8, 1.4, 0.01, seed=100 * run + 7)
    if run == 2:  # the newer llama.cpp decodes q8_0 30 % slower
        _noisy(q8["metrics"]["tg_tps"], 800.0 * 1.4 * 0.7, 0.01, seed=100 * run + 8)
    bad = _cell(base, "llama_cpp", "f32", variant="truncated")
    bad["expect"] = "error"
    bad["expect_kind"] = ["bad-file"]
    _failed(bad, "error", "gguf_init_from_file: failed to read tensor info", "PASS")
    bad["outcome"]["error_kind"] = "bad-file"
    _busy(bad, 0.05)
    if run == 2:  # fails for another reason now: WARN, and the reason says why
        msg = "llama_model_load: unexpected end of file"
        bad["outcome"] |= {"message": msg, "error_kind": "unclassified"}
        bad["verdict"] = "WARN"
        bad["verdict_reason"] = (
            "failed, but not for the expected reason: expected bad-file, got unclassified: " + msg
        )
    return [q8, bad]


def _newest(cells: list[dict[str, Any]]) -> None:
    """The newest run: references for llama.cpp, onnxruntime contended, tvm_jit leaked."""
    for cell in cells:
        if cell["runtime"] == "llama_cpp" and cell["expect"] == "ok":
            _reference(cell)
        if cell["runtime"] == "onnxruntime":
            _busy(cell, CONTENDED_CORES)
            _figures(cell, 0.8 * 0.5, 0.05, seed=999)  # half speed while the host was busy
        if cell["runtime"] == "tvm_jit":
            cell["evidence"]["leaked_processes"] = [
                {
                    "pid": LEAKED_PID,
                    "cmdline": ["python", "-c", "import time; time.sleep(600)", XSS],
                    "create_time": 1.7e9,
                    "found_at": "cell-end",
                    "found_by": "env-marker",
                    "killed": True,
                }
            ]
            cell["verdict"] = "WARN"
            cell["verdict_reason"] = f"1 process(es) outlived the cell: {LEAKED_PID}"


def history_run(run: int) -> RunRecord:
    """Run ``run`` (0, 1, 2) of one matrix on five runtime rows; llama.cpp 0.3.40 in run 2."""
    rec = golden()
    base = rec["cells"][0]
    rec["run_id"] = f"2026120{1 + 4 * run}T000000Z-history{run}"
    rec["created_utc"] = f"2026-12-0{1 + 4 * run}T00:00:00+00:00"
    rec["matrix"]["path"] = HISTORY_MATRIX
    rec["runtimes"] = {
        name: {
            "adapter": f"rtmatrix.runtimes.{name}.adapter:Adapter",
            "distribution": dist,
            "version": versions[run],
            "extra": name,
            "container": container,
        }
        for name, (dist, versions, container, _, _) in FIVE_ROWS.items()
    }
    rec["cells"] = _history_cells(base, run) + _llama_extras(base, run)
    if run == 2:
        _newest(rec["cells"])
    rec["matrix"]["n_cells"] = len(rec["cells"])
    return as_run(rec)


def history_runs() -> list[RunRecord]:
    return [history_run(i) for i in range(3)]
