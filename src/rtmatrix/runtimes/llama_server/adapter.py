"""The llama_server row: llama.cpp's own ``llama-server``, from the shared tool build of the
installed llama-cpp-python's sdist (the same llama.cpp source as the binding).

``load`` starts one server per cell on 127.0.0.1 and a free port, as a child of the worker (in
its process group: a killed cell takes it down; ``close`` stops it), and waits for ``/health``:
the cell's load time is the server's. The vocabulary (size, BOS/EOS, byte-fallback and control
tokens) is read from the GGUF file with the ``gguf`` package. A server answers requests, not
single decode steps: the plain ``generate`` loop (prefill, decode, logits) is unavailable here,
and the row runs the lifecycle scenarios ``stream``, ``cancel`` (over HTTP, :mod:`.stream`) and
``serve`` (:mod:`.driver`).

The tools are built (or found in the cache) once per run by :meth:`LlamaServerAdapter.prepare`,
before the row's first cell; a cell without them is ``unavailable`` with the reason.

Row options: ``parallel`` (slots, 4), ``cont_batching`` (true), ``flash_attn`` (``auto``, as the
llama_cpp row and llama.cpp's own tools: :func:`rtmatrix.runtimes.llama_cpp.adapter.
flash_attn_mode`), ``extra_buffer_types`` (true, llama.cpp's default: ``--repack``; false:
``--no-repack``, as the llama_cpp row's option), ``server_args`` (extra command-line
arguments), ``start_timeout_s`` (90), ``request_timeout_s`` (120).
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, LoadParams, RuntimeUnavailable
from rtmatrix.adapters.capabilities import PromptCache
from rtmatrix.numerics import StackReport
from rtmatrix.runtimes.llama_cpp import reftool
from rtmatrix.runtimes.llama_cpp.adapter import (
    EXTRA_BUFTS_DEFAULT,
    extra_buffer_types,
    flash_attn_mode,
    kv_args,
    kv_types,
)
from rtmatrix.runtimes.llama_server import client
from rtmatrix.runtimes.llama_server.driver import LlamaServerDriver
from rtmatrix.runtimes.llama_server.errors import ERROR_PATTERNS
from rtmatrix.runtimes.llama_server.process import (
    ServerConfig,
    ServerProcess,
    find_tools,
    server_argv,
)
from rtmatrix.runtimes.llama_server.stream import ServerStreamBackend, abort_prefill
from rtmatrix.serverproc import free_port

NO_LOOP = (
    "llama-server answers whole requests over HTTP; it exposes no single prefill/decode step "
    "or logits, so the plain timed generation loop does not run on this row (it runs the "
    "lifecycle scenarios stream, cancel and serve)"
)
BYTE, CONTROL, UNKNOWN = 6, 3, 2  # llama.cpp token types (tokenizer.ggml.token_type)
_EVIDENCE = re.compile(
    r"system_info|n_ctx|n_slots|kv_unified|flash_attn|flash attention|n_threads|model type|"
    r"file type|"
    r"buffer size|error|failed|warn| W | E ",
    re.IGNORECASE,
)
DEFAULTS: dict[str, Any] = {
    "parallel": 4,
    "cont_batching": True,
    "flash_attn": "auto",
    "extra_buffer_types": EXTRA_BUFTS_DEFAULT,
    "server_args": [],
    "start_timeout_s": 90.0,
    "request_timeout_s": 120.0,
}


class Vocab:
    """What the worker needs of the GGUF vocabulary: size, special ids, token types."""

    def __init__(self, path: Path) -> None:
        import gguf

        reader = gguf.GGUFReader(str(path))
        types = reader.fields["tokenizer.ggml.token_type"].contents()
        self.types: list[int] = [int(t) for t in types]
        self.size = len(self.types)
        self.bos = self._id(reader, "tokenizer.ggml.bos_token_id")
        self.eos = self._id(reader, "tokenizer.ggml.eos_token_id")

    @staticmethod
    def _id(reader: Any, key: str) -> int:
        found = reader.fields.get(key)
        return int(found.contents()) if found is not None else -1

    def ids_of(self, kind: int) -> list[int]:
        return [i for i, t in enumerate(self.types) if t == kind]


class LlamaServerAdapter(Adapter):
    name: ClassVar[str] = "llama_server"
    distribution: ClassVar[str] = "llama-cpp-python"
    extra: ClassVar[str] = "llama-cpp"
    container: ClassVar[str] = "gguf"
    converter: ClassVar[str | None] = "llama_cpp"  # convert_hf_to_gguf.py of the same sdist
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS
    # no crash_control: a llama-server that dies takes the request, not the worker, so the
    # cell ends as the worker's error, never by a signal, and a control run would never fire

    def __init__(self) -> None:
        self._opts: dict[str, Any] = dict(DEFAULTS)
        self._tools: reftool.ToolBuild | None = None
        self._cfg: ServerConfig | None = None
        self._server: ServerProcess | None = None
        self._workdir: Path | None = None
        self._vocab: Vocab | None = None
        self._backend: ServerStreamBackend | None = None
        self._props: dict[str, Any] = {}
        self._stopped: dict[str, Any] = {}
        self._kv_asked: dict[str, str] = {}

    def configure(self, options: dict[str, Any]) -> None:
        self._opts = DEFAULTS | {k: v for k, v in options.items() if k in DEFAULTS}

    # -- runtime -------------------------------------------------------------------------------
    @classmethod
    def prepare(cls, log: Callable[[str], None]) -> dict[str, Any]:
        """Build (or find cached) llama-server from the installed binding's sdist, once per run
        (the same build the llama_cpp row's reference tool uses); a failure is recorded and the
        row's cells become ``unavailable``."""
        log(
            "llama_server: llama-server from the installed llama-cpp-python's sdist (cached by "
            "version and options; a first build takes minutes to tens of minutes on 2 cores)"
        )
        try:
            build = reftool.build_tools(log=log)
        except reftool.ToolUnavailable as exc:
            return {"llama_server": {"unavailable": exc.reason}}
        return {
            "llama_server": {
                "root": str(build.root),
                "built_now": build.built,
                "version": build.tool_version("llama-server"),
            }
        }

    def import_runtime(self) -> str:
        self._tools = find_tools()
        line = self._tools.tool_version("llama-server").splitlines()[0]
        return f"{self._tools.version} (llama-server {line.removeprefix('version: ').strip()})"

    @property
    def binary(self) -> Path:
        return self._need_tools().llama_server

    def _need_tools(self) -> reftool.ToolBuild:
        if self._tools is None:
            msg = "llama_server: import_runtime() has not run"
            raise RuntimeError(msg)
        return self._tools

    def server_env(self) -> dict[str, str]:
        return reftool.tool_env(self._need_tools().bin_dir)

    # -- model ---------------------------------------------------------------------------------
    def load(self, model_path: Path, params: LoadParams) -> None:
        tools = self._need_tools()
        parallel = int(self._opts["parallel"])
        if not 1 <= parallel <= 64:
            msg = f"options.parallel must be 1..64 slots, got {parallel!r}"
            raise ValueError(msg)
        self._cfg = ServerConfig(
            model=str(model_path),
            port=free_port(),
            n_ctx_per_slot=params.n_ctx,
            parallel=parallel,
            threads=params.threads,
            n_batch=params.n_ctx,
            n_ubatch=min(params.n_ctx, params.n_batch),
            cont_batching=bool(self._opts["cont_batching"]),
            flash_attn=flash_attn_mode(self._opts),
            extra_buffer_types=extra_buffer_types(self._opts),
            extra_args=(*kv_args(params.options), *(str(a) for a in self._opts["server_args"])),
        )
        self._kv_asked = kv_types(params.options)
        self._workdir = Path(tempfile.mkdtemp(prefix="rtmatrix-llama-server-"))
        argv = server_argv(tools.llama_server, self._cfg)
        self._server = ServerProcess(
            argv, tools.bin_dir, self._workdir / "server.log", self._cfg.port
        )
        self._server.start(float(self._opts["start_timeout_s"]))
        self._vocab = Vocab(model_path)
        self._props = self._read_props()

    def _read_props(self) -> dict[str, Any]:
        port = self.port
        try:
            props = client.get_json(port, "/props")
            models = client.get_json(port, "/v1/models")
        except (client.ServerError, ValueError) as exc:
            return {"error": str(exc)[:300]}
        meta = ((models.get("data") or [{}])[0] or {}).get("meta") or {}
        settings = props.get("default_generation_settings") or {}
        return {
            "total_slots": props.get("total_slots"),
            "n_ctx_per_slot": settings.get("n_ctx"),
            "model_meta": meta,
            "build_info": props.get("build_info"),
            "endpoints": {k: props[k] for k in props if str(k).startswith("endpoint_")},
        }

    @property
    def port(self) -> int:
        if self._cfg is None:
            msg = "llama_server: no server was started (load() has not run)"
            raise RuntimeError(msg)
        return self._cfg.port

    def _need_vocab(self) -> Vocab:
        if self._vocab is None:
            msg = "llama_server: load() has not run"
            raise RuntimeError(msg)
        return self._vocab

    @property
    def vocab_size(self) -> int:
        return self._need_vocab().size

    @property
    def special_ids(self) -> dict[str, int]:
        v = self._need_vocab()
        return {"bos": v.bos, "eos": v.eos}

    def reset(self) -> None:
        raise RuntimeUnavailable(NO_LOOP)

    def prefill(self, tokens: Sequence[int]) -> None:
        raise RuntimeUnavailable(NO_LOOP)

    def decode(self, token: int) -> None:
        raise RuntimeUnavailable(NO_LOOP)

    def last_logits(self) -> NDArray[np.float32]:
        raise RuntimeUnavailable(NO_LOOP)

    def counters(self) -> dict[str, float]:
        return {}

    # -- capabilities: Streaming, Abortable, Serving --------------------------------------------
    def stream_backend(self) -> ServerStreamBackend:
        if self._backend is None:
            server = self._server
            if server is None:
                raise RuntimeError(NO_LOOP)
            self._backend = ServerStreamBackend(
                self.port,
                server.rss,
                float(self._opts["request_timeout_s"]),
                self.byte_token_ids(),
            )
        return self._backend

    def abort_prefill(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
        """A client that drops its connection mid-prefill (see :func:`.stream.abort_prefill`)."""
        return abort_prefill(self.port, prompt, delay_s)

    # -- PromptCaching --------------------------------------------------------------------------
    def prompt_cache(self) -> PromptCache:
        said = ("every request the harness sends sets cache_prompt false (stream, cancel, "
                "sample, batch invariance); the serve scenario's /v1/completions load keeps the "
                "server's default (cache_prompt on)")  # fmt: skip
        return PromptCache(False, said)

    # -- Sampling --------------------------------------------------------------------------------
    sampler_api: ClassVar[str] = (
        "llama-server POST /completion {prompt: ids, samplers, temperature, top_k, top_p, min_p, "
        "repeat_penalty, seed, ignore_eos, return_tokens}"
    )
    sampler_order: ClassVar[str] = "truncate-then-temperature"
    sampler_order_source: ClassVar[str] = (
        "the request's own 'samplers' list (rtmatrix.runtimes.llama_server.client.SAMPLERS: "
        "penalties, top_k, top_p, min_p, temperature; llama.cpp's common/sampling.cpp then adds "
        "the seeded dist)"
    )

    def sample_generate(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        return client.sample(self.port, prompt, n_gen, params, seed).tokens

    def sample_beside_requests(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        """The same seeded request while other requests generate in the server's other slots
        (other prompts, greedy, longer): does another slot's work change this one's draws?"""
        import threading

        others = [[int(t) + 1 + i for t in prompt] for i in range(max(1, self._slots() - 1))]
        done = threading.Event()

        def busy(ids: list[int]) -> None:
            while not done.is_set():
                with contextlib.suppress(client.ServerError, OSError, ValueError):
                    client.complete(self.port, ids, 4 * n_gen, [])

        threads = [threading.Thread(target=busy, args=(o,), daemon=True) for o in others]
        for th in threads:
            th.start()
        try:
            time.sleep(0.05)
            return client.sample(self.port, prompt, n_gen, params, seed).tokens
        finally:
            done.set()
            for th in threads:
                th.join(30.0)

    constraint_api: ClassVar[str] = "llama-server POST /completion {json_schema: schema, ...}"

    def sample_constrained(
        self,
        prompt: Sequence[int],
        n_gen: int,
        params: dict[str, Any],
        seed: int,
        schema: dict[str, Any],
    ) -> dict[str, Any]:
        """Sampled ids under the server's grammar from ``schema``; the end-of-sequence id ends
        the answer (``ignore_eos`` off: it is how the grammar says it is complete)."""
        c = client.sample(self.port, prompt, n_gen, params, seed, json_schema=schema,
                          ignore_eos=False)  # fmt: skip
        return {"tokens": c.tokens, "text": self.text_of(c.tokens), "stop": c.stop_type}

    def _slots(self) -> int:
        return int(self._cfg.parallel) if self._cfg is not None else 1

    def server_driver(self) -> LlamaServerDriver:
        return LlamaServerDriver(self)

    # -- what the backend and the driver use ------------------------------------------------------
    def server_config(self) -> ServerConfig:
        if self._cfg is None:
            msg = "llama_server: load() has not run"
            raise RuntimeError(msg)
        return self._cfg

    def byte_token_ids(self) -> list[int]:
        return self._need_vocab().ids_of(BYTE)

    def text_of(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens`` as the server renders it (``/detokenize``), control and
        unknown tokens (BOS, EOS) left out as the binding's ``detokenize`` leaves them out."""
        v = self._need_vocab()
        keep = [int(t) for t in tokens if v.types[int(t)] not in (CONTROL, UNKNOWN)]
        answer = client.post_json(self.port, "/detokenize", {"tokens": keep}, 30.0)
        return str(answer.get("content", ""))

    def build_settings(self) -> dict[str, Any]:
        """The tool build a server comes from: binary, version, build options (recorded)."""
        tools = self._need_tools()
        m = tools.manifest
        return {
            "binary": str(tools.llama_server),
            "llama_server_version": tools.tool_version("llama-server"),
            "from_sdist": f"llama-cpp-python {tools.version}",
            "sdist_sha256": (m.get("sdist") or {}).get("sha256"),
            "cmake_options": m.get("cmake_options"),
            "compiler": m.get("compiler"),
            "binary_sha256": ((m.get("binaries") or {}).get("llama-server") or {}).get("sha256"),
        }

    # -- evidence ------------------------------------------------------------------------------
    def evidence(self) -> dict[str, Any]:
        if self._tools is None:
            return {}
        out: dict[str, Any] = {
            "tool_build": self.build_settings()
            | {
                "root": str(self._tools.root),
                "configure_cmd": self._tools.manifest.get("configure_cmd"),
                "build_cmd": self._tools.manifest.get("build_cmd"),
                "size_bytes": _size(self._tools.bin_dir),
            },
            "debug_facilities": debug_facilities(),
        }
        srv = self._server
        if self._cfg is not None and srv is not None:
            lines = srv.log_tail(200_000).splitlines()
            out |= {
                "command_line": shlex.join(srv.argv),
                "argv": list(srv.argv),
                "server_settings": self._cfg.to_dict(),
                "server_startup_s": srv.startup_s,
                "server_pid": srv.proc.pid if srv.proc else None,
                "server_alive": srv.alive(),
                "props": self._props,
                "log_lines_total": len(lines),
                "log_excerpt": [ln for ln in lines if _EVIDENCE.search(ln)][:80],
                "flash_attn": flash_attn_record(self._cfg.flash_attn, lines),
                "extra_buffer_types": {
                    "requested": self._cfg.extra_buffer_types,
                    "llama_cpp_default": EXTRA_BUFTS_DEFAULT,
                    "how": "--repack / --no-repack (llama_model_params.use_extra_bufts)",
                    "buffer_lines": [ln for ln in lines if "model buffer size" in ln][:8],
                },
                "log_tail": "\n".join(lines[-40:]),
            }
            if srv.alive():
                try:
                    out["metrics_at_end"] = client.parse_prometheus(
                        client.get_text(self.port, "/metrics", 5.0)
                    )
                except client.ServerError as exc:
                    out["metrics_at_end"] = {"error": str(exc)[:200]}
        return out

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend, kernels and effective numerics (StackReporting) from the server's own log
        lines, read by the llama.cpp home's readers."""
        from rtmatrix.runtimes.llama_cpp.stack import tensor_types
        from rtmatrix.runtimes.llama_server import stack

        lines = self._server.log_tail(200_000).splitlines() if self._server is not None else []
        model = Path(self._cfg.model) if self._cfg is not None else Path()
        return stack.report(dict(evidence), lines, dtype, tensor_types(model), self._kv_asked)

    def close(self) -> None:
        self._backend = None
        if self._server is not None:
            self._stopped = self._server.stop()
            self._server = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def flash_attn_record(requested: str, lines: Sequence[str]) -> dict[str, str]:
    """Flash attention as requested and, where the log says it, as resolved."""
    for ln in lines:
        if "Flash Attention" in ln and ("enabled" in ln or "disabled" in ln):
            return {
                "requested": requested,
                "resolved": "enabled" if "enabled" in ln else "disabled",
            }
    return {
        "requested": requested,
        "resolved": "not in the log: llama-server logs it from verbosity 4 "
        "(row option server_args = ['--log-verbosity', '4'])",
    }


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and not p.is_symlink())


def debug_facilities() -> dict[str, Any]:
    """What a llama-server offers for debugging and monitoring (the endpoints this row uses)."""
    return {
        "metrics_endpoint": {
            "available": True,
            "used": True,
            "how": "--metrics: GET /metrics, Prometheus text (llamacpp:* counters and gauges)",
        },
        "slots_endpoint": {
            "available": True,
            "used": True,
            "how": "GET /slots: per slot is_processing, task, prompt tokens processed, decoded",
        },
        "props_endpoint": {"available": True, "used": True, "how": "GET /props: slots, n_ctx"},
        "token_probabilities": {
            "available": True,
            "used": True,
            "how": "n_probs on /completion: top log-probabilities of every generated position",
        },
        "verbose_log": {"available": True, "how": "--verbose / --log-file: per-request logs"},
    }
