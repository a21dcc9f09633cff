"""onnxruntime-genai's model builder (``python -m onnxruntime_genai.models.builder``), the
vendor's own converter from a Hugging Face checkpoint to the folder both ONNX rows read.

:func:`convert` runs ``python -m onnxruntime_genai.models.builder -i FOLDER -o OUT -p PRECISION
-e cpu -c CACHE`` in a child (``sys.executable``: the builder, torch, transformers and onnx-ir
come from this environment; the parent imports none of them) without a network
(:func:`rtmatrix.converters.base.run_offline`). It writes ``model.onnx`` + ``model.onnx.data``,
``genai_config.json`` and the checkpoint's tokenizer files into one folder: the
``onnxruntime_genai`` row loads the folder, the ``onnxruntime`` row ``model.onnx`` in it. The
graph is the builder's own (``GroupQueryAttention``, ``SkipSimplifiedLayerNormalization``,
``MatMulNBits`` at int4/int8: com.microsoft contrib ops that ONNX Runtime's CPU provider has):
inputs ``input_ids``, ``attention_mask`` (int64), ``past_key_values.N.key|value``
``[batch, kv_heads, past, kv_cache_dim]``, outputs ``logits`` and ``present.N.*`` of the total
length; there is no ``position_ids`` (GQA derives positions from the mask) and the head
dimension of the cache is symbolic (``decoder.head_size`` in ``genai_config.json`` is its value).

The folder is cached (:func:`rtmatrix.fixtures.cache.cached_build`) by the checkpoint's content
hash, the builder's version (package metadata: the runtime is never imported here), the versions
of the packages it imports, the options and :data:`KEY_VERSION`; its
:class:`~rtmatrix.converters.base.Conversion` record is in the entry's manifest
(``conversion``), the builder's full log beside the model (``convert.log``).

A builder that exits non-zero or writes no ``model.onnx``/``genai_config.json`` raises
:class:`~rtmatrix.converters.base.ConverterRefused`, naming the builder, its version, the
checkpoint's ``model_type`` and the builder's own last error line (``KeyError: 'rope_type'``).
A refusal is cached too, keyed the same (``<entry>.refused.json`` and ``.refused.log`` beside
where the folder would be), so every cell of one checkpoint runs a failing conversion once;
not cached: a time-out, a kill by a signal (memory) and a missing Python package, whose retry
may succeed. Delete the ``.refused.json`` to retry any other refusal. A missing builder or a
missing package it needs (onnx-ir is one onnxruntime-genai does not declare) is
:class:`~rtmatrix.fixtures.spec.ExporterUnavailable`, naming the pip command.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from rtmatrix.converters import base
from rtmatrix.converters.base import ChildRun, Conversion, Converted, Log, VendorDtype, dtype_map
from rtmatrix.converters.base import error_line as error_line  # the builder's: no specifics
from rtmatrix.fixtures.cache import file_sha256
from rtmatrix.fixtures.sources import content_sha256
from rtmatrix.fixtures.spec import ExporterUnavailable, FixtureError

NAME = "ort_genai"
TOOL = "onnxruntime_genai.models.builder"
DISTRIBUTION = "onnxruntime-genai"
CONTAINER = "onnx"
#: the rtmatrix extra that installs it (with ``reference``: torch and transformers)
EXTRA = "onnxruntime-genai"
#: the builder's precisions for the CPU execution provider (its fp16/bf16 are CUDA/DML ones)
PRECISIONS = ("fp32", "int8", "int4")
#: the builder's own quantizations (its ``--precision``, every other option at its default, as
#: onnxruntime-genai 0.18's ``builder.py`` and ``quantization/quant_config.py`` set them for the
#: CPU provider): ``MatMulNBits`` round-to-nearest weights, symmetric (no zero point), blocks of
#: 32 along the input, ``accuracy_level`` 4 (the matmul quantizes its activations to int8 at run
#: time), every MatMul including the LM head; norms stay fp32. The embedding of a model that ties
#: it to the LM head (``shared_embeddings``, on by default for such a model) is read from the
#: quantized head at int4 (``GatherBlockQuantized``, 4-bit only) and stays a separate fp32 table
#: at int8; an untied embedding stays fp32 (checked on SmolLM2-135M's graphs)
VENDOR_DTYPES = (
    VendorDtype("genai-int8", "--precision", "int8", 8,
                "MatMulNBits int8 weights, symmetric, blocks of 32, int8 activations "
                "(accuracy_level 4); LM head int8, embedding and norms fp32"),
    VendorDtype("genai-int4", "--precision", "int4", 4,
                "MatMulNBits int4 weights, symmetric, blocks of 32, int8 activations "
                "(accuracy_level 4); LM head int4, a tied embedding read from it, norms fp32"),
)  # fmt: skip
#: rtmatrix dtype -> the builder's ``--precision``
DTYPES = dtype_map({"f32": "fp32"}, VENDOR_DTYPES)
EXECUTION_PROVIDER = "cpu"
#: bump when the key or what a conversion records changes
KEY_VERSION = "1"
OUTPUT = "model.onnx"
GENAI_CONFIG = "genai_config.json"
LOG_FILE = "convert.log"
CONVERT_TIMEOUT_S = 3600.0
#: what the builder needs in this environment (distribution -> module it imports); onnxruntime-
#: genai 0.18 declares none but numpy and onnxruntime
REQUIRED = {"onnxruntime-genai": "onnxruntime_genai", "onnx-ir": "onnx_ir", "torch": "torch",
            "transformers": "transformers"}  # fmt: skip
#: the packages whose versions shape the output (in the key and the record)
PYTHON_PACKAGES = (
    "onnxruntime-genai", "onnxruntime", "onnx-ir", "onnx", "torch", "transformers", "tokenizers",
    "safetensors", "numpy",
)  # fmt: skip


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        msg = (
            f"precision {precision!r}: the model builder writes {', '.join(PRECISIONS)} for "
            f"the {EXECUTION_PROVIDER} execution provider"
        )
        raise ValueError(msg)
    return precision


def python_packages() -> dict[str, str]:
    """The versions of the packages the builder imports (``absent`` for a missing one)."""
    return base.package_versions(PYTHON_PACKAGES)


def require_builder(packages: dict[str, str]) -> str:
    """The builder's version; :class:`ExporterUnavailable` naming the pip command when it or a
    package it imports is not installed."""
    missing = [d for d in REQUIRED if packages.get(d, "absent") == "absent"]
    if missing:
        msg = (
            f"onnxruntime-genai's model builder needs {', '.join(missing)} in this environment "
            f"({sys.executable}): pip install {' '.join(missing)}"
        )
        raise ExporterUnavailable(msg)
    return packages[DISTRIBUTION]


def conversion_key(folder: Path, precision: str, packages: dict[str, str]) -> dict[str, Any]:
    return {
        "key_version": KEY_VERSION,
        "converter": NAME,
        "tool": TOOL,
        "distribution": DISTRIBUTION,
        "version": packages[DISTRIBUTION],
        "transformers": packages["transformers"],
        "options": options(precision),
        "source_sha256": content_sha256(folder),
        "other_files_sha256": base.other_files_sha256(folder),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "python_packages": packages,
    }


def options(precision: str) -> dict[str, str]:
    return {"precision": precision, "execution_provider": EXECUTION_PROVIDER}


def refusal(
    version: str, folder: Path, precision: str, run: ChildRun, missing: str | None
) -> tuple[str, bool]:
    """The refusal's message, and whether a retry would refuse the same (so it is cached)."""
    kind = base.model_type(folder, with_architecture=True)
    what = (f"onnxruntime-genai's model builder ({TOOL}, {DISTRIBUTION} {version}) refused "
            f"{folder}, model_type {kind}, at {precision}")  # fmt: skip
    return base.refusal_message(what, run, error_line(run.log), missing)


def convert_artifact(
    folder: Path,
    precision: str,
    root: Path | None = None,
    log: Log | None = None,
    *,
    timeout_s: float = CONVERT_TIMEOUT_S,
) -> Converted:
    """Convert the Hugging Face checkpoint ``folder`` with the model builder (cached);
    :class:`ConverterRefused` when the builder fails."""
    check_precision(precision)
    folder = folder.resolve()
    if not (folder / "config.json").is_file():
        msg = f"checkpoint {folder} is not a Hugging Face folder (no config.json)"
        raise FixtureError(msg)
    say = log or (lambda _msg: None)
    packages = python_packages()
    version = require_builder(packages)
    key = conversion_key(folder, precision, packages)
    label = f"ort-genai-{folder.name}-{precision}"

    def build(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        say(f"converting {folder} at {precision} with {TOOL} ({DISTRIBUTION} {version})")
        return _run_builder(folder, precision, key, path, refused, timeout_s)

    done = Converted.from_artifact(base.build_unless_refused(label, key, OUTPUT, build, root))
    say(f"{'converted' if done.built else 'cached'}: {done.path.parent}")
    return done


def convert(
    folder: Path, precision: str, root: Path | None = None, log: Log | None = None
) -> Converted:
    """:func:`convert_artifact`: ``model.onnx`` (its folder holds ``genai_config.json``), its
    record, and whether this call built it."""
    return convert_artifact(folder, precision, root, log)


def _run_builder(
    folder: Path, precision: str, key: dict[str, Any], path: Path,
    refused: tuple[Path, Path], timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Run the builder into ``path.parent`` (a temporary entry); the manifest's extra."""
    out = path.parent
    env = base.offline_env({"TQDM_DISABLE": "1"})  # its per-tensor progress bars only
    with tempfile.TemporaryDirectory(prefix=".ort-genai-work-", dir=out.parent) as work:
        cmd = [sys.executable, "-m", TOOL, "-i", str(folder), "-o", str(out), "-p", precision,
               "-e", EXECUTION_PROVIDER, "-c", str(Path(work) / "cache")]  # fmt: skip
        run = base.run_offline(cmd, out / LOG_FILE, timeout_s, env=env, cwd=Path(work))
    version = str(key["version"])
    conversion = Conversion.of_run(
        run, cmd, converter=NAME, tool=TOOL, distribution=DISTRIBUTION, version=version,
        options=options(precision), source=folder, source_sha256=str(key["source_sha256"]),
    )  # fmt: skip
    absent = [p.name for p in (path, out / GENAI_CONFIG) if not p.is_file() or not p.stat().st_size]
    if run.returncode != 0 or absent:
        message, keep = refusal(version, folder, precision, run, " or ".join(absent))
        raise base.refuse(refused, message, conversion, run.log, keep=keep)
    return {
        "conversion": conversion.to_dict(),
        "python_packages": key["python_packages"],
        "files": _files(out),
        "genai_config": _genai_summary(out / GENAI_CONFIG),
        "log": LOG_FILE,
    }


def _files(out: Path) -> dict[str, dict[str, Any]]:
    """Every file the builder wrote (and its log), with size and sha256: ``model.onnx`` holds
    the graph only, its weights are in ``model.onnx.data``."""
    return {f.name: {"size": f.stat().st_size, "sha256": file_sha256(f)}
            for f in sorted(out.iterdir()) if f.is_file()}  # fmt: skip


def _genai_summary(path: Path) -> dict[str, Any]:
    """What of the builder's ``genai_config.json`` a reader of ``model.onnx`` alone needs."""
    try:
        cfg = json.loads(path.read_text("utf-8"))
        model, search = dict(cfg.get("model") or {}), dict(cfg.get("search") or {})
    except (OSError, ValueError, TypeError, AttributeError):
        return {}
    decoder = dict(model.get("decoder") or {})
    return {
        "type": model.get("type"),
        "head_size": decoder.get("head_size"),
        "num_key_value_heads": decoder.get("num_key_value_heads"),
        "context_length": model.get("context_length"),
        "past_present_share_buffer": search.get("past_present_share_buffer"),
    }
