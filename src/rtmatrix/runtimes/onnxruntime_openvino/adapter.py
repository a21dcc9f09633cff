"""The ONNX Runtime + OpenVINO execution provider row (PyPI ``onnxruntime-openvino``).

The same KV-cache loop and placement evidence as the ORT row (``OrtAdapter``), with
``["OpenVINOExecutionProvider", "CPUExecutionProvider"]`` by default. ``onnxruntime-openvino``
installs the same ``onnxruntime`` module as the plain wheel, so it lives in its own venv
(``pip install 'rtmatrix[onnxruntime-openvino]'``); a plain onnxruntime makes this row
``unavailable``. That build reads ONNX IR <= 13 (the exporter writes IR 8; recorded per cell).

What this row adds to the ORT evidence:

- ``partitions`` (``rtmatrix.metrics.partitions`` over the graph and assignment read by
  ``rtmatrix.runtimes.onnxruntime.graph_partitions``, ORT's profile read by
  ``rtmatrix.runtimes.onnxruntime.profile``): the partitions the delegate made, from ORT's
  EP graph-assignment record (one entry per OpenVINO subgraph; CPU nodes grouped into connected
  components) on the graph ORT partitioned (its basic-level optimized graph, dumped by a CPU
  session); the tensors crossing each boundary with dtype, shape and bytes, measured by running that
  graph with those tensors made outputs at the cell's prompt length (``prefill``) and for one
  token after it (``decode``), and per token; time per partition from a profiling session with the
  same providers (second prefill, second decode step; ``<EP>_<subgraph>_<k>_kernel_time`` events,
  named ``OpenVINO-EP-subgraph_N``); node coverage of the delegate. With only the CPU EP the same
  block describes the delegate-off control (``role: control``).
- ``openvino``: OpenVINO's version, devices and the CPU device's own defaults
  (``INFERENCE_PRECISION_HINT`` etc.), read through the OpenVINO C library the wheel bundles, in a
  child process; ``precision``: the OpenVINO EP's ``precision`` option as passed (the EP's
  documented CPU default is FP32, ACCURACY keeps the model's types; a bf16/f16 hint goes through
  ``load_config``), which parity then judges.

Runtime options beyond the ORT row's: OpenVINO EP options inside ``providers``
(``[["OpenVINOExecutionProvider", {precision = "FP32"}], "CPUExecutionProvider"]``; values are
passed as strings; ``num_of_threads`` defaults to the matrix's ``threads``),
``partition_analysis`` (default true; false skips the extra sessions).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import LoadParams, RuntimeUnavailable
from rtmatrix.metrics import partitions as pt
from rtmatrix.runtimes.onnxruntime import graph_partitions, profile
from rtmatrix.runtimes.onnxruntime.adapter import NP_TYPES, OrtAdapter
from rtmatrix.runtimes.onnxruntime.placement import CPU, provider_names

OV = "OpenVINOExecutionProvider"
MAX_IR_VERSION = 13  # onnxruntime-openvino 1.24.1 refused IR 14 at load
_OV_KEYS = (
    "FULL_DEVICE_NAME",
    "INFERENCE_PRECISION_HINT",
    "EXECUTION_MODE_HINT",
    "PERFORMANCE_HINT",
    "INFERENCE_NUM_THREADS",
    "OPTIMIZATION_CAPABILITIES",
)
_EXTRA_HINT = (
    "pip install 'rtmatrix[onnxruntime-openvino]' in a venv of its own "
    "(it installs the same onnxruntime module as the plain onnxruntime wheel)"
)


def ov_entry(provider: Any, threads: int) -> Any:
    """A provider list entry with OpenVINO EP options as strings and ``num_of_threads``
    defaulting to the matrix's threads; other providers pass through."""
    if isinstance(provider, str):
        name, opts = provider, {}
    else:
        name, opts = str(provider[0]), dict(provider[1])
    if name != OV:
        return provider
    out = {str(k): str(v) for k, v in opts.items()}
    out.setdefault("num_of_threads", str(threads))
    return [name, out]


def precision_record(ov_options: dict[str, str] | None, device: dict[str, Any]) -> dict[str, Any]:
    """What precision the OpenVINO EP was asked for, and what OpenVINO's device would pick."""
    if ov_options is None:
        return {"delegate": None}
    load_config = ov_options.get("load_config")
    hint = None
    if load_config:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            cfg = json.loads(load_config)
            dev = ov_options.get("device_type", "CPU")
            hint = (cfg.get(dev) or {}).get("INFERENCE_PRECISION_HINT")
    return {
        "ovep_precision_option": ov_options.get("precision"),
        "ovep_precision_used": ov_options.get("precision")
        or "not set: the EP's documented default for CPU is FP32",
        "load_config_inference_precision_hint": hint,
        "device_type": ov_options.get("device_type", "CPU (EP default)"),
        "openvino_device_default_hint": (device.get("CPU") or {}).get("INFERENCE_PRECISION_HINT"),
        "judged_by": "the cell's parity against the fp32 numpy reference",
    }


def read_ir_version(head: bytes) -> int | None:
    """``ModelProto.ir_version`` (field 1, a varint, serialized first) from a model file's first
    bytes, without parsing the whole (weights included) file; None when it is not there."""
    if not head or head[0] != 0x08:
        return None
    value, shift = 0, 0
    for b in head[1:11]:
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
    return None


def _vm_hwm() -> int | None:
    """This process's peak resident set (``VmHWM``, bytes) from /proc; None elsewhere."""
    try:
        status = Path("/proc/self/status").read_text("utf-8")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def _trim_heap() -> None:
    """Give freed heap back to the OS (glibc ``malloc_trim``); a no-op elsewhere."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(name).malloc_trim(0)


def ov_query() -> dict[str, Any]:
    """OpenVINO's version, devices and CPU defaults through the C library the onnxruntime-openvino
    wheel bundles (``onnxruntime/capi/libopenvino_c.so``). Run in a child process."""
    import ctypes

    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    lib = ctypes.CDLL(str(capi / "libopenvino_c.so"))

    class Version(ctypes.Structure):
        _fields_ = [("build", ctypes.c_char_p), ("description", ctypes.c_char_p)]

    class Devices(ctypes.Structure):
        _fields_ = [("devices", ctypes.POINTER(ctypes.c_char_p)), ("size", ctypes.c_size_t)]

    out: dict[str, Any] = {}
    ver = Version()
    if lib.ov_get_openvino_version(ctypes.byref(ver)) == 0:
        out["version"] = (ver.build or b"").decode()
        lib.ov_version_free(ctypes.byref(ver))
    core = ctypes.c_void_p()
    if lib.ov_core_create(ctypes.byref(core)) != 0:
        out["error"] = "ov_core_create failed"
        return out
    devs = Devices()
    names: list[str] = []
    if lib.ov_core_get_available_devices(core, ctypes.byref(devs)) == 0:
        names = [(devs.devices[i] or b"").decode() for i in range(devs.size)]
        lib.ov_available_devices_free(ctypes.byref(devs))
    out["devices"] = names
    for dev in names:
        props: dict[str, str] = {}
        for key in _OV_KEYS:
            val = ctypes.c_char_p()
            if lib.ov_core_get_property(core, dev.encode(), key.encode(), ctypes.byref(val)) == 0:
                props[key] = (val.value or b"").decode()
                lib.ov_free(val)
        out[dev] = props
    lib.ov_core_free(core)
    return out


def _ov_query_main() -> None:
    print(json.dumps(ov_query()))


# -- the partition evidence's pure steps -----------------------------------------------------------
#: per phase: time per partition, run time, unattributed time, unattributed events, fused inputs
_Times = tuple[
    dict[str, dict[str, float]],
    dict[str, float],
    dict[str, float],
    list[str],
    dict[str, dict[str, dict[str, int]]],
]


def _measured_shapes(
    graph: pt.Graph,
    feeds: Mapping[str, Mapping[str, NDArray[Any]]],
    events: list[Mapping[str, Any]],
) -> dict[str, dict[str, pt.Shape]]:
    """Per phase, the shape of every tensor: the feeds', then those ORT's profile reports."""
    runs = profile.profile_runs(events)
    shapes: dict[str, dict[str, pt.Shape]] = {}
    for (ph, f), run in zip(feeds.items(), runs, strict=False):
        shapes[ph] = {k: (str(v.dtype), tuple(int(d) for d in v.shape)) for k, v in f.items()}
        shapes[ph] |= profile.shapes_from_profile(run, graph)
    return shapes


def _add_fused(out: dict[str, Any], fused: Mapping[str, Mapping[str, dict[str, int]]]) -> None:
    """What ORT handed each fused subgraph, per partition, and the initializers among it."""
    for entry in out["per_partition"]:
        for ph, per in fused.items():
            if entry["id"] in per:
                entry.setdefault("fused_node", {})[ph] = per[entry["id"]]
    # initializers ORT hands the delegate's fused subgraphs as inputs on every run (0 when the
    # delegate took the whole model and compiled its weights in)
    out["delegate_parameter_bytes_per_run"] = {
        ph: sum(v.get("parameter_bytes", 0) for v in per.values()) for ph, per in fused.items()
    }


def _evidence_sources(timing: str, n_runs: dict[str, int]) -> dict[str, Any]:
    """Where each part of the partition evidence comes from, in words."""
    return {
        "graph": "the basic-level optimized graph ORT partitions, dumped by a CPU session",
        "assignment": "session.get_provider_graph_assignment_info() of the measured session",
        "shapes": "measured: output_type_shape of every node in ORT's profile of that graph "
        "on the CPU EP, at the cell's prompt length and one decode step after it",
        "time": (
            "profiling JSON of the measured session (profiling on during the repetitions): "
            "mean per prefill run and per decode step over every repetition but the first"
            if timing == "measured"
            else "profiling JSON of a second session with the same providers and options, "
            "run as the loop does (prefill, decode at P-1, decode at P; twice): the second "
            "prefill and the last decode are timed"
        )
        + "; the profiler's own per-node cost lands in outside_partitions",
        "timed_runs": n_runs,
        "partition_definition": "one partition per delegate subgraph; CPU nodes grouped into "
        "connected components",
    }


def _graph_check(
    graph: pt.Graph,
    assignment: Sequence[tuple[str, Sequence[str]]],
    parts: Sequence[pt.Partition],
    cross: Sequence[pt.Crossing],
    fused: Mapping[str, Mapping[str, dict[str, int]]],
) -> dict[str, Any]:
    """The assignment record against the dumped graph, and each fused subgraph's outputs (from
    the decode profile) against the tensors the graph says leave that partition."""
    names = {n.name for n in graph.nodes}
    assigned = {n for _, ns in assignment for n in ns}
    decode = fused.get("decode", {})
    check = [
        (p.id, decode[p.id]["outputs"], len({c.tensor for c in cross if c.src == p.id}))
        for p in parts
        if p.id in decode
    ]
    return {
        "nodes_in_graph": len(names),
        "assigned_nodes_not_in_graph": len(assigned - names),
        "graph_nodes_not_assigned": len(names - assigned),
        "fused_outputs_match": all(a == b for _, a, b in check) if check else None,
        "fused_outputs": [{"id": i, "profile": a, "graph": b} for i, a, b in check],
    }


class OrtOpenVinoAdapter(OrtAdapter):
    name: ClassVar[str] = "onnxruntime_openvino"
    distribution: ClassVar[str] = "onnxruntime-openvino"
    extra: ClassVar[str] = "onnxruntime-openvino"
    container: ClassVar[str] = "onnx"
    #: not the genai builder's ONNX (com.microsoft contrib ops, untried with the OpenVINO EP)
    converter: ClassVar[str | None] = None

    def __init__(self) -> None:
        super().__init__()
        self._prompt_len = 0
        self._analysis = True
        self._assignment: list[tuple[str, list[str]]] | None = None
        self._assignment_why: str | None = None
        self._profile_measured = False
        self._measured_events: list[dict[str, Any]] = []
        self._calls: list[tuple[int, str]] = []  # (repetition, prefill|decode) per session run
        self._rep = -1
        self._paired_rounds = 0

    # -- runtime -------------------------------------------------------------------------------
    def import_runtime(self) -> str:
        try:
            version = super().import_runtime()
        except RuntimeUnavailable as exc:
            msg = f"onnxruntime is not installed ({exc}); {_EXTRA_HINT}"
            raise RuntimeUnavailable(msg) from exc
        avail = list(self._ort.get_available_providers())
        if OV not in avail:
            try:
                dist = f"onnxruntime-openvino {metadata.version(self.distribution)} is installed"
            except metadata.PackageNotFoundError:
                dist = "onnxruntime-openvino is not installed"
            msg = (
                f"this onnxruntime {version} has no {OV} (available: {', '.join(avail)}; "
                f"{dist}); {_EXTRA_HINT}"
            )
            raise RuntimeUnavailable(msg)
        return version

    # -- model ---------------------------------------------------------------------------------
    def load(self, model_path: Path, params: LoadParams) -> None:
        opts = dict(params.options)
        self._analysis = bool(opts.get("partition_analysis", True))
        given = opts.get("providers")
        provs = list(given) if given is not None else [OV, CPU]
        opts["providers"] = [ov_entry(p, params.threads) for p in provs]
        self._paired_rounds = int(opts.get("paired_control_rounds", 0))
        timing = str(opts.get("partition_timing", "measured"))
        if timing not in ("measured", "probe"):
            msg = f"partition_timing {timing!r}; valid: measured, probe"
            raise ValueError(msg)
        # a delegate row profiles its measured session (a few events per run: a fused node per
        # subgraph); the CPU EP's per-node profiling is not cheap, so a control row uses a probe
        self._profile_measured = (
            self._analysis and timing == "measured" and OV in provider_names(provs)
        )
        super().load(model_path, replace(params, options=opts))

    def _session_options(self, params: LoadParams, *, verbose: bool = False) -> Any:
        so = super()._session_options(params, verbose=verbose)
        if self._profile_measured and self._sess is None and not self._calls:
            so.enable_profiling = True
            so.profile_file_prefix = str(
                Path(tempfile.gettempdir()) / f"rtmatrix-ov-measured-{os.getpid()}"
            )
        return so

    def prefill(self, tokens: Sequence[int]) -> None:
        self._prompt_len = len(tokens)
        self._rep += 1
        self._calls.append((self._rep, "prefill"))
        super().prefill(tokens)

    def decode(self, token: int) -> None:
        self._calls.append((self._rep, "decode"))
        super().decode(token)

    def _end_measured_profile(self) -> None:
        if not self._profile_measured or self._sess is None:
            return
        try:
            path = Path(self._sess.end_profiling())
        except Exception:
            return
        try:
            self._measured_events = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            self._measured_events = []
        finally:
            path.unlink(missing_ok=True)

    def _ov_options(self) -> dict[str, str] | None:
        for p in self._providers:
            if not isinstance(p, str) and p[0] == OV:
                return {str(k): str(v) for k, v in dict(p[1]).items()}
            if p == OV:
                return {}
        return None

    # -- evidence ------------------------------------------------------------------------------
    def _record_assignment(self) -> None:
        """The measured session's EP assignment, (EP, node names) per reported subgraph."""
        if not self._api_requested or self._sess is None:
            self._assignment_why = "the EP graph-assignment API is not available or not requested"
            return
        try:
            info = self._sess.get_provider_graph_assignment_info()
            self._assignment = [
                (str(sub.ep_name), [str(n.name) for n in sub.get_nodes()]) for sub in info
            ]
        except Exception as exc:
            self._assignment_why = f"get_provider_graph_assignment_info failed: {exc}"

    def _build_report(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        if self._ort is None:
            return {}, None
        had_session = self._sess is not None
        hwm = _vm_hwm()  # before the extra sessions below load the model again
        if had_session:
            self._record_assignment()
            self._end_measured_profile()
        ev, pl = super()._build_report()
        assert pl is not None  # the runtime is imported
        ov_opts = self._ov_options()
        device = self._openvino_info() if ov_opts is not None else {}
        ev["openvino"] = device
        ev["precision"] = precision_record(ov_opts, device)
        if "model" in ev:
            ev["model"] |= self._ir_info()
        if not had_session:
            return ev, pl
        if not self._analysis:
            ev["partitions"] = {"unavailable": "partition_analysis = false in the runtime options"}
            return ev, pl
        # the delegate is on only where the session registered it (a refused EP is a fallback)
        delegate_on = OV in (pl.get("used") or [])
        try:
            part = self._partition_evidence(delegate_on)
        except Exception as exc:  # evidence is best effort; the measured figures stand
            part = {"error": f"{type(exc).__name__}: {exc}"}
        part["memory"] = {
            "peak_rss_before_analysis_bytes": hwm,
            "source": "VmHWM of the worker when evidence() began (after the counted repetitions)",
            "note": "the cell's peak memory also covers the sessions this analysis (and a paired "
            "control) creates afterwards; this figure is the measured phase's own peak",
        }
        if delegate_on and self._paired_rounds > 0 and "error" not in part:
            try:
                part["paired_control"] = self._paired_control(self._paired_rounds)
            except Exception as exc:
                part["paired_control"] = {"error": f"{type(exc).__name__}: {exc}"}
        ev["partitions"] = part
        if "partitions" in part and isinstance(part["partitions"], int):
            pl["partitions"] = part["partitions"]
            pl["partitions_source"] = (
                "rtmatrix.metrics.partitions: delegate subgraphs from the EP assignment record "
                "+ connected components of CPU nodes"
            )
            pl.pop("partitions_reason", None)
            pl["subgraphs"] = [
                p["subgraph"] for p in part.get("per_partition", []) if p.get("subgraph")
            ]
            pl["coverage_pct"] = (part.get("coverage") or {}).get("pct")
        return ev, pl

    def _ir_info(self) -> dict[str, Any]:
        assert self._model_path is not None
        try:
            with self._model_path.open("rb") as fh:
                ir = read_ir_version(fh.read(16))
        except OSError as exc:
            return {"ir_version": None, "ir_reason": f"cannot read the model file: {exc}"}
        return {"ir_version": ir, "max_ir_version_for_this_build": MAX_IR_VERSION}

    def _openvino_info(self) -> dict[str, Any]:
        code = (
            "from rtmatrix.runtimes.onnxruntime_openvino.adapter import _ov_query_main; "
            "_ov_query_main()"
        )
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
            return {"error": f"OpenVINO C API query failed: {exc}"}
        info["source"] = "OpenVINO C API (libopenvino_c.so bundled with onnxruntime), child process"
        return info

    # -- partitions ----------------------------------------------------------------------------
    def _feeds(self, n_new: int, n_past: int) -> dict[str, NDArray[Any]]:
        feeds: dict[str, NDArray[Any]] = {
            name: np.zeros((1, arr.shape[1], n_past, arr.shape[3]), dtype=arr.dtype)
            for name, arr in self._empty_past.items()
        }
        total = n_past + n_new

        def typed(name: str, arr: NDArray[Any]) -> NDArray[Any]:
            return arr.astype(NP_TYPES.get(self._inputs[name].type, np.int64))

        feeds["input_ids"] = typed("input_ids", np.ones((1, n_new)))
        if "position_ids" in self._inputs:
            feeds["position_ids"] = typed(
                "position_ids", np.arange(n_past, total).reshape(1, n_new)
            )
        if "attention_mask" in self._inputs:
            feeds["attention_mask"] = typed("attention_mask", np.ones((1, total)))
        return feeds

    def _partition_evidence(self, delegate_on: bool) -> dict[str, Any]:
        n_prompt = self._prompt_len or 16
        phases = {"prefill": (n_prompt, 0), "decode": (1, n_prompt)}
        self._release_session()
        _trim_heap()  # the analysis sessions should not stack on memory the measured one freed
        t0 = time.perf_counter()
        graph, events, feeds = self._partitioned_graph(phases)
        if self._assignment is None:
            return {"unavailable": self._assignment_why or "no EP assignment recorded"}
        parts = graph_partitions.ort_partitions(graph, self._assignment)
        cross = pt.crossings(graph, parts)
        shapes = _measured_shapes(graph, feeds, events)
        del events, feeds
        timing, n_runs, (times, run_us, other, missed, fused) = self._partition_times(phases, parts)
        delegate = OV if delegate_on else None
        tokens = {ph: n for ph, (n, _) in phases.items()}
        out = pt.summarize(graph, parts, delegate, shapes, tokens, times, run_us, other)
        _add_fused(out, fused)
        out["sources"] = _evidence_sources(timing, n_runs)
        out["graph_check"] = _graph_check(graph, self._assignment, parts, cross, fused)
        if missed:
            out["unattributed_events"] = sorted(set(missed))[:20]
        out["analysis_s"] = round(time.perf_counter() - t0, 2)
        return out

    def _partitioned_graph(
        self, phases: dict[str, tuple[int, int]]
    ) -> tuple[pt.Graph, list[Mapping[str, Any]], dict[str, dict[str, NDArray[Any]]]]:
        """The graph ORT partitions (its basic-level optimized graph; weights written aside, so
        only the graph is parsed), ORT's profile of a prefill and a decode step on it (the shapes
        of every tensor), and the feeds of those steps: one CPU session."""
        import onnx

        ort = self._ort
        with tempfile.TemporaryDirectory(prefix="rtmatrix-ov-") as tmp:
            dump = Path(tmp) / "basic.onnx"
            so = ort.SessionOptions()
            so.log_severity_level = 3
            so.intra_op_num_threads = self._threads
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            so.optimized_model_filepath = str(dump)
            so.add_session_config_entry(
                "session.optimized_model_external_initializers_file_name", "basic.onnx.data"
            )
            so.add_session_config_entry(
                "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
            )
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / "shapes")
            sess = ort.InferenceSession(str(self._model_path), so, providers=[CPU])
            feeds = {ph: self._feeds(n_new, n_past) for ph, (n_new, n_past) in phases.items()}
            for f in feeds.values():
                sess.run(None, f)
            prof = Path(sess.end_profiling())
            del sess
            gc.collect()
            model = onnx.load(str(dump), load_external_data=False)
            events = json.loads(prof.read_text("utf-8"))
        graph = graph_partitions.graph_from_onnx(model)
        return graph, events, feeds

    def _partition_times(
        self, phases: dict[str, tuple[int, int]], parts: list[pt.Partition]
    ) -> tuple[str, dict[str, int], _Times]:
        """Time per partition: the measured session's own profile where it was on (a delegate
        row), else a profiling session with the same providers and options; which of the two, and
        how many runs per phase were timed."""
        measured = self._measured_runs()
        timing = "measured"
        if measured is None:
            measured = self._probe_runs(phases)
            timing = "probe"
        n_runs = {ph: len(r) for ph, r in measured[0].items()}
        return timing, n_runs, self._mean_times(*measured, parts)

    # -- delegate on vs off, in the cell ------------------------------------------------------
    def _time_generation(self, sess: Any, n_prompt: int, n_gen: int) -> tuple[float, float]:
        """Seconds for a prefill of ``n_prompt`` tokens and for ``n_gen`` decode steps after it,
        the KV cache fed back as the adapter's loop does (harness clock)."""
        names = [o.name for o in sess.get_outputs()]
        clock = time.perf_counter
        feeds = self._feeds(n_prompt, 0)
        t0 = clock()
        outs = sess.run(names, feeds)
        pp = clock() - t0
        pos, tg = n_prompt, 0.0
        for _ in range(n_gen):
            step = self._feeds(1, pos)
            for name, value in zip(names, outs, strict=True):
                if name in self._past_of:
                    step[self._past_of[name]] = value
            t0 = clock()
            outs = sess.run(names, step)
            tg += clock() - t0
            pos += 1
        return pp, tg

    def _paired_control(self, rounds: int) -> dict[str, Any]:
        """Delegate on vs off measured side by side in this cell, so load drift on a shared
        machine falls on both: per round a session with this row's providers and one with the
        CPU EP only (same model and options), one at a time, order alternating, each warmed up
        then timed on a prefill and the decode steps of one repetition."""
        ort = self._ort
        n_prompt = self._prompt_len or 16
        # the decode steps of one timed repetition (the most any repetition made: the worker's
        # self-check probes after the timed ones prefill without decoding)
        per_rep = Counter(rep for rep, k in self._calls if k == "decode")
        n_gen = max(max(per_rep.values(), default=0), 1)
        n_gen = min(n_gen, max(self._n_ctx - n_prompt, 1))
        params = LoadParams(n_ctx=self._n_ctx, threads=self._threads, options=self._options)
        configs = {"delegate": self._providers, "control": [CPU]}
        tps: dict[str, dict[str, list[float]]] = {k: {"pp": [], "tg": []} for k in configs}
        for r in range(rounds):
            order = list(configs) if r % 2 == 0 else list(reversed(configs))
            for label in order:
                sess = ort.InferenceSession(
                    str(self._model_path), self._session_options(params), providers=configs[label]
                )
                if label == "delegate" and OV not in sess.get_providers():
                    return {"unavailable": f"{OV} was not registered in the paired session"}
                self._time_generation(sess, n_prompt, min(n_gen, 2))  # warm-up
                pp, tg = self._time_generation(sess, n_prompt, n_gen)
                tps[label]["pp"].append(n_prompt / pp)
                tps[label]["tg"].append(n_gen / tg)
                del sess
                gc.collect()
                _trim_heap()
        out: dict[str, Any] = {
            "method": "in-cell A/B: per round a session with this row's providers and one with "
            "the CPU EP only, same model and session options, one at a time, order alternating; "
            "each warmed up, then a prefill and the decode steps of one repetition timed by the "
            "harness clock",
            "rounds": rounds,
            "prompt_tokens": n_prompt,
            "decode_steps": n_gen,
            "delegate_tps": {k: [round(v, 2) for v in vals] for k, vals in tps["delegate"].items()},
            "control_tps": {k: [round(v, 2) for v in vals] for k, vals in tps["control"].items()},
        }
        for ph in ("pp", "tg"):
            ratios = [a / b for a, b in zip(tps["delegate"][ph], tps["control"][ph], strict=True)]
            med = statistics.median(ratios)
            out[f"{ph}_ratios"] = [round(x, 3) for x in ratios]
            out[f"{ph}_ratio_median"] = round(med, 3)
            out.setdefault("delegate_slower", {})[ph] = med < 1.0
            out.setdefault("slower_every_round", {})[ph] = all(x < 1.0 for x in ratios)
        return out

    def _probe_runs(
        self, phases: dict[str, tuple[int, int]]
    ) -> tuple[dict[str, list[list[Mapping[str, Any]]]], dict[str, list[float]]]:
        """A profiling session with the measured session's providers and options, run as the
        loop does, twice (warm-up, timed): the prefill follows decode steps, the timed decode
        step at context P follows the one at P-1."""
        sess = self._probe_session(verbose=False, profile=True)
        (n_prompt, _), (n_dec, n_ctx) = phases["prefill"], phases["decode"]
        sequence = [(n_prompt, 0), (n_dec, max(n_ctx - 1, 0)), (n_dec, n_ctx)]
        timed = {"prefill": len(sequence), "decode": 2 * len(sequence) - 1}  # run indices
        for _ in range(2):
            for n_new, n_past in sequence:
                sess.run(None, self._feeds(n_new, n_past))
        path = Path(sess.end_profiling())
        del sess
        gc.collect()
        try:
            events = json.loads(path.read_text("utf-8"))
        finally:
            path.unlink(missing_ok=True)
        runs, durs = profile.profile_runs(events), profile.run_durations(events)
        by_phase = {ph: [runs[i]] for ph, i in timed.items() if i < len(runs)}
        dur_phase = {ph: [durs[i]] for ph, i in timed.items() if i < len(durs)}
        return by_phase, dur_phase

    def _measured_runs(
        self,
    ) -> tuple[dict[str, list[list[Mapping[str, Any]]]], dict[str, list[float]]] | None:
        """The measured session's own profile, each run matched to the call that made it:
        every generation repetition but the first (warm-up)."""
        events = self._measured_events
        if not events:
            return None
        runs, durs = profile.profile_runs(events), profile.run_durations(events)
        if len(runs) != len(self._calls) or len(durs) != len(self._calls):
            return None
        first = 1 if any(rep > 0 for rep, _ in self._calls) else 0
        by_phase: dict[str, list[list[Mapping[str, Any]]]] = {}
        dur_phase: dict[str, list[float]] = {}
        for (rep, kind), run, dur in zip(self._calls, runs, durs, strict=True):
            if rep >= first:
                by_phase.setdefault(kind, []).append(run)
                dur_phase.setdefault(kind, []).append(dur)
        return by_phase, dur_phase

    @staticmethod
    def _mean_times(
        by_phase: dict[str, list[list[Mapping[str, Any]]]],
        dur_phase: dict[str, list[float]],
        parts: list[pt.Partition],
    ) -> _Times:
        """Mean microseconds per run of each phase, per partition; unattributed time; what ORT
        handed each fused subgraph (last run of the phase)."""
        times: dict[str, dict[str, float]] = {}
        run_us: dict[str, float] = {}
        other: dict[str, float] = {}
        missed: list[str] = []
        fused: dict[str, dict[str, dict[str, int]]] = {}
        for ph, runs in by_phase.items():
            if not runs:
                continue
            total = {p.id: 0.0 for p in parts}
            rest = 0.0
            for run in runs:
                t, o, miss = profile.partition_times(run, parts)
                for pid, v in t.items():
                    total[pid] += v
                rest += o
                missed.extend(miss)
            n = len(runs)
            times[ph] = {pid: v / n for pid, v in total.items()}
            other[ph] = rest / n
            durs = dur_phase.get(ph) or []
            run_us[ph] = sum(durs) / len(durs) if durs else 0.0
            fused[ph] = profile.fused_node_args(runs[-1], parts)
        return times, run_us, other, missed, fused
