"""llama.cpp's own converter, ``convert_hf_to_gguf.py``, as the installed binding ships it.

:func:`converter_source` takes the converter from the sdist of the installed llama-cpp-python
version (``pip download``, as :mod:`rtmatrix.runtimes.llama_cpp.reftool` builds the tools from):
``vendor/llama.cpp/``'s ``convert_hf_to_gguf.py``, the ``conversion/`` package it imports (one
module per architecture family), its own ``gguf-py/`` (never PyPI's ``gguf``), the chat templates
some models read (``models/templates/``), ``convert_hf_to_gguf_update.py`` (the source of the BPE
pre-tokenizer hashes) and ``requirements/``. They are extracted once, atomically, under a lock,
into ``<tools>/llama.cpp-convert-<version>/`` beside a manifest (the sdist's sha256, every file's
size and sha256, the llama.cpp commit the sdist's submodule records).

:func:`convert` runs ``python convert_hf_to_gguf.py FOLDER --outfile F --outtype T`` in a child
(``sys.executable``: torch, transformers and sentencepiece come from this environment) without a
network (:func:`rtmatrix.converters.base.run_offline`), ``PYTHONPATH`` = the sdist's ``gguf-py``.
A ``sitecustomize`` on that path (rtmatrix's, in the entry's ``probe/``) prints, at the child's
exit, which ``gguf`` the converter imported; a ``gguf`` from anywhere but the sdist fails the
conversion. The file is cached by checkpoint content + converter version + options + the
converter's Python packages; its :class:`~rtmatrix.converters.base.Conversion` record is in the
entry's manifest (``conversion``) and its full log beside the file (``convert.log``).

A converter that exits non-zero or writes nothing raises
:class:`~rtmatrix.converters.base.ConverterRefused` with the converter's own last error line. A
refusal is cached too (``<entry>.refused.json`` and ``.refused.log`` beside where the file would
be), so ten cells of one checkpoint run a failing conversion once; not cached: a time-out, a
kill by a signal (memory) and a missing Python package (installing it is the fix), whose
retry may succeed. Delete the ``.refused.json`` to retry any other refusal.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtmatrix.converters import base
from rtmatrix.converters.base import ChildRun, Conversion, Converted, Log, VendorDtype
from rtmatrix.fixtures.cache import file_sha256
from rtmatrix.fixtures.sources import content_sha256
from rtmatrix.fixtures.spec import ExporterUnavailable, FixtureError
from rtmatrix.runtimes.llama_cpp.reftool import (
    DISTRIBUTION,
    ToolUnavailable,
    build_lock,
    download_sdist,
    installed_version,
    tools_root,
)

NAME = "llama_cpp"
TOOL = "convert_hf_to_gguf.py"
CONTAINER = "gguf"
#: the rtmatrix extra that installs it (``DISTRIBUTION``, imported above: the sdist of the
#: installed llama-cpp-python carries the converter)
EXTRA = "llama-cpp"
#: the types the converter writes itself (its ``tq1_0``/``tq2_0`` are for ternary models only,
#: ``auto`` is a guess): anything else is llama-quantize's job
OUTTYPES = ("f32", "f16", "bf16", "q8_0")
#: no quantized dtype of its own name: q8_0/q4_0 name GGUF's own block types (blocks of 32, an
#: f16 scale each), which rtmatrix's GGUF writer writes for a seeded model too, so the name
#: already says what the file's matmul weights hold, whoever wrote it
VENDOR_DTYPES: tuple[VendorDtype, ...] = ()
#: rtmatrix dtype -> the converter's ``--outtype`` (q4_0 and the other k-quants are
#: llama-quantize's, not built here yet)
DTYPES = {"f32": "f32", "f16": "f16", "q8_0": "q8_0", "q4_0": "q4_0"}
#: rtmatrix dtype -> llama-quantize's type, applied to the converter's f32 file (llama.cpp's
#: own route to a k-quant: convert, then quantize)
QUANTIZED = {"q4_0": "Q4_0"}
QUANTIZE_KEY_VERSION = "1"
QUANTIZE_TIMEOUT_S = 1800.0
#: bump when the key or what a conversion records changes
CONVERTER_KEY_VERSION = "1"
SOURCE_MANIFEST = "convert-source.json"
OUTPUT = "model.gguf"
LOG_FILE = "convert.log"
#: what of ``vendor/llama.cpp/`` the converter needs (``conversion/`` and ``models/templates/``
#: are absent from older sdists, whose converter was one file)
MEMBERS = (
    TOOL, "convert_hf_to_gguf_update.py", "conversion/", "gguf-py/", "models/templates/",
    "requirements/", "LICENSE",
)  # fmt: skip
#: the packages the converter imports from this environment (in the key and the record)
PYTHON_PACKAGES = (
    "torch", "transformers", "tokenizers", "safetensors", "numpy", "sentencepiece", "protobuf",
    "mistral_common", "pyyaml",
)  # fmt: skip
CONVERT_TIMEOUT_S = 3600.0
LOCK_TIMEOUT_S = 1800.0
PROBE = "rtmatrix-probe: gguf "
_PROBE_SOURCE = f'''"""rtmatrix: say at exit which gguf the converter imported (nothing else)."""
import atexit
import sys


def _rtmatrix_report_gguf():
    mod = sys.modules.get("gguf")
    print("{PROBE}" + str(getattr(mod, "__file__", None)), file=sys.stderr, flush=True)


atexit.register(_rtmatrix_report_gguf)
'''
#: the converter's own logged error (``ERROR:hf-to-gguf:why``): its last word without a traceback
_LOG_ERROR = re.compile(r"^(?:ERROR|CRITICAL):[\w.-]+:(.*)$")


@dataclass(frozen=True)
class ConverterSource:
    """The converter of one llama-cpp-python sdist, extracted: ``root`` holds ``script``,
    ``gguf_py`` (the folder to put on ``PYTHONPATH``) and the manifest."""

    root: Path
    script: Path
    gguf_py: Path
    version: str  # the llama-cpp-python version whose sdist it came from
    label: str  # "convert_hf_to_gguf.py (llama-cpp-python 0.3.36, llama.cpp 0c1e5709)"
    commit: str  # the llama.cpp commit the sdist's submodule records, or ""
    sdist_sha256: str
    manifest: dict[str, Any]

    @property
    def probe(self) -> Path:
        return self.root / "probe"


# -- the converter's source ---------------------------------------------------------------------
def source_dir(version: str, root: Path | None = None) -> Path:
    return (root or tools_root()) / f"llama.cpp-convert-{version}"


def read_source(entry: Path) -> ConverterSource | None:
    """The extracted converter in ``entry`` if complete (every file of its manifest present
    with its recorded size), else None."""
    try:
        manifest: dict[str, Any] = json.loads((entry / SOURCE_MANIFEST).read_text("utf-8"))
        for rel, rec in manifest["files"].items():
            if (entry / rel).stat().st_size != rec["size"]:
                return None
        version, commit = str(manifest["version"]), str(manifest["commit"])
        sdist_sha = str(manifest["sdist"]["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ConverterSource(entry, entry / TOOL, entry / "gguf-py", version,
                           source_label(version, commit), commit, sdist_sha,
                           manifest)  # fmt: skip


def source_label(version: str, commit: str) -> str:
    where = f", llama.cpp {commit[:8]}" if commit else ""
    return f"{TOOL} ({DISTRIBUTION} {version}{where})"


def converter_source(log: Log | None = None, root: Path | None = None) -> ConverterSource:
    """The converter of the installed llama-cpp-python's sdist, extracted once into
    ``<tools>/llama.cpp-convert-<version>/``. :class:`ToolUnavailable` when it cannot be had
    (the binding not installed, no registry to download the sdist from)."""
    say = log or (lambda _msg: None)
    version = installed_version()
    entry = source_dir(version, root)
    found = read_source(entry)
    if found is not None:
        return found
    entry.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(entry.parent / f".{entry.name}.lock", LOCK_TIMEOUT_S, say):
        found = read_source(entry)  # extracted by the process we waited for
        if found is not None:
            return found
        work = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
        try:
            say(f"downloading the {DISTRIBUTION} {version} sdist for {TOOL}")
            sdist = download_sdist(version, work / "sdist", work / "download.log")
            _extract(sdist, work / "out", version)
            if entry.exists():  # an incomplete entry: nobody can be using it
                shutil.rmtree(entry)
            (work / "out").rename(entry)
        except OSError as exc:
            msg = f"extracting {TOOL} in {work} failed: {exc}"
            raise ToolUnavailable(msg) from exc
        finally:
            shutil.rmtree(work, ignore_errors=True)
    found = read_source(entry)
    if found is None:
        msg = f"{TOOL} was extracted but {entry} is not a complete entry"
        raise ToolUnavailable(msg)
    say(f"extracted {found.label} -> {entry}")
    return found


def _wanted(name: str, top: str) -> str | None:
    """``name``'s path below ``vendor/llama.cpp/`` if the converter needs it, else None."""
    prefix = f"{top}/vendor/llama.cpp/"
    if not name.startswith(prefix):
        return None
    rel = name[len(prefix) :]
    if "__pycache__" in rel.split("/"):
        return None
    wanted = any(rel == m or (m.endswith("/") and rel.startswith(m)) for m in MEMBERS)
    return rel if wanted else None


def _extract(sdist: Path, out: Path, version: str) -> None:
    """The converter's files of ``sdist`` into ``out`` (flat: ``out/convert_hf_to_gguf.py``),
    the probe, and the manifest."""
    files: dict[str, dict[str, Any]] = {}
    commit = ""
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar:
                top = member.name.split("/", 1)[0]
                if member.name == f"{top}/.git/modules/vendor/llama.cpp/HEAD":
                    commit = _read_member(tar, member).strip()
                rel = _wanted(member.name, top)
                if rel is None or not member.isfile():
                    continue
                data = _read_member(tar, member, text=False)
                dest = out / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                files[rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    except (OSError, tarfile.TarError) as exc:
        msg = f"cannot read {sdist.name}: {exc}"
        raise ToolUnavailable(msg) from exc
    for needed in (TOOL, "gguf-py/gguf/__init__.py"):
        if needed not in files:
            msg = f"{sdist.name} has no vendor/llama.cpp/{needed}"
            raise ToolUnavailable(msg)
    probe = out / "probe" / "sitecustomize.py"
    probe.parent.mkdir()
    probe.write_text(_PROBE_SOURCE, "utf-8")
    files["probe/sitecustomize.py"] = {"size": probe.stat().st_size, "sha256": file_sha256(probe)}
    manifest = {
        "distribution": DISTRIBUTION,
        "version": version,
        "sdist": {"file": sdist.name, "sha256": file_sha256(sdist)},
        "commit": commit if re.fullmatch(r"[0-9a-f]{40}", commit) else "",
        "members": list(MEMBERS),
        "extracted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": dict(sorted(files.items())),
    }
    (out / SOURCE_MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), "utf-8")


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, text: bool = True) -> Any:
    fh = tar.extractfile(member)
    data = fh.read() if fh is not None else b""
    return data.decode("utf-8", errors="replace") if text else data


# -- conversion ---------------------------------------------------------------------------------
def check_outtype(outtype: str) -> str:
    if outtype not in OUTTYPES:
        msg = (
            f"outtype {outtype!r}: {TOOL} writes {', '.join(OUTTYPES)} itself "
            "(other types: llama-quantize from one of these)"
        )
        raise ValueError(msg)
    return outtype


def python_packages() -> dict[str, str]:
    """The versions of the packages the converter imports from this environment."""
    return base.package_versions(PYTHON_PACKAGES)


def conversion_key(source: ConverterSource, folder: Path, outtype: str) -> dict[str, Any]:
    return {
        "key_version": CONVERTER_KEY_VERSION,
        "converter": NAME,
        "tool": TOOL,
        "distribution": DISTRIBUTION,
        "version": source.version,
        "sdist_sha256": source.sdist_sha256,
        "options": {"outtype": outtype},
        "source_sha256": content_sha256(folder),
        "other_files_sha256": base.other_files_sha256(folder),
        "source_name": folder.name,  # the converter names the model after its folder
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "python_packages": python_packages(),
    }


def error_line(log: str) -> str:
    """The converter's own last word on why it failed: the exception line of its last
    traceback (``NotImplementedError: ...``), else its last ``ERROR:`` log line, else its last
    line; the probe's line is not the converter's."""
    return base.error_line(log, skip_prefix=PROBE, log_error=_LOG_ERROR)


def gguf_imported_from(log: str) -> str | None:
    """Which ``gguf`` the converter imported, as the probe printed it at exit."""
    found = [line[len(PROBE) :].strip() for line in log.splitlines() if line.startswith(PROBE)]
    return found[-1] if found else None


def _refusal(source: ConverterSource, folder: Path, run: ChildRun, out: Path) -> tuple[str, bool]:
    """The refusal's message, and whether a retry would refuse the same (so it is cached)."""
    what = f"llama.cpp's {TOOL} ({DISTRIBUTION} {source.version}) refused {folder}"
    what += f" ({base.model_type(folder)})"
    return base.refusal_message(what, run, error_line(run.log), out.name)


def convert_artifact(
    folder: Path,
    outtype: str,
    root: Path | None = None,
    log: Log | None = None,
    *,
    timeout_s: float = CONVERT_TIMEOUT_S,
) -> Converted:
    """Convert the Hugging Face checkpoint ``folder`` to GGUF with the installed binding's own
    converter (cached); :class:`ConverterRefused` when the converter fails."""
    check_outtype(outtype)
    folder = folder.resolve()
    if not folder.is_dir():
        msg = f"checkpoint {folder} is not a folder (a Hugging Face checkpoint: config.json, ...)"
        raise FixtureError(msg)
    say = log or (lambda _msg: None)
    source = converter_source(say)
    key = conversion_key(source, folder, outtype)
    label = f"llama.cpp-convert-{folder.name}-{outtype}"

    def build(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        say(f"converting {folder} to {outtype} with {source.label}")
        return _run_converter(source, folder, outtype, key, path, refused, timeout_s)

    return Converted.from_artifact(base.build_unless_refused(label, key, OUTPUT, build, root))


def quantize_artifact(
    folder: Path, dtype: str, root: Path | None = None, log: Log | None = None
) -> Converted:
    """The checkpoint at ``dtype`` (:data:`QUANTIZED`) the way llama.cpp makes one: the
    converter's f32 file, then ``llama-quantize`` (built on demand from the same sdist, an
    entry of its own), cached by the f32 file's hash + the quantizer's version + the type."""
    from rtmatrix.runtimes.llama_cpp.reftool import QUANTIZE, build_tools, tool_env

    say = log or (lambda _msg: None)
    f32 = convert_artifact(folder, "f32", root, log)
    tools = build_tools(log=say, targets=QUANTIZE)
    binary = tools.bin_dir / QUANTIZE[0]
    qtype = QUANTIZED[dtype]
    key = {"quantize_key_version": QUANTIZE_KEY_VERSION, "base_sha256": file_sha256(f32.path),
           "tool": tools.manifest["binaries"][QUANTIZE[0]]["sha256"], "type": qtype}  # fmt: skip
    label = f"llama.cpp-quantize-{folder.name}-{dtype}"

    def build(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        cmd = [str(binary), str(f32.path), str(path), qtype, str(os.cpu_count() or 1)]
        say(f"quantizing {f32.path.name} to {qtype} with llama-quantize")
        run = base.run_offline(cmd, path.parent / LOG_FILE, QUANTIZE_TIMEOUT_S,
                               env=tool_env(tools.bin_dir))  # fmt: skip
        first = f32.conversion
        conv = Conversion(
            converter=NAME, tool=f"{TOOL} + llama-quantize", distribution=DISTRIBUTION,
            version=first.version, options={"outtype": "f32", "quantize": qtype},
            command=[*first.command, "&&", *base.offline_prefix()[0], *cmd],
            wall_s=round(first.wall_s + run.wall_s, 2), log_tail=run.tail,
            offline=first.offline, network_attempts=base.network_attempts(run.log),
            source=first.source, source_sha256=first.source_sha256,
        )  # fmt: skip
        if run.returncode != 0 or not path.is_file():
            why = base.error_line(run.log) or run.how_it_ended()
            msg = (f"llama.cpp's llama-quantize ({DISTRIBUTION} {first.version}) refused "
                   f"{f32.path.name} at {qtype}: {why}")  # fmt: skip
            raise base.refuse(refused, msg, conv, run.log, keep=not run.timed_out)
        return {"conversion": conv.to_dict(), "quantize_tool": tools.tool_version(QUANTIZE[0])}

    return Converted.from_artifact(base.build_unless_refused(label, key, OUTPUT, build, root))


def convert(
    folder: Path, outtype: str, root: Path | None = None, log: Log | None = None
) -> Converted:
    """:func:`convert_artifact` (or :func:`quantize_artifact` for :data:`QUANTIZED`); a
    converter that cannot be had here (no sdist, no torch) is :class:`ExporterUnavailable`
    (the cell is unavailable, with why)."""
    try:
        if outtype in QUANTIZED:
            return quantize_artifact(folder, outtype, root, log)
        return convert_artifact(folder, outtype, root, log)
    except ToolUnavailable as exc:
        msg = f"{TOOL} is unavailable here: {exc.reason}"
        raise ExporterUnavailable(msg) from exc


def _run_converter(
    source: ConverterSource, folder: Path, outtype: str, key: dict[str, Any], path: Path,
    refused: tuple[Path, Path], timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Run the converter into ``path`` (a temporary entry's file); the manifest's extra."""
    cmd = [sys.executable, str(source.script), str(folder), "--outfile", str(path),
           "--outtype", outtype]  # fmt: skip
    pythonpath = f"{source.probe}{os.pathsep}{source.gguf_py}"
    env = base.offline_env({"PYTHONPATH": pythonpath})
    env.pop("NO_LOCAL_GGUF", None)  # it would stop the converter preferring its own gguf-py
    run = base.run_offline(cmd, path.parent / LOG_FILE, timeout_s, env=env, cwd=path.parent)
    conversion = Conversion.of_run(
        run, cmd, converter=NAME, tool=TOOL, distribution=DISTRIBUTION, version=source.version,
        options={"outtype": outtype}, source=folder, source_sha256=str(key["source_sha256"]),
    )  # fmt: skip
    if run.returncode != 0 or not path.is_file() or path.stat().st_size == 0:
        message, keep = _refusal(source, folder, run, path)
        raise base.refuse(refused, message, conversion, run.log, keep=keep)
    imported = gguf_imported_from(run.log)
    if imported is None or not Path(imported).resolve().is_relative_to(source.gguf_py.resolve()):
        msg = (
            f"{TOOL} imported gguf from {imported or 'nowhere the probe could see'}, not from "
            f"the sdist's {source.gguf_py} (PYTHONPATH={pythonpath}); the file is not kept"
        )
        raise ToolUnavailable(msg)
    return {
        "conversion": conversion.to_dict(),
        "converter_source": {
            "root": str(source.root),
            "version": source.version,
            "commit": source.commit,
            "sdist_sha256": source.sdist_sha256,
            "label": source.label,
        },
        "gguf_imported_from": imported,
        "env": {"PYTHONPATH": pythonpath},
        "python_packages": key["python_packages"],
        "log": LOG_FILE,
    }
