"""OpenVINO's own exporter (``optimum-cli export openvino``, optimum-intel), the vendor's converter
from a Hugging Face checkpoint to the stateful OpenVINO IR both OpenVINO rows read.

**Its own environment.** optimum-intel pins transformers below rtmatrix's (``< 5.6``; its Gemma
export configs cap it at 5.0), so it cannot live in rtmatrix's venv. :func:`environment` builds a
dedicated venv on first use in the tools cache (``<tools>/optimum-intel-<version>-<hash of the
pins>/``, the folder llama.cpp's tools use: ``$RTMATRIX_TOOLS_DIR``, else beside the fixture
cache), under a lock, with its progress on stderr, in four steps (:func:`build_steps`): a venv of
rtmatrix's own Python; ``pip install torch==2.13.0`` (its CPU build: where PyPI's torch is a CUDA
build, set ``$RTMATRIX_TORCH_INDEX_URL`` to ``https://download.pytorch.org/whl/cpu``); the pinned
packages (:data:`PINS`) and optimum-intel's other declared requirements; optimum-intel itself
with ``--no-deps`` (at ``$RTMATRIX_OPTIMUM_INTEL_VERSION`` where set, :data:`VERSION_ENV`: another
venv beside this one). torchvision, which optimum-intel declares, is left out: PyPI's torchvision
is built against CUDA torch and fails to import beside the CPU one (``operator torchvision::nms does
not exist``), which breaks transformers' import; no LLM export imports it. Then transformers
:data:`OVERLAY_TRANSFORMERS` goes into ``overlays/transformers-<v>/`` (``pip install --no-deps
--target``), and a check in the venv imports the exporter and reads, per ``model_type``, the
transformers range optimum-intel's export config allows. The venv's manifest (``tool-env.json``,
written last: a folder without it is rebuilt) records the commands, versions, step times, its
size and that range table. A venv that cannot be built is
:class:`~rtmatrix.fixtures.spec.ExporterUnavailable` naming the step, its log and the command that
builds it (:data:`BUILD_COMMAND`); a process tries once.

**A conversion** runs ``<venv>/bin/optimum-cli export openvino --model FOLDER --task
text-generation-with-past --weight-format fp32|fp16|int8|int4 OUT`` in a child without a network
(:func:`rtmatrix.converters.base.run_offline`). Where the checkpoint's ``model_type`` is outside
the main transformers' range and inside an overlay's (Gemma 3: at most 5.0), that overlay is first
on ``PYTHONPATH`` (recorded as the option ``transformers``). The folder it writes holds
``openvino_model.xml``/``.bin`` (a stateful decoder: inputs ``input_ids``, ``attention_mask``,
``position_ids``, ``beam_idx``; the KV cache is the model's state), OpenVINO tokenizer models and
the checkpoint's config files. It is cached (:func:`rtmatrix.converters.base.build_unless_refused`)
by the checkpoint's content hash, optimum-intel's version, every package version in the venv (read
from its metadata: nothing is imported here), the options and :data:`KEY_VERSION`; the
:class:`~rtmatrix.converters.base.Conversion` record is in the entry's manifest, the exporter's
full log beside the model (``convert.log``). An exporter that exits non-zero or writes no
``openvino_model.xml``/``.bin`` raises :class:`~rtmatrix.converters.base.ConverterRefused` with its
own last error line, cached like the other homes' refusals.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rtmatrix import locks
from rtmatrix.converters import base
from rtmatrix.converters.base import ChildRun, Conversion, Converted, Log
from rtmatrix.fixtures.cache import file_sha256, key_hash
from rtmatrix.fixtures.sources import content_sha256
from rtmatrix.fixtures.spec import ExporterUnavailable, FixtureError
from rtmatrix.runtimes.llama_cpp.reftool import tools_root

NAME = "optimum_intel"
TOOL = "optimum-cli export openvino"
DISTRIBUTION = "optimum-intel"
CONTAINER = "openvino-ir"
#: no rtmatrix extra installs it: it lives in its own venv (below), built on first use
EXTRA: str | None = None
TASK = "text-generation-with-past"
WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")
#: rtmatrix dtype -> ``--weight-format``. fp16 stores the weights in f16 (decompressed to the
#: inference precision at load); int8/int4 are NNCF's data-free weight compression (int4: its
#: default group size and int8 ratio for the model)
DTYPES = {"f32": "fp32", "f16": "fp16", "int8w": "int8", "int4w": "int4"}
#: bump when the key or what a conversion records changes
KEY_VERSION = "1"
OUTPUT = "openvino_model.xml"
WEIGHTS = "openvino_model.bin"
LOG_FILE = "convert.log"
CONVERT_TIMEOUT_S = 3600.0

# -- the environment ----------------------------------------------------------------------------
#: the pinned packages of the venv: optimum-intel 2.2.0 (the newest) and the optimum it requires;
#: transformers 5.5.4, the newest it allows (< 5.6), which reads the configs and weights
#: transformers 5.x writes (5.0.0 misreads a partial-rotary LongRoPE config and Qwen3-MoE's
#: fused experts); OpenVINO and its tokenizers at the version of rtmatrix's OpenVINO rows
PINS = {
    "optimum-intel": "2.2.0",
    "optimum": "2.3.0",
    "transformers": "5.5.4",
    "nncf": "3.4.0",
    "openvino": "2026.4.1",
    "openvino-tokenizers": "2026.4.1.0",
}
#: optimum-intel at another version than :data:`PINS` says (the converter upgrade flow, ``nox -s
#: upgrade_diff -- optimum-intel OLD NEW``): only optimum-intel's pin changes, the others stay, so a
#: version they do not fit fails the venv's check and the cells are unavailable with that reason
VERSION_ENV = "RTMATRIX_OPTIMUM_INTEL_VERSION"
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+!-]*")
#: installed first, alone, so its index can be PyTorch's CPU one (``$RTMATRIX_TORCH_INDEX_URL``)
TORCH = "torch==2.13.0"
TORCH_INDEX_ENV = "RTMATRIX_TORCH_INDEX_URL"
#: optimum-intel 2.2.0's other requirements as it declares them, less torchvision (see above)
DECLARED = ("huggingface-hub>=0.23.2,<1.22", "requests>=2.33,<3.0", "setuptools")
#: transformers versions kept beside the main one for the model types optimum-intel caps below
#: it: 5.0.0 for Gemma, Gemma 2 and Gemma 3 (``GemmaOpenVINOConfig.MAX_TRANSFORMERS_VERSION``;
#: with falcon_mamba, gemma3n_text, glm, lfm2, lfm2_moe and mamba in 2.2.0: the venv's manifest
#: lists them, ``overlays``)
OVERLAY_TRANSFORMERS = ("5.0.0",)
ENV_KEY_VERSION = "1"
ENV_MANIFEST = "tool-env.json"
ENV_LOG = "build.log"
STEP_TIMEOUT_S = 1800.0
LOCK_TIMEOUT_S = 3600.0
#: what the venv's check prints: versions and, per model_type, optimum-intel's transformers range
CHECK_PREFIX = "rtmatrix-check: "
_CHECK_SOURCE = f"""
import json
from importlib import metadata
import optimum.exporters.openvino  # registers the OpenVINO export configs
from optimum.exporters.tasks import TasksManager

ranges = {{}}
for model_type, exporters in TasksManager._SUPPORTED_MODEL_TYPE.items():
    ctor = (exporters.get("openvino") or {{}}).get({TASK!r})
    cls = getattr(ctor, "func", ctor)
    if cls is not None:
        ranges[model_type] = [str(getattr(cls, "MIN_TRANSFORMERS_VERSION", None) or "") or None,
                              str(getattr(cls, "MAX_TRANSFORMERS_VERSION", None) or "") or None]
names = ("optimum-intel", "optimum", "transformers", "torch", "openvino", "nncf")
print({CHECK_PREFIX!r} + json.dumps({{"versions": {{n: metadata.version(n) for n in names}},
                                     "ranges": ranges}}))
"""
#: the one command that builds the venv (what an unavailable cell says to run)
BUILD_COMMAND = f"{shlex.quote(sys.executable)} -m rtmatrix.converters.optimum_intel"
#: pip's lines echoed to stderr while the venv builds (the rest goes to its log): downloads of
#: a megabyte or more, what it installs, its errors
_PROGRESS = re.compile(r"\s*(Downloading \S+ \([\d.]+ [MG]B\)|Installing collected|Successfully "
                       r"installed|ERROR)")  # fmt: skip
#: the environments a process failed to build (entry -> why): tried once per process
_FAILED: dict[Path, str] = {}


@dataclass(frozen=True)
class Environment:
    """The converter's venv, built: its root, the manifest and what it says."""

    root: Path
    manifest: dict[str, Any]
    built: bool  # True when this call built it

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def cli(self) -> Path:
        return self.root / "bin" / "optimum-cli"

    @property
    def version(self) -> str:
        return str(self.manifest["versions"]["optimum-intel"])

    @property
    def transformers(self) -> str:
        return str(self.manifest["versions"]["transformers"])

    def overlay(self, version: str) -> Path:
        return overlay_dir(self.root, version)

    def transformers_for(self, model_type: str) -> tuple[str, Path | None, str]:
        """The transformers a conversion of ``model_type`` runs with: the main one, or an
        overlay (its folder), and why."""
        allowed = (self.manifest.get("ranges") or {}).get(model_type)
        return pick_transformers(self.transformers, allowed, self.manifest.get("overlays") or {},
                                 self.root)  # fmt: skip

    def packages(self, overlay: Path | None = None) -> dict[str, str]:
        """Every distribution in the venv (an overlay's first) and its version."""
        return venv_packages(self.root, overlay)


def pins() -> dict[str, str]:
    """:data:`PINS`, with optimum-intel at ``$RTMATRIX_OPTIMUM_INTEL_VERSION`` where that is set."""
    override = os.environ.get(VERSION_ENV, "").strip()
    if not override:
        return dict(PINS)
    if not _VERSION.fullmatch(override):
        msg = f"${VERSION_ENV}={override!r} is not a version (e.g. 2.1.0)"
        raise ExporterUnavailable(msg)
    return PINS | {DISTRIBUTION: override}


def env_key() -> dict[str, Any]:
    """What the venv depends on: any change builds another one beside it."""
    return {
        "key_version": ENV_KEY_VERSION,
        "pins": pins(),
        "torch": TORCH,
        "declared": list(DECLARED),
        "overlays": list(OVERLAY_TRANSFORMERS),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }


def env_dir(root: Path | None = None) -> Path:
    key = env_key()
    version = key["pins"][DISTRIBUTION]
    return (root or tools_root()) / f"optimum-intel-{version}-{key_hash(key)[:12]}"


def overlay_dir(venv: Path, version: str) -> Path:
    return venv / "overlays" / f"transformers-{version}"


def site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python*/site-packages"))
    return found[0] if found else None


def venv_packages(venv: Path, overlay: Path | None = None) -> dict[str, str]:
    """Each distribution's version as the venv's Python sees it (``overlay`` first on its path),
    read from package metadata."""
    paths = [str(p) for p in (overlay, site_packages(venv)) if p is not None]
    out: dict[str, str] = {}
    for dist in metadata.distributions(path=paths):
        name = str(dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name not in out:  # the first on the path wins, as for an import
            out[name] = dist.version
    return dict(sorted(out.items()))


def version_tuple(text: str) -> tuple[int, ...]:
    """``5.0`` -> (5, 0, 0); ``5.2.99`` -> (5, 2, 99); a suffix (``rc1``, ``+cpu``) is cut."""
    nums = [int(m.group()) for m in (re.match(r"\d+", p) for p in text.split(".")[:3]) if m]
    return tuple(nums + [0] * (3 - len(nums)))


def bounds(allowed: Sequence[str | None] | None) -> tuple[str | None, str | None]:
    """``[min, max]`` as optimum-intel's check reads it (either may be None)."""
    low, high = [*list(allowed or []), None, None][:2]
    return low, high


def allows(version: str, allowed: Sequence[str | None] | None) -> bool:
    """Whether transformers ``version`` is within optimum-intel's ``[min, max]`` for a model
    type (its own check: an error where the version is below min or above max)."""
    low, high = bounds(allowed)
    v = version_tuple(version)
    return not ((low and v < version_tuple(low)) or (high and v > version_tuple(high)))


def pick_transformers(
    main: str, allowed: Sequence[str | None] | None, overlays: dict[str, Any], venv: Path
) -> tuple[str, Path | None, str]:
    """The main transformers where optimum-intel allows it for the model type, else the newest
    overlay it allows, else the main one (the exporter then refuses in its own words)."""
    if allows(main, allowed):
        return main, None, f"transformers {main}: the venv's own"
    low, high = bounds(allowed)
    span = f"{low or 'any'} to {high or 'any'}"
    for version in sorted(overlays, key=version_tuple, reverse=True):
        if allows(version, allowed):
            why = (f"transformers {version} (overlay): optimum-intel allows {span} for this "
                   f"model type, not {main}")  # fmt: skip
            return version, overlay_dir(venv, version), why
    return main, None, f"transformers {main}: optimum-intel allows {span}, no installed one fits"


def read_env(root: Path) -> Environment | None:
    """The venv in ``root`` if complete (its manifest, Python and optimum-cli present)."""
    try:
        manifest: dict[str, Any] = json.loads((root / ENV_MANIFEST).read_text("utf-8"))
        complete = manifest["key"] == env_key() and all(
            (root / rel).exists() for rel in ("bin/python", "bin/optimum-cli")
        ) and all(overlay_dir(root, v).is_dir() for v in manifest["overlays"])  # fmt: skip
        _ = manifest["versions"]["optimum-intel"], manifest["versions"]["transformers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Environment(root, manifest, built=False) if complete else None


def find_environment(root: Path | None = None) -> Environment:
    """The built venv, never building it; :class:`ExporterUnavailable` saying how to build it."""
    entry = env_dir(root)
    found = read_env(entry)
    if found is None:
        msg = f"optimum-intel's environment is not built in {entry}; build it with: {BUILD_COMMAND}"
        raise ExporterUnavailable(msg)
    return found


def environment(log: Log | None = None, root: Path | None = None) -> Environment:
    """The converter's venv, built on first use (minutes, once; its progress on stderr).
    :class:`ExporterUnavailable` with the failed step, its log and :data:`BUILD_COMMAND` when it
    cannot be built here (no package index, no space); a process does not try twice."""
    say = log or (lambda _msg: None)
    entry = env_dir(root)
    found = read_env(entry)
    if found is not None:
        return found
    if entry in _FAILED:
        raise ExporterUnavailable(_FAILED[entry])
    try:
        with locks.exclusive(entry.parent / f".{entry.name}.lock", LOCK_TIMEOUT_S, say,
                             "building optimum-intel's environment"):  # fmt: skip
            found = read_env(entry)  # built by the process we waited for
            if found is not None:
                return found
            manifest = _build_env(entry, say)
    except (OSError, locks.LockTimeout, EnvBuildFailed) as exc:
        why = (f"optimum-intel's environment could not be built in {entry}: {exc}; build it "
               f"with: {BUILD_COMMAND} (it needs a package index: PyPI or $PIP_INDEX_URL; where "
               f"PyPI's torch is a CUDA build, {TORCH_INDEX_ENV}="
               "https://download.pytorch.org/whl/cpu)")  # fmt: skip
        _FAILED[entry] = why
        raise ExporterUnavailable(why) from exc
    return Environment(entry, manifest, built=True)


class EnvBuildFailed(RuntimeError):
    """A step of the venv's build failed; the message names it and its log's tail."""


def torch_index_args() -> list[str]:
    index = os.environ.get(TORCH_INDEX_ENV, "").strip()
    return ["--index-url", index] if index else []


def build_steps(entry: Path) -> list[tuple[str, list[str]]]:
    """The venv's build, step by step: (what, command)."""
    py = str(entry / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    pinned = pins()
    others = [f"{n}=={v}" for n, v in pinned.items() if n != DISTRIBUTION]
    steps = [
        ("a venv of this Python", [sys.executable, "-m", "venv", str(entry)]),
        (f"{TORCH} (the CPU build: ~200 MB download)", [*pip, TORCH, *torch_index_args()]),
        ("optimum, transformers, nncf, openvino, openvino-tokenizers",
         [*pip, TORCH, *others, *DECLARED]),
        (f"{DISTRIBUTION}=={pinned[DISTRIBUTION]} (--no-deps: without torchvision)",
         [*pip, "--no-deps", f"{DISTRIBUTION}=={pinned[DISTRIBUTION]}"]),
    ]  # fmt: skip
    for version in OVERLAY_TRANSFORMERS:
        target = str(overlay_dir(entry, version))
        what = f"transformers {version} beside it (overlay for capped model types)"
        steps.append((what, [*pip, "--no-deps", "--target", target, f"transformers=={version}"]))
    return steps


def _say_both(say: Log, text: str) -> None:
    print(f"rtmatrix: {text}", file=sys.stderr, flush=True)
    say(text)


def _build_env(entry: Path, say: Log) -> dict[str, Any]:
    """Build the venv in ``entry`` (in place: its scripts name their own path), its manifest
    written last; a failure removes the half-built folder."""
    if entry.exists():  # incomplete: nobody can be using it
        shutil.rmtree(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    log_path = entry.parent / f".{entry.name}.{ENV_LOG}"
    log_path.write_text("", "utf-8")
    steps = build_steps(entry)
    t0 = time.perf_counter()
    times: dict[str, float] = {}
    try:
        for i, (what, cmd) in enumerate(steps, 1):
            _say_both(say, f"optimum-intel environment [{i}/{len(steps) + 1}] {what}")
            times[what] = _run_step(cmd, log_path, what)
        _say_both(say, f"optimum-intel environment [{len(steps) + 1}/{len(steps) + 1}] checking "
                       "the exporter imports (offline)")  # fmt: skip
        check = _check_env(entry, log_path)
        manifest = _env_manifest(entry, steps, times, check, time.perf_counter() - t0)
        shutil.copy2(log_path, entry / ENV_LOG)
        (entry / ENV_MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), "utf-8")
    except BaseException:
        shutil.rmtree(entry, ignore_errors=True)
        raise
    finally:
        log_path.unlink(missing_ok=True)
    size_mb = manifest["size_bytes"] / 2**20
    _say_both(say, f"optimum-intel environment built in {manifest['total_s']:.0f} s "
                   f"({size_mb:.0f} MiB) -> {entry}")  # fmt: skip
    return manifest


def _run_step(cmd: list[str], log_path: Path, what: str) -> float:
    """Run one build step, its output appended to ``log_path`` (pip's download lines echoed to
    stderr); its time. :class:`EnvBuildFailed` on a failure or a time-out."""
    t0 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env, start_new_session=True)  # fmt: skip
        except OSError as exc:
            msg = f"{what}: could not start {cmd[0]}: {exc}"
            raise EnvBuildFailed(msg) from exc
        rc = _pump(proc, log, STEP_TIMEOUT_S)
    if rc is None:
        msg = f"{what} ran past {STEP_TIMEOUT_S:.0f} s and was killed; log tail:\n{_tail(log_path)}"
        raise EnvBuildFailed(msg)
    if rc != 0:
        msg = f"{what} failed (exit {rc}): {shlex.join(cmd)}; log tail:\n{_tail(log_path)}"
        raise EnvBuildFailed(msg)
    return round(time.perf_counter() - t0, 1)


def _pump(proc: subprocess.Popen[str], log: Any, timeout_s: float) -> int | None:
    """Copy ``proc``'s output to ``log`` line by line until it exits: its exit status, or None
    where it ran past ``timeout_s`` (its process group killed)."""
    assert proc.stdout is not None
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    try:
        for line in proc.stdout:
            log.write(line)
            if _PROGRESS.match(line):
                print(f"  {line.strip()[:160]}", file=sys.stderr, flush=True)
        rc = proc.wait()
    except BaseException:
        kill()
        proc.wait()
        raise
    finally:
        timer.cancel()
        proc.stdout.close()
    return None if fired.is_set() else rc


def _tail(path: Path, chars: int = 2000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text("utf-8", errors="replace")[-chars:]
    return ""


def _check_env(entry: Path, log_path: Path) -> dict[str, Any]:
    """Import the exporter in the venv, offline: versions and each model type's range."""
    cmd = [str(entry / "bin" / "python"), "-c", _CHECK_SOURCE]
    run = base.run_offline(cmd, log_path.with_suffix(".check.log"), 600.0,
                           env=_child_env())  # fmt: skip
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {TOOL} check (imports optimum.exporters.openvino)\n{run.log}")
    found = [line[len(CHECK_PREFIX) :] for line in run.log.splitlines()
             if line.startswith(CHECK_PREFIX)]  # fmt: skip
    log_path.with_suffix(".check.log").unlink(missing_ok=True)
    if run.returncode != 0 or not found:
        msg = (f"the exporter does not import in the new venv ({run.how_it_ended()}): "
               f"{base.error_line(run.log)}")  # fmt: skip
        raise EnvBuildFailed(msg)
    out: dict[str, Any] = json.loads(found[-1])
    return out


def _dir_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _env_manifest(
    entry: Path, steps: list[tuple[str, list[str]]], times: dict[str, float],
    check: dict[str, Any], total_s: float,
) -> dict[str, Any]:  # fmt: skip
    overlays = {}
    main = check["versions"]["transformers"]
    for version in OVERLAY_TRANSFORMERS:
        ranges = check["ranges"].items()
        capped = sorted(m for m, r in ranges if not allows(main, r) and allows(version, r))
        overlays[version] = {"path": str(overlay_dir(entry, version)), "model_types": capped}
    return {
        "key": env_key(),
        "key_sha256": key_hash(env_key()),
        "versions": check["versions"],
        "ranges": check["ranges"],
        "overlays": overlays,
        "steps": [{"what": w, "command": shlex.join(c), "s": times.get(w)} for w, c in steps],
        "torch_index": os.environ.get(TORCH_INDEX_ENV) or "pip's configured index",
        "left_out": {"torchvision": "PyPI's build needs CUDA torch; no LLM export imports it"},
        "packages": venv_packages(entry),
        "size_bytes": _dir_size(entry),
        "total_s": round(total_s, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# -- conversion ---------------------------------------------------------------------------------
def check_weight_format(weight_format: str) -> str:
    if weight_format not in WEIGHT_FORMATS:
        msg = (f"weight format {weight_format!r}: {TOOL} writes {', '.join(WEIGHT_FORMATS)} "
               "(--weight-format)")  # fmt: skip
        raise ValueError(msg)
    return weight_format


def options(weight_format: str, transformers: str) -> dict[str, str]:
    return {"task": TASK, "weight_format": weight_format, "transformers": transformers}


def command(
    env: Environment, folder: Path, weight_format: str, out: Path, overlay: Path | None = None
) -> list[str]:
    """The exporter's command line; with an overlay, ``env PYTHONPATH=<overlay>`` before it (so
    the recorded command says which transformers ran)."""
    prefix = ["env", f"PYTHONPATH={overlay}"] if overlay is not None else []
    return [*prefix, str(env.cli), "export", "openvino", "--model", str(folder), "--task", TASK,
            "--weight-format", weight_format, str(out)]  # fmt: skip


def _child_env() -> dict[str, str]:
    """The offline environment, without rtmatrix's own Python paths (the venv's are its own)."""
    env = base.offline_env({"PYTHONNOUSERSITE": "1", "TQDM_DISABLE": "1"})
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


def conversion_key(
    folder: Path, weight_format: str, env: Environment, transformers: str,
    packages: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    return {
        "key_version": KEY_VERSION,
        "converter": NAME,
        "tool": TOOL,
        "distribution": DISTRIBUTION,
        "version": env.version,
        "options": options(weight_format, transformers),
        "source_sha256": content_sha256(folder),
        "other_files_sha256": base.other_files_sha256(folder),
        "environment": env.manifest["key_sha256"],
        "python_packages": packages,
    }


def refusal(
    version: str, transformers: str, folder: Path, weight_format: str, run: ChildRun,
    missing: str | None, env_root: Path,
) -> tuple[str, bool]:  # fmt: skip
    """The refusal's message, and whether a retry would refuse the same (so it is cached). A
    package missing from the venv is the venv's fault, not the checkpoint's: not kept."""
    kind = base.model_type(folder, with_architecture=True)
    what = (f"OpenVINO's exporter ({TOOL}, {DISTRIBUTION} {version}, transformers "
            f"{transformers}) refused {folder}, model_type {kind}, at {weight_format}")  # fmt: skip
    said = base.error_line(run.log)
    if base.MISSING_MODULE.match(said) and run.returncode > 0:
        return (f"{what}: {said} (its environment {env_root} is incomplete: delete it and run "
                f"{BUILD_COMMAND})"), False  # fmt: skip
    return base.refusal_message(what, run, said, missing)


def convert_artifact(
    folder: Path,
    weight_format: str,
    root: Path | None = None,
    log: Log | None = None,
    *,
    env_root: Path | None = None,
    timeout_s: float = CONVERT_TIMEOUT_S,
) -> Converted:
    """Convert the Hugging Face checkpoint ``folder`` with OpenVINO's exporter (cached; the
    exporter's venv built on first use); :class:`ConverterRefused` when the exporter fails."""
    check_weight_format(weight_format)
    folder = folder.resolve()
    if not (folder / "config.json").is_file():
        msg = f"checkpoint {folder} is not a Hugging Face folder (no config.json)"
        raise FixtureError(msg)
    say = log or (lambda _msg: None)
    env = environment(say, env_root)
    transformers, overlay, why = env.transformers_for(base.model_type(folder))
    packages = env.packages(overlay)
    key = conversion_key(folder, weight_format, env, transformers, packages)
    label = f"optimum-intel-{folder.name}-{weight_format}"

    def build(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        say(f"converting {folder} at {weight_format} with {TOOL} ({DISTRIBUTION} {env.version}, "
            f"{why})")  # fmt: skip
        return _run_exporter(env, folder, weight_format, (transformers, overlay, why), key,
                             path, refused, timeout_s)  # fmt: skip

    done = Converted.from_artifact(base.build_unless_refused(label, key, OUTPUT, build, root))
    say(f"{'converted' if done.built else 'cached'}: {done.path.parent}")
    return done


def convert(
    folder: Path, weight_format: str, root: Path | None = None, log: Log | None = None
) -> Converted:
    """:func:`convert_artifact`: ``openvino_model.xml`` (its folder holds the weights, the
    tokenizer models and the checkpoint's config), its record, and whether this call built it."""
    return convert_artifact(folder, weight_format, root, log)


def _run_exporter(
    env: Environment, folder: Path, weight_format: str, picked: tuple[str, Path | None, str],
    key: dict[str, Any], path: Path, refused: tuple[Path, Path], timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Run the exporter into ``path.parent`` (a temporary entry); the manifest's extra."""
    out = path.parent
    transformers, overlay, why = picked
    cmd = command(env, folder, weight_format, out, overlay)
    run = base.run_offline(cmd, out / LOG_FILE, timeout_s, env=_child_env(), cwd=out)
    conversion = Conversion.of_run(
        run, cmd, converter=NAME, tool=TOOL, distribution=DISTRIBUTION, version=env.version,
        options=options(weight_format, transformers), source=folder,
        source_sha256=str(key["source_sha256"]),
    )  # fmt: skip
    absent = [p.name for p in (path, out / WEIGHTS) if not p.is_file() or not p.stat().st_size]
    if run.returncode != 0 or absent:
        message, keep = refusal(env.version, transformers, folder, weight_format, run,
                                " or ".join(absent), env.root)  # fmt: skip
        raise base.refuse(refused, message, conversion, run.log, keep=keep)
    return {
        "conversion": conversion.to_dict(),
        "python_packages": key["python_packages"],
        "environment": {
            "root": str(env.root),
            "key_sha256": env.manifest["key_sha256"],
            "versions": env.manifest["versions"],
        },
        "transformers": {
            "version": transformers,
            "overlay": str(overlay) if overlay else None,
            "why": why,
        },
        "files": _files(out),
        "log": LOG_FILE,
    }


def _files(out: Path) -> dict[str, dict[str, Any]]:
    """Every file the exporter wrote (and its log), with size and sha256."""
    return {f.name: {"size": f.stat().st_size, "sha256": file_sha256(f)}
            for f in sorted(out.iterdir()) if f.is_file()}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rtmatrix.converters.optimum_intel``: build (or find) the venv; say where."""
    del argv
    try:
        env = environment(lambda _msg: None)
    except ExporterUnavailable as exc:
        print(f"rtmatrix: {exc}", file=sys.stderr)
        return 1
    m = env.manifest
    state = "built" if env.built else "already built"
    print(f"optimum-intel's environment ({state}): {env.root}\n"
          f"  {', '.join(f'{k} {v}' for k, v in m['versions'].items())}\n"
          f"  {m['size_bytes'] / 2**20:.0f} MiB, built in {m['total_s']} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
