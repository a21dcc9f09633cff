"""The llama.cpp row, through llama-cpp-python's low-level API.

``Llama`` loads the model and creates the context; prefill and decode then call ``llama_decode``
directly (one batch, synchronized) so the harness clock times the runtime call and little else,
and llama.cpp's own ``llama_perf_context`` counters are read beside it. All log lines are captured
with ``llama_log_set`` (``verbose=False`` would otherwise send load errors to /dev/null).
"""

from __future__ import annotations

import contextlib
import ctypes
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, CrashControl, LoadParams, RuntimeUnavailable
from rtmatrix.adapters.capabilities import PromptCache, ReferenceBudget
from rtmatrix.numerics import StackReport
from rtmatrix.protocol import JobParams
from rtmatrix.runtimes.llama_cpp.errors import ERROR_PATTERNS
from rtmatrix.runtimes.llama_cpp.server import LlamaCppServer
from rtmatrix.runtimes.llama_cpp.stack import BUFFER_LINE, KV_LINE
from rtmatrix.runtimes.llama_cpp.stream import LlamaCppBackend, abort_prefill

_LEVELS = {0: "none", 1: "debug", 2: "info", 3: "warn", 4: "error", 5: "cont"}
_EVIDENCE_PATTERNS = re.compile(
    r"assigned to device|buffer size|offload|splits|REPACK|flash_attn|n_ctx|cannot be used|"
    r"model type|file type|error|failed|warn",
    re.IGNORECASE,
)
_MAX_LOG_LINES = 5000


#: what llama-cpp-python's ``Llama(...)`` does by default where llama.cpp's own tools differ
BINDING_DEFAULTS = {
    "flash_attn": "disabled: Llama(flash_attn=False) maps to LLAMA_FLASH_ATTN_TYPE_DISABLED; "
    "llama.cpp's tools (llama-bench, llama-server, llama-cli) default to auto",
}
_FA_MODES = {"auto": "auto", "on": "on", "off": "off", True: "on", False: "off"}

#: llama.cpp's own default for ``llama_model_params.use_extra_bufts`` (the tools' ``--repack``)
EXTRA_BUFTS_DEFAULT = True

#: a cell that dies by a signal is rerun once with llama.cpp's extra buffer types off: the
#: CPU backend's weight-repacking layouts (CPU_REPACK, AMX) are the host-specific kernel path
#: most likely to crash (llama.cpp issue 20824: AMX on virtualized Sapphire/Granite Rapids)
CRASH_CONTROL = CrashControl(
    options={"extra_buffer_types": False},
    explains="llama.cpp's extra buffer types (use_extra_bufts: weights repacked for the CPU "
    "backend's AMX / CPU_REPACK kernels)",
    log_pattern=r"AMX|REPACK|repack|extra buffer|amx",
)


def extra_buffer_types(options: Mapping[str, Any]) -> bool:
    """The row's ``extra_buffer_types`` option (llama.cpp's ``use_extra_bufts``, which its
    tools call ``--repack``/``--no-repack``): true (llama.cpp's default) lets the CPU backend
    repack weights into its AMX or CPU_REPACK layouts; false keeps them as the file stores
    them."""
    value = options.get("extra_buffer_types", EXTRA_BUFTS_DEFAULT)
    if not isinstance(value, bool):
        msg = f"options.extra_buffer_types {value!r}: valid: true (llama.cpp's default) or false"
        raise ValueError(msg)
    return value


#: KV-cache types llama.cpp's tools accept (``-ctk``/``-ctv``) -> GGML type ids (ggml.h)
KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
            "iq4_nl": 20, "bf16": 30}  # fmt: skip
#: llama.cpp's default KV-cache type (``llama_context_default_params``: GGML_TYPE_F16)
KV_DEFAULT = "f16"


def kv_types(options: Mapping[str, Any]) -> dict[str, str]:
    """The row's ``type_k`` / ``type_v`` options (llama.cpp's KV-cache types; its tools'
    ``-ctk``/``-ctv``), only those set; a value llama.cpp does not know is refused."""
    out = {}
    for key in ("type_k", "type_v"):
        if key not in options:
            continue
        value = str(options[key]).lower()
        if value not in KV_TYPES:
            msg = (f"options.{key} {options[key]!r}: valid: {', '.join(KV_TYPES)} (llama.cpp's "
                   f"default: {KV_DEFAULT})")  # fmt: skip
            raise ValueError(msg)
        out[key] = value
    return out


def kv_args(options: Mapping[str, Any]) -> list[str]:
    """``-ctk T -ctv T`` for llama.cpp's tools, for the KV types the row sets."""
    flags = {"type_k": "-ctk", "type_v": "-ctv"}
    return [x for k, v in kv_types(options).items() for x in (flags[k], v)]


_CONTEXT_LINE = re.compile(r"^llama_context:\s+(\w+)\s+=\s+(\S.*?)\s*$")


def flash_attn_mode(options: Mapping[str, Any]) -> str:
    """The row's ``flash_attn`` option: ``auto`` (default, as llama.cpp's own tools), ``on``,
    ``off``."""
    value = options.get("flash_attn", "auto")
    mode = _FA_MODES.get(value.lower() if isinstance(value, str) else value)
    if mode is None:
        msg = f"options.flash_attn {value!r}: valid: 'auto', 'on', 'off' (or true/false)"
        raise ValueError(msg)
    return mode


@contextlib.contextmanager
def _flash_attn_type(mode: str) -> Iterator[None]:
    """``Llama(...)`` only takes a bool (on/disabled); for ``auto`` its DISABLED constant is
    pointed at AUTO while the context is created (the log's ``flash_attn = auto`` confirms)."""
    if mode != "auto":
        yield
        return
    import llama_cpp.llama_cpp as inner

    saved = inner.LLAMA_FLASH_ATTN_TYPE_DISABLED
    inner.LLAMA_FLASH_ATTN_TYPE_DISABLED = inner.LLAMA_FLASH_ATTN_TYPE_AUTO
    try:
        yield
    finally:
        inner.LLAMA_FLASH_ATTN_TYPE_DISABLED = saved


@contextlib.contextmanager
def model_params(use_extra_bufts: bool) -> Iterator[None]:
    """``Llama(...)`` takes no ``use_extra_bufts``: it starts from llama.cpp's
    ``llama_model_default_params()``, which is wrapped while the model loads so the field is
    the row's (the log's buffer lines confirm: no ``CPU_REPACK``/``AMX model buffer``)."""
    if use_extra_bufts == EXTRA_BUFTS_DEFAULT:
        yield
        return
    import llama_cpp.llama_cpp as inner

    saved = inner.llama_model_default_params

    def _params() -> Any:
        params = saved()
        params.use_extra_bufts = use_extra_bufts
        return params

    inner.llama_model_default_params = _params
    try:
        yield
    finally:
        inner.llama_model_default_params = saved


def load_settings(model_path: Path, params: LoadParams) -> dict[str, Any]:
    """The ``Llama(...)`` keyword arguments for this row: the one rule for how llama.cpp loads a
    model here, used by :meth:`LlamaCppAdapter.load` and by the server the ``serve`` scenario
    starts (its model settings have the same names, ``model_path`` aside). The whole context is
    one logical batch (``n_batch = n_ctx``); the physical batch is ``min(n_ctx, params.n_batch)``;
    CPU only; ``use_mmap`` from the row's options (default true)."""
    return {
        "model_path": str(model_path),
        "n_ctx": params.n_ctx,
        "n_batch": params.n_ctx,
        "n_ubatch": min(params.n_ctx, params.n_batch),
        "n_threads": params.threads,
        "n_threads_batch": params.threads,
        "n_gpu_layers": 0,
        "use_mmap": bool(params.options.get("use_mmap", True)),
        "flash_attn": flash_attn_mode(params.options) == "on",
        **{k: KV_TYPES[v] for k, v in kv_types(params.options).items()},
        "seed": 0,
        "verbose": False,
    }


class LlamaCppAdapter(Adapter):
    name: ClassVar[str] = "llama_cpp"
    distribution: ClassVar[str] = "llama-cpp-python"
    extra: ClassVar[str] = "llama-cpp"
    container: ClassVar[str] = "gguf"
    converter: ClassVar[str | None] = "llama_cpp"  # convert_hf_to_gguf.py of the same sdist
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS
    crash_control: ClassVar[CrashControl | None] = CRASH_CONTROL
    #: llama-bench once per phase (``-n 0``, ``-p 0``); llama-perplexity twice (the base file's
    #: logits, then the KL divergence of the cell's file from them)
    reference_budget: ClassVar[ReferenceBudget] = ReferenceBudget(benchmark_runs=2, quality_runs=2)

    def __init__(self) -> None:
        self._extra_bufts = EXTRA_BUFTS_DEFAULT
        self._lib: Any = None
        self._llm: Any = None
        self._ctx: Any = None
        self._n_vocab = 0
        self._log: list[tuple[str, str]] = []
        self._partial = ""
        self._log_cb: Any = None
        self._abort_cb: Any = None
        self._settings: dict[str, Any] = {}
        self._settings_options: dict[str, Any] = {}
        self._fa_mode = "auto"
        self._backend: LlamaCppBackend | None = None

    # -- runtime -------------------------------------------------------------------------------
    def import_runtime(self) -> str:
        try:
            import llama_cpp
        except ImportError as exc:
            msg = f"llama-cpp-python is not installed ({exc}); pip install 'rtmatrix[llama-cpp]'"
            raise RuntimeUnavailable(msg) from exc
        self._lib = llama_cpp
        self._install_log_capture()
        return str(llama_cpp.__version__)

    def _install_log_capture(self) -> None:
        lib = self._lib

        @lib.llama_log_callback  # type: ignore[untyped-decorator]
        def _cb(level: int, text: bytes, _user: Any) -> None:
            self._on_log(level, text.decode("utf-8", errors="replace"))

        self._log_cb = _cb  # keep a reference: ctypes does not
        lib.llama_log_set(_cb, ctypes.c_void_p(0))

    def _on_log(self, level: int, text: str) -> None:
        if len(self._log) >= _MAX_LOG_LINES:
            return
        self._partial += text
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            name = _LEVELS.get(level, str(level))
            self._log.append((name, line))
            self.log_line(name, line)

    # -- the runtime's own tools (ReferenceBenchmark; prepared once per run) ------------------
    @classmethod
    def prepare(cls, log: Callable[[str], None]) -> dict[str, Any]:
        """Build (or find cached) llama-bench + llama-server from the installed binding's
        sdist; a failure is recorded and the reference figures become ``unavailable``."""
        from rtmatrix.runtimes.llama_cpp import reftool

        log("llama_cpp: llama.cpp's tools from the installed llama-cpp-python's sdist (cached "
            "by version and options; a first build takes ~13 min on 2 cores)")  # fmt: skip
        try:
            build = reftool.build_tools(log=log)
        except reftool.ToolUnavailable as exc:
            return {"reference_tool": {"unavailable": exc.reason}}
        return {"reference_tool": {"root": str(build.root), "built_now": build.built,
                                   "version": build.tool_version()}}  # fmt: skip

    @classmethod
    def reference_benchmark(
        cls, model_path: Path, params: JobParams, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """llama-bench on the cell's file with the settings this row loads the model with
        (threads, n_batch, n_ubatch, flash attention, mmap, extra buffer types as ``--repack``),
        prompt and generation lengths."""
        from rtmatrix.runtimes.llama_cpp import reftool

        load = LoadParams(n_ctx=params.n_ctx, threads=params.threads, options=dict(options))
        st = load_settings(model_path, load)
        repack = ["--repack", "1" if extra_buffer_types(options) else "0"]
        extra = repack + kv_args(options)
        extra += [str(x) for x in options.get("reference_extra_args", [])]
        # PP from an empty cache and TG after the prompt, as the harness measures them: one
        # llama-bench run per phase (-n 0 / -p 0), with the row's own load settings
        runs = {
            "pp": (params.prompt_tokens, 0, 0),
            "tg": (0, params.gen_tokens, params.prompt_tokens),
        }
        out: dict[str, Any] = {}
        evidence: dict[str, Any] = {"tool": "llama-bench", "phases": {}, "commands": []}
        try:
            build = reftool.find_tools()
            for phase, (n_prompt, n_gen, depth) in runs.items():
                res = reftool.run_llama_bench(
                    build, model_path, threads=params.threads, n_prompt=n_prompt, n_gen=n_gen,
                    repetitions=params.repetitions, flash_attn=flash_attn_mode(options),
                    n_batch=int(st["n_batch"]), n_ubatch=int(st["n_ubatch"]),
                    use_mmap=bool(st["use_mmap"]), extra=["-d", str(depth), *extra],
                    timeout_s=max(60.0, 30.0 * params.repetitions),
                )  # fmt: skip
                found = reftool.phase_at(res.phases, phase, depth)
                ev = res.evidence()
                evidence["commands"].append(ev["command"])
                evidence |= {"tool_version": ev["tool_version"], "settings": ev["settings"]}
                evidence["phases"][phase] = ev["phases"] | {"depth": depth}
                if found is not None:
                    out[f"{phase}_tps"] = list(found.samples_tps)
        except reftool.ToolUnavailable as exc:
            raise RuntimeUnavailable(exc.reason) from exc
        evidence["command"] = " && ".join(evidence["commands"])
        return out | {"evidence": evidence}

    @classmethod
    def reference_quality(
        cls,
        model_path: Path,
        base_path: Path,
        text: str,
        n_ctx: int,
        params: JobParams,
        options: Mapping[str, Any],
    ) -> dict[str, Any]:
        """llama-perplexity's ``--kl-divergence`` of the cell's file from ``base_path`` over one
        chunk of ``n_ctx`` ids of ``text``, with the row's threads, flash attention and extra
        buffer types."""
        from rtmatrix.runtimes.llama_cpp import perplexity, reftool

        try:
            return perplexity.kl_divergence(
                reftool.find_tools(), base_path, model_path, text, n_ctx=n_ctx,
                threads=params.threads, flash_attn=flash_attn_mode(options),
                repack=extra_buffer_types(options), timeout_s=max(120.0, params.repetitions * 60.0),
                kv=kv_args(options),
            )  # fmt: skip
        except reftool.ToolUnavailable as exc:
            raise RuntimeUnavailable(exc.reason) from exc

    # -- model ---------------------------------------------------------------------------------
    def load(self, model_path: Path, params: LoadParams) -> None:
        """Options: ``use_mmap`` (default true; false reads the weights into anonymous memory,
        as a device without a page cache to lean on would), ``flash_attn``,
        ``extra_buffer_types`` (:func:`extra_buffer_types`)."""
        self._settings = load_settings(model_path, params)
        self._settings_options = dict(params.options)
        self._fa_mode = flash_attn_mode(params.options)
        self._extra_bufts = extra_buffer_types(params.options)
        try:
            with _flash_attn_type(self._fa_mode), model_params(self._extra_bufts):
                self._llm = self._lib.Llama(**self._settings)
        except (ValueError, RuntimeError) as exc:
            # the binding's message is generic; llama.cpp's own error lines say what was wrong
            errors = [text.strip() for lvl, text in self._log if lvl == "error"][-3:]
            if not errors:
                raise
            msg = f"llama.cpp: {' | '.join(errors)} ({exc})"
            raise type(exc)(msg) from exc
        self._ctx = self._llm._ctx.ctx
        self._n_vocab = int(self._llm.n_vocab())

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def special_ids(self) -> dict[str, int]:
        return {"bos": int(self._llm.token_bos()), "eos": int(self._llm.token_eos())}

    def reset(self) -> None:
        lib = self._lib
        lib.llama_memory_clear(lib.llama_get_memory(self._ctx), True)
        lib.llama_perf_context_reset(self._ctx)

    def _decode(self, tokens: Sequence[int]) -> None:
        lib = self._lib
        arr = (lib.llama_token * len(tokens))(*tokens)
        rc = lib.llama_decode(self._ctx, lib.llama_batch_get_one(arr, len(tokens)))
        lib.llama_synchronize(self._ctx)
        if rc != 0:
            msg = f"llama_decode returned {rc} for a batch of {len(tokens)} token(s)"
            raise RuntimeError(msg)

    def prefill(self, tokens: Sequence[int]) -> None:
        self._decode(tokens)

    def decode(self, token: int) -> None:
        self._decode([token])

    def last_logits(self) -> NDArray[np.float32]:
        ptr = self._lib.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,)).astype(np.float32, copy=True)

    def counters(self) -> dict[str, float]:
        perf = self._lib.llama_perf_context(self._ctx)
        return {
            "pp_ms": float(perf.t_p_eval_ms),
            "pp_tokens": float(perf.n_p_eval),
            "tg_ms": float(perf.t_eval_ms),
            "tg_tokens": float(perf.n_eval),
            "load_ms": float(perf.t_load_ms),
        }

    # -- PromptCaching --------------------------------------------------------------------------
    def prompt_cache(self) -> PromptCache:
        return PromptCache(False, "reset() clears the context's memory (llama_memory_clear) "
                           "before every generation")  # fmt: skip

    # -- Sampling --------------------------------------------------------------------------------
    sampler_api: ClassVar[str] = (
        "llama_cpp.Llama.set_seed(seed) + Llama.generate(ids, temp, top_k, top_p, min_p, "
        "repeat_penalty): the binding's llama_sampler chain"
    )
    sampler_order: ClassVar[str] = "truncate-then-temperature"
    sampler_order_source: ClassVar[str] = (
        "llama-cpp-python llama_cpp/llama.py Llama._init_sampler: penalties, top_k, typical, "
        "top_p, min_p, temp, dist(seed)"
    )

    def sample_generate(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        """``n_gen`` ids from the binding's own sampler chain on a cleared sequence (typical-p
        off; top_k 0 means off, as in llama.cpp)."""
        self.reset()
        self._llm.reset()
        self._llm.set_seed(int(seed))
        out: list[int] = []
        for tok in self._llm.generate(
            list(prompt),
            top_k=int(params.get("top_k", 0) or 0),
            top_p=float(params.get("top_p", 1.0)),
            min_p=float(params.get("min_p", 0.0)),
            typical_p=1.0,
            temp=float(params.get("temperature", 1.0)),
            repeat_penalty=float(params.get("repeat_penalty", 1.0)),
            reset=True,
        ):
            out.append(int(tok))
            if len(out) >= n_gen:
                break
        return out

    constraint_api: ClassVar[str] = (
        "llama_cpp.LlamaGrammar.from_json_schema(schema) passed to Llama.generate(grammar=...)"
    )

    def sample_constrained(
        self,
        prompt: Sequence[int],
        n_gen: int,
        params: dict[str, Any],
        seed: int,
        schema: dict[str, Any],
    ) -> dict[str, Any]:
        """Sampled ids under a grammar made from ``schema`` by the binding (GBNF); ends at the
        end-of-sequence id (the grammar's end) or after ``n_gen`` ids."""
        import json

        grammar = self._lib.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
        self.reset()
        self._llm.reset()
        self._llm.set_seed(int(seed))
        eos = int(self._llm.token_eos())
        out: list[int] = []
        stop = "length"
        for tok in self._llm.generate(
            list(prompt),
            top_k=int(params.get("top_k", 0) or 0),
            top_p=float(params.get("top_p", 1.0)),
            min_p=float(params.get("min_p", 0.0)),
            typical_p=1.0,
            temp=float(params.get("temperature", 1.0)),
            repeat_penalty=float(params.get("repeat_penalty", 1.0)),
            reset=True,
            grammar=grammar,
        ):
            if int(tok) == eos:
                stop = "eos"
                break
            out.append(int(tok))
            if len(out) >= n_gen:
                break
        return {"tokens": out, "text": self.text_of(out), "stop": stop}

    # -- capabilities: Streaming, Abortable, Serving ---------------------------------------------
    def stream_backend(self) -> LlamaCppBackend:
        """The ``stream``/``cancel`` backend: llama-cpp-python's ``create_completion`` stream."""
        if self._backend is None:
            self._backend = LlamaCppBackend(self)
        return self._backend

    def abort_prefill(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
        """A prefill stopped through llama.cpp's abort callback (see :func:`abort_prefill`)."""
        return abort_prefill(self, prompt, delay_s)

    def server_driver(self) -> LlamaCppServer:
        """``python -m llama_cpp.server`` with this adapter's load settings."""
        return LlamaCppServer(self, self._settings, extra_bufts=self._extra_bufts)

    # -- what the backend and the server driver use ---------------------------------------------
    def stream_completion(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        on_token: Callable[[], bool],
    ) -> Iterator[dict[str, Any]]:
        """llama-cpp-python's own streaming API over token ids: ``Llama.create_completion(prompt=
        ids, stream=True)``, greedy (temperature 0), ``banned`` ids masked by ``logit_bias``.

        ``on_token`` is called by the runtime's loop right after each token is sampled (through a
        ``StoppingCriteria``, the binding's per-token stop hook); returning True stops the request
        there (that token is sampled but never yielded). Closing the returned iterator closes the
        stream. Chunks are the binding's text chunks: a byte token that does not complete a UTF-8
        character is held back, so a chunk can carry several tokens. The sequence state is
        released first: every stream is a fresh request (no prefix reuse)."""
        lib = self._lib
        seen = [len(prompt) - 1]

        def _hook(ids: Any, _logits: Any) -> bool:
            # generate() calls it once per sampled token with the ids so far (one longer each
            # time); create_completion calls it once more at the end with the evaluated ids
            # (shorter): only the per-token calls count
            if len(ids) <= seen[0]:
                return False
            seen[0] = len(ids)
            return bool(on_token())

        self.release_sequence()
        chunks: Iterator[dict[str, Any]] = self._llm.create_completion(
            prompt=list(prompt),
            max_tokens=max_tokens,
            stream=True,
            temperature=0.0,
            logit_bias={int(t): float("-inf") for t in banned},
            stopping_criteria=lib.StoppingCriteriaList([_hook]),
        )
        return chunks

    def tokenize_text(self, text: str) -> list[int]:
        """llama.cpp's own tokenization of ``text`` with the loaded model's vocabulary
        (Tokenizing: no BOS, special tokens not parsed)."""
        ids = self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        return [int(t) for t in ids]

    def sequence_tokens(self) -> list[int]:
        """The token ids the high-level ``Llama`` object holds evaluated (prompt + generated, the
        last sampled token excluded: it is never evaluated)."""
        return [int(t) for t in self._llm._input_ids[: self._llm.n_tokens]]

    def release_sequence(self) -> None:
        """Give back the sequence state: clear llama.cpp's memory (KV cells) and the high-level
        object's token bookkeeping (``Llama.reset``), which would otherwise reuse the prefix."""
        self.reset()
        self._llm.reset()

    def memory_state(self) -> dict[str, int]:
        """The runtime's own view of the context state: ``llama_state_get_size`` (bytes a state
        save would write: grows with the KV cells in use), the highest KV position of sequence 0
        (-1 when empty) and the binding's evaluated-token count."""
        lib = self._lib
        mem = lib.llama_get_memory(self._ctx)
        return {
            "state_bytes": int(lib.llama_state_get_size(self._ctx)),
            "kv_pos_max": int(lib.llama_memory_seq_pos_max(mem, 0)),
            "n_tokens": int(self._llm.n_tokens),
        }

    def text_of(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens`` (BOS and other control tokens render as nothing)."""
        raw: bytes = self._llm.detokenize(list(tokens))
        return raw.decode("utf-8", errors="replace")

    def byte_token_ids(self) -> list[int]:
        """Ids of the vocabulary's byte-fallback tokens (``LLAMA_TOKEN_ATTR_BYTE``)."""
        lib = self._lib
        vocab = lib.llama_model_get_vocab(self._llm.model)
        n = int(lib.llama_vocab_n_tokens(vocab))
        byte = int(lib.LLAMA_TOKEN_ATTR_BYTE)
        return [i for i in range(n) if int(lib.llama_vocab_get_attr(vocab, i)) & byte]

    def set_abort(self, should_abort: Callable[[], bool] | None) -> None:
        """Install (or with None remove) llama.cpp's abort callback, polled between graph nodes
        of ``llama_decode``: returning True aborts the running decode (it returns 2)."""
        lib = self._lib
        if should_abort is None:
            lib.llama_set_abort_callback(self._ctx, lib.ggml_abort_callback(), None)
            self._abort_cb = None
            return

        @lib.ggml_abort_callback  # type: ignore[untyped-decorator]
        def _cb(_data: Any) -> bool:
            return bool(should_abort())

        self._abort_cb = _cb  # keep a reference: ctypes does not
        lib.llama_set_abort_callback(self._ctx, _cb, None)

    def decode_status(self, tokens: Sequence[int]) -> int:
        """``llama_decode`` on one batch, synchronized; its return code instead of an exception
        (0 ok, 1 no KV slot, 2 aborted, <0 error)."""
        lib = self._lib
        arr = (lib.llama_token * len(tokens))(*tokens)
        rc = int(lib.llama_decode(self._ctx, lib.llama_batch_get_one(arr, len(tokens))))
        lib.llama_synchronize(self._ctx)
        return rc

    # -- evidence ------------------------------------------------------------------------------
    def _devices(self) -> list[dict[str, Any]]:
        try:
            from llama_cpp import _ggml

            g = _ggml.libggml
            g.ggml_backend_dev_count.restype = ctypes.c_size_t
            g.ggml_backend_dev_get.restype = ctypes.c_void_p
            g.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
            for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
                getattr(g, fn).restype = ctypes.c_char_p
                getattr(g, fn).argtypes = [ctypes.c_void_p]
            devs = []
            for i in range(g.ggml_backend_dev_count()):
                d = g.ggml_backend_dev_get(i)
                devs.append(
                    {
                        "name": g.ggml_backend_dev_name(d).decode(),
                        "description": g.ggml_backend_dev_description(d).decode(),
                    }
                )
            return devs
        except (ImportError, AttributeError, OSError) as exc:
            return [{"error": f"device enumeration unavailable: {exc}"}]

    def _debug_facilities(self) -> dict[str, Any]:
        """What this llama-cpp-python build offers for debugging, probed on the binding."""
        lib = self._lib
        return {
            "log_callback": {
                "available": hasattr(lib, "llama_log_set"),
                "used": self._log_cb is not None,
                "how": "llama_log_set(callback): every load/run log line, even with verbose=False",
            },
            "perf_counters": {
                "available": hasattr(lib, "llama_perf_context"),
                "used": True,
                "how": "llama_perf_context(ctx) after llama_synchronize: prompt/eval ms and tokens",
            },
            "system_info": {
                "available": hasattr(lib, "llama_print_system_info"),
                "how": "llama_print_system_info(): compiled CPU features and backends",
            },
            "state_inspection": {
                "available": hasattr(lib, "llama_state_get_size"),
                "how": "llama_state_get_size(ctx): bytes of the context/KV state",
            },
            "abort_callback": {
                "available": hasattr(lib, "llama_set_abort_callback"),
                "how": "llama_set_abort_callback(ctx, fn): stop a running decode",
            },
        }

    def evidence(self) -> dict[str, Any]:
        lib = self._lib
        if lib is None:
            return {}
        lines = [f"[{lvl}] {text}" for lvl, text in self._log]
        placement: dict[str, int] = {}
        for _, text in self._log:
            m = re.search(r"layer\s+\d+ assigned to device (\S+)", text)
            if m:
                placement[m.group(1).rstrip(",")] = placement.get(m.group(1).rstrip(","), 0) + 1
        return {
            "settings": self._settings_evidence(),
            "debug_facilities": self._debug_facilities(),
            "system_info": lib.llama_print_system_info().decode(errors="replace").strip(),
            "gpu_offload_supported": bool(lib.llama_supports_gpu_offload()),
            "devices": self._devices(),
            "layer_placement": placement,
            "log_lines_total": len(self._log),
            "log_excerpt": [ln for ln in lines if _EVIDENCE_PATTERNS.search(ln)][:80],
            "log_tail": lines[-40:],
            "warnings": [f"[{lvl}] {t}" for lvl, t in self._log if lvl in ("warn", "error")][:40],
        }

    def _settings_evidence(self) -> dict[str, Any]:
        """What was asked for, what llama.cpp says it used (its context log), and where the
        binding's defaults differ from llama.cpp's tools."""
        effective: dict[str, str] = {}
        for _, text in self._log:
            m = _CONTEXT_LINE.match(text)
            if m:
                effective[m.group(1)] = m.group(2)
            if "Flash Attention" in text and ("enabled" in text or "disabled" in text):
                effective["flash_attn_resolved"] = "enabled" if "enabled" in text else "disabled"
        requested = {k: v for k, v in self._settings.items() if k not in ("model_path", "verbose")}
        buffers = {m.group(1): m.group(2) for _, t in self._log if (m := BUFFER_LINE.search(t))}
        kv = next(((m, t) for _, t in self._log if (m := KV_LINE.search(t))), None)
        kv_cache = (
            {"type_k": kv[0].group(1), "type_v": kv[0].group(2), "line": kv[1].strip(),
             "requested": kv_types(self._settings_options), "llama_cpp_default": KV_DEFAULT}
            if kv else {"unavailable": "no KV-cache size line in llama.cpp's log"}
        )  # fmt: skip
        return {
            "kv_cache": kv_cache,
            "requested": requested
            | {"flash_attn": self._fa_mode, "extra_buffer_types": self._extra_bufts},
            "effective": effective,
            "repack": any("REPACK" in t and "buffer size" in t for _, t in self._log),
            "model_buffers": buffers,
            "extra_buffer_types": {
                "requested": self._extra_bufts,
                "llama_cpp_default": EXTRA_BUFTS_DEFAULT,
                "extra_in_use": sorted(b for b in buffers if b not in ("CPU", "CPU_Mapped")),
                "how": "llama_model_params.use_extra_bufts (llama-bench/llama-server --repack)",
            },
            "threadpool": "OpenMP build: llama.cpp's poll setting does not apply",
            "binding_defaults": BINDING_DEFAULTS,
        }

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend, kernels and effective numerics (StackReporting): the model buffers and
        KV-cache types from llama.cpp's own log lines, the tensor types from the GGUF file."""
        from rtmatrix.runtimes.llama_cpp import stack

        path = Path(str(self._settings.get("model_path", "")))
        return stack.report(dict(evidence), dtype, stack.tensor_types(path))

    def close(self) -> None:
        self._backend = None
        if self._llm is not None:
            self._llm.close()
            self._llm = None
            self._ctx = None
