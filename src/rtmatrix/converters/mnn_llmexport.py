"""MNN-LLM's own exporter (``llmexport``, PyPI ``llmexport``), the vendor's converter from a
Hugging Face checkpoint to the folder ``MNN.llm`` loads (the ``mnn_llm`` row).

:func:`convert` runs ``python <site-packages>/llmexport/llmexport.py --path FOLDER --export mnn
--dst_path OUT --quant_bit N --quant_block 64 --mnnconvert ''`` in a child (``sys.executable``:
torch, transformers, onnx and the ``mnn`` wheel come from this environment; the parent imports
none of them) without a network (:func:`rtmatrix.converters.base.run_offline`), with the
package's own folder on ``PYTHONPATH``: llmexport 0.0.5's console script (``llmexport:main``)
fails with ``No module named 'utils'`` because its modules import their sibling package
``utils`` as a top-level one. ``--mnnconvert ''`` names no local ``MNNConvert`` binary, so the
exporter takes the ``mnn`` wheel's converter (the one the runtime row loads with) instead of
looking for ``../../../build/MNNConvert`` relative to its working directory.

**Offline always.** That converter (``MNN.tools.mnnconvert``) imports MNN's telemetry logger,
which on a missing ``aliyun`` package runs ``pip install -U aliyun-log-python-sdk`` through
whatever ``pip`` is first on ``PATH`` and then uploads the machine id and the arguments. The
child runs in a network namespace (``unshare -n``), with every ``pip`` on its ``PATH`` replaced
by a stub that refuses and says so (:data:`BLOCKED`; ``PIP_NO_INDEX`` alone would still let pip
install from a configured ``find-links`` folder), and the distributions installed in this
environment are compared before and after the run (``environment`` in the manifest). A blocked
``pip`` and any network error in the log are the record's ``network_attempts``.

The output: ``llm.mnn`` (the graph, with MNN's fused ``Attention`` op holding the KV cache),
``llm.mnn.weight`` (:data:`OUTPUT`, the main file: its hash and size are the entry's),
``config.json`` (MNN.llm's runtime config), ``llm_config.json``, ``tokenizer.mtok``, the
embedding table ``embeddings_bf16.bin`` (``--embed_bit 16`` means bf16, whatever the weights'
bits) and ``export_args.json`` (every argument the exporter ran with); beside them rtmatrix
keeps the MNN converter's own log (``mnnconvert.log``, the exporter's ``.export.log``) and the
checkpoint's ``generation_config.json`` (its bos/eos ids: the exporter keeps them only inside
its tokenizer file).

Weights: 16, 8 or 4 bits only (:data:`DTYPES`: rtmatrix's ``f16``, ``mnn-q8``, ``mnn-q4``). At
16 the linear weights are fp16 and the embedding table bf16; at 8/4 they are MNN's weight-only
blocked quantization (blocks of :data:`QUANT_BLOCK`, asymmetric: the exporter's defaults, passed
explicitly so the record states them), the LM head at the same bits (:data:`VENDOR_DTYPES`).

Cached (:func:`rtmatrix.converters.base.build_unless_refused`) by the checkpoint's content hash,
the exporter's version (package metadata: it is never imported here), the versions of the
packages it imports, the options and :data:`KEY_VERSION`. A refusal (non-zero exit, or a
missing output file) is :class:`~rtmatrix.converters.base.ConverterRefused` in the exporter's
own words, kept beside the entry unless a retry may succeed (time-out, signal, missing module).
A missing exporter is :class:`~rtmatrix.fixtures.spec.ExporterUnavailable` naming the pip extra.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from rtmatrix.converters import base
from rtmatrix.converters.base import ChildRun, Conversion, Converted, Log, VendorDtype, dtype_map
from rtmatrix.fixtures.cache import file_sha256
from rtmatrix.fixtures.sources import content_sha256
from rtmatrix.fixtures.spec import ExporterUnavailable, FixtureError

NAME = "mnn_llmexport"
TOOL = "llmexport.py"
DISTRIBUTION = "llmexport"
CONTAINER = "mnn"
#: the weight bits the exporter writes (``--quant_bit``)
QUANT_BITS = ("16", "8", "4")
#: ``--quant_block`` (the exporter's default; 0 would be per channel)
QUANT_BLOCK = "64"
#: the exporter's own quantizations (its ``--quant_bit``; llmexport 0.0.5's other defaults, and
#: ``--quant_block`` passed as its default): round-to-nearest weights, asymmetric (min/max with
#: a zero point: ``--sym`` off), blocks of 64 along the input, every linear layer and the LM
#: head at the same bits (``--lm_quant_bit`` defaults to ``--quant_bit``). The embedding of a
#: model that ties it to the LM head is read from the quantized head (``tie_embeddings``); an
#: untied one stays bf16 (``--embed_bit 16``). The exporter's ``config.json`` says ``memory``
#: low: at run time MNN's int8 GEMM quantizes the activations too
VENDOR_DTYPES = (
    VendorDtype("mnn-q8", "--quant_bit", "8", 8,
                "int8 weights, asymmetric, blocks of 64, LM head int8; a tied embedding read "
                "from the quantized head, an untied one bf16"),
    VendorDtype("mnn-q4", "--quant_bit", "4", 4,
                "int4 weights, asymmetric, blocks of 64, LM head int4; a tied embedding read "
                "from the quantized head, an untied one bf16"),
)  # fmt: skip
#: rtmatrix dtype -> ``--quant_bit``: 16 = fp16 linear weights (and a bf16 embedding table)
DTYPES = dtype_map({"f16": "16"}, VENDOR_DTYPES)
#: bump when the key or what a conversion records changes
KEY_VERSION = "1"
OUTPUT = "llm.mnn.weight"
#: what a complete export holds (``MNN.llm.create`` reads ``config.json``, which names the rest)
REQUIRED_FILES = ("llm.mnn", OUTPUT, "config.json", "llm_config.json")
LOG_FILE = "convert.log"
#: the MNN converter's own output (the exporter redirects it into ``.export.log`` in its cwd)
MNNCONVERT_LOG = "mnnconvert.log"
EXPORT_LOG = ".export.log"
#: the checkpoint's files copied beside the export (what the row reads bos/eos from)
COPIED = ("generation_config.json",)
CONVERT_TIMEOUT_S = 3600.0
#: distribution -> what must be installed for the exporter to run at all
REQUIRED = ("llmexport", "mnn", "torch", "transformers", "onnx")
#: the packages whose versions shape the output (in the key and the record)
PYTHON_PACKAGES = (
    "llmexport", "mnn", "torch", "transformers", "tokenizers", "safetensors", "onnx",
    "sentencepiece", "numpy",
)  # fmt: skip
EXTRA = "mnn-llm"
#: what the ``pip`` stubs print: the child tried to install a package (MNN's telemetry does)
BLOCKED = "rtmatrix-blocked: "
_PIP_STUB = f"""#!/bin/sh
echo "{BLOCKED}$(basename "$0") $*" >&2
exit 1
"""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: a frame of the exporter's spinner (yaspin's braille dots before the step's name)
_SPINNER = re.compile(r"^[\u2800-\u28ff] ")
#: the MNN converter's own words for a failed conversion
_MNNCONVERT_FAILED = re.compile(r"Converted Failed|\[ERROR\]|Not Support|Error for ")


def check_quant_bit(bits: str) -> str:
    if str(bits) not in QUANT_BITS:
        msg = f"quant_bit {bits!r}: llmexport writes {', '.join(QUANT_BITS)}-bit weights only"
        raise ValueError(msg)
    return str(bits)


def python_packages() -> dict[str, str]:
    """The versions of the packages the exporter imports (``absent`` for a missing one)."""
    return base.package_versions(PYTHON_PACKAGES)


def require_exporter(packages: dict[str, str]) -> str:
    """The exporter's version; :class:`ExporterUnavailable` naming the pip command when it or
    a package it needs is not installed."""
    missing = [d for d in REQUIRED if packages.get(d, "absent") == "absent"]
    if missing:
        msg = (
            f"MNN-LLM's exporter needs {', '.join(missing)} in this environment "
            f"({sys.executable}): pip install 'rtmatrix[{EXTRA}]' (install PyPI's CPU torch "
            "first: plain torch is a CUDA build)"
        )
        raise ExporterUnavailable(msg)
    return packages[DISTRIBUTION]


def exporter_script() -> Path:
    """``llmexport.py`` of the installed distribution, found from its metadata (not imported)."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        msg = f"{DISTRIBUTION} is not installed: pip install 'rtmatrix[{EXTRA}]'"
        raise ExporterUnavailable(msg) from exc
    script = Path(str(dist.locate_file(f"llmexport/{TOOL}")))
    if not script.is_file():
        msg = f"{DISTRIBUTION} {dist.version} has no llmexport/{TOOL} (looked at {script})"
        raise ExporterUnavailable(msg)
    return script


def options(bits: str) -> dict[str, str]:
    return {"quant_bit": bits, "quant_block": QUANT_BLOCK}


def conversion_key(folder: Path, bits: str, packages: dict[str, str]) -> dict[str, Any]:
    return {
        "key_version": KEY_VERSION,
        "converter": NAME,
        "tool": TOOL,
        "distribution": DISTRIBUTION,
        "version": packages[DISTRIBUTION],
        "options": options(bits),
        "source_sha256": content_sha256(folder),
        "other_files_sha256": base.other_files_sha256(folder),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "python_packages": packages,
    }


def command(script: Path, folder: Path, out: Path, bits: str) -> list[str]:
    """The exporter's command line (run with ``script``'s folder on ``PYTHONPATH``)."""
    return [sys.executable, str(script), "--path", str(folder), "--export", "mnn",
            "--dst_path", str(out), "--quant_bit", bits, "--quant_block", QUANT_BLOCK,
            "--mnnconvert", ""]  # fmt: skip


def child_env(script: Path, stubs: Path) -> dict[str, str]:
    """The offline environment, the exporter's folder on ``PYTHONPATH`` (its ``utils``) and the
    ``pip`` stubs first on ``PATH``."""
    return base.offline_env({
        "PYTHONPATH": str(script.parent),
        "PATH": f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}",
        "TQDM_DISABLE": "1",
        "PYTHONUNBUFFERED": "1",
    })  # fmt: skip


def write_pip_stubs(folder: Path) -> Path:
    """``pip``, ``pip3`` and ``pip3.X`` that install nothing and say they were called."""
    folder.mkdir(parents=True, exist_ok=True)
    names = ("pip", "pip3", f"pip{sys.version_info.major}.{sys.version_info.minor}")
    for name in names:
        stub = folder / name
        stub.write_text(_PIP_STUB, "utf-8")
        stub.chmod(stub.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def clean_log(text: str) -> str:
    """The exporter's log without its spinner: ANSI codes and spinner frames gone, each line
    its last ``\\r`` segment (what a terminal would show)."""
    lines = [_ANSI.sub("", line).split("\r")[-1].rstrip() for line in text.splitlines()]
    return "\n".join(ln for ln in lines if ln.strip() and not _SPINNER.match(ln)) + "\n"


def install_attempts(log: str) -> list[str]:
    """What the child tried to install (the stubs' lines)."""
    return [line.strip()[:300] for line in log.splitlines() if line.startswith(BLOCKED)][:20]


def mnnconvert_problems(log: str) -> list[str]:
    """The MNN converter's own lines that say it failed."""
    return [ln.strip()[:300] for ln in log.splitlines() if _MNNCONVERT_FAILED.search(ln)][:10]


def installed_distributions() -> dict[str, str]:
    """Every distribution this interpreter sees, name -> version (metadata only)."""
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            out[str(name).lower()] = str(dist.version)
    return out


def environment_change(before: dict[str, str], after: dict[str, str]) -> dict[str, Any]:
    """What was installed, upgraded or removed in this environment while the exporter ran."""
    names = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
    changed = [f"{n} {before.get(n, 'absent')} -> {after.get(n, 'absent')}" for n in names]
    return {"unchanged": not changed, "changed": changed, "distributions": len(after)}


def error_line(log: str) -> str:
    """The exporter's last word: its last traceback's exception (it prints one and exits 1
    when a step fails), else its last line; a stub's line is not the exporter's."""
    return base.error_line(log, skip_prefix=BLOCKED)


def refusal(
    version: str, folder: Path, bits: str, run: ChildRun, missing: str | None,
    converter_log: str = "",
) -> tuple[str, bool]:  # fmt: skip
    """The refusal's message, and whether a retry would refuse the same (so it is kept)."""
    kind = base.model_type(folder, with_architecture=True)
    what = (f"MNN-LLM's exporter ({TOOL}, {DISTRIBUTION} {version}) refused {folder}, "
            f"model_type {kind}, at {bits}-bit weights")  # fmt: skip
    said = error_line(run.log)
    problems = mnnconvert_problems(converter_log)
    if problems and (run.returncode == 0 or said == "it printed nothing"):
        said = f"MNN's converter said: {'; '.join(problems[:3])}"
    return base.refusal_message(what, run, said, missing)


def convert_artifact(
    folder: Path,
    bits: str,
    root: Path | None = None,
    log: Log | None = None,
    *,
    timeout_s: float = CONVERT_TIMEOUT_S,
) -> Converted:
    """Export the Hugging Face checkpoint ``folder`` with MNN-LLM's exporter at ``bits``-bit
    weights (cached); :class:`ConverterRefused` when the exporter fails."""
    bits = check_quant_bit(bits)
    folder = folder.resolve()
    if not (folder / "config.json").is_file():
        msg = f"checkpoint {folder} is not a Hugging Face folder (no config.json)"
        raise FixtureError(msg)
    say = log or (lambda _msg: None)
    packages = python_packages()
    version = require_exporter(packages)
    script = exporter_script()
    key = conversion_key(folder, bits, packages)
    label = f"mnn-llmexport-{folder.name}-q{bits}"

    def build(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        say(f"converting {folder} at {bits}-bit weights with {TOOL} ({DISTRIBUTION} {version})")
        return _run_exporter(script, folder, bits, key, path, refused, timeout_s)

    done = Converted.from_artifact(base.build_unless_refused(label, key, OUTPUT, build, root))
    say(f"{'converted' if done.built else 'cached'}: {done.path.parent}")
    return done


def convert(folder: Path, bits: str, root: Path | None = None, log: Log | None = None) -> Converted:
    """:func:`convert_artifact`: ``llm.mnn.weight`` (its folder holds ``config.json``, which
    ``MNN.llm.create`` reads), its record, and whether this call built it."""
    return convert_artifact(folder, bits, root, log)


def _run_exporter(
    script: Path, folder: Path, bits: str, key: dict[str, Any], path: Path,
    refused: tuple[Path, Path], timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Run the exporter into ``path.parent`` (a temporary entry); the manifest's extra."""
    out = path.parent
    cmd = command(script, folder, out, bits)
    before = installed_distributions()
    with tempfile.TemporaryDirectory(prefix=".mnn-llmexport-work-", dir=out.parent) as tmp:
        work = Path(tmp)
        env = child_env(script, write_pip_stubs(work / "pip-stubs"))
        raw = base.run_offline(cmd, out / LOG_FILE, timeout_s, env=env, cwd=work)
        converter_log = _move_converter_log(work / EXPORT_LOG, out / MNNCONVERT_LOG)
    environment = environment_change(before, installed_distributions())
    run = dataclasses.replace(raw, log=clean_log(raw.log))
    (out / LOG_FILE).write_text(run.log, "utf-8")
    conversion = _record(run, cmd, bits, folder, key)
    absent = [n for n in REQUIRED_FILES if not (out / n).is_file() or not (out / n).stat().st_size]
    if run.returncode != 0 or absent:
        version = str(key["version"])
        message, keep = refusal(version, folder, bits, run, " or ".join(absent), converter_log)
        raise base.refuse(refused, message, conversion, run.log, keep=keep)
    copied = _copy_from_checkpoint(folder, out)
    return {
        "conversion": conversion.to_dict(),
        "python_packages": key["python_packages"],
        "environment": environment,
        "install_attempts": install_attempts(run.log),
        "export_args": _export_args(out),
        "llm_config": _read_json(out / "llm_config.json"),
        "embedding": embedding_file(out),
        "copied_from_checkpoint": copied,
        "files": _files(out),
        "log": LOG_FILE,
        "converter_log": MNNCONVERT_LOG,
    }


def _record(
    run: ChildRun, cmd: list[str], bits: str, folder: Path, key: dict[str, Any]
) -> Conversion:
    """The conversion's record; a blocked ``pip`` counts as a network attempt (it would have
    downloaded a package, and the package uploads telemetry)."""
    conv = Conversion.of_run(
        run, cmd, converter=NAME, tool=TOOL, distribution=DISTRIBUTION,
        version=str(key["version"]), options=options(bits), source=folder,
        source_sha256=str(key["source_sha256"]),
    )  # fmt: skip
    attempts = [*install_attempts(run.log), *conv.network_attempts][:20]
    return dataclasses.replace(conv, network_attempts=attempts)


def _move_converter_log(src: Path, dest: Path) -> str:
    """The MNN converter's ``.export.log`` moved beside the export; its text ('' if none)."""
    try:
        text = src.read_text("utf-8", errors="replace")
    except OSError:
        return ""
    dest.write_text(text, "utf-8")
    return text


def _copy_from_checkpoint(folder: Path, out: Path) -> list[str]:
    copied = []
    for name in COPIED:
        if (folder / name).is_file():
            shutil.copyfile(folder / name, out / name)
            copied.append(name)
    return copied


def embedding_file(out: Path) -> dict[str, Any]:
    """Which embedding table the exporter wrote and at what precision (``embeddings_bf16.bin``:
    bf16; ``embeddings_int8.bin``/``_int4``: quantized; none: tied to the quantized LM head)."""
    for f in sorted(out.glob("embeddings_*.bin")):
        kind = f.stem.removeprefix("embeddings_")
        return {"file": f.name, "precision": kind, "size": f.stat().st_size}
    return {"file": None, "precision": "tied to the LM head (llm_config.json tie_embeddings)"}


def _export_args(out: Path) -> dict[str, Any]:
    """``export_args.json`` less the paths (the entry was a temporary folder then)."""
    args = _read_json(out / "export_args.json")
    return {k: v for k, v in args.items() if k not in ("path", "dst_path", "tokenizer_path")}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _files(out: Path) -> dict[str, dict[str, Any]]:
    """Every file the exporter wrote (and the logs), with size and sha256."""
    return {f.name: {"size": f.stat().st_size, "sha256": file_sha256(f)}
            for f in sorted(out.iterdir()) if f.is_file()}  # fmt: skip
