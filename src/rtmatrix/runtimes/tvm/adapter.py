"""The MLC-LLM / TVM row: the fixture model compiled with Apache TVM, run by the Relax VM.

What runs is TVM's Relax virtual machine on a model library built the way MLC-LLM builds one
(model written with ``tvm.relax.frontend.nn``, compiled for this CPU, weights in TVM's
tensor-cache format). The ``mlc_llm`` engine itself is not installable from PyPI and is not what
runs here; ``evidence()`` says whether it happens to be importable.

Options (``[[runtimes]] options``):

``mode``           ``"aot"`` (default): load the prebuilt ``model.so``; ``"jit"``: compile the same
                   module from ``spec.json`` in this process at load (LLVM in memory), then run.
``runtime_only``   import TVM with only ``libtvm_runtime`` (``TVM_USE_RUNTIME_LIB=1``, no
                   compiler library); default true for ``aot``, and ``jit`` requires false.
``verify``         check the library's sha256 against the artifact manifest before ``dlopen``
                   (default true): TVM dies by signal on a damaged library, this raises instead.
``allocator``      the VM's memory allocator, ``"naive"`` (default) or ``"pooled"`` (TVM's own
                   default). The KV cache grows by one row a step, so every step allocates new
                   sizes: the pooled allocator keeps them all (+80 MB on ``small`` after 64
                   tokens), the naive one frees them, at no measurable speed cost here.

Other keys are not an error: the matrix merges fixture-level options meant for other parts (a
scenario's ``cancel_cycles``, ``leak_tolerance_mb``, ...) into every row's options. They are
ignored and listed under ``ignored_options`` in the evidence; the values of the keys above are
still checked.

Both options that change the import are needed before ``import_runtime``; the worker passes
the options at ``load``. Until it calls :meth:`TvmAdapter.configure` first, the adapter reads
them from the worker's job file (the one ``python -m rtmatrix.worker JOB.json`` runs).

TVM has no timing counters of its own, so ``counters()`` is empty. Its failures are mostly
process deaths (an out-of-range position or token id reads out of bounds: SIGSEGV); the adapter
checks positions against the context and ids against the vocabulary and raises instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import metadata, util
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, LoadParams, RuntimeUnavailable
from rtmatrix.numerics import StackReport
from rtmatrix.runtimes.tvm.errors import ERROR_PATTERNS

MODES = ("aot", "jit")
SPEC_FILE = "spec.json"
MANIFEST_FILE = "tvm-manifest.json"
ENGINE_NOTE = "the mlc_llm engine itself is not installable from PyPI"
#: global functions worth knowing about when debugging a TVM deployment (probed, not assumed)
_DEBUG_FUNCS = (
    "vm.builtin.debug_print",
    "vm.builtin.invoke_debug_func",
    "runtime.NumThreads",
    "runtime.config_threadpool",
    "runtime.SaveParams",
    "runtime.LoadParams",
    "vm.builtin.tensor_cache.load",
    "vm.builtin.attention_kv_cache_debug_get_kv",
    "ffi.GetRegisteredTypeKeys",
)


class TvmOptionError(ValueError):
    """A ``[[runtimes]] options`` value this adapter does not accept."""


OPTIONS = ("mode", "runtime_only", "verify", "allocator")
#: where this row's defaults differ from TVM's own, and why
BINDING_DEFAULTS = {
    "allocator": "this row defaults to naive; TVM's VirtualMachine defaults to pooled, which "
    "keeps every KV-growth allocation size (+80 MB peak RSS on small after 64 tokens) at no "
    'measured speed difference; options.allocator = "pooled" runs TVM\'s default',
}
ALLOCATORS = ("naive", "pooled")


def ignored_options(options: dict[str, Any]) -> list[str]:
    """The option keys this adapter does not use. Not an error: the matrix merges fixture-level
    options meant for other parts (a scenario's ``cancel_cycles``, ``leak_tolerance_mb``, ...)
    into every row's options; they are ignored and listed in the evidence."""
    return sorted(set(options) - set(OPTIONS))


def _check_options(options: dict[str, Any]) -> tuple[str, bool, bool]:
    """(mode, runtime_only, verify) from the row's options; validates the values of the keys
    this adapter uses and ignores the others (:func:`ignored_options`)."""
    if str(options.get("allocator", "naive")) not in ALLOCATORS:
        msg = f"tvm option allocator={options['allocator']!r}; valid: {', '.join(ALLOCATORS)}"
        raise TvmOptionError(msg)
    mode = str(options.get("mode", "aot"))
    if mode not in MODES:
        msg = f"tvm option mode={mode!r}; valid: {', '.join(MODES)}"
        raise TvmOptionError(msg)
    runtime_only = bool(options.get("runtime_only", mode == "aot"))
    if mode == "jit" and runtime_only:
        msg = "tvm mode='jit' compiles at load and needs TVM's compiler: runtime_only must be false"
        raise TvmOptionError(msg)
    return mode, runtime_only, bool(options.get("verify", True))


def _mapped_libraries() -> list[str]:
    try:
        maps = Path("/proc/self/maps").read_text("utf-8", errors="replace")
    except OSError:
        return []
    names = {line.split()[-1] for line in maps.splitlines() if "libtvm" in line}
    return sorted(Path(n).name for n in names)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def package_breakdown(distribution: str = "apache-tvm") -> dict[str, Any]:
    """Installed bytes of the whole wheel (its RECORD) beside the runtime library alone."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return {"error": f"{distribution} is not installed"}
    total, libs = 0, {}
    for f in dist.files or []:
        path = Path(str(dist.locate_file(f)))
        try:
            size = path.stat().st_size
        except OSError:
            continue
        total += size
        if path.name.startswith("libtvm") and path.suffix == ".so":
            libs[path.name] = size
    runtime = libs.get("libtvm_runtime.so")
    return {
        "wheel_installed_bytes": total,
        "libraries_bytes": libs,
        "runtime_library_bytes": runtime,
        "runtime_library_share": round(runtime / total, 4) if runtime and total else None,
        "method": "RECORD of the distribution; runtime = libtvm_runtime.so alone",
    }


def mlc_llm_status() -> dict[str, Any]:
    """Whether an ``mlc_llm`` engine is importable here (found, not imported)."""
    found = util.find_spec("mlc_llm") is not None
    versions = {}
    for dist in ("mlc-llm", "mlc-llm-cpu", "mlc-llm-nightly-cpu", "mlc-ai-nightly-cpu"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    note = (
        "importable but not used: this row runs TVM's Relax VM on an rtmatrix-built library"
        if found
        else f"not importable: {ENGINE_NOTE}"
    )
    return {"importable": found, "distributions": versions, "note": note}


class TvmAdapter(Adapter):
    name: ClassVar[str] = "tvm"
    distribution: ClassVar[str] = "apache-tvm"
    extra: ClassVar[str] = "mlc"
    container: ClassVar[str] = "tvm"
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS

    def __init__(self) -> None:
        self._options: dict[str, Any] | None = None
        self._ignored: list[str] = []
        self._mode = "aot"
        self._runtime_only = True
        self._tvm: Any = None
        self._version = ""
        self._import_s = 0.0
        self._vm: Any = None
        self._dev: Any = None
        self._params: Any = None
        self._cache: Any = None
        self._logits: Any = None
        self._pos = 0
        self._n_ctx = 0
        self._spec: dict[str, Any] = {}
        self._folder: Path | None = None
        self._manifest: dict[str, Any] | None = None
        self._verified: bool | None = None
        self._load: dict[str, Any] = {}
        self._threads: dict[str, Any] = {}
        self._lib: Any = None
        self._prefill_fn: Any = None
        self._decode_fn: Any = None

    # -- runtime -------------------------------------------------------------------------------
    def configure(self, options: dict[str, Any]) -> None:
        """The row's options, before :meth:`import_runtime` (they decide what is imported)."""
        self._options = dict(options)

    def import_runtime(self) -> str:
        options = self._options or {}
        self._mode, self._runtime_only, _ = _check_options(options)
        self._ignored = ignored_options(options)
        already = "tvm" in sys.modules
        if self._runtime_only and not already:
            os.environ["TVM_USE_RUNTIME_LIB"] = "1"
        t0 = time.perf_counter()
        try:
            import tvm
        except ImportError as exc:
            msg = f"apache-tvm is not installed ({exc}); pip install 'rtmatrix[mlc]'"
            raise RuntimeUnavailable(msg) from exc
        self._import_s = time.perf_counter() - t0
        self._tvm = tvm
        try:
            self._version = metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            self._version = str(tvm.__version__)
        return self._version

    # -- model ---------------------------------------------------------------------------------
    def load(self, model_path: Path, params: LoadParams) -> None:
        mode, runtime_only, verify = _check_options(params.options)
        self._ignored = ignored_options(params.options)
        if (mode, runtime_only) != (self._mode, self._runtime_only):
            msg = (
                f"tvm options at load (mode={mode}, runtime_only={runtime_only}) differ from "
                f"those TVM was imported with (mode={self._mode}, "
                f"runtime_only={self._runtime_only})"
            )
            raise TvmOptionError(msg)
        tvm = self._tvm
        folder = model_path.parent
        self._folder = folder
        spec_path = folder / SPEC_FILE
        if not spec_path.is_file():
            msg = f"{folder} has no {SPEC_FILE}: not an rtmatrix TVM artifact folder"
            raise FileNotFoundError(msg)
        self._spec = json.loads(spec_path.read_text("utf-8"))
        cfg = self._spec["config"]
        if params.n_ctx > int(cfg["max_positions"]):
            msg = (
                f"n_ctx {params.n_ctx} exceeds the {cfg['max_positions']} positions this library "
                "was built for (its rotary tables end there; TVM would read past them)"
            )
            raise ValueError(msg)
        self._n_ctx = params.n_ctx
        manifest_path = folder / MANIFEST_FILE
        if manifest_path.is_file():
            self._manifest = json.loads(manifest_path.read_text("utf-8"))
        # the pool is created on the first parallel kernel: set its size before any runs
        os.environ["TVM_NUM_THREADS"] = str(params.threads)
        self._dev = tvm.cpu(0)
        t0 = time.perf_counter()
        if mode == "aot":
            self._verified = self._verify_library(model_path) if verify else None
            self._lib = tvm.runtime.load_module(str(model_path))
            self._load["load_module_s"] = round(time.perf_counter() - t0, 4)
            rt_mod = self._lib
        else:
            from rtmatrix.fixtures import tvm_model

            target = tvm_model.host_target()
            ex, report = tvm_model.compile_module(cfg, target, self._spec["pipeline"])
            self._load["jit"] = report | {"target": target}
            t1 = time.perf_counter()
            rt_mod = ex.jit()
            self._load["jit"]["jit_link_s"] = round(time.perf_counter() - t1, 4)
            self._load["compile_total_s"] = round(time.perf_counter() - t0, 4)
            self._lib = rt_mod
        from tvm.runtime.vm import VirtualMachine

        allocator = str(params.options.get("allocator", "naive"))
        self._load["allocator"] = allocator
        t1 = time.perf_counter()
        self._vm = VirtualMachine(rt_mod, self._dev, memory_cfg=allocator)
        self._load["vm_init_s"] = round(time.perf_counter() - t1, 4)
        t1 = time.perf_counter()
        self._params = self._load_weights(folder)
        self._load["weights_s"] = round(time.perf_counter() - t1, 4)
        self._cache = self._allocate_cache(cfg, params.n_ctx)
        self._prefill_fn = self._vm["prefill"]
        self._decode_fn = self._vm["decode"]
        num = tvm.get_global_func("runtime.NumThreads", allow_missing=True)
        self._threads = {"requested": params.threads, "tvm_num_threads": num() if num else None}
        self.reset()

    def _allocate_cache(self, cfg: dict[str, Any], n_ctx: int) -> Any:
        """Keys ``(kv, d, c)`` and values ``(kv, c, d)`` per layer, ``c`` = n_ctx rounded up to
        the library's column tile, zeroed once: the library writes rows in place and masks every
        row at or past the current length, so a reset needs no clearing."""
        import tvm_ffi

        tvm = self._tvm
        n_kv, d = int(cfg["n_head_kv"]), int(cfg["head_dim"])
        tile = int(self._spec.get("cache", {}).get("c_multiple", 16))
        c = -(-n_ctx // tile) * tile
        layers = []
        for i in range(2 * int(cfg["n_layer"])):
            shape = (n_kv, d, c) if i % 2 == 0 else (n_kv, c, d)
            layers.append(tvm.runtime.tensor(np.zeros(shape, dtype=np.float32), self._dev))
        self._load["kv_cache_bytes"] = 2 * int(cfg["n_layer"]) * n_kv * d * c * 4
        return tvm_ffi.Array(layers)

    def _verify_library(self, path: Path) -> bool | None:
        lib = (self._manifest or {}).get("library") or {}
        want = lib.get("sha256")
        if not want:
            return None
        got = _sha256(path)
        if got != want:
            msg = (
                f"{path.name}: sha256 {got[:16]}... differs from the artifact manifest's "
                f"{want[:16]}...; refusing to load a damaged library (TVM would die by signal)"
            )
            raise RuntimeError(msg)
        return True

    def _load_weights(self, folder: Path) -> Any:
        tvm = self._tvm
        load = tvm.get_global_func("vm.builtin.tensor_cache.load")
        by_name = tvm.get_global_func("vm.builtin.param_array_from_cache_by_name")
        clear = tvm.get_global_func("vm.builtin.tensor_cache.clear")
        if not (folder / "tensor-cache.json").is_file():
            msg = f"{folder} has no tensor-cache.json (the weights)"
            raise FileNotFoundError(msg)
        load(str(folder), int(self._dev.dlpack_device_type()), 0)
        try:
            return by_name(list(self._spec["param_names"]))
        finally:
            clear()

    @property
    def vocab_size(self) -> int:
        return int(self._spec["config"]["vocab_size"])

    @property
    def special_ids(self) -> dict[str, int]:
        return {"bos": int(self._spec.get("bos_id", -1)), "eos": int(self._spec.get("eos_id", -1))}

    def reset(self) -> None:
        self._pos = 0
        self._logits = None

    def _run(self, fn: Any, tokens: Sequence[int]) -> None:
        n = len(tokens)
        if n < 1:
            msg = "no tokens to process"
            raise ValueError(msg)
        if self._pos + n > self._n_ctx:
            msg = f"position {self._pos + n - 1} is past the context of {self._n_ctx} tokens"
            raise ValueError(msg)
        ids = np.asarray(tokens, dtype=np.int32)
        if int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size:
            msg = (
                f"token id out of range [0, {self.vocab_size}): {int(ids.min())}..{int(ids.max())}"
            )
            raise ValueError(msg)
        tvm = self._tvm
        n_past = tvm.runtime.ShapeTuple([self._pos])
        self._logits = fn(tvm.runtime.tensor(ids, self._dev), n_past, self._cache, self._params)
        self._pos += n

    def prefill(self, tokens: Sequence[int]) -> None:
        self._run(self._prefill_fn, tokens)

    def decode(self, token: int) -> None:
        self._run(self._decode_fn, [token])

    def last_logits(self) -> NDArray[np.float32]:
        if self._logits is None:
            msg = "no logits: nothing processed since reset"
            raise RuntimeError(msg)
        return np.asarray(self._logits.numpy()[-1], dtype=np.float32).copy()

    def counters(self) -> dict[str, float]:
        return {}  # TVM keeps no timing counters of its own

    # -- evidence ------------------------------------------------------------------------------
    def row_label(self) -> str:
        major_minor = ".".join(self._version.split(".")[:2]) or "?"
        how = "compiled ahead of time" if self._mode == "aot" else "compiled at load (JIT)"
        return f"TVM {major_minor} Relax VM, {how} — the MLC-LLM compilation path; {ENGINE_NOTE}"

    def _debug_facilities(self) -> list[str]:
        tvm = self._tvm
        found = [n for n in _DEBUG_FUNCS if tvm.get_global_func(n, allow_missing=True)]
        if self._vm is not None:
            for attr, what in (
                (
                    "set_instrument",
                    "VirtualMachine.set_instrument: a hook before/after every "
                    "VM call (per-kernel timing or tensor dumps)",
                ),
                ("time_evaluator", "VirtualMachine.time_evaluator: repeat-and-time one function"),
            ):
                if hasattr(self._vm, attr):
                    found.append(what)
        if self._lib is not None and hasattr(self._lib, "inspect_source"):
            try:
                kept = bool(self._lib.inspect_source("ll"))
            except Exception:  # not every module kind keeps its source
                kept = False
            if kept:  # JIT: the LLVM module is in memory (a loaded .so keeps none)
                found.append("Module.inspect_source('ll'/'asm'): the generated LLVM IR / assembly")
        return found

    def placement(self) -> dict[str, Any] | None:
        """The ``Placement`` capability: this row builds for and runs on the CPU only."""
        if self._tvm is None:
            return None
        return {"requested": ["cpu"], "used": ["cpu"], "fallback": False}

    def evidence(self) -> dict[str, Any]:
        if self._tvm is None:
            return {}
        mapped = _mapped_libraries()
        return {
            "row_label": self.row_label(),
            "mode": self._mode,
            "ignored_options": self._ignored,
            "runtime_import": {
                "runtime_only_requested": self._runtime_only,
                "libraries_mapped": mapped,
                "compiler_loaded": any("compiler" in n for n in mapped),
                "import_s": round(self._import_s, 4),
            },
            "manifest": self._manifest,
            "artifact": {
                "folder": str(self._folder) if self._folder else None,
                "manifest_path": str(self._folder / MANIFEST_FILE)
                if self._folder and self._manifest
                else None,
                "library_sha256_verified": self._verified,
            },
            "settings": self._settings_evidence(),
            "load_breakdown": self._load,
            "threads": self._threads,
            "package": package_breakdown(self.distribution),
            "mlc_llm": mlc_llm_status(),
            "debug_facilities": self._debug_facilities(),
            "counters": "none: TVM keeps no timing counters (the harness clock is the source)",
        }

    def _settings_evidence(self) -> dict[str, Any]:
        """The settings that change this row's speed or memory: what was asked for, and what
        ran — the target and CPU features the library was compiled for (the artifact manifest,
        or the JIT compile's target), the VM allocator and TVM's thread pool size."""
        target = (self._manifest or {}).get("target") or self._load.get("jit", {}).get("target")
        info = target if isinstance(target, dict) else {}
        features = info.get("llvm_cpu_features")
        return {
            "requested": {
                "mode": self._mode,
                "allocator": self._load.get("allocator"),
                "threads": (self._threads or {}).get("requested"),
            },
            "effective": {
                "target": info.get("string") or info.get("json") or info or None,
                "mcpu": info.get("mcpu"),
                "vector_width_bits": info.get("vector_width_bits"),
                "llvm_cpu_features": len(features) if isinstance(features, list) else None,
                "allocator": self._load.get("allocator"),
                "tvm_num_threads": (self._threads or {}).get("tvm_num_threads"),
            },
            "binding_defaults": BINDING_DEFAULTS,
        }

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend, kernels and effective numerics (StackReporting), from this row's evidence."""
        from rtmatrix.runtimes.tvm import stack

        return stack.report(dict(evidence), dtype)

    def close(self) -> None:
        self._vm = None
        self._params = None
        self._cache = None
        self._logits = None
        self._lib = None
