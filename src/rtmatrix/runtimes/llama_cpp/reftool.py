"""llama.cpp's own tools, built from the very source the installed binding was built from.

``build_tools`` downloads the sdist of the installed llama-cpp-python version (``pip download
--no-deps --no-binary :all:``), configures its ``vendor/llama.cpp`` with the options that matter
as the binding's build sets them (:data:`CMAKE_OPTIONS`), builds :data:`BINARIES` only
(``llama-bench``, ``llama-server``, ``llama-perplexity``) and installs them, with the shared
libraries they load, atomically into the rtmatrix cache
(``tools/llama.cpp-<version>-<hash of the build key>/``) beside a ``tool-build.json`` manifest.
A second call reuses the build; a lock keeps two processes from building the same entry at once.
Every failure (no network, no cmake, a compile error) is a :class:`ToolUnavailable` with the
reason; nothing here imports the binding.

``run_llama_bench`` runs ``llama-bench -o json`` on a model file in its own process group (killed
on timeout) and returns the per-phase tokens/s samples, the exact command line, the tool's version
and its raw JSON.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtmatrix import locks
from rtmatrix.fixtures.cache import cache_root, file_sha256, key_hash

DISTRIBUTION = "llama-cpp-python"
BINARIES = ("llama-bench", "llama-server", "llama-perplexity")
#: llama.cpp's quantizer, built on demand into an entry of its own (a converted checkpoint's
#: k-quant dtypes), so adding it did not change the key of the tools every run needs
QUANTIZE = ("llama-quantize",)
MANIFEST = "tool-build.json"
TOOLS_DIR_ENV = "RTMATRIX_TOOLS_DIR"
BUILD_KEY_VERSION = "1"

# What llama-cpp-python's build of the same source sets, where it matters for speed or for
# running the tools here. Its CMakeLists.txt (``if (LLAMA_BUILD)``) sets BUILD_SHARED_LIBS On,
# LLAMA_BUILD_COMMON ON and LLAMA_CURL OFF; scikit-build-core builds Release; everything else is
# llama.cpp's own default, written out so the manifest shows it: GGML_NATIVE ON (-march=native),
# GGML_OPENMP ON (the CPU backend's threads are an OpenMP team), GGML_CPU_REPACK ON,
# GGML_LLAMAFILE ON. The binding's build turns the tools and the server off; here they are on,
# tests and examples off. CMAKE_BUILD_RPATH $ORIGIN lets the finished folder move.
CMAKE_OPTIONS: dict[str, str] = {
    "CMAKE_BUILD_TYPE": "Release",
    "BUILD_SHARED_LIBS": "ON",
    "GGML_NATIVE": "ON",
    "GGML_OPENMP": "ON",
    "GGML_CPU_REPACK": "ON",
    "GGML_LLAMAFILE": "ON",
    "LLAMA_CURL": "OFF",
    "LLAMA_BUILD_COMMON": "ON",
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF",
    "LLAMA_BUILD_TOOLS": "ON",
    "LLAMA_BUILD_SERVER": "ON",
    "CMAKE_BUILD_RPATH": "$ORIGIN",
}
# options of llama-cpp-python's own CMakeLists (not llama.cpp's): dropped from $CMAKE_ARGS
BINDING_ONLY_OPTIONS = frozenset({"LLAVA_BUILD", "LLAMA_BUILD"})

DOWNLOAD_TIMEOUT_S = 1200.0
CONFIGURE_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 3600.0
LOCK_TIMEOUT_S = 3600.0
LOG_TAIL_CHARS = 3000

Log = Callable[[str], None]


class ToolUnavailable(RuntimeError):
    """The tool cannot be built or run here; ``reason`` says why (recorded as `unavailable`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ToolBuild:
    root: Path  # the cache entry: bin/ and tool-build.json
    version: str  # the llama-cpp-python version whose sdist it came from
    manifest: dict[str, Any]
    built: bool  # True when this call built it, False when the cache had it

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def llama_bench(self) -> Path:
        return self.bin_dir / "llama-bench"

    @property
    def llama_server(self) -> Path:
        return self.bin_dir / "llama-server"

    def tool_version(self, binary: str = "llama-bench") -> str:
        """The binary's ``--version`` output, as recorded when it was built."""
        return str(self.manifest["binaries"][binary]["version_output"])


# -- build key and cache entry ------------------------------------------------------------------
def tools_root() -> Path:
    """``$RTMATRIX_TOOLS_DIR``, else ``<rtmatrix cache>/tools`` (the cache is
    ``$RTMATRIX_CACHE_DIR`` or ``~/.cache/rtmatrix``)."""
    env = os.environ.get(TOOLS_DIR_ENV)
    return Path(env) if env else cache_root().parent / "tools"


def installed_version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        msg = (
            f"{DISTRIBUTION} is not installed, so there is no sdist version to build the tools from"
        )
        raise ToolUnavailable(msg) from exc


def env_cmake_options(cmake_args: str | None = None) -> dict[str, str]:
    """``-DNAME=VALUE`` entries of ``$CMAKE_ARGS`` (as pip's build of the binding sees them),
    less the options only llama-cpp-python's own CMakeLists knows."""
    text = os.environ.get("CMAKE_ARGS", "") if cmake_args is None else cmake_args
    out: dict[str, str] = {}
    for arg in shlex.split(text):
        if not arg.startswith("-D") or "=" not in arg:
            continue
        name, value = arg[2:].split("=", 1)
        name = name.split(":", 1)[0]  # -DNAME:BOOL=ON
        if name not in BINDING_ONLY_OPTIONS:
            out[name] = value
    return out


def cmake_options(cmake_args: str | None = None) -> dict[str, str]:
    return CMAKE_OPTIONS | env_cmake_options(cmake_args)


def compiler_id() -> str:
    """First line of the C++ compiler's ``--version`` (``$CXX``, else ``c++``); '' if none."""
    cxx = os.environ.get("CXX", "c++")
    exe = shutil.which(cxx)
    if exe is None:
        return ""
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.stdout.strip().splitlines()
    return lines[0] if lines else ""


def host_cpu_id() -> str:
    """Machine and a hash of the CPU's feature flags: GGML_NATIVE binaries are per CPU."""
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text("utf-8", errors="replace").splitlines():
            if line.startswith(("flags", "Features")):
                flags = line.split(":", 1)[-1].strip()
                break
    return f"{platform.machine()}-{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def build_key(
    version: str, options: dict[str, str], targets: tuple[str, ...] = BINARIES
) -> dict[str, Any]:
    return {
        "key_version": BUILD_KEY_VERSION,
        "distribution": DISTRIBUTION,
        "version": version,
        "cmake_options": dict(sorted(options.items())),
        "targets": list(targets),
        "compiler": compiler_id(),
        "host_cpu": host_cpu_id(),
    }


def entry_dir(root: Path, version: str, key: dict[str, Any]) -> Path:
    return root / f"llama.cpp-{version}-{key_hash(key)[:12]}"


def read_valid(entry: Path, targets: tuple[str, ...] = BINARIES) -> dict[str, Any] | None:
    """The manifest of a complete entry (every binary present with its recorded sha256 size)."""
    try:
        manifest: dict[str, Any] = json.loads((entry / MANIFEST).read_text("utf-8"))
        for name in targets:
            rec = manifest["binaries"][name]
            if (entry / "bin" / name).stat().st_size != rec["size_bytes"]:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest


# -- lock -----------------------------------------------------------------------------------------
@contextlib.contextmanager
def build_lock(path: Path, timeout_s: float, log: Log) -> Iterator[None]:
    """An exclusive lock on ``path`` (:func:`rtmatrix.locks.exclusive`); a builder still
    holding it after ``timeout_s`` makes the tools :class:`ToolUnavailable`."""
    try:
        with locks.exclusive(path, timeout_s, log, "building the tools"):
            yield
    except locks.LockTimeout as exc:
        msg = f"the tool build lock: {exc}"
        raise ToolUnavailable(msg) from None


# -- build steps -------------------------------------------------------------------------------
def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text("utf-8", errors="replace")[-LOG_TAIL_CHARS:]
    return ""


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _finish(proc: subprocess.Popen[str], timeout_s: float) -> tuple[bool, str, str]:
    """Wait for ``proc`` (a session leader); on timeout or interruption kill its whole process
    group. Returns (timed out, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        return True, out or "", err or ""
    except BaseException:
        _kill_group(proc.pid)
        proc.wait()
        raise
    return False, out or "", err or ""


def _step(cmd: Sequence[str], log_path: Path, timeout_s: float, what: str) -> None:
    """Run one build step in its own process group, appending its output to ``log_path``; a
    failure is ToolUnavailable with the log's tail."""
    with log_path.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {shlex.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(
                list(cmd), stdout=fh, stderr=subprocess.STDOUT, text=True, start_new_session=True
            )
        except OSError as exc:
            msg = f"{what} could not start: {exc}"
            raise ToolUnavailable(msg) from exc
        timed_out, _, _ = _finish(proc, timeout_s)
    if timed_out:
        msg = f"{what} ran past {timeout_s:.0f} s and was killed; log tail:\n{_tail(log_path)}"
        raise ToolUnavailable(msg)
    if proc.returncode != 0:
        msg = f"{what} failed (exit {proc.returncode}); log tail:\n{_tail(log_path)}"
        raise ToolUnavailable(msg)


def download_sdist(version: str, dest: Path, log_path: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    cmd += ["--disable-pip-version-check", "-d", str(dest), f"{DISTRIBUTION}=={version}"]
    _step(cmd, log_path, DOWNLOAD_TIMEOUT_S, f"pip download {DISTRIBUTION}=={version} (network?)")
    found = sorted(dest.glob("*.tar.gz"))
    if not found:
        msg = f"pip download left no .tar.gz sdist in {dest}; log tail:\n{_tail(log_path)}"
        raise ToolUnavailable(msg)
    return found[0]


def unpack_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Extract only ``<top>/vendor/llama.cpp/`` of the sdist; returns that folder."""
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in f"{m.name}/"]
            if not members:
                msg = f"{sdist.name} has no vendor/llama.cpp"
                raise ToolUnavailable(msg)
            tar.extractall(dest, members=members, filter="data")
            top = members[0].name.split("/", 1)[0]
    except (OSError, tarfile.TarError) as exc:
        msg = f"cannot unpack {sdist.name}: {exc}"
        raise ToolUnavailable(msg) from exc
    src = dest / top / "vendor" / "llama.cpp"
    if not (src / "CMakeLists.txt").is_file():
        msg = f"{sdist.name}: vendor/llama.cpp has no CMakeLists.txt"
        raise ToolUnavailable(msg)
    return src


def configure_cmd(src: Path, build: Path, options: dict[str, str]) -> list[str]:
    cmd = ["cmake", "-S", str(src), "-B", str(build)]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    return cmd + [f"-D{k}={v}" for k, v in sorted(options.items())]


def build_cmd(build: Path, jobs: int, targets: tuple[str, ...] = BINARIES) -> list[str]:
    return ["cmake", "--build", str(build), "--target", *targets, "-j", str(max(1, jobs))]


def stage_binaries(
    build_bin: Path, out_bin: Path, targets: tuple[str, ...] = BINARIES
) -> list[str]:
    """Copy the binaries and every shared library beside them (symlinks kept)."""
    out_bin.mkdir(parents=True)
    names: list[str] = []
    for p in sorted(build_bin.iterdir()):
        if p.name in targets or ".so" in p.name:
            shutil.copy2(p, out_bin / p.name, follow_symlinks=False)
            names.append(p.name)
    missing = [b for b in targets if not (out_bin / b).is_file()]
    if missing:
        msg = f"the build produced no {', '.join(missing)} in {build_bin}"
        raise ToolUnavailable(msg)
    return names


def tool_env(bin_dir: Path) -> dict[str, str]:
    """The environment for the tools: their own libraries first (LD_LIBRARY_PATH outranks the
    RUNPATH, so a path to the binding's libllama must not win)."""
    env = dict(os.environ)
    old = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = f"{bin_dir}{os.pathsep}{old}" if old else str(bin_dir)
    return env


def version_output(binary: Path) -> str:
    try:
        out = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=tool_env(binary.parent),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        msg = f"{binary.name} --version could not run: {exc}"
        raise ToolUnavailable(msg) from exc
    text = (out.stdout + out.stderr).strip()
    if out.returncode != 0 and text.lower().startswith("usage:"):
        # llama-quantize has no --version: it prints its usage (so it runs); its code is the
        # libraries' beside it, whose hashes the manifest records
        return f"{binary.name} has no --version (it printed its usage: it runs)"
    if out.returncode != 0:
        msg = f"{binary.name} --version exited {out.returncode}: {text[-LOG_TAIL_CHARS:]}"
        raise ToolUnavailable(msg)
    return text


def file_records(bin_dir: Path, names: Sequence[str]) -> dict[str, str]:
    """Each staged file's sha256, or ``-> target`` for a symlink (the libraries the binaries
    load carry the code: the executables themselves are small)."""
    out: dict[str, str] = {}
    for name in names:
        p = bin_dir / name
        out[name] = f"-> {os.readlink(p)}" if p.is_symlink() else file_sha256(p)
    return out


def _binary_record(path: Path) -> dict[str, Any]:
    return {
        "path": f"bin/{path.name}",
        "size_bytes": path.stat().st_size,
        "sha256": file_sha256(path),
        "version_output": version_output(path),
    }


def _build_into(work: Path, out: Path, key: dict[str, Any], jobs: int, log: Log) -> None:
    """Download, unpack, configure, build and stage into ``out`` (with its manifest)."""
    log_path = work / "build.log"
    t0 = time.perf_counter()
    log(f"downloading the {DISTRIBUTION} {key['version']} sdist")
    sdist = download_sdist(key["version"], work / "sdist", log_path)
    t_dl = time.perf_counter()
    src = unpack_llama_cpp(sdist, work / "src")
    options: dict[str, str] = key["cmake_options"]
    log(f"configuring {src} (CMake, {len(options)} options)")
    _step(
        configure_cmd(src, work / "build", options),
        log_path,
        CONFIGURE_TIMEOUT_S,
        "cmake configure",
    )
    targets = tuple(key["targets"])
    log(f"building {', '.join(targets)} with -j{jobs}")
    t_cfg = time.perf_counter()
    _step(build_cmd(work / "build", jobs, targets), log_path, BUILD_TIMEOUT_S, "cmake --build")
    t_build = time.perf_counter()
    libs = stage_binaries(work / "build" / "bin", out / "bin", targets)
    manifest = {
        "key": key,
        "key_sha256": key_hash(key),
        "sdist": {"file": sdist.name, "sha256": file_sha256(sdist)},
        "cmake_options": options,
        "configure_cmd": configure_cmd(Path("<src>"), Path("<build>"), options),
        "build_cmd": build_cmd(Path("<build>"), jobs, targets),
        "compiler": key["compiler"],
        "cmake_version": _first_line(["cmake", "--version"]),
        "jobs": jobs,
        "download_s": round(t_dl - t0, 1),
        "configure_s": round(t_cfg - t_dl, 1),
        "build_s": round(t_build - t_cfg, 1),
        "total_s": round(time.perf_counter() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": file_records(out / "bin", libs),
        "binaries": {b: _binary_record(out / "bin" / b) for b in targets},
    }
    shutil.copy2(log_path, out / "build.log")
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), "utf-8")


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.stdout.strip().splitlines()
    return lines[0] if lines else ""


def _install(tmp_out: Path, entry: Path) -> None:
    """Rename the finished folder into place (replacing an incomplete entry)."""
    if entry.exists():
        shutil.rmtree(entry)
    tmp_out.rename(entry)


def build_tools(
    version: str | None = None,
    cache_dir: Path | None = None,
    *,
    jobs: int = 2,
    log: Log | None = None,
    targets: tuple[str, ...] = BINARIES,
) -> ToolBuild:
    """Build (or reuse) llama.cpp's ``targets`` (llama-bench, llama-server, llama-perplexity;
    or :data:`QUANTIZE`, an entry of its own) from the sdist of llama-cpp-python ``version``
    (default: the installed one). Raises :class:`ToolUnavailable` with the reason."""
    say = log or (lambda _msg: None)
    version = version or installed_version()
    root = cache_dir or tools_root()
    key = build_key(version, cmake_options(), targets)
    entry = entry_dir(root, version, key)
    manifest = read_valid(entry, targets)
    if manifest is not None:
        return ToolBuild(entry, version, manifest, built=False)
    if shutil.which("cmake") is None:
        msg = "cmake is not on PATH (needed to build the llama.cpp tools from the sdist)"
        raise ToolUnavailable(msg)
    with build_lock(root / f".{entry.name}.lock", LOCK_TIMEOUT_S, say):
        manifest = read_valid(entry, targets)  # built by the process we waited for
        if manifest is not None:
            return ToolBuild(entry, version, manifest, built=False)
        work = Path(tempfile.mkdtemp(prefix=f".{entry.name}-build-", dir=root))
        try:
            _build_into(work, work / "out", key, jobs, say)
            _install(work / "out", entry)
        except OSError as exc:
            msg = f"building the tools in {work} failed: {exc}"
            raise ToolUnavailable(msg) from exc
        finally:
            shutil.rmtree(work, ignore_errors=True)
    manifest = read_valid(entry, targets)
    if manifest is None:
        msg = f"the tool build finished but {entry} is not a complete entry"
        raise ToolUnavailable(msg)
    say(f"built {', '.join(targets)} in {manifest['total_s']} s -> {entry / 'bin'}")
    return ToolBuild(entry, version, manifest, built=True)


def find_tools(version: str | None = None, cache_dir: Path | None = None) -> ToolBuild:
    """The cached build for ``version`` (default: the installed binding), never building it;
    :class:`ToolUnavailable` says how to get it (``rtmatrix run`` prepares it once per run)."""
    version = version or installed_version()
    root = cache_dir or tools_root()
    entry = entry_dir(root, version, build_key(version, cmake_options()))
    manifest = read_valid(entry)
    if manifest is None:
        msg = (
            f"{', '.join(BINARIES)} for llama-cpp-python {version} are not built in {entry}; "
            "`rtmatrix run` builds them before the first llama.cpp cell (or: python -c "
            "'from rtmatrix.runtimes.llama_cpp.reftool import build_tools; build_tools()')"
        )
        raise ToolUnavailable(msg)
    return ToolBuild(entry, version, manifest, built=False)


# -- llama-bench -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PhaseResult:
    """One llama-bench test: ``pp`` (prompt only), ``tg`` (generation only) or ``pg`` (both)."""

    phase: str
    n_prompt: int
    n_gen: int
    n_depth: int
    samples_tps: tuple[float, ...]
    avg_tps: float
    stddev_tps: float
    samples_ns: tuple[int, ...]


@dataclass(frozen=True)
class BenchResult:
    phases: dict[str, PhaseResult]
    command: list[str]
    tool_version: str
    raw: list[dict[str, Any]]
    wall_s: float
    stderr_tail: str = ""
    settings: dict[str, Any] = field(default_factory=dict)  # what each test ran with, per the tool

    def evidence(self) -> dict[str, Any]:
        return {
            "tool": "llama-bench",
            "tool_version": self.tool_version,
            "command": shlex.join(self.command),
            "settings": self.settings,
            "phases": {
                k: {
                    "avg_tps": p.avg_tps,
                    "stddev_tps": p.stddev_tps,
                    "samples_tps": list(p.samples_tps),
                }
                for k, p in self.phases.items()
            },
            "wall_s": round(self.wall_s, 3),
        }


_FLASH_ATTN = {0: "off", 1: "on", -1: "auto", "0": "off", "1": "on", "-1": "auto"}
# per-test fields of llama-bench's JSON that say how it ran (kept as the settings evidence)
SETTING_FIELDS = (
    "build_commit", "build_number", "cpu_info", "backends", "n_threads", "cpu_mask", "cpu_strict",
    "poll", "n_batch", "n_ubatch", "type_k", "type_v", "flash_attn", "load_mode", "lazy_mode",
    "no_kv_offload", "embeddings", "no_op_offload", "no_host", "repack", "n_gpu_layers",
    "model_type", "model_size", "model_n_params",
)  # fmt: skip


def flash_attn_arg(value: str | int | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.lower() in ("on", "off", "auto"):
        return value.lower()
    if value in _FLASH_ATTN:
        return _FLASH_ATTN[value]
    msg = f"flash_attn {value!r}: valid: 'on', 'off', 'auto', 1, 0, -1 or None (the tool's default)"
    raise ValueError(msg)


def bench_command(
    binary: Path,
    model: Path,
    *,
    threads: int,
    n_prompt: int,
    n_gen: int,
    repetitions: int,
    flash_attn: str | int | None = None,
    n_batch: int | None = None,
    n_ubatch: int | None = None,
    use_mmap: bool | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The llama-bench command line; a None setting is left to the tool's own default."""
    cmd = [str(binary), "-m", str(model), "-t", str(threads), "-p", str(n_prompt)]
    cmd += ["-n", str(n_gen), "-r", str(repetitions), "-o", "json", "-ngl", "0"]
    fa = flash_attn_arg(flash_attn)
    if fa is not None:
        cmd += ["-fa", fa]
    if n_batch is not None:
        cmd += ["-b", str(n_batch)]
    if n_ubatch is not None:
        cmd += ["-ub", str(n_ubatch)]
    if use_mmap is not None:
        cmd += ["-lm", "mmap" if use_mmap else "none"]
    return cmd + list(extra)


def phase_of(test: dict[str, Any]) -> str:
    n_p, n_g = int(test.get("n_prompt", 0)), int(test.get("n_gen", 0))
    if n_p > 0 and n_g == 0:
        return "pp"
    if n_g > 0 and n_p == 0:
        return "tg"
    return "pg"


def parse_bench_json(text: str) -> tuple[dict[str, PhaseResult], list[dict[str, Any]]]:
    """llama-bench ``-o json`` (an array of tests) -> phases keyed ``pp``/``tg``/``pg`` (a second
    test of the same phase gets ``pp#2``), and the raw list."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        msg = f"llama-bench printed no JSON ({exc}): {text[:300]!r}"
        raise ToolUnavailable(msg) from exc
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        msg = f"llama-bench JSON is not a list of tests: {text[:300]!r}"
        raise ToolUnavailable(msg)
    phases: dict[str, PhaseResult] = {}
    seen: dict[str, int] = {}
    for test in raw:
        name = phase_of(test)
        seen[name] = seen.get(name, 0) + 1
        phases[name if seen[name] == 1 else f"{name}#{seen[name]}"] = _phase(name, test)
    return phases, raw


def _phase(name: str, test: dict[str, Any]) -> PhaseResult:
    try:
        return PhaseResult(
            phase=name,
            n_prompt=int(test["n_prompt"]),
            n_gen=int(test["n_gen"]),
            n_depth=int(test.get("n_depth", 0)),
            samples_tps=tuple(float(x) for x in test["samples_ts"]),
            avg_tps=float(test["avg_ts"]),
            stddev_tps=float(test["stddev_ts"]),
            samples_ns=tuple(int(x) for x in test.get("samples_ns", [])),
        )
    except (KeyError, TypeError, ValueError) as exc:
        msg = f"llama-bench JSON test lacks {exc} (fields: {sorted(test)})"
        raise ToolUnavailable(msg) from exc


def phase_at(phases: dict[str, PhaseResult], phase: str, depth: int) -> PhaseResult | None:
    """The ``pp``/``tg`` test run at KV depth ``depth`` (llama-bench ``-d``), if any."""
    found = [p for p in phases.values() if p.phase == phase and p.n_depth == depth]
    return found[0] if found else None


def settings_of(raw: list[dict[str, Any]]) -> dict[str, Any]:
    """The settings the tool reports per test (the first test's; they are per run here)."""
    if not raw:
        return {}
    return {k: raw[0][k] for k in SETTING_FIELDS if k in raw[0]}


def run_group(
    cmd: list[str], env: dict[str, str], timeout_s: float, what: str = "llama-bench"
) -> tuple[int, str, str]:
    """Run ``cmd`` in its own process group; on timeout the whole group is killed."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    timed_out, out, err = _finish(proc, timeout_s)
    if timed_out:
        tail = err[-LOG_TAIL_CHARS:]
        msg = f"{what} ran past {timeout_s:.0f} s and was killed; stderr tail: {tail}"
        raise ToolUnavailable(msg)
    return proc.returncode, out, err


def run_llama_bench(
    build: ToolBuild,
    model: Path,
    *,
    threads: int,
    n_prompt: int,
    n_gen: int,
    repetitions: int,
    flash_attn: str | int | None,
    n_batch: int | None,
    n_ubatch: int | None,
    use_mmap: bool | None,
    extra: Sequence[str] = (),
    timeout_s: float,
) -> BenchResult:
    """Run llama-bench on ``model``; raises :class:`ToolUnavailable` on any failure."""
    cmd = bench_command(
        build.llama_bench, model, threads=threads, n_prompt=n_prompt, n_gen=n_gen,
        repetitions=repetitions, flash_attn=flash_attn, n_batch=n_batch, n_ubatch=n_ubatch,
        use_mmap=use_mmap, extra=extra,
    )  # fmt: skip
    t0 = time.perf_counter()
    try:
        rc, out, err = run_group(cmd, tool_env(build.bin_dir), timeout_s)
    except OSError as exc:
        msg = f"llama-bench could not start: {exc}"
        raise ToolUnavailable(msg) from exc
    wall = time.perf_counter() - t0
    if rc != 0:
        msg = f"llama-bench exited {rc}; stderr tail: {err[-LOG_TAIL_CHARS:]}"
        raise ToolUnavailable(msg)
    phases, raw = parse_bench_json(out)
    return BenchResult(
        phases, cmd, build.tool_version(), raw, wall, err[-LOG_TAIL_CHARS:], settings_of(raw)
    )
