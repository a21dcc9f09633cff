"""The onnxruntime-genai row: the same ONNX folder (``model.onnx`` + ``genai_config.json``) driven
through ``og.Generator`` with token ids — the "batteries-included" way ORT users generate text.

``prefill`` is ``Generator.append_tokens(prompt)`` and ``decode`` is ``append_tokens([token])``:
both run the model synchronously (the worker picks the token greedily from ``get_logits()``, so
every row is measured by the same loop). ``reset`` starts a new ``Generator``. genai keeps no timing
counters, so ``counters()`` is empty.

Placement: genai does not expose its ORT session. The providers asked for are compared with the
model's ``device_type``; node counts come from ORT's own verbose "Node placements" log, captured
from file descriptor 2 while the model loads (the session's log level is raised to verbose for the
load only when ``placement_log`` is on, the default; ORT logs nothing per run at that level).

Runtime options: ``providers`` (genai names, e.g. ``["cuda"]``; default none = CPU),
``provider_options`` (``{provider: {key: value}}``), ``placement_log`` (default true),
``session_options`` (merged into genai_config's decoder ``session_options``; threads always come
from the matrix).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, LoadParams, RuntimeUnavailable
from rtmatrix.adapters.capabilities import PromptCache
from rtmatrix.numerics import StackReport
from rtmatrix.runtimes.onnxruntime.placement import parse_placement_log
from rtmatrix.runtimes.onnxruntime_genai.errors import ERROR_PATTERNS
from rtmatrix.runtimes.onnxruntime_genai.stream import OrtGenaiBackend

GENAI_CONFIG = "genai_config.json"
_ORT_LINE = re.compile(r"\[(?P<sev>[VIWEF]):onnxruntime")
_EVIDENCE_PATTERNS = re.compile(r"execution provider|placed on|placement|fallback", re.IGNORECASE)
# candidate set_log_options keys; which ones this genai accepts is probed, not assumed
_LOG_OPTION_CANDIDATES = (
    "enabled",
    "ansi_tags",
    "warning",
    "generate_next_token",
    "append_next_tokens",
    "hit_eos",
    "hit_max_length",
    "model_input_values",
    "model_output_shapes",
    "model_output_values",
    "model_logits",
    "session_options",
    "value_stats",
)
# genai provider name -> the device_type a model placed on it reports
_DEVICE_OF = {"cuda": "CUDA", "dml": "DML", "webgpu": "WebGPU", "qnn": "QnnWithSharedMemory"}


@contextlib.contextmanager
def capture_fd2(sink: list[str]) -> Iterator[None]:
    """Collect what native code writes to file descriptor 2; echo all but ORT's verbose/info
    lines back to the real stderr so the runner's stderr tail still shows warnings and errors."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines = tmp.read().decode("utf-8", errors="replace").splitlines()
            sink.extend(lines)
            loud = [ln for ln in lines if not (m := _ORT_LINE.search(ln)) or m["sev"] in "WEF"]
            if loud:
                os.write(2, ("\n".join(loud) + "\n").encode())


class OrtGenaiAdapter(Adapter):
    name: ClassVar[str] = "onnxruntime_genai"
    distribution: ClassVar[str] = "onnxruntime-genai"
    extra: ClassVar[str] = "onnxruntime-genai"
    container: ClassVar[str] = "onnx"
    converter: ClassVar[str | None] = "ort_genai"  # its own model builder
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS

    def __init__(self) -> None:
        self._og: Any = None
        self._model: Any = None
        self._params: Any = None
        self._gen: Any = None
        self._folder: Path | None = None
        self._cfg: dict[str, Any] = {}
        self._providers: list[str] = []
        self._explicit = False
        self._placement_log = True
        self._threads = 1
        self._n_ctx = 0
        self._n_vocab = 0
        self._pos = 0
        self._log: list[str] = []
        self._load_error: str | None = None
        self._atexit = False
        self._backend: OrtGenaiBackend | None = None

    # -- runtime -------------------------------------------------------------------------------
    def import_runtime(self) -> str:
        try:
            import onnxruntime_genai
        except ImportError as exc:
            msg = (
                f"onnxruntime-genai is not installed ({exc}); "
                "pip install 'rtmatrix[onnxruntime-genai]'"
            )
            raise RuntimeUnavailable(msg) from exc
        self._og = onnxruntime_genai
        if not self._atexit:
            # genai reports leaked objects (and may touch Python) at shutdown: release first
            atexit.register(self._release)
            self._atexit = True
        return str(onnxruntime_genai.__version__)

    # -- model ---------------------------------------------------------------------------------
    def load(self, model_path: Path, params: LoadParams) -> None:
        og = self._og
        opts = dict(params.options)
        self._folder = model_path if model_path.is_dir() else model_path.parent
        cfg_path = self._folder / GENAI_CONFIG
        if not cfg_path.is_file():
            msg = (
                f"{self._folder} has no {GENAI_CONFIG}: onnxruntime-genai needs one beside the "
                "model (rtmatrix writes it for its fixtures)"
            )
            raise FileNotFoundError(msg)
        self._cfg = json.loads(cfg_path.read_text("utf-8")).get("model", {})
        self._threads, self._n_ctx = params.threads, params.n_ctx
        given = opts.get("providers")
        self._explicit = given is not None
        self._providers = [str(p) for p in (given or [])]
        self._placement_log = bool(opts.get("placement_log", True))
        config = og.Config(str(self._folder))
        config.clear_providers()
        for prov in self._providers:
            config.append_provider(prov)
        for prov, kv in dict(opts.get("provider_options", {})).items():
            for key, value in dict(kv).items():
                config.set_provider_option(str(prov), str(key), str(value))
        session: dict[str, Any] = {
            **dict(opts.get("session_options", {})),
            "intra_op_num_threads": params.threads,
        }
        if self._placement_log:
            session["log_severity_level"] = 0
        config.overlay(json.dumps({"model": {"decoder": {"session_options": session}}}))
        try:
            with capture_fd2(self._log):
                self._model = og.Model(config)
        except Exception as exc:
            self._load_error = f"{type(exc).__name__}: {exc}"
            raise
        vocab = self._cfg.get("vocab_size")
        if not isinstance(vocab, int):
            msg = f"{cfg_path}: model.vocab_size is missing or not an integer ({vocab!r})"
            raise ValueError(msg)
        self._n_vocab = vocab
        self.reset()

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def special_ids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for key in ("bos", "eos"):
            val = self._cfg.get(f"{key}_token_id")
            if isinstance(val, list):
                val = val[0] if val else None
            if isinstance(val, int):
                out[key] = val
        out.setdefault("eos", -1)
        return out

    def reset(self) -> None:
        og = self._og
        self._gen = None
        self._params = og.GeneratorParams(self._model)
        self._params.set_search_options(max_length=self._n_ctx)
        self._gen = og.Generator(self._model, self._params)
        self._pos = 0

    def _append(self, tokens: Sequence[int]) -> None:
        if self._pos + len(tokens) > self._n_ctx:
            msg = (
                f"context full: {self._pos} cached + {len(tokens)} new tokens > n_ctx {self._n_ctx}"
            )
            raise ValueError(msg)
        self._gen.append_tokens(np.asarray(tokens, dtype=np.int32))
        self._pos += len(tokens)

    def prefill(self, tokens: Sequence[int]) -> None:
        self._append(tokens)

    def decode(self, token: int) -> None:
        self._append([token])

    def last_logits(self) -> NDArray[np.float32]:
        logits = np.asarray(self._gen.get_logits(), dtype=np.float32).reshape(-1)
        return np.array(logits[-self._n_vocab :], dtype=np.float32, copy=True)

    def counters(self) -> dict[str, float]:
        return {}  # onnxruntime-genai keeps no per-call timing counters

    # -- Sampling --------------------------------------------------------------------------------
    sampler_api: ClassVar[str] = (
        "onnxruntime_genai.GeneratorParams.set_search_options(do_sample=True, temperature, "
        "top_k, top_p, repetition_penalty, random_seed) + Generator.generate_next_token()"
    )
    sampler_order: ClassVar[str] = "temperature-then-truncate"
    sampler_order_source: ClassVar[str] = (
        "onnxruntime-genai src/search.cpp GreedySearch_Cpu::SampleTopKTopP / SampleTopP: top-k, "
        "logits / temperature, softmax, top-p, draw"
    )

    def sample_generate(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        """``n_gen`` ids from the engine's own sampler on a new generator (min_p: not an option
        of this engine; asked for, it is refused)."""
        og = self._og
        if float(params.get("min_p", 0.0)) > 0:
            msg = "onnxruntime-genai has no min_p search option"
            raise RuntimeUnavailable(msg)
        gp = og.GeneratorParams(self._model)
        opts: dict[str, Any] = {
            "max_length": min(self._n_ctx, len(prompt) + n_gen),
            "do_sample": True,
            "temperature": float(params.get("temperature", 1.0)),
            "top_p": float(params.get("top_p", 1.0)),
            "repetition_penalty": float(params.get("repeat_penalty", 1.0)),
            "random_seed": int(seed),
        }
        k = int(params.get("top_k", 0) or 0)
        opts["top_k"] = k if k > 0 else self._n_vocab
        gp.set_search_options(**opts)
        gen = og.Generator(self._model, gp)
        gen.append_tokens(np.asarray(list(prompt), dtype=np.int32))
        out: list[int] = []
        while len(out) < n_gen and not gen.is_done():
            gen.generate_next_token()
            out.append(int(gen.get_next_tokens()[0]))
        del gen
        self.reset()
        return out

    # -- PromptCaching --------------------------------------------------------------------------
    def prompt_cache(self) -> PromptCache:
        return PromptCache(False, "reset() makes a new og.Generator for every generation: no KV "
                           "state carries from one generation to the next")  # fmt: skip

    # -- Tokenizing ------------------------------------------------------------------------------
    def tokenize_text(self, text: str) -> list[int]:
        """genai's own tokenizer (``og.Tokenizer``, from the folder's ``tokenizer.json``, which
        rtmatrix writes beside a real checkpoint's model)."""
        if self._folder is None or not (self._folder / "tokenizer.json").is_file():
            msg = f"{self._folder} has no tokenizer.json: genai has no tokenizer for this model"
            raise RuntimeUnavailable(msg)
        return [int(i) for i in self._og.Tokenizer(self._model).encode(text)]

    # -- capabilities: Streaming, Abortable, Placement -----------------------------------------
    def stream_backend(self) -> OrtGenaiBackend:
        """The ``stream``/``cancel`` backend: genai's ``Generator`` loop on the loaded model."""
        if self._backend is None:
            eos = self.special_ids.get("eos", -1)
            self._backend = OrtGenaiBackend(self._og, self._model, self._n_ctx, eos)
        return self._backend

    def abort_prefill(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
        """``terminate_session`` from another thread while ``append_tokens`` runs."""
        return self.stream_backend().abort_prefill(prompt, delay_s)

    def placement(self) -> dict[str, Any] | None:
        """The providers asked for against the model's ``device_type``; node counts from ORT's
        verbose "Node placements" log captured at load."""
        if self._og is None:
            return None
        device = str(self._model.device_type) if self._model is not None else None
        requested = self._providers or ["cpu"]
        used = [device] if device else []
        wanted = {_DEVICE_OF.get(p.lower(), p) for p in self._providers if p.lower() != "cpu"}
        problems = [f"{w} requested, model reports device {device}" for w in wanted if device != w]
        counts = parse_placement_log(self._log)
        warn = [ln for ln in self._log if (m := _ORT_LINE.search(ln)) and m["sev"] in "WEF"]
        placement: dict[str, Any] = {
            "requested": requested,
            "requested_explicitly": self._explicit,
            "used": used,
            "fallback": bool(self._explicit and problems and self._model is not None),
            "detail": "; ".join(warn[:10]) or None,
            "problems": problems,
            "nodes_by_provider": counts or None,
            "partitions": None,
            "partitions_reason": "genai exposes no session; the verbose log gives counts only",
            "source": "ORT verbose log during model load" if counts else None,
        }
        if not counts:
            placement["not_used"] = {
                "log": "placement_log is off"
                if not self._placement_log
                else "no 'Node placements' line in ORT's log"
            }
        return placement

    # -- evidence ------------------------------------------------------------------------------
    def _log_options(self) -> dict[str, bool]:
        """Which ``set_log_options`` keys this genai accepts (each tried alone, set to False)."""
        accepted: dict[str, bool] = {}
        for key in _LOG_OPTION_CANDIDATES:
            try:
                self._og.set_log_options(**{key: False})
                accepted[key] = True
            except Exception:
                accepted[key] = False
        return accepted

    def _debug_facilities(self) -> dict[str, Any]:
        og = self._og
        accepted = self._log_options()
        return {
            "log_options": {
                "available": hasattr(og, "set_log_options"),
                "keys": sorted(k for k, ok in accepted.items() if ok),
                "how": "onnxruntime_genai.set_log_options(enabled=True, ...)",
            },
            "log_callback": {
                "available": hasattr(og, "set_log_callback"),
                "how": "onnxruntime_genai.set_log_callback(fn)",
            },
            "ort_session_log": {
                "available": True,
                "used": self._placement_log,
                "how": "genai_config session_options.log_severity_level = 0 (ORT verbose log)",
            },
            "provider_probes": {
                name: bool(getattr(og, name)())
                for name in dir(og)
                if name.startswith("is_") and name.endswith("_available")
            },
        }

    def evidence(self) -> dict[str, Any]:
        og = self._og
        if og is None:
            return {}
        device = str(self._model.device_type) if self._model is not None else None
        ort_lines = [ln for ln in self._log if _ORT_LINE.search(ln)]
        warn = [ln for ln in self._log if (m := _ORT_LINE.search(ln)) and m["sev"] in "WEF"]
        ev: dict[str, Any] = {
            "system_info": f"onnxruntime-genai {og.__version__}; model type "
            f"{self._model.type if self._model is not None else '-'}; device {device}",
            "debug_facilities": self._debug_facilities(),
            "genai_config": self._cfg,
            "session": {"intra_op_num_threads": self._threads, "providers": self._providers},
            "log_lines_total": len(self._log),
            "log_excerpt": [
                ln
                for ln in self._log
                if _EVIDENCE_PATTERNS.search(ln)
                or ((m := _ORT_LINE.search(ln)) is not None and m["sev"] in "WEF")
                or not _ORT_LINE.search(ln)
            ][:80],
            "log_tail": (ort_lines or self._log)[-40:],
            "warnings": warn[:40],
        }
        if self._load_error:
            ev["load_error"] = self._load_error
        return ev

    def _release(self) -> None:
        self._backend = None
        self._gen = None
        self._params = None
        self._model = None
        gc.collect()

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend and effective numerics (StackReporting); genai exposes no optimized graph."""
        from rtmatrix.numerics import unavailable
        from rtmatrix.runtimes.onnxruntime import stack

        ev = dict(evidence)
        why = unavailable("onnxruntime-genai exposes no optimized graph or kernel record")
        return StackReport(
            backend=stack.backend(ev), kernels=why, numerics=stack.numerics(ev, dtype)
        )

    def close(self) -> None:
        self._release()
