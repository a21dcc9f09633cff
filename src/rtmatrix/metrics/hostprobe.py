"""The host-limits probe itself: the child process :mod:`rtmatrix.metrics.hostlimits` starts.

    python -m rtmatrix.metrics.hostprobe --threads 2 --out limits.json [--buffer-mib 512]

It measures, at ``--threads`` threads, (a) the sustained memory **read** bandwidth: numpy's
``maximum.reduce`` (a SIMD reduction that releases the GIL) over a buffer far larger than the
last-level cache, split into one contiguous slice per Python thread, all started together; and
(b) the peak **matmul** throughput of the dtypes the host computes natively: f32 through numpy's
BLAS, int8 through ONNX Runtime's ``MatMulInteger`` (MLAS's u8×s8 GEMM) where onnxruntime is
installed, bf16 through ``torch.matmul`` (oneDNN) where the CPU has bf16 instructions and torch is
installed. A probe that cannot run says why (``unavailable``); nothing is estimated.

Why a child: BLAS libraries size their thread pool once, when they are loaded, from
``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` — the parent's numpy is already
loaded with a pool as wide as the machine (and threadpoolctl, which could resize it, is not a
dependency) — so the parent starts this module with those variables set to the thread count.
The child also keeps the probe's 512 MiB buffer and the runtimes the int8/bf16 probes import
(onnxruntime, torch) out of the parent, which never imports a runtime.

Progress goes to stderr line by line; the result (a JSON object) to ``--out``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

#: bump when a probe's method changes: cached results of another version are measured again
PROBE_VERSION = 1
#: the environment variables that size a BLAS / OpenMP thread pool at load
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")  # fmt: skip
#: a matmul's side is doubled from this until one product takes MIN_PRODUCT_S (or MAX_SIDE)
MIN_SIDE, MAX_SIDE, MIN_PRODUCT_S = 256, 2048, 0.05
#: the CPU flags (/proc/cpuinfo) that mean native bf16 arithmetic
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def spread(samples: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and interquartile range of the repetitions."""
    vals = sorted(float(s) for s in samples)
    q1, _, q3 = statistics.quantiles(vals, n=4, method="inclusive") if len(vals) > 1 else vals * 3
    return {"n": len(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1],
            "iqr": [q1, q3]}  # fmt: skip


def measured(samples: Sequence[float], unit: str, method: str, **params: Any) -> dict[str, Any]:
    return {"value": statistics.median(samples), "unit": unit, "method": method,
            "samples": [float(s) for s in samples], "stats": spread(samples),
            "params": params}  # fmt: skip


def unavailable(unit: str, reason: str) -> dict[str, Any]:
    return {"value": None, "unit": unit, "reason": reason}


# -- memory read bandwidth -------------------------------------------------------------------
def llc_bytes(sys_root: Path = Path("/sys")) -> int | None:
    """The last-level cache's size as sysfs lists it for cpu0 (Linux), else None."""
    best = None
    for entry in sorted((sys_root / "devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((entry / "level").read_text())
            text = (entry / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        size = int(text.rstrip("KMG")) * mult
        if best is None or level > best[0] or (level == best[0] and size > best[1]):
            best = (level, size)
    return best[1] if best else None


def _parallel_pass(chunks: Sequence[np.ndarray[Any, Any]]) -> tuple[float, float]:
    """One read of every chunk, one thread each, started together: (wall s, concurrency). The
    concurrency (the threads' busy time ÷ the wall time) is ~N when the reductions overlap and
    ~1 when something (the GIL) serialised them."""
    times: list[tuple[float, float]] = [(0.0, 0.0)] * len(chunks)
    start = threading.Barrier(len(chunks))

    def read(i: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        np.maximum.reduce(chunks[i])
        times[i] = (t0, time.perf_counter())

    workers = [threading.Thread(target=read, args=(i,)) for i in range(len(chunks))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = max(t1 for _, t1 in times) - min(t0 for t0, _ in times)
    return wall, sum(t1 - t0 for t0, t1 in times) / wall


def read_bandwidth(threads: int, buffer_bytes: int, repeats: int, say: Progress) -> dict[str, Any]:
    n = buffer_bytes // 4
    # every page written before timing, each with its own values (no page a host could merge)
    buf = np.arange(n, dtype=np.float32)
    chunks = np.array_split(buf, threads)
    _parallel_pass(chunks)  # warm-up
    samples, overlap = [], []
    for r in range(repeats):
        wall, conc = _parallel_pass(chunks)
        samples.append(n * 4 / wall)
        overlap.append(conc)
        say(f"  read bandwidth {r + 1}/{repeats}: {samples[-1] / 1e9:.1f} GB/s")
    llc = llc_bytes()
    method = (f"numpy maximum.reduce over {threads} contiguous float32 slice(s) of a "
              f"{buffer_bytes / 2**20:.0f} MiB buffer, one Python thread each (numpy releases "
              "the GIL in the reduction), started together; bytes read ÷ wall time from the "
              "first thread's start to the last one's end; 1 warm-up pass")  # fmt: skip
    return measured(samples, "bytes/s", method, buffer_bytes=buffer_bytes, threads=threads,
                    llc_bytes=llc, buffer_over_llc=(buffer_bytes / llc) if llc else None,
                    concurrency=spread(overlap), numpy=np.__version__)  # fmt: skip


# -- matmul throughput -----------------------------------------------------------------------
def _timed(product: Callable[[], object], side: int, repeats: int, what: str,
           say: Progress) -> tuple[list[float], int]:  # fmt: skip
    """Operations/s of ``repeats`` products of side ``side`` (2·n³ each), after a warm-up."""
    product()
    samples = []
    unit = "GOP/s" if "int" in what else "GFLOP/s"
    for r in range(repeats):
        t0 = time.perf_counter()
        product()
        samples.append(2.0 * side**3 / (time.perf_counter() - t0))
        say(f"  {what} {r + 1}/{repeats}: {samples[-1] / 1e9:.0f} {unit} (n={side})")
    return samples, side


def _calibrated(make: Callable[[int], Callable[[], object]], max_side: int) -> int:
    """The side whose product takes at least MIN_PRODUCT_S (doubling from MIN_SIDE)."""
    side = min(MIN_SIDE, max_side)
    while side < max_side:
        product = make(side)
        product()
        t0 = time.perf_counter()
        product()
        if time.perf_counter() - t0 >= MIN_PRODUCT_S:
            break
        side *= 2
    return min(side, max_side)


def blas_info() -> dict[str, Any]:
    """The BLAS numpy was built with (``numpy.show_config``), and its thread pools where
    threadpoolctl is installed."""
    info: dict[str, Any] = {}
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]
        blas = dict(deps.get("blas") or {})
        info = {k: blas.get(k) for k in ("name", "version", "openblas configuration") if k in blas}
    except (KeyError, TypeError, ValueError) as exc:
        info["unavailable"] = f"numpy.show_config: {exc}"
    try:
        tpc = importlib.import_module("threadpoolctl")
        info["threadpools"] = tpc.threadpool_info()
    except ImportError:
        info["threadpools"] = ("threadpoolctl not installed: the pool is sized by "
                               f"{'/'.join(THREAD_VARS)} in the probe's environment")  # fmt: skip
    return info


def matmul_f32(threads: int, repeats: int, max_side: int, say: Progress) -> dict[str, Any]:
    rng = np.random.default_rng(0)

    def make(side: int) -> Callable[[], object]:
        a = rng.standard_normal((side, side), dtype=np.float32)
        b = rng.standard_normal((side, side), dtype=np.float32)
        return lambda: a @ b

    side = _calibrated(make, max_side)
    samples, side = _timed(make(side), side, repeats, "f32 matmul", say)
    blas = blas_info()
    lib = " ".join(str(blas[k]) for k in ("name", "version") if blas.get(k)) or "numpy's BLAS"
    method = (f"numpy float32 matmul of two {side}×{side} matrices (2·n³ FLOP each) through "
              f"{lib}, its pool sized to {threads} thread(s) by the environment; 1 warm-up "
              "product")  # fmt: skip
    return measured(samples, "FLOP/s", method, side=side, threads=threads, blas=blas)


def matmul_int8(threads: int, repeats: int, max_side: int, say: Progress) -> dict[str, Any]:
    try:
        ort = importlib.import_module("onnxruntime")
        onnx = importlib.import_module("onnx")
    except ImportError as exc:
        return unavailable("OP/s", f"int8 is measured with ONNX Runtime's MatMulInteger: {exc}")
    helper, tp = onnx.helper, onnx.TensorProto
    rng = np.random.default_rng(0)

    def make(side: int) -> Callable[[], object]:
        b = rng.integers(-127, 128, (side, side), dtype=np.int8)
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "int8-peak",
            [helper.make_tensor_value_info("A", tp.UINT8, [side, side])],
            [helper.make_tensor_value_info("Y", tp.INT32, [side, side])],
            [onnx.numpy_helper.from_array(b, "B")])  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])  # fmt: skip
        feed = {"A": rng.integers(0, 256, (side, side), dtype=np.uint8)}
        return lambda: sess.run(None, feed)

    side = _calibrated(make, max_side)
    samples, side = _timed(make(side), side, repeats, "int8 matmul", say)
    method = (f"ONNX Runtime {ort.__version__} MatMulInteger (u8×s8 -> s32, MLAS) of two "
              f"{side}×{side} matrices, CPUExecutionProvider, intra_op_num_threads={threads}; "
              "2·n³ integer operations each; 1 warm-up run")  # fmt: skip
    return measured(samples, "OP/s", method, side=side, threads=threads,
                    onnxruntime=ort.__version__)  # fmt: skip


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    try:
        text = cpuinfo.read_text("utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return set(val.split())
    return set()


def matmul_bf16(threads: int, repeats: int, max_side: int, say: Progress) -> dict[str, Any]:
    native = sorted(set(BF16_FLAGS) & cpu_flags())
    if not native:
        return unavailable("FLOP/s", "the CPU lists no native bf16 instructions (none of "
                           f"{', '.join(BF16_FLAGS)} in /proc/cpuinfo)")  # fmt: skip
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        return unavailable("FLOP/s", f"bf16 is measured with torch.matmul: {exc}")
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)

    def make(side: int) -> Callable[[], object]:
        a = torch.randn(side, side, generator=gen).to(torch.bfloat16)
        b = torch.randn(side, side, generator=gen).to(torch.bfloat16)
        return lambda: a @ b

    side = _calibrated(make, max_side)
    samples, side = _timed(make(side), side, repeats, "bf16 matmul", say)
    method = (f"torch {torch.__version__} bfloat16 matmul of two {side}×{side} matrices "
              f"(oneDNN), torch.set_num_threads({threads}); the CPU's {', '.join(native)}; "
              "2·n³ FLOP each; 1 warm-up product")  # fmt: skip
    return measured(samples, "FLOP/s", method, side=side, threads=threads,
                    torch=torch.__version__, cpu_flags=native)  # fmt: skip


MATMULS: dict[str, Callable[[int, int, int, Progress], dict[str, Any]]] = {
    "f32": matmul_f32, "int8": matmul_int8, "bf16": matmul_bf16,
}  # fmt: skip


def _guarded(name: str, unit: str, probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return probe()
    except Exception as exc:  # a probe's failure is its result, never the whole probe's
        return unavailable(unit, f"the {name} probe failed: {type(exc).__name__}: {exc}"[:400])


def probe(threads: int, buffer_bytes: int, repeats: int, dtypes: Sequence[str],
          max_side: int = MAX_SIDE, say: Progress = _stderr) -> dict[str, Any]:  # fmt: skip
    """Every probe at ``threads`` threads: ``{"bandwidth": ..., "matmul": {dtype: ...}}``."""
    t0 = time.perf_counter()
    say(f"rtmatrix: host limits at {threads} thread(s): memory read bandwidth "
        f"({buffer_bytes / 2**20:.0f} MiB buffer, {repeats} passes)")  # fmt: skip
    bandwidth = partial(read_bandwidth, threads, buffer_bytes, repeats, say)
    out: dict[str, Any] = {"bandwidth": _guarded("read-bandwidth", "bytes/s", bandwidth)}
    out["matmul"] = {}
    for dtype in dtypes:
        say(f"rtmatrix: host limits at {threads} thread(s): {dtype} matmul peak")
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        run = partial(MATMULS[dtype], threads, repeats, max_side, say)
        out["matmul"][dtype] = _guarded(f"{dtype} matmul", unit, run)
    out["probe_wall_s"] = time.perf_counter() - t0
    out["environment"] = {k: os.environ.get(k) for k in THREAD_VARS}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtmatrix.metrics.hostprobe")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--buffer-mib", type=float, default=512.0)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--max-side", type=int, default=MAX_SIDE)
    ap.add_argument("--dtypes", default=",".join(MATMULS))
    args = ap.parse_args(argv)
    dtypes = [d for d in args.dtypes.split(",") if d]
    unknown = sorted(set(dtypes) - set(MATMULS))
    if unknown:
        msg = f"unknown dtype(s) {', '.join(unknown)}; valid: {', '.join(MATMULS)}"
        raise SystemExit(msg)
    result = probe(args.threads, int(args.buffer_mib * 2**20), args.repeats, dtypes,
                   args.max_side)  # fmt: skip
    args.out.write_text(json.dumps(result), "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
