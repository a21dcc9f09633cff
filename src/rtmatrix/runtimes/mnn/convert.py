"""The fixture's ``model.onnx`` -> an ``.mnn`` file, with MNN's own converter (``MNNConvert``,
built into the ``mnn`` wheel's ``_tools`` extension), in a child process, cached.

The child is ``python -m rtmatrix.runtimes.mnn.convert ONNX OUT [flags]``: it calls
``_tools.mnnconvert`` directly, not the wheel's ``mnnconvert`` console script (that script imports
a telemetry logger which pip-installs a package and contacts a remote endpoint). The converter
exits 0 and reports success even when it fails, so the result is judged by what it wrote and
said: no output file, or ``Converted Failed`` / ``[ERROR]`` in its log, is a failed conversion;
``has empty input`` (a tensor the graph names but nothing produces: the converter goes on, and
the module it writes crashes the process in ``forward``) is one too. The error carries the
converter's own lines, which the row's error patterns classify.

Flags come from the row's options: ``weight_quant_bits`` (8 or 4: ``--weightQuantBits``, MNN's
weight quantization; 0 = none), ``weight_quant_block`` (``--weightQuantBlock``, default per
channel), ``weight_quant_asymmetric`` (``--weightQuantAsymmetric``), ``fp16`` (``--fp16``,
half-precision storage). The cache key is the fixture folder's content-hash name, the file's size,
the flags, the MNN version and :data:`CONVERTER_VERSION`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONVERTER_VERSION = "1"
OUT_NAME = "model.mnn"
TIMEOUT_S = 900.0
_FAILED = re.compile(r"Converted Failed|\[ERROR\]|Not Support|has empty input")
LOG_LINES = 12


class ConvertError(RuntimeError):
    """MNN's converter did not produce a usable model; the message holds its own lines."""


def flags(options: Mapping[str, Any]) -> list[str]:
    """The converter flags the row's options ask for (validated)."""
    out: list[str] = []
    bits = int(options.get("weight_quant_bits", 0) or 0)
    if bits not in (0, 2, 3, 4, 5, 6, 7, 8):
        msg = f"options.weight_quant_bits must be 0 (none) or 2..8, got {bits!r}"
        raise ValueError(msg)
    if bits:
        out += ["--weightQuantBits", str(bits)]
        block = options.get("weight_quant_block")
        if block is not None:
            out += ["--weightQuantBlock", str(int(block))]
        if options.get("weight_quant_asymmetric"):
            out.append("--weightQuantAsymmetric")
    if options.get("fp16"):
        out.append("--fp16")
    return out


def problems(log: str) -> list[str]:
    """The converter's own lines that say it failed."""
    return [ln.strip() for ln in log.splitlines() if _FAILED.search(ln)][:LOG_LINES]


def convert(onnx_path: Path, out: Path, extra: list[str]) -> dict[str, Any]:
    """Run the converter child; the manifest's extra fields, or :class:`ConvertError`."""
    cmd = [sys.executable, "-m", __name__, str(onnx_path), str(out), *extra]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        msg = f"MNN's converter ran past {TIMEOUT_S:g} s on {onnx_path} and was killed"
        raise ConvertError(msg) from exc
    log = (proc.stdout or "") + (proc.stderr or "")
    said = problems(log)
    if proc.returncode != 0 or said or not out.is_file():
        why = "; ".join(said) or log.strip()[-600:] or f"exit {proc.returncode}, no output"
        msg = f"MNN's converter could not convert {onnx_path.name}: {why}"
        raise ConvertError(msg)
    version = next((ln.strip() for ln in log.splitlines() if "target version" in ln), "")
    return {
        "converter_version": CONVERTER_VERSION,
        "source": str(onnx_path),
        "flags": extra,
        "convert_s": round(time.perf_counter() - t0, 3),
        "converter_says": version,
    }


def mnn_file(
    onnx_path: Path, options: Mapping[str, Any], mnn_version: str
) -> tuple[Path, dict[str, Any], bool]:
    """The cached ``.mnn`` for the fixture at ``onnx_path``: (file, manifest, built now)."""
    from rtmatrix.fixtures.cache import cached_build

    extra = flags(options)
    key = {
        "converter_version": CONVERTER_VERSION,
        "mnn": mnn_version,
        "fixture": onnx_path.parent.name,  # the fixture's content-hash folder
        "file": onnx_path.name,
        "size": onnx_path.stat().st_size,
        "flags": extra,
    }
    art = cached_build(
        f"mnn-{onnx_path.parent.name}", key, OUT_NAME, lambda p: convert(onnx_path, p, extra)
    )
    return art.path, art.manifest, art.built


def main(argv: list[str] | None = None) -> int:
    """The child: ``ONNX OUT [converter flags]``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(f"usage: python -m {__name__} MODEL.onnx OUT.mnn [flags]", file=sys.stderr)
        return 2
    import _tools  # the mnn wheel's converter extension

    argv_c = ["MNNConvert", "-f", "ONNX", "--modelFile", args[0], "--MNNModel", args[1], *args[2:]]
    _tools.mnnconvert(argv_c)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
