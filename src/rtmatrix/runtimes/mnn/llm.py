"""The MNN-LLM engine row (``mnn_llm``): ``MNN.llm`` (in the ``mnn`` wheel) on the folder MNN's
own exporter writes from a Hugging Face checkpoint (:mod:`rtmatrix.converters.mnn_llmexport`,
``converter = "mnn_llmexport"``): ``llm.mnn`` with the KV cache inside MNN's fused ``Attention``
op, ``llm.mnn.weight``, ``embeddings_bf16.bin``, ``tokenizer.mtok`` and ``config.json``.

``load`` is ``MNN.llm.create(<folder>/config.json)``, ``set_config`` with the matrix's threads
and the row's options, then ``load()``. ``prefill``/``decode`` are ``Llm.forward(ids)``: it runs
the ids through the model, keeps their keys and values in the engine's cache and returns the
logits of the last position (``[1, 1, vocab]``), so the harness's own loop, the teacher-forced
quality pass and first-step parity all read real logits. ``reset`` is ``Llm.reset()`` (the cache
is emptied: the same prompt gives the same logits again). MNN's per-call timing
(``prefill_us``/``decode_us`` of its context) is kept by its own ``response``/``generate`` loop
only, so ``counters()`` is empty and PP/TG come from the harness clock.

Rows fed rtmatrix's own fixtures (the seeded numpy models) have no such folder: the row's
container is ``mnn``, which rtmatrix writes no exporter for, so those cells are skipped with
that reason; a ``path`` that is not an exporter's folder is refused at load, naming the files
it lacks.

What ran, not what was asked: llmexport's "16-bit" weights keep the linear layers in fp16 but
write the embedding table in bf16 (``embeddings_bf16.bin``, its ``--embed_bit 16``), which
alone moves a toy's logits by ~0.15; such a cell is judged as bf16, and its evidence says why
(``requantized``). At 8/4 bits the file's weights are MNN's blocked quantization (the cell's
dtype says so already).

Row options: ``precision`` (``low`` | ``normal`` | ``high``; the exporter's config says ``low``:
fp16 compute where the CPU has it), ``memory`` (``low`` | ``normal`` | ``high``; ``low``: the
quantized weights' matmuls quantize activations at run time), ``backend`` (MNN's
``backend_type``, default the exporter's ``cpu``). Unset, the exporter's own config stands.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from rtmatrix.adapters.base import Adapter, LoadParams, RuntimeUnavailable
from rtmatrix.numerics import Fact, Numerics, StackReport, unavailable
from rtmatrix.runtimes.mnn.errors import ERROR_PATTERNS

CONFIG = "config.json"
#: what ``MNN.llm.create`` needs beside ``config.json`` (its default names, as llmexport writes)
NEEDED = ("llm.mnn", "llm.mnn.weight", "llm_config.json")
#: the row's options -> MNN.llm's config keys (unset: the exporter's config.json stands)
CONFIG_KEYS = {"precision": "precision", "memory": "memory", "backend": "backend_type"}
LEVELS = ("low", "normal", "high")
LICENSE_NOTE = (
    "the wheel's metadata says BSD-3; the MNN source repository's LICENSE.txt is Apache-2.0"
)


def folder_of(model_path: Path) -> Path:
    """The exporter's folder: ``model_path`` itself, or the folder of a file in it."""
    return model_path if model_path.is_dir() else model_path.parent


def check_folder(folder: Path) -> Path:
    """``folder``'s ``config.json``; :class:`FileNotFoundError` naming what is missing when it
    is not an llmexport folder."""
    absent = [n for n in (CONFIG, *NEEDED) if not (folder / n).is_file()]
    if absent:
        msg = (
            f"{folder} is not MNN-LLM's exporter output (no {', '.join(absent)}): the mnn_llm "
            "row runs what llmexport writes from a Hugging Face checkpoint"
        )
        raise FileNotFoundError(msg)
    return folder / CONFIG


def asked_config(options: Mapping[str, Any], threads: int) -> dict[str, Any]:
    """The config the row sets over the exporter's (threads always; the rest where asked)."""
    out: dict[str, Any] = {"thread_num": threads}
    for opt, key in CONFIG_KEYS.items():
        value = options.get(opt)
        if value is None:
            continue
        if opt != "backend" and str(value).lower() not in LEVELS:
            msg = f"options.{opt} must be one of {', '.join(LEVELS)}, got {value!r}"
            raise ValueError(msg)
        out[key] = str(value).lower()
    return out


def special_ids(folder: Path) -> dict[str, int]:
    """bos/eos from the checkpoint's ``generation_config.json`` the converter home copies beside
    the export (the exporter keeps them only inside ``tokenizer.mtok``); eos -1 if none."""
    out: dict[str, int] = {}
    try:
        cfg = json.loads((folder / "generation_config.json").read_text("utf-8"))
    except (OSError, ValueError):
        cfg = {}
    for key in ("bos", "eos"):
        val = cfg.get(f"{key}_token_id") if isinstance(cfg, dict) else None
        val = val[0] if isinstance(val, list) and val else val
        if isinstance(val, int):
            out[key] = val
    out.setdefault("eos", -1)
    return out


def stored_weights(folder: Path) -> dict[str, Any] | None:
    """Where the export's weights are not what its bits say (a 16-bit export's embedding table
    in bf16): the ``requantized`` evidence the parent judges the cell by, else None."""
    try:
        args = json.loads((folder / "export_args.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    bits = args.get("quant_bit") if isinstance(args, dict) else None
    if bits != 16 or not (folder / "embeddings_bf16.bin").is_file():
        return None
    return {
        "bits": 16,
        "by": "MNN-LLM's exporter (--quant_bit 16: linear weights fp16, the embedding table "
        "bf16 in embeddings_bf16.bin, its --embed_bit 16)",
        "judged_as": "bf16",
    }


class MnnLlmAdapter(Adapter):
    name: ClassVar[str] = "mnn_llm"
    distribution: ClassVar[str] = "mnn"
    extra: ClassVar[str] = "mnn"
    container: ClassVar[str] = "mnn"
    converter: ClassVar[str | None] = "mnn_llmexport"  # MNN-LLM's own exporter, llmexport
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ERROR_PATTERNS

    def __init__(self) -> None:
        self._mod: Any = None
        self._version = ""
        self._llm: Any = None
        self._folder: Path | None = None
        self._n_ctx = 0
        self._n_vocab = 0
        self._pos = 0
        self._special: dict[str, int] = {}
        self._logits: NDArray[np.float32] | None = None
        self._asked: dict[str, Any] = {}
        self._reported: dict[str, Any] = {}
        self._requant: dict[str, Any] | None = None
        self._timing: dict[str, float] = {}

    def import_runtime(self) -> str:
        try:
            import MNN
            import MNN.llm
        except ImportError as exc:
            msg = f"mnn is not installed ({exc}); pip install 'rtmatrix[mnn]'"
            raise RuntimeUnavailable(msg) from exc
        self._mod = MNN.llm
        self._version = str(MNN.version())
        return self._version

    # -- model ---------------------------------------------------------------------------------
    def load(self, model_path: Path, params: LoadParams) -> None:
        folder = folder_of(model_path)
        config = check_folder(folder)
        self._folder, self._n_ctx = folder, params.n_ctx
        self._asked = asked_config(params.options, params.threads)
        self._special = special_ids(folder)
        self._requant = stored_weights(folder)
        t0 = time.perf_counter()
        llm = self._mod.create(str(config))
        if not llm.set_config(dict(self._asked)):
            msg = f"MNN.llm refused the config {self._asked}"
            raise ValueError(msg)
        llm.load()
        t1 = time.perf_counter()
        self._llm = llm
        self._reported = self._dump_config()
        self._n_vocab = int(self._forward([self._special.get("bos", 0)]).shape[-1])
        self._timing = {"create_load_s": t1 - t0, "vocab_probe_s": time.perf_counter() - t1}
        self.reset()

    def _dump_config(self) -> dict[str, Any]:
        """The config MNN.llm runs with (the exporter's, the row's over it), as it dumps it."""
        try:
            data = json.loads(str(self._llm._c_obj.dump_config()))
        except (AttributeError, ValueError, TypeError):
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def special_ids(self) -> dict[str, int]:
        return dict(self._special)

    def reset(self) -> None:
        self._llm.reset()
        self._pos = 0
        self._logits = None

    def _forward(self, tokens: Sequence[int]) -> NDArray[np.float32]:
        if self._pos + len(tokens) > self._n_ctx:
            msg = (
                f"context full: {self._pos} cached + {len(tokens)} new tokens > n_ctx {self._n_ctx}"
            )
            raise ValueError(msg)
        out = self._llm.forward([int(t) for t in tokens])
        if out is None:
            msg = "MNN.llm's forward returned nothing (its own log says why: see the cell's stdout)"
            raise RuntimeError(msg)
        self._pos += len(tokens)
        self._logits = np.asarray(out.read(), dtype=np.float32).reshape(-1)
        return self._logits

    def prefill(self, tokens: Sequence[int]) -> None:
        self._forward(tokens)

    def decode(self, token: int) -> None:
        self._forward([token])

    def last_logits(self) -> NDArray[np.float32]:
        if self._logits is None:
            msg = "no logits yet: prefill first"
            raise RuntimeError(msg)
        return np.array(self._logits, dtype=np.float32, copy=True)

    def counters(self) -> dict[str, float]:
        return {}  # MNN.llm times its own response/generate loop only, not forward()

    # -- Tokenizing ------------------------------------------------------------------------------
    def tokenize_text(self, text: str) -> list[int]:
        """MNN-LLM's own tokenizer (``tokenizer.mtok``, the exporter's from the checkpoint's)."""
        return [int(i) for i in self._llm.tokenizer_encode(text)]

    # -- evidence ------------------------------------------------------------------------------
    def evidence(self) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "settings": {"asked": dict(self._asked), "reported": dict(self._reported)},
            "load_timing_s": {k: round(v, 4) for k, v in self._timing.items()},
            "license_note": LICENSE_NOTE,
            "export": _export_facts(self._folder) if self._folder else {},
            "debug_facilities": {
                "engine_log": {
                    "available": True,
                    "how": "Llm.get_log() (only where MNN was built with LLM_LOG_TO_STRING)",
                },
                "config_dump": {"available": True, "how": "Llm.dump_config()"},
                "reference_tool": {
                    "available": False,
                    "why": "the wheel ships no llm_demo/llm_bench (source-build tools)",
                },
            },
        }
        if self._requant:
            ev["requantized"] = dict(self._requant)
        return ev

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """Backend and what MNN-LLM says of its numerics (StackReporting), from its own config
        dump and the export's files: a precision level, not a per-kernel fact."""
        settings = dict(evidence.get("settings") or {})
        reported = dict(settings.get("reported") or {})
        backend = {"asked": settings.get("asked"), "reported": reported} if reported else {}
        return StackReport(
            backend=backend or unavailable("MNN.llm dumped no config"),
            kernels=unavailable("MNN-LLM names no kernel"),
            numerics=numerics(settings, dict(evidence.get("export") or {})),
        )

    def close(self) -> None:
        self._llm = None
        self._logits = None


def numerics(settings: Mapping[str, Any], export: Mapping[str, Any]) -> Numerics:
    """The facts MNN-LLM and the export give: the embedding table's precision (the weight
    layout) and, for 8/4-bit weights at ``memory`` low, the run-time quantization of the
    matmuls' activations (MNN's int8 GEMM on the quantized weights; measured on SmolLM2-135M
    mnn-q8: KLD 0.040 at low, 0.0012 at normal)."""
    reported = dict(settings.get("reported") or {})
    emb = dict(export.get("embedding") or {})
    layout = None
    if emb.get("precision"):
        layout = Fact(str(emb["precision"]), f"the embedding table {emb.get('file')}",
                      "the exporter's folder")  # fmt: skip
    bits = dict(export.get("export_args") or {}).get("quant_bit")
    act = None
    if bits in (4, 8) and reported.get("memory") == "low":
        asked = "memory" in dict(settings.get("asked") or {})
        act = Fact("i8", f"memory low with {bits}-bit weights: MNN's int8 GEMM quantizes the "
                   "activations at run time", "MNN.llm dump_config", default=not asked)  # fmt: skip
    return Numerics(
        devices=[str(reported.get("backend_type") or "cpu")],
        weight_layout=layout,
        activation_quantization=act,
        unavailable=f"MNN-LLM reports a precision level ({reported.get('precision')!r}), not "
        "the precision of its kernels",
    )


def _export_facts(folder: Path) -> dict[str, Any]:
    """What the export's own files say: its arguments (bits, block), the embedding table."""
    out: dict[str, Any] = {}
    try:
        args = json.loads((folder / "export_args.json").read_text("utf-8"))
    except (OSError, ValueError):
        args = {}
    if isinstance(args, dict):
        keys = ("quant_bit", "quant_block", "lm_quant_bit", "embed_bit", "sym")
        out["export_args"] = {k: args[k] for k in keys if k in args}
    emb = sorted(folder.glob("embeddings_*.bin"))
    out["embedding"] = (
        {"file": emb[0].name, "precision": emb[0].stem.removeprefix("embeddings_")}
        if emb
        else {"file": None, "precision": None, "why": "none written: tied to the LM head"}
    )
    return out
