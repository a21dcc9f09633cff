"""OpenVINO's own ``benchmark_app`` as the openvino row's reference tool.

The model is a stateless decoder (explicit ``past_key_values.*`` inputs), so one benchmark run
is one fixed shape: ``-shape`` names every input (the prompt's ids on an empty cache for PP;
one id on a cache of the prompt's length for TG), ``-hint none`` so ``-nthreads`` and
``-nstreams`` are taken, one synchronous request, inputs filled by the tool (random ids and
cache values: the cost of a step does not depend on them). Its JSON report's median latency
gives tokens/s. What it leaves out, the harness's figure includes: the cache growing over the
decode, the present -> past copies and the host-side argmax.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rtmatrix.protocol import JobParams

TOOL = "benchmark_app"
_FIXED = ("input_ids", "attention_mask", "position_ids")


class BenchmarkUnavailable(RuntimeError):
    """benchmark_app cannot run here; the message says why."""


def tool_path() -> Path:
    """``benchmark_app`` beside this Python (the wheel's console script), else on PATH."""
    beside = Path(sys.executable).with_name(TOOL)
    if beside.is_file():
        return beside
    found = shutil.which(TOOL)
    if found is None:
        msg = f"{TOOL} is not installed beside {sys.executable} or on PATH (openvino ships it)"
        raise BenchmarkUnavailable(msg)
    return Path(found)


def shape_arg(inputs: list[tuple[str, int, int]], present: set[str], n_new: int, past: int) -> str:
    """``-shape`` for every input: ``inputs`` are (past input name, kv heads, head dim)."""
    parts = [f"input_ids[1,{n_new}]"]
    if "attention_mask" in present:
        parts.append(f"attention_mask[1,{n_new + past}]")
    if "position_ids" in present:
        parts.append(f"position_ids[1,{n_new}]")
    parts += [f"{name}[1,{kv},{past},{dim}]" for name, kv, dim in inputs]
    return ",".join(parts)


def _inputs(onnx: Path) -> tuple[list[tuple[str, int, int]], set[str]]:
    import openvino as ov

    model = ov.Core().read_model(str(onnx))
    names = {p.get_any_name() for p in model.inputs}
    past = []
    for p in model.inputs:
        name, shape = p.get_any_name(), p.get_partial_shape()
        if name in _FIXED:
            continue
        if len(shape) != 4 or shape[1].is_dynamic or shape[3].is_dynamic:
            msg = f"input {name!r} {shape} is not a KV-cache input with static heads/head dim"
            raise BenchmarkUnavailable(msg)
        past.append((name, shape[1].get_length(), shape[3].get_length()))
    return past, names


def parse_report(path: Path) -> dict[str, Any]:
    """``benchmark_report.json``'s execution results (values as the tool writes them)."""
    try:
        data = json.loads(path.read_text("utf-8"))
        results: dict[str, Any] = data["execution_results"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = f"{TOOL} wrote no readable report at {path}: {exc}"
        raise BenchmarkUnavailable(msg) from exc
    if "latency (ms)" not in results:
        msg = f"{TOOL}'s report has no 'latency (ms)' (keys: {sorted(results)})"
        raise BenchmarkUnavailable(msg)
    return results


def _one(cmd: list[str], report: Path, timeout_s: float) -> dict[str, Any]:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = f"{TOOL} did not finish: {exc}"
        raise BenchmarkUnavailable(msg) from exc
    if out.returncode != 0:
        msg = f"{TOOL} exited {out.returncode}: {(out.stdout + out.stderr)[-1500:]}"
        raise BenchmarkUnavailable(msg)
    return parse_report(report / "benchmark_report.json")


def run(model_path: Path, params: JobParams, options: dict[str, Any]) -> dict[str, Any]:
    """PP and TG tokens/s from benchmark_app at the cell's shapes, with the evidence."""
    import openvino as ov

    onnx = model_path / "model.onnx" if model_path.is_dir() else model_path
    tool = tool_path()
    past, present = _inputs(onnx)
    seconds = max(2, params.repetitions)
    device = str(options.get("device", "CPU"))
    prompt = params.prompt_tokens
    shapes = {"pp": (prompt, 0), "tg": (1, prompt)}
    out: dict[str, Any] = {}
    evidence: dict[str, Any] = {"tool": TOOL, "tool_version": str(ov.__version__),
                                "commands": [], "phases": {}}  # fmt: skip
    for phase, (n_new, n_past) in shapes.items():
        with tempfile.TemporaryDirectory(prefix="rtmatrix-ovbench-") as tmp:
            cmd = [
                str(tool), "-m", str(onnx), "-d", device, "-hint", "none",
                "-nthreads", str(params.threads), "-nstreams", "1", "-nireq", "1",
                "-api", "sync", "-shape", shape_arg(past, present, n_new, n_past),
                "-t", str(seconds), "-report_type", "no_counters", "-report_folder", tmp,
                "-json_stats",
            ]  # fmt: skip
            res = _one(cmd, Path(tmp), timeout_s=120.0 + 4 * seconds)
        latency_ms = float(res["latency (ms)"])
        out[f"{phase}_tps"] = [n_new * 1000.0 / latency_ms]
        evidence["commands"].append(shlex.join(cmd))
        evidence["phases"][phase] = {"new_ids": n_new, "cache": n_past} | {
            k: res[k] for k in ("latency (ms)", "avg latency", "min latency", "max latency",
                                "total number of iterations", "compile model time (ms)",
                                "first inference time (ms)") if k in res
        }  # fmt: skip
    evidence["command"] = " && ".join(evidence["commands"])
    evidence["method"] = ("tokens/s from the median latency of one fixed-shape inference "
                          "(TG: one id on a cache of prompt_tokens; the harness's decode grows "
                          "the cache)")  # fmt: skip
    evidence["settings"] = {"threads": params.threads, "streams": 1, "requests": 1,
                            "api": "sync", "hint": "none", "device": device,
                            "seconds_per_phase": seconds}  # fmt: skip
    return out | {"evidence": evidence}
