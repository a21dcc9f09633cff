"""What every converter home shares: the record of one conversion, the converter's refusal (an
outcome charged to the converter, not to a runtime), and running the converter offline.

A converter is a vendor's own tool that turns a team's checkpoint (a Hugging Face folder) into
the file its runtime reads: llama.cpp's ``convert_hf_to_gguf.py``, onnxruntime-genai's model
builder, OpenVINO's exporter, ... Each lives in its own module of :mod:`rtmatrix.converters`,
runs in a child process (the parent never imports torch or transformers), inside a network
namespace where the platform allows one (``unshare -n``), and is cached by checkpoint hash +
converter version + options. Nothing here imports a converter.

What the homes share besides: the checkpoint facts a key and a message need
(:func:`model_type`, :func:`other_files_sha256`, :func:`package_versions`), the converter's last
word in its log (:func:`error_line`), and the refusal cache (:func:`refusal_message`,
:func:`refuse`, :func:`build_unless_refused`): a refusal a retry would repeat is kept beside the
entry the conversion would have made, and read back instead of running the converter again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rtmatrix.fixtures.cache import (
    CachedArtifact,
    cache_root,
    cached_build,
    file_sha256,
    key_hash,
    safe_label,
)
from rtmatrix.fixtures.spec import FixtureError

#: the tail of a converter's log kept in its record and in a refusal's message
LOG_TAIL_CHARS = 2500
#: a converter's own words when it tried to reach the network (a hub, a telemetry endpoint)
NETWORK_PATTERNS = (
    r"Network is unreachable",
    r"Temporary failure in name resolution",
    r"Name or service not known",
    r"Failed to establish a new connection",
    r"Max retries exceeded with url",
    r"urlopen error",
    r"Could not resolve host",
    r"ConnectionError",
)
_NETWORK = re.compile("|".join(NETWORK_PATTERNS))
#: the line a Python traceback ends with: ``KeyError: 'rope_type'``, ``SystemExit``
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: .*)?$")
#: an error line that says a Python package is missing (installing it is the fix)
MISSING_MODULE = re.compile(r"^(ModuleNotFoundError|ImportError)\b")
#: the most of a converter's error line a message quotes
ERROR_LINE_CHARS = 500

#: where a converter home says what it is doing (a progress line), or nowhere
Log = Callable[[str], None]


@dataclass(frozen=True)
class VendorDtype:
    """One of a converter's own quantizations as an rtmatrix dtype of its own (``genai-int4``,
    ``ov-int8``, ``mnn-q4``): what a team gets from the vendor's tool at its defaults, judged
    against transformers like any quantized dtype. A home declares its own in ``VENDOR_DTYPES``;
    :mod:`rtmatrix.converters.dtypes` reads every home's, and the matrix loader, parity's
    tolerances and the numerics' quantized set derive from that one list."""

    name: str  # rtmatrix's dtype: "genai-int4"
    flag: str  # the converter's own option: "--precision"
    value: str  # its value there: "int4"
    bits: int  # the weights' bits, 8 or 4: the tolerance, and what int8w/int4w would have meant
    doc: str  # one line: what the vendor's default quantization does

    @property
    def option(self) -> str:
        """The converter's own words: ``--precision int4``."""
        return f"{self.flag} {self.value}"


def dtype_map(plain: dict[str, str], vendor: Iterable[VendorDtype]) -> dict[str, str]:
    """A home's ``DTYPES`` (rtmatrix dtype -> the converter's option value): its float dtypes
    ``plain`` and its own quantized ones."""
    return plain | {d.name: d.value for d in vendor}


@dataclass(frozen=True)
class Conversion:
    """How one file was converted: the converter, its version and options, the command line,
    its time and its own log; whether it ran offline and whether it tried the network."""

    converter: str  # the converter's home name, e.g. "llama_cpp"
    tool: str  # what the tool is, in the vendor's words: "convert_hf_to_gguf.py"
    distribution: str  # the package it came from, e.g. "llama-cpp-python"
    version: str
    options: dict[str, str]
    command: list[str]
    wall_s: float
    log_tail: str
    offline: str  # how it was kept offline, or why it was not
    network_attempts: list[str] = field(default_factory=list)
    #: the checkpoint it converted and its content hash
    source: str = ""
    source_sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "converter": self.converter,
            "tool": self.tool,
            "distribution": self.distribution,
            "version": self.version,
            "options": dict(self.options),
            "command": list(self.command),
            "wall_s": self.wall_s,
            "log_tail": self.log_tail,
            "offline": self.offline,
            "network_attempts": list(self.network_attempts),
            "source": self.source,
            "source_sha256": self.source_sha256,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Conversion:
        return cls(
            converter=str(data["converter"]),
            tool=str(data["tool"]),
            distribution=str(data["distribution"]),
            version=str(data["version"]),
            options={str(k): str(v) for k, v in dict(data["options"]).items()},
            command=[str(c) for c in data["command"]],
            wall_s=float(data["wall_s"]),
            log_tail=str(data["log_tail"]),
            offline=str(data["offline"]),
            network_attempts=[str(x) for x in data.get("network_attempts") or []],
            source=str(data.get("source") or ""),
            source_sha256=str(data.get("source_sha256") or ""),
        )

    @classmethod
    def of_run(
        cls, run: ChildRun, cmd: list[str], *, converter: str, tool: str, distribution: str,
        version: str, options: dict[str, str], source: Path, source_sha256: str,
    ) -> Conversion:  # fmt: skip
        """The record of ``cmd`` as :func:`run_offline` ran it (behind :func:`offline_prefix`,
        which also says how it was kept offline): its time, its log's tail and the network
        attempts the log shows."""
        prefix, how = offline_prefix()
        return cls(
            converter=converter, tool=tool, distribution=distribution, version=version,
            options=dict(options), command=[*prefix, *cmd], wall_s=run.wall_s,
            log_tail=run.tail, offline=how, network_attempts=network_attempts(run.log),
            source=str(source), source_sha256=source_sha256,
        )  # fmt: skip

    def label(self) -> str:
        """``convert_hf_to_gguf.py (llama-cpp-python 0.3.36, outtype f16)``"""
        opts = ", ".join(f"{k} {v}" for k, v in sorted(self.options.items()))
        return f"{self.tool} ({self.distribution} {self.version}" + (f", {opts})" if opts else ")")


class ConverterRefused(FixtureError):
    """The converter did not produce the file: the cell's outcome is charged to the converter.

    ``conversion`` holds what ran (command, log, version), so the report can show the
    converter's own message next to the architecture it refused."""

    def __init__(self, message: str, conversion: Conversion) -> None:
        super().__init__(message)
        self.conversion = conversion


@cache
def offline_prefix() -> tuple[tuple[str, ...], str]:
    """The command prefix that runs a child without a network, and how it does so; an empty
    prefix and the reason where the platform has none (the child then runs as it is, with the
    hub's offline variables set, and any attempt it makes is still read from its log)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return (), "not isolated: util-linux's unshare is not on PATH"
    try:
        probe = subprocess.run([unshare, "-n", "true"], capture_output=True, text=True,
                               timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return (), f"not isolated: unshare -n could not start ({exc})"
    if probe.returncode != 0:
        why = (probe.stderr or "").strip()[-200:] or f"exit {probe.returncode}"
        return (), f"not isolated: unshare -n failed here ({why})"
    return (unshare, "-n", "--"), "a network namespace with no interfaces (unshare -n)"


def offline_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment with every hub told to stay offline (and no telemetry)."""
    env = dict(os.environ)
    env |= {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "PIP_NO_INDEX": "1",  # a converter that pip-installs on import finds no index
    }
    return env | (extra or {})


def network_attempts(log: str) -> list[str]:
    """The log lines that show the converter trying to reach the network."""
    return [line.strip()[:300] for line in log.splitlines() if _NETWORK.search(line)][:20]


@dataclass(frozen=True)
class ChildRun:
    """One converter child, finished: its exit status, time and log."""

    returncode: int
    wall_s: float
    log: str
    timed_out: bool = False

    @property
    def tail(self) -> str:
        return self.log.strip()[-LOG_TAIL_CHARS:]

    def how_it_ended(self) -> str:
        if self.timed_out:
            return "ran past its time limit and was killed"
        if self.returncode >= 0:
            return f"exit {self.returncode}"
        try:
            return f"killed by {signal.Signals(-self.returncode).name}"
        except ValueError:
            return f"killed by signal {-self.returncode}"


def run_offline(
    cmd: list[str], log_path: Path, timeout_s: float, env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ChildRun:  # fmt: skip
    """Run a converter's command in its own process group under :func:`offline_prefix`, its
    output (stdout and stderr together) written to ``log_path``; killed on timeout."""
    prefix, _how = offline_prefix()
    t0 = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        try:
            proc = subprocess.Popen(
                [*prefix, *cmd], stdout=log, stderr=subprocess.STDOUT, env=env or offline_env(),
                cwd=cwd, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            log.write(f"could not start {cmd[0]}: {exc}\n")
            return ChildRun(127, 0.0, log_path.read_text("utf-8", errors="replace"))
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.perf_counter() - t0
    text = log_path.read_text("utf-8", errors="replace")
    return ChildRun(proc.returncode, round(wall, 2), text, timed_out)


@dataclass(frozen=True)
class Converted:
    """A converted file (a converted folder's main file), its record, the cache entry's
    manifest, and whether this call ran the converter (False: the cache's)."""

    path: Path
    conversion: Conversion
    built: bool
    manifest: dict[str, Any]

    @classmethod
    def from_artifact(cls, art: CachedArtifact) -> Converted:
        """The cache entry ``art``, whose manifest holds the record under ``conversion``."""
        conversion = Conversion.from_dict(art.manifest["conversion"])
        return cls(art.path, conversion, art.built, art.manifest)


# -- the checkpoint -----------------------------------------------------------------------------
def model_type(folder: Path, *, with_architecture: bool = False) -> str:
    """``config.json``'s ``model_type`` (else its first architecture), for messages; with
    ``with_architecture``, ``model_type (FirstArchitecture)`` (``?`` for either one missing).
    What is wrong instead where the file cannot be read or is not an object."""
    try:
        config = json.loads((folder / "config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return "no readable config.json"
    if not isinstance(config, dict):
        return "config.json is not an object"
    arches = config.get("architectures") or ["?"]
    if with_architecture:
        return f"{config.get('model_type') or '?'} ({arches[0]})"
    return str(config.get("model_type") or arches[0])


def other_files_sha256(folder: Path) -> str:
    """The checkpoint's files that ``content_sha256`` leaves out (``*.bin`` weights, a
    SentencePiece ``tokenizer.model``, ``merges.txt``, a README a converter reads for metadata):
    one hash of their names and hashes."""
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.suffix not in (".json", ".safetensors"):
            h.update(f"{f.name}\0{file_sha256(f)}\n".encode())
    return h.hexdigest()


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """The installed version of each distribution in ``names`` (``absent`` for a missing one),
    read from package metadata: nothing is imported."""
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


# -- the converter's own words ------------------------------------------------------------------
def error_line(
    log: str, *, skip_prefix: str | None = None, log_error: re.Pattern[str] | None = None
) -> str:
    """The converter's own last word on why it failed: the exception line of its last traceback
    (``KeyError: 'rope_type'``), else (where ``log_error`` is given) the first group of the
    last line that pattern matches (a logged ``ERROR:...:why``), else its last non-empty line;
    ``it printed nothing`` for an empty log. Lines starting with ``skip_prefix`` (what a probe
    in the child printed) are not the converter's and are passed over."""
    lines = log.splitlines()
    if skip_prefix is not None:
        lines = [line for line in lines if not line.startswith(skip_prefix)]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call")]
    if starts:
        for line in lines[starts[-1] + 1 :]:
            if line.strip() and not line[0].isspace() and EXCEPTION_LINE.match(line.strip()):
                return line.strip()[:ERROR_LINE_CHARS]
    if log_error is not None:
        for line in reversed(lines):
            m = log_error.match(line.strip())
            if m and m.group(1).strip():
                return m.group(1).strip()[:ERROR_LINE_CHARS]
    rest = [line.strip() for line in lines if line.strip()]
    return rest[-1][:ERROR_LINE_CHARS] if rest else "it printed nothing"


# -- refusals -----------------------------------------------------------------------------------
def refusal_message(what: str, run: ChildRun, said: str, missing: str | None) -> tuple[str, bool]:
    """The refusal's message (``what`` names the converter and what it refused; ``said`` is its
    :func:`error_line`; ``missing`` the file an exit 0 did not write), and whether a retry would
    refuse the same, so that it is kept: not a time-out, a kill by a signal (memory) nor a
    missing Python package (installing it is the fix)."""
    if run.timed_out or run.returncode < 0:
        return f"{what}: it {run.how_it_ended()}; last line: {said}", False
    if run.returncode == 0:
        return f"{what}: it exited 0 but wrote no {missing}; last line: {said}", True
    if MISSING_MODULE.match(said):
        return f"{what}: {said} (install it in this environment: {sys.executable})", False
    return f"{what}: {said}", True


def refusal_paths(label: str, key: dict[str, Any], root: Path | None) -> tuple[Path, Path]:
    """Where a refusal of ``key`` is kept, ``(<entry>.refused.json, <entry>.refused.log)``:
    beside the entry :func:`~rtmatrix.fixtures.cache.cached_build` would make."""
    entry = (root or cache_root()) / f"{safe_label(label)}-{key_hash(key)[:16]}"
    return (entry.with_name(f"{entry.name}.refused.json"),
            entry.with_name(f"{entry.name}.refused.log"))  # fmt: skip


def cached_refusal(path: Path) -> ConverterRefused | None:
    """The refusal kept in ``path`` (a ``.refused.json``), saying how to retry; None where there
    is none or it cannot be read."""
    try:
        data = json.loads(path.read_text("utf-8"))
        conversion = Conversion.from_dict(data["conversion"])
        message = str(data["message"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ConverterRefused(f"{message} (cached refusal; delete {path} to retry)", conversion)


def keep_refusal(paths: tuple[Path, Path], message: str, conv: Conversion, log: str) -> None:
    """Write the refusal to ``paths`` (see :func:`refusal_paths`) atomically (temp file +
    rename), the converter's full log first, the record (which :func:`cached_refusal` reads)
    last."""
    record = {"message": message, "conversion": conv.to_dict(),
              "refused_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    for path, text in ((paths[1], log), (paths[0], json.dumps(record, indent=2, sort_keys=True))):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, "utf-8")
        tmp.replace(path)


def refuse(
    paths: tuple[Path, Path], message: str, conv: Conversion, log: str, *, keep: bool
) -> ConverterRefused:
    """The :class:`ConverterRefused` to raise, kept first in ``paths`` where ``keep`` (see
    :func:`refusal_message`)."""
    if keep:
        keep_refusal(paths, message, conv, log)
    return ConverterRefused(message, conv)


def build_unless_refused(
    label: str,
    key: dict[str, Any],
    filename: str,
    build: Callable[[Path, tuple[Path, Path]], dict[str, Any]],
    root: Path | None = None,
) -> CachedArtifact:
    """:func:`~rtmatrix.fixtures.cache.cached_build` of ``key`` behind its refusal cache: a kept
    refusal is raised (before the lock, and again after it: the process waited for may have
    refused) instead of running ``build(path, refusal_paths)``, which keeps its own refusals
    there (:func:`refuse`)."""
    refused = refusal_paths(label, key, root)
    cached = cached_refusal(refused[0])
    if cached is not None:
        raise cached

    def guarded(path: Path) -> dict[str, Any]:
        again = cached_refusal(refused[0])  # refused by the process we waited for
        if again is not None:
            raise again
        return build(path, refused)

    return cached_build(label, key, filename, guarded, root)
