"""The parent process never imports a runtime (issue 13): a matrix with int8 ONNX (built and
judged with ORT's quantizer), TVM (compiled) and llama.cpp cells runs through
``rtmatrix.runner`` in a fresh interpreter, with a fresh fixture cache so every fixture and
reference is really built there; afterwards none of the runtimes is in that interpreter's
``sys.modules``. A fresh interpreter, because this test process imports runtimes elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

RUNTIMES = ("llama_cpp", "onnxruntime", "onnxruntime_genai", "tvm", "openvino")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        any(find_spec(m) is None for m in RUNTIMES),
        reason=f"needs every runtime installed: {', '.join(RUNTIMES)}",
    ),
]

MATRIX = """
[run]
repetitions = 1
warmup = 0
timeout_s = 300

[params]
threads = 1
n_ctx = 64
prompt_tokens = 8
gen_tokens = 4

[[runtimes]]
name = "llama_cpp"
options = { extra_buffer_types = false }  # known to work on any host (issue 24)

[[runtimes]]
name = "onnxruntime"

[[runtimes]]
name = "onnxruntime_genai"

[[runtimes]]
name = "tvm_aot"
adapter = "tvm"
options = { mode = "aot" }

[[runtimes]]
name = "openvino"

[[fixtures]]
model = "tiny"
dtypes = ["f32", "q8_0", "int8"]
"""

# what the parent runs: the runner and nothing else, then a report of what it imported
SCRIPT = """
import json, sys
from pathlib import Path
from rtmatrix.matrix import load_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix

matrix, results, cwd, runtimes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
path = run_matrix(load_matrix(Path(matrix)), Path(results), progress=lambda _: None, cwd=Path(cwd))
rec = load_run(path)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in runtimes)
cells = [
    {"runtime": c["runtime"], "dtype": c["fixture"]["dtype"], "status": c["outcome"]["status"],
     "message": c["outcome"].get("message"), "parity": c["parity"]["status"]}
    for c in rec["cells"]
]
print(json.dumps({"loaded": loaded, "cells": cells}))
"""


def run_parent(tmp_path: Path, repo: Path) -> dict[str, Any]:
    (tmp_path / "m.toml").write_text(MATRIX, "utf-8")
    env = dict(os.environ, RTMATRIX_CACHE_DIR=str(tmp_path / "cache"))  # nothing cached
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(tmp_path / "m.toml"),
            str(tmp_path / "results"),
            str(repo),
            ",".join(RUNTIMES),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
        cwd=repo,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_a_run_with_int8_onnx_tvm_and_llama_cpp_imports_no_runtime(
    tmp_path: Path, repo: Path
) -> None:
    out = run_parent(tmp_path, repo)
    got = {(c["runtime"], c["dtype"]): c for c in out["cells"]}
    # every cell really ran (so the quantizer, the TVM compiler and the references were used)
    assert set(got) == {
        ("llama_cpp", "f32"),
        ("llama_cpp", "q8_0"),
        ("onnxruntime", "f32"),
        ("onnxruntime", "int8"),
        ("onnxruntime_genai", "f32"),
        ("onnxruntime_genai", "int8"),
        ("tvm_aot", "f32"),
        ("openvino", "f32"),
        ("openvino", "int8"),
    }
    for key, c in got.items():
        # which kernels run a quantized file is the host's (an int8 FullyConnected where the
        # CPU has the instructions, f32 with decompressed weights elsewhere): either is a cell
        # that ran, the second one marked as a kernel-level fallback
        ran = c["status"] == "ok" or (
            c["status"] == "fallback" and str(c["message"]).startswith("kernel-level fallback")
        )
        assert ran and c["parity"] == "measured", (key, c)
    assert out["loaded"] == []
