"""The ONNX Runtime row: an ``InferenceSession`` driven by rtmatrix's own KV-cache loop.

``load`` creates the session (intra-op threads from the matrix, execution providers from the
runtime's ``options``); ``prefill``/``decode`` each run the graph once on numpy inputs and keep the
``present.*`` outputs as the next call's ``past_key_values.*``. ONNX Runtime has no per-call timing
counters, so ``counters()`` is empty and PP/TG come from the harness clock only.

Placement evidence answers "which execution provider actually ran this?": the providers asked for,
the ones the session registered (``get_providers()``), ORT's own warning text when it replaced a
provider, per-provider node counts and the number of contiguous partitions. Node counts come from
the session's EP graph-assignment record (``session.record_ep_graph_assignment_info``) where this
ORT has it; otherwise from a second session with the same options whose verbose log ("Node
placements") or profiling JSON (``args.provider``) is parsed. An explicitly requested provider
that is absent from the session, or that was given no node, is a fallback.

Runtime options (``[[runtimes]] options`` in the matrix):

- ``providers``: list of provider names (or ``[name, {provider options}]`` pairs); default: what
  ``get_available_providers()`` offers, CPU last (strict runs leave CPU out).
- ``disable_cpu_ep_fallback``: true sets ``session.disable_cpu_ep_fallback=1`` (a strict run: what
  the requested providers cannot run is a load error, not silent CPU work).
- ``graph_optimization_level``: ``disable`` | ``basic`` | ``extended`` | ``all`` (ORT default).
- ``execution_mode``: ``sequential`` (ORT default) | ``parallel`` (operators on the inter-op pool).
- ``inter_op_threads``: the inter-op pool's size (ORT default 0: its own choice; only
  ``parallel`` uses it). Intra-op threads are the matrix's ``threads`` (ORT's default, 0, is one
  per physical core; every row gets the same threads here).
- ``allow_spinning``: false sets ``session.intra_op.allow_spinning=0`` (ORT default: spin).
- ``log_severity_level``: the session's log level (0 verbose … 4 fatal; default 2, warnings).
- ``session_config``: extra ``add_session_config_entry`` pairs, e.g.
  ``{"session.intra_op.allow_spinning" = "0"}`` (ORT's defaults otherwise).
- ``placement_source``: ``auto`` (default) | ``api`` | ``log`` | ``profile``: where node counts
  come from.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import re
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import LoadParams, RuntimeUnavailable
from rtmatrix.adapters.kvloop import ExplicitKvAdapter
from rtmatrix.numerics import StackReport
from rtmatrix.runtimes.onnxruntime.errors import ERROR_PATTERNS
from rtmatrix.runtimes.onnxruntime.placement import (
    CPU,
    count_partitions,
    judge_fallback,
    parse_placement_log,
    provider_names,
)
from rtmatrix.runtimes.onnxruntime.profile import parse_profile

PLACEMENT_SOURCES = ("auto", "api", "log", "profile")
_OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
_EXECUTION_MODES = {"sequential": "ORT_SEQUENTIAL", "parallel": "ORT_PARALLEL"}
SPINNING = "session.intra_op.allow_spinning"
#: session config entries that change performance, read back into the settings evidence
_CONFIG_KEYS = (SPINNING, "session.inter_op.allow_spinning", "session.disable_cpu_ep_fallback",
                "session.set_denormal_as_zero", "session.use_env_allocators")  # fmt: skip
#: where this row's settings differ from what ONNX Runtime (and onnxruntime_perf_test) does
BINDING_DEFAULTS = {
    "intra_op_num_threads": "ORT default 0 (one thread per physical core; onnxruntime_perf_test "
    "-x 0); this row uses the matrix's threads, as every row does",
}
_SEVERITY = {0: "verbose", 1: "info", 2: "warning", 3: "error", 4: "fatal"}
_MAX_LOG_LINES = 5000
_EVIDENCE_PATTERNS = re.compile(
    r"provider|placed|placement|fallback|partition|subgraph|error|fail|warn|not in available",
    re.IGNORECASE,
)
NP_TYPES = {
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
}


@contextlib.contextmanager
def _capture_warnings(sink: list[str]) -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            sink.extend(f"{w.category.__name__}: {w.message}" for w in caught)


class OrtAdapter(ExplicitKvAdapter):
    name: ClassVar[str] = "onnxruntime"
    distribution: ClassVar[str] = "onnxruntime"
    extra: ClassVar[str] = "onnxruntime"
    container: ClassVar[str] = "onnx"
    #: onnxruntime-genai's model builder: its model.onnx, fed by this loop (no position_ids;
    #: the cache's head dimension is symbolic, see ``_genai_decoder``)
    converter: ClassVar[str | None] = "ort_genai"
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS

    def __init__(self) -> None:
        self._ort: Any = None
        self._sess: Any = None
        self._model_path: Path | None = None
        self._options: dict[str, Any] = {}
        self._threads = 1
        self._providers: list[Any] = []
        self._explicit = False
        self._strict = False
        self._source = "auto"
        self._api_requested = False
        self._load_error: str | None = None
        self._warnings: list[str] = []
        self._log: list[tuple[int, str]] = []
        self._log_cb_installed = False
        self._n_ctx = 0
        self._n_vocab = 0
        self._special: dict[str, int] = {}
        self._inputs: dict[str, Any] = {}
        self._outputs: list[str] = []
        self._past_of: dict[str, str] = {}  # present output -> past input
        self._empty_past: dict[str, NDArray[Any]] = {}
        self._past: dict[str, NDArray[Any]] = {}
        self._pos = 0
        self._logits: NDArray[np.float32] | None = None
        #: (evidence, placement) once reported: the placement probes release the session
        self._reported: tuple[dict[str, Any], dict[str, Any] | None] | None = None

    # -- runtime -------------------------------------------------------------------------------
    def import_runtime(self) -> str:
        try:
            import onnxruntime
        except ImportError as exc:
            msg = f"onnxruntime is not installed ({exc}); pip install 'rtmatrix[onnxruntime]'"
            raise RuntimeUnavailable(msg) from exc
        self._ort = onnxruntime
        self._install_log_capture()
        return str(onnxruntime.__version__)

    def _install_log_capture(self) -> None:
        """Route ORT's logger into this adapter where the API exists (ORT >= 1.2x); otherwise
        ORT logs to stderr, which the runner keeps as ``stderr_tail``."""
        setter = getattr(self._ort, "set_default_logger_callback", None)
        if setter is None:
            return

        def _cb(severity: int, _category: str, _logid: str, where: str, message: str) -> None:
            if len(self._log) < _MAX_LOG_LINES:
                self._log.append((int(severity), f"{where} {message}"))

        try:
            setter(_cb, 2)
        except (RuntimeError, TypeError):
            return
        if not self._log_cb_installed:
            atexit.register(self._remove_log_capture)  # never call into Python at shutdown
        self._log_cb_installed = True

    def _remove_log_capture(self) -> None:
        if self._log_cb_installed and self._ort is not None:
            with contextlib.suppress(Exception):
                self._ort.set_default_logger_callback(None)
        self._log_cb_installed = False

    # -- model ---------------------------------------------------------------------------------
    def _session_options(self, params: LoadParams, *, verbose: bool = False) -> Any:
        ort, opts = self._ort, self._options
        so = ort.SessionOptions()
        so.intra_op_num_threads = params.threads
        if "inter_op_threads" in opts:
            so.inter_op_num_threads = int(opts["inter_op_threads"])
        mode = opts.get("execution_mode")
        if mode is not None:
            if mode not in _EXECUTION_MODES:
                msg = f"execution_mode {mode!r}; valid: {', '.join(_EXECUTION_MODES)}"
                raise ValueError(msg)
            so.execution_mode = getattr(ort.ExecutionMode, _EXECUTION_MODES[mode])
        if "allow_spinning" in opts:
            so.add_session_config_entry(SPINNING, "1" if opts["allow_spinning"] else "0")
        so.log_severity_level = 0 if verbose else int(opts.get("log_severity_level", 2))
        if verbose:
            so.log_verbosity_level = 0
        level = opts.get("graph_optimization_level")
        if level is not None:
            if level not in _OPT_LEVELS:
                msg = f"graph_optimization_level {level!r}; valid: {', '.join(_OPT_LEVELS)}"
                raise ValueError(msg)
            so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[level])
        for key, value in dict(opts.get("session_config", {})).items():
            so.add_session_config_entry(str(key), str(value))
        if self._strict:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        return so

    def _default_providers(self) -> list[Any]:
        avail = list(self._ort.get_available_providers())
        ordered = [p for p in avail if p != CPU]
        return ordered if self._strict else [*ordered, CPU]

    def _create(self, so: Any) -> Any:
        with _capture_warnings(self._warnings):
            return self._ort.InferenceSession(str(self._model_path), so, providers=self._providers)

    def load(self, model_path: Path, params: LoadParams) -> None:
        ort = self._ort
        self._reported = None
        self._options = dict(params.options)
        self._threads = params.threads
        self._n_ctx = params.n_ctx
        self._model_path = model_path / "model.onnx" if model_path.is_dir() else model_path
        self._strict = bool(self._options.get("disable_cpu_ep_fallback", False))
        self._source = str(self._options.get("placement_source", "auto"))
        if self._source not in PLACEMENT_SOURCES:
            msg = f"placement_source {self._source!r}; valid: {', '.join(PLACEMENT_SOURCES)}"
            raise ValueError(msg)
        given = self._options.get("providers")
        self._explicit = given is not None
        self._providers = (
            [p if isinstance(p, str) else (str(p[0]), dict(p[1])) for p in given]
            if given is not None
            else self._default_providers()
        )
        so = self._session_options(params)
        has_api = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")
        if self._source in ("auto", "api") and has_api:
            so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
            self._api_requested = True
        try:
            self._sess = self._create(so)
        except Exception as exc:
            self._load_error = f"{type(exc).__name__}: {exc}"
            if self._strict:
                msg = (
                    f"strict run (session.disable_cpu_ep_fallback=1) refused at load: {exc} "
                    f"[requested providers: {', '.join(provider_names(self._providers)) or '-'}; "
                    f"available: {', '.join(ort.get_available_providers())}]"
                )
                raise RuntimeError(msg) from exc
            raise
        self._describe_io()

    def _describe_io(self) -> None:
        sess = self._sess
        self._inputs = {i.name: i for i in sess.get_inputs()}
        outs = [o.name for o in sess.get_outputs()]
        logits = "logits" if "logits" in outs else outs[0]
        self._outputs = [logits, *(o for o in outs if o != logits)]
        last = sess.get_outputs()[outs.index(logits)].shape[-1]
        if not isinstance(last, int):
            msg = f"output {logits!r} has no static vocabulary dimension ({last!r})"
            raise ValueError(msg)
        self._n_vocab = last
        self._past_of, self._empty_past = {}, {}
        head_size = self._genai_decoder().get("head_size")
        for name, info in self._inputs.items():
            if name in ("input_ids", "attention_mask", "position_ids"):
                continue
            suffix = name.split(".", 1)[-1]
            present = next((o for o in outs if o != name and o.endswith("." + suffix)), None)
            shape = list(info.shape)
            if len(shape) == 4 and not isinstance(shape[3], int) and isinstance(head_size, int):
                shape[3] = head_size  # the model builder's symbolic ``kv_cache_dim``
            if (
                present is None
                or len(shape) != 4
                or not all(isinstance(shape[d], int) for d in (1, 3))
            ):
                msg = (
                    f"input {name!r} {info.shape} is not a KV-cache input this adapter can feed "
                    f"(expected past_*.N.key|value [batch, heads, past, head_dim] with a "
                    f"matching present output; a symbolic head_dim needs decoder.head_size in "
                    f"a genai_config.json beside the model)"
                )
                raise ValueError(msg)
            self._past_of[present] = name
            dtype = NP_TYPES.get(info.type, np.float32)
            self._empty_past[name] = np.zeros((1, shape[1], 0, shape[3]), dtype=dtype)
        if "input_ids" not in self._inputs:
            msg = f"the model has no 'input_ids' input (inputs: {', '.join(self._inputs)})"
            raise ValueError(msg)
        self._special = self._read_special_ids()
        self.reset()

    def _genai_decoder(self) -> dict[str, Any]:
        """``model.decoder`` of a genai_config.json beside the model, else empty: onnxruntime-
        genai's model builder leaves the cache's head dimension symbolic (``kv_cache_dim``,
        one export for plain and quantized caches) and names it there (``head_size``)."""
        assert self._model_path is not None
        with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
            cfg = json.loads(self._model_path.with_name("genai_config.json").read_text("utf-8"))
            return dict(cfg.get("model", {}).get("decoder") or {})
        return {}

    def _read_special_ids(self) -> dict[str, int]:
        """bos/eos from the model's metadata, else a genai_config.json beside it; a missing bos
        is left out (the worker then uses the fixture vocabulary's), a missing eos is -1."""
        meta = dict(self._sess.get_modelmeta().custom_metadata_map)
        cfg: dict[str, Any] = {}
        assert self._model_path is not None
        cfg_path = self._model_path.with_name("genai_config.json")
        if cfg_path.is_file():
            with contextlib.suppress(OSError, ValueError):
                cfg = json.loads(cfg_path.read_text("utf-8")).get("model", {})
        out: dict[str, int] = {}
        for key in ("bos", "eos"):
            val = meta.get(f"{key}_token_id", cfg.get(f"{key}_token_id"))
            if isinstance(val, list):
                val = val[0] if val else None
            if val is not None:
                with contextlib.suppress(TypeError, ValueError):
                    out[key] = int(val)
        out.setdefault("eos", -1)
        return out

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def special_ids(self) -> dict[str, int]:
        return dict(self._special)

    def _clear_cache(self) -> None:
        self._past = dict(self._empty_past)

    def _forward(self, tokens: Sequence[int], start: int, total: int, phase: str) -> Any:
        n = len(tokens)
        feeds: dict[str, Any] = dict(self._past)
        ids_type = NP_TYPES.get(self._inputs["input_ids"].type, np.int64)
        feeds["input_ids"] = np.asarray(tokens, dtype=ids_type).reshape(1, n)
        if "position_ids" in self._inputs:
            pos_type = NP_TYPES.get(self._inputs["position_ids"].type, np.int64)
            feeds["position_ids"] = np.arange(start, total, dtype=pos_type).reshape(1, n)
        if "attention_mask" in self._inputs:
            mask_type = NP_TYPES.get(self._inputs["attention_mask"].type, np.int64)
            feeds["attention_mask"] = np.ones((1, total), dtype=mask_type)
        outs = self._sess.run(self._outputs, feeds)
        for name, value in zip(self._outputs[1:], outs[1:], strict=True):
            past = self._past_of.get(name)
            if past is not None:
                self._past[past] = value
        return outs[0][0, -1]

    def counters(self) -> dict[str, float]:
        return {}  # ONNX Runtime keeps no per-call timing counters

    # -- evidence ------------------------------------------------------------------------------
    def _from_api(self) -> tuple[dict[str, int] | None, int | None, str | None]:
        if not self._api_requested or self._sess is None:
            return None, None, "not requested" if self._sess is not None else "no session"
        try:
            info = self._sess.get_provider_graph_assignment_info()
        except Exception as exc:
            return None, None, f"get_provider_graph_assignment_info failed: {exc}"
        order: list[str] = []
        for sub in info:
            order.extend([str(sub.ep_name)] * len(sub.get_nodes()))
        if not order:
            return None, None, "the session recorded no assignment"
        counts: dict[str, int] = {}
        for ep in order:
            counts[ep] = counts.get(ep, 0) + 1
        return counts, count_partitions(order), None

    def _probe_session(self, *, verbose: bool, profile: bool) -> Any:
        """A second session with the same model, providers and options, for diagnostics that
        would slow the measured one (verbose log, profiling)."""
        so = self._session_options(
            LoadParams(n_ctx=self._n_ctx, threads=self._threads, options=self._options),
            verbose=verbose,
        )
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = str(
                Path(tempfile.gettempdir()) / f"rtmatrix-ort-{os.getpid()}"
            )
        return self._create(so)

    def _release_session(self) -> None:
        """Drop the measured session before a diagnostic one loads the model again, so the
        cell's peak memory is not two copies of the model (``evidence`` runs after the reps)."""
        self._sess = None
        self._past = {}
        gc.collect()

    def _from_log(self) -> tuple[dict[str, int] | None, str | None]:
        if not self._log_cb_installed:
            return None, "this onnxruntime has no set_default_logger_callback to read its log"
        mark = len(self._log)
        self._ort.set_default_logger_callback(self._log_cb_proxy(), 0)
        try:
            self._probe_session(verbose=True, profile=False)
        except Exception as exc:
            return None, f"verbose probe session failed: {exc}"
        finally:
            verbose_lines = [text for _, text in self._log[mark:]]
            del self._log[mark:]
            self._install_log_capture()
        counts = parse_placement_log(verbose_lines)
        return (counts or None), (None if counts else "no 'Node placements' lines in the log")

    def _log_cb_proxy(self) -> Any:
        def _cb(severity: int, _category: str, _logid: str, where: str, message: str) -> None:
            self._log.append((int(severity), f"{where} {message}"))

        return _cb

    def _from_profile(self) -> tuple[dict[str, int] | None, int | None, str | None]:
        try:
            sess = self._probe_session(verbose=False, profile=True)
            feeds: dict[str, Any] = dict(self._empty_past)
            feeds["input_ids"] = np.ones((1, 2), dtype=np.int64)
            if "position_ids" in self._inputs:
                feeds["position_ids"] = np.arange(2, dtype=np.int64).reshape(1, 2)
            if "attention_mask" in self._inputs:
                feeds["attention_mask"] = np.ones((1, 2), dtype=np.int64)
            sess.run(None, feeds)
            path = Path(sess.end_profiling())
        except Exception as exc:
            return None, None, f"profiling probe failed: {exc}"
        try:
            events = json.loads(path.read_text("utf-8"))
        finally:
            path.unlink(missing_ok=True)
        counts, parts = parse_profile(events)
        return (counts or None), (parts or None), (None if counts else "no node events")

    def _node_placement(self) -> dict[str, Any]:
        tried: dict[str, str] = {}
        order = ("api", "log", "profile") if self._source == "auto" else (self._source,)
        for source in order:
            if source == "api":
                counts, parts, why = self._from_api()
                label = "ep-graph-assignment-api"
            elif source == "log":
                self._release_session()
                counts, why = self._from_log()
                parts, label = None, "verbose-log (second session, same options)"
            else:
                self._release_session()
                counts, parts, why = self._from_profile()
                label = "profiling-json (second session, same options, one 2-token run)"
            if counts:
                out: dict[str, Any] = {"nodes_by_provider": counts, "source": label}
                out["partitions"] = parts
                if parts is None:
                    out["partitions_reason"] = "this source gives counts, not execution order"
                if tried:
                    out["not_used"] = tried
                return out
            tried[source] = why or "no data"
        return {"nodes_by_provider": None, "partitions": None, "source": None, "not_used": tried}

    def _debug_facilities(self) -> dict[str, Any]:
        ort = self._ort
        so_attrs = set(dir(ort.SessionOptions))
        sess_attrs = set(dir(ort.InferenceSession))
        api = "get_provider_graph_assignment_info" in sess_attrs
        return {
            "verbose_log": {
                "available": "log_severity_level" in so_attrs,
                "how": "SessionOptions.log_severity_level = 0 (prints 'Node placements')",
            },
            "logger_callback": {
                "available": hasattr(ort, "set_default_logger_callback"),
                "used": self._log_cb_installed,
                "how": "onnxruntime.set_default_logger_callback(fn, severity)",
            },
            "profiling": {
                "available": "enable_profiling" in so_attrs and "end_profiling" in sess_attrs,
                "how": "SessionOptions.enable_profiling = True; end_profiling() -> JSON "
                "(args.provider per node)",
            },
            "placement_api": {
                "available": api,
                "used": self._api_requested,
                "how": "session.record_ep_graph_assignment_info=1; "
                "get_provider_graph_assignment_info()",
            },
            "optimized_model_dump": {
                "available": "optimized_model_filepath" in so_attrs,
                "how": "SessionOptions.optimized_model_filepath",
            },
            "run_log": {
                "available": "log_severity_level" in set(dir(ort.RunOptions)),
                "how": "RunOptions.log_severity_level",
            },
            "ep_devices": {
                "available": hasattr(ort, "get_ep_devices"),
                "how": "onnxruntime.get_ep_devices()",
            },
        }

    def _devices(self) -> list[dict[str, Any]]:
        getter = getattr(self._ort, "get_ep_devices", None)
        if getter is None:
            return [{"device": str(self._ort.get_device())}]
        try:
            return [
                {
                    "ep": str(d.ep_name),
                    "ep_vendor": str(d.ep_vendor),
                    "type": str(d.device.type).rsplit(".", 1)[-1],
                    "vendor": str(d.device.vendor),
                }
                for d in getter()
            ]
        except Exception as exc:
            return [{"error": f"device enumeration failed: {exc}"}]

    def evidence(self) -> dict[str, Any]:
        return self._report()[0]

    def placement(self) -> dict[str, Any] | None:
        """Which execution provider ran this (the ``Placement`` capability): the providers
        asked for, the session's, per-provider node counts, the fallback judgement."""
        return self._report()[1]

    def _report(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Evidence and placement, built together once (in that order the probes need: model
        facts from the measured session, then node counts, which may release it)."""
        if self._reported is None:
            self._reported = self._build_report()
        return self._reported

    def _build_report(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        ort = self._ort
        if ort is None:
            return {}, None
        requested = provider_names(self._providers)
        had_session = self._sess is not None
        used = list(self._sess.get_providers()) if had_session else []
        model = self._model_info() if had_session else None
        nodes = self._node_placement() if had_session else {}
        fallback, problems = judge_fallback(
            requested, used, nodes.get("nodes_by_provider"), self._explicit
        )
        fallback = fallback and had_session  # no session: nothing ran anywhere
        lines = [f"[{_SEVERITY.get(s, s)}] {t}" for s, t in self._log]
        warn_lines = [f"[{_SEVERITY.get(s, s)}] {t}" for s, t in self._log if s >= 2]
        detail = "; ".join([*self._warnings, *warn_lines][:10])
        placement: dict[str, Any] = {
            "requested": requested,
            "requested_explicitly": self._explicit,
            "used": used,
            "fallback": fallback,
            "detail": detail or None,
            "problems": problems,
            "strict": self._strict,
            "available": list(ort.get_available_providers()),
            **nodes,
        }
        build = getattr(ort, "get_build_info", None)
        ev: dict[str, Any] = {
            "system_info": f"onnxruntime {ort.__version__}"
            + (f"; {build()}" if build else "")
            + f"; device {ort.get_device()}",
            "devices": self._devices(),
            "debug_facilities": self._debug_facilities(),
            "settings": self._settings_evidence(),
            "session": {
                "intra_op_num_threads": self._threads,
                "providers_passed": [
                    p if isinstance(p, str) else [p[0], p[1]] for p in self._providers
                ],
                "options": self._options,
            },
            "python_warnings": self._warnings[:20],
            "log_lines_total": len(self._log),
            "log_excerpt": [ln for ln in lines if _EVIDENCE_PATTERNS.search(ln)][:80],
            "log_tail": lines[-40:],
            "warnings": warn_lines[:40],
        }
        if self._load_error:
            ev["load_error"] = self._load_error
        if model is not None:
            ev["model"] = model
        if had_session:
            ev["kernels"] = self._kernels()
        return ev, placement

    def _kernels(self) -> dict[str, Any]:
        """The optimized graph's nodes by execution provider and op type, from the session's own
        assignment record (what ran, after ORT's fusions: e.g. ``MatMulNBits`` or a
        ``DequantizeLinear`` kept in front of an f32 ``MatMul``)."""
        if not self._api_requested or self._sess is None:
            return {"unavailable": "this ORT records no EP graph assignment (or it was not asked)"}
        try:
            info = self._sess.get_provider_graph_assignment_info()
        except Exception as exc:  # the record is diagnostics: its absence is said, not fatal
            return {"unavailable": f"get_provider_graph_assignment_info failed: {exc}"}
        ops: dict[str, dict[str, int]] = {}
        for sub in info:
            per = ops.setdefault(str(sub.ep_name), {})
            for node in sub.get_nodes():
                key = f"{node.domain}.{node.op_type}" if node.domain else str(node.op_type)
                per[key] = per.get(key, 0) + 1
        return {
            "source": "InferenceSession.get_provider_graph_assignment_info(): the optimized "
            "graph's nodes per execution provider",
            "op_types": ops,
            "graph_optimization_level": str(self._options.get("graph_optimization_level", "all")),
        }

    def _settings_evidence(self) -> dict[str, Any]:
        """What the matrix asked for and what the session says it uses (its own
        ``get_session_options()``: optimization level, execution mode, thread counts, the
        performance-relevant config entries; ``(ORT default)`` where an entry was not set)."""
        requested = {
            k: self._options[k]
            for k in ("graph_optimization_level", "execution_mode", "inter_op_threads",
                      "allow_spinning", "session_config", "providers")
            if k in self._options
        } | {"intra_op_num_threads": self._threads}  # fmt: skip
        effective: dict[str, Any] = {}
        so = None
        if self._sess is not None:
            with contextlib.suppress(Exception):
                so = self._sess.get_session_options()
        if so is not None:
            effective = {
                "graph_optimization_level": str(so.graph_optimization_level).split(".")[-1],
                "execution_mode": str(so.execution_mode).split(".")[-1],
                "intra_op_num_threads": int(so.intra_op_num_threads),
                "inter_op_num_threads": int(so.inter_op_num_threads),
            }
            for key in _CONFIG_KEYS:
                try:
                    value = so.get_session_config_entry(key)
                except Exception:  # not set: ORT raises for a missing key
                    value = None
                effective[key] = value if value not in (None, "") else "(ORT default)"
        return {"requested": requested, "effective": effective,
                "binding_defaults": BINDING_DEFAULTS}  # fmt: skip

    def _model_info(self) -> dict[str, Any]:
        meta = self._sess.get_modelmeta()
        return {
            "producer": meta.producer_name,
            "graph": meta.graph_name,
            "metadata": dict(meta.custom_metadata_map),
            "inputs": {n: [str(i.type), list(i.shape)] for n, i in self._inputs.items()},
        }

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend, kernels and effective numerics (StackReporting), from this row's evidence."""
        from rtmatrix.runtimes.onnxruntime import stack

        return stack.report(dict(evidence), dtype)

    def close(self) -> None:
        self._sess = None
        self._past = {}
        self._remove_log_capture()
