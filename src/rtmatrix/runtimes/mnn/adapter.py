"""The MNN row: Alibaba's MNN runtime (the ``mnn`` wheel) on the ONNX fixture, converted with
MNN's own converter (:mod:`rtmatrix.runtimes.mnn.convert`, a child process, cached) and driven by
rtmatrix's KV-cache loop through MNN's module API, as the ONNX Runtime row is.

``load`` converts (or finds) the ``.mnn``, makes a runtime manager (``backend`` CPU, ``precision``,
``numThread`` = the matrix's threads) and loads the module with every input and output named
(``shape_mutable``: the prompt length and the cache grow). ``prefill``/``decode`` run
``Module.forward`` on ``MNN.expr`` constants; the ``present.*`` outputs go straight back in as the
next call's ``past_key_values.*`` (MNN stores int64 inputs as int32: the ids are fed as int32).
MNN has no per-call timing the Python API returns, so ``counters()`` is empty and PP/TG come from
the harness clock.

Row options (``[[runtimes]] options``; sweep them to compare):

- ``precision``: ``normal`` (MNN's default) | ``low`` (fp16 compute where the CPU has it) |
  ``low_bf16`` | ``high``; MNN does not report which precision it used (its log line that it
  switched, and the device's features line, are kept in the evidence);
- ``weight_quant_bits`` (0 = none | 8 | 4 …), ``weight_quant_block``,
  ``weight_quant_asymmetric``, ``fp16``: the converter's weight quantization and half storage.
  Weights quantized by the converter are not the file's weights: parity is then judged as for a
  quantized dtype (tokens not demanded; logits within that dtype's tolerance, against the
  reference on the file's weights), and the evidence says so (``requantized``).

What MNN does with the harness's own quantized ONNX files, recorded rather than hidden: the
weight-only ``int8w`` file's DequantizeLinear weights are folded back to f32 by the converter (the
``.mnn`` is as large as the f32 one); the blocked ``int4w`` file converts, then fails at run time
with a shape error.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import LoadParams, RuntimeUnavailable
from rtmatrix.adapters.kvloop import ExplicitKvAdapter
from rtmatrix.fixtures.genai_config import special_ids_beside
from rtmatrix.numerics import StackReport
from rtmatrix.runtimes.mnn.errors import ERROR_PATTERNS

PRECISIONS = {"normal": "normal", "low": "low", "low_bf16": "Low_BF16", "high": "high"}
FIXED = ("input_ids", "attention_mask", "position_ids")
LICENSE_NOTE = (
    "the wheel's metadata says BSD-3; the MNN source repository's LICENSE.txt is Apache-2.0"
)


class MnnAdapter(ExplicitKvAdapter):
    name: ClassVar[str] = "mnn"
    distribution: ClassVar[str] = "mnn"
    extra: ClassVar[str] = "mnn"
    container: ClassVar[str] = "onnx"
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS

    def __init__(self) -> None:
        self._onnx: Path | None = None
        self._nn: Any = None
        self._expr: Any = None
        self._version = ""
        self._module: Any = None
        self._n_ctx = 0
        self._n_vocab = 0
        self._special: dict[str, int] = {}
        self._past_names: list[str] = []
        self._present_names: list[str] = []
        self._empty: list[tuple[int, int]] = []  # (kv heads, head dim) per past input
        self._past: list[Any] = []
        self._pos = 0
        self._logits: NDArray[np.float32] | None = None
        self._asked: dict[str, Any] = {}
        self._convert: dict[str, Any] = {}
        self._requant: dict[str, Any] | None = None
        self._timing: dict[str, float] = {}

    def import_runtime(self) -> str:
        try:
            import MNN
            import MNN.expr
            import MNN.nn
        except ImportError as exc:
            msg = f"mnn is not installed ({exc}); pip install 'rtmatrix[mnn]'"
            raise RuntimeUnavailable(msg) from exc
        self._nn, self._expr = MNN.nn, MNN.expr
        self._version = str(MNN.version())
        return self._version

    # -- model ---------------------------------------------------------------------------------
    def load(self, model_path: Path, params: LoadParams) -> None:
        from rtmatrix.runtimes.mnn.convert import flags, mnn_file

        onnx = model_path / "model.onnx" if model_path.is_dir() else model_path
        self._onnx = onnx
        opts = dict(params.options)
        precision = str(opts.get("precision", "normal"))
        if precision not in PRECISIONS:
            msg = f"options.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}"
            raise ValueError(msg)
        self._n_ctx = params.n_ctx
        self._special = special_ids_beside(onnx)
        t0 = time.perf_counter()
        path, manifest, built = mnn_file(onnx, opts, self._version)
        t1 = time.perf_counter()
        self._convert = dict(manifest) | {"converted_now": built, "wall_s": round(t1 - t0, 3)}
        bits = int(opts.get("weight_quant_bits", 0) or 0)
        self._requant = (
            {
                "bits": bits,
                "by": f"MNN's converter ({' '.join(flags(opts))})",
                "judged_as": f"int{bits}w" if bits in (4, 8) else "int8",
            }
            if bits
            else None
        )
        self._asked = {
            "backend": "CPU",
            "precision": PRECISIONS[precision],
            "numThread": params.threads,
        }
        rt = self._nn.create_runtime_manager((dict(self._asked),))
        names = self._io_names(onnx)
        self._module = self._nn.load_module_from_file(
            str(path), names[0], names[1], runtime_manager=rt, shape_mutable=True, rearrange=True
        )
        self._timing = {"convert_s": t1 - t0, "load_module_s": time.perf_counter() - t1}
        self.reset()

    def _io_names(self, onnx: Path) -> tuple[list[str], list[str]]:
        """Inputs and outputs by name, from the ONNX graph's declarations (not its weights)."""
        import onnx as onnx_lib

        model = onnx_lib.load(str(onnx), load_external_data=False)
        inputs = [i.name for i in model.graph.input]
        outputs = [o.name for o in model.graph.output]
        if "input_ids" not in inputs or "logits" not in outputs:
            msg = f"{onnx.name}: expected input_ids in and logits out, got {inputs} -> {outputs}"
            raise ValueError(msg)
        self._past_names = [n for n in inputs if n not in FIXED]
        self._present_names = []
        self._empty = []
        dims = {i.name: i.type.tensor_type.shape.dim for i in model.graph.input}
        for name in self._past_names:
            suffix = name.split(".", 1)[-1]
            present = next((o for o in outputs if o != "logits" and o.endswith("." + suffix)), None)
            d = dims[name]
            if present is None or len(d) != 4 or not d[1].dim_value or not d[3].dim_value:
                msg = f"input {name!r} is not a KV-cache input this adapter can feed"
                raise ValueError(msg)
            self._present_names.append(present)
            self._empty.append((int(d[1].dim_value), int(d[3].dim_value)))
        vocab = model.graph.output[outputs.index("logits")].type.tensor_type.shape.dim[-1]
        self._n_vocab = int(vocab.dim_value)
        ins = [n for n in FIXED if n in inputs] + self._past_names
        return ins, ["logits", *self._present_names]

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def special_ids(self) -> dict[str, int]:
        return dict(self._special)

    def _var(self, a: NDArray[Any]) -> Any:
        F = self._expr
        if a.dtype.kind in "iu":
            return F.const(a.astype(np.int32), list(a.shape), F.NCHW, F.int)
        return F.const(a.astype(np.float32), list(a.shape), F.NCHW, F.float)

    def _clear_cache(self) -> None:
        self._past = [self._var(np.zeros((1, h, 0, d), np.float32)) for h, d in self._empty]

    def _forward(self, tokens: Sequence[int], start: int, total: int, phase: str) -> Any:
        n = len(tokens)
        feeds = [
            self._var(np.asarray(tokens, np.int64).reshape(1, n)),
            self._var(np.ones((1, total), np.int64)),
            self._var(np.arange(start, total, dtype=np.int64).reshape(1, n)),
            *self._past,
        ]
        outs = self._module.forward(feeds)
        if not outs or len(outs) != 1 + len(self._past):
            msg = (
                f"MNN's forward returned {len(outs or [])} outputs, expected "
                f"{1 + len(self._past)} (its own log says why: see the cell's stdout)"
            )
            raise RuntimeError(msg)
        self._past = list(outs[1:])
        return outs[0].read()[0, -1]

    def counters(self) -> dict[str, float]:
        return {}

    # -- evidence ------------------------------------------------------------------------------
    def evidence(self) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "settings": {
                "asked": dict(self._asked),
                "reported": "MNN's module API reports neither the precision nor the threads it "
                "used (a switch to low precision is a line in its log)",
            },
            "conversion": self._convert,
            "load_timing_s": {k: round(v, 4) for k, v in self._timing.items()},
            "license_note": LICENSE_NOTE,
            "debug_facilities": {
                "per_op_callback": {
                    "available": True,
                    "how": "MNN.Interpreter session API: runSessionWithCallBackInfo "
                    "(op name, type, flops per op); not the module API this row runs",
                },
                "converter_dump": {
                    "available": True,
                    "how": "MNNConvert --JsonFile / --info / --dumpPass",
                },
                "env_log_switch": {
                    "available": False,
                    "why": "the runtime reads no environment variable",
                },
                "reference_tool": {
                    "available": False,
                    "why": "the wheel ships no benchmark executable "
                    "(MNNV2Basic, benchmark, timeProfile are source-build tools)",
                },
            },
        }
        if self._requant:
            ev["requantized"] = dict(self._requant)
        with contextlib.suppress(Exception):
            ev["threads_env"] = {k: os.environ[k] for k in ("OMP_NUM_THREADS",) if k in os.environ}
        return ev

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend, kernels and what MNN does not say of its numerics (StackReporting)."""
        from rtmatrix.runtimes.mnn import stack

        size = stack.source_size(self._onnx) if self._onnx is not None else None
        return stack.report(dict(evidence), dtype, size)

    def close(self) -> None:
        self._past = []
        self._module = None
