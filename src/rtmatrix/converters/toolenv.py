"""A converter in a venv of its own: what the homes that need one share (optimum-intel pins a
transformers rtmatrix's own venv cannot take, litert-torch needs TensorFlow and another exact
transformers).

The venv is built on first use in the tools cache, in place (its scripts name their own path),
step by step (:func:`run_step`: each step's output in a log, pip's downloads echoed to stderr),
then checked by importing the exporter offline (:func:`check_imports`); its manifest is written
last, so a folder without one is a half-built venv and is built again (:func:`build`). A build
runs under a lock, and a process that failed to build one does not try again (:func:`ensure`).
The homes keep what is theirs: pins, steps, the check's source, the manifest's own fields.
Nothing here imports a converter.
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
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from rtmatrix import locks
from rtmatrix.converters import base
from rtmatrix.converters.base import Log
from rtmatrix.fixtures.cache import file_sha256
from rtmatrix.fixtures.spec import ExporterUnavailable

#: the CPU build of torch (on rtmatrix's CI machines it lies on their disk)
TORCH = "torch==2.13.0"
#: where PyPI's torch is a CUDA build: PyTorch's CPU index
TORCH_INDEX_ENV = "RTMATRIX_TORCH_INDEX_URL"
ENV_MANIFEST = "tool-env.json"
ENV_LOG = "build.log"
STEP_TIMEOUT_S = 1800.0
LOCK_TIMEOUT_S = 3600.0
#: the line the offline import check prints its JSON on
CHECK_PREFIX = "rtmatrix-check: "
#: pip's lines echoed to stderr while a venv builds (the rest goes to its log): downloads of
#: a megabyte or more, what it installs, its errors
_PROGRESS = re.compile(r"\s*(Downloading \S+ \([\d.]+ [MG]B\)|Installing collected|Successfully "
                       r"installed|ERROR)")  # fmt: skip

Steps = list[tuple[str, list[str]]]
E = TypeVar("E")


@dataclass(frozen=True)
class ToolEnvironment:
    """A converter's venv, built: its root, the manifest and what it says. A home subclasses it
    with its :attr:`CLI` (the exporter's console script) and :attr:`DISTRIBUTION`."""

    CLI: ClassVar[str] = ""
    DISTRIBUTION: ClassVar[str] = ""

    root: Path
    manifest: dict[str, Any]
    built: bool  # True when this call built it

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def cli(self) -> Path:
        return self.root / "bin" / self.CLI

    @property
    def version(self) -> str:
        return str(self.manifest["versions"][self.DISTRIBUTION])

    def packages(self, overlay: Path | None = None) -> dict[str, str]:
        """Every distribution in the venv (an overlay's first) and its version."""
        return venv_packages(self.root, overlay)


class EnvBuildFailed(RuntimeError):
    """A step of the venv's build failed; the message names it and its log's tail."""


def torch_index_args() -> list[str]:
    index = os.environ.get(TORCH_INDEX_ENV, "").strip()
    return ["--index-url", index] if index else []


def pip_install(entry: Path) -> list[str]:
    """The venv's ``pip install`` command, quiet about itself."""
    py = str(entry / "bin" / "python")
    return [py, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]


def say_both(say: Log, text: str) -> None:
    print(f"rtmatrix: {text}", file=sys.stderr, flush=True)
    say(text)


def child_env() -> dict[str, str]:
    """The offline environment, without rtmatrix's own Python paths (the venv's are its own)."""
    env = base.offline_env({"PYTHONNOUSERSITE": "1", "TQDM_DISABLE": "1"})
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


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


def dir_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def files(out: Path) -> dict[str, dict[str, Any]]:
    """Every file an exporter wrote (and its log), with size and sha256."""
    return {f.name: {"size": f.stat().st_size, "sha256": file_sha256(f)}
            for f in sorted(out.iterdir()) if f.is_file()}  # fmt: skip


def run_step(cmd: list[str], log_path: Path, what: str, timeout_s: float = STEP_TIMEOUT_S) -> float:
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
        rc = _pump(proc, log, timeout_s)
    if rc is None:
        msg = f"{what} ran past {timeout_s:.0f} s and was killed; log tail:\n{tail(log_path)}"
        raise EnvBuildFailed(msg)
    if rc != 0:
        msg = f"{what} failed (exit {rc}): {shlex.join(cmd)}; log tail:\n{tail(log_path)}"
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


def tail(path: Path, chars: int = 2000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text("utf-8", errors="replace")[-chars:]
    return ""


def check_imports(entry: Path, log_path: Path, source: str, what: str) -> dict[str, Any]:
    """Run ``source`` in the venv's Python, offline (it imports the exporter and prints its
    findings as JSON after :data:`CHECK_PREFIX`); its output goes to the build log under
    ``$ what``. The last
    such JSON, or :class:`EnvBuildFailed` with the exporter's last words."""
    check_log = log_path.with_suffix(".check.log")
    cmd = [str(entry / "bin" / "python"), "-c", source]
    run = base.run_offline(cmd, check_log, 600.0, env=child_env())
    check_log.unlink(missing_ok=True)
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {what}\n{run.log}")
    found = [line[len(CHECK_PREFIX) :] for line in run.log.splitlines()
             if line.startswith(CHECK_PREFIX)]  # fmt: skip
    if run.returncode != 0 or not found:
        msg = (f"the exporter does not import in the new venv ({run.how_it_ended()}): "
               f"{base.error_line(run.log, skip_prefix=CHECK_PREFIX)}")  # fmt: skip
        raise EnvBuildFailed(msg)
    out: dict[str, Any] = json.loads(found[-1])
    return out


def manifest_base(
    entry: Path, key: dict[str, Any], key_sha256: str, steps: Steps, times: dict[str, float],
    total_s: float,
) -> dict[str, Any]:  # fmt: skip
    """The manifest fields every tool venv has (a home adds its own: versions, ranges, ...)."""
    return {
        "key": key,
        "key_sha256": key_sha256,
        "steps": [{"what": w, "command": shlex.join(c), "s": times.get(w)} for w, c in steps],
        "torch_index": os.environ.get(TORCH_INDEX_ENV) or "pip's configured index",
        "packages": venv_packages(entry),
        "size_bytes": dir_size(entry),
        "total_s": round(total_s, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def build(
    entry: Path,
    title: str,
    steps: Steps,
    check: Callable[[Path, Path], Any],
    manifest: Callable[[Steps, dict[str, float], Any, float], dict[str, Any]],
    say: Log,
) -> dict[str, Any]:
    """Build the venv in ``entry`` by ``steps``, then ``check(entry, log_path)`` (the offline
    import), then write ``manifest(steps, times, checked, total_s)`` last; a failure removes
    the half-built folder. Progress on stderr as ``<title> environment [i/n] what``."""
    if entry.exists():  # incomplete: nobody can be using it
        shutil.rmtree(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    log_path = entry.parent / f".{entry.name}.{ENV_LOG}"
    log_path.write_text("", "utf-8")
    t0 = time.perf_counter()
    times: dict[str, float] = {}
    n = len(steps) + 1
    try:
        for i, (what, cmd) in enumerate(steps, 1):
            say_both(say, f"{title} environment [{i}/{n}] {what}")
            times[what] = run_step(cmd, log_path, what)
        say_both(say, f"{title} environment [{n}/{n}] checking the exporter imports (offline)")
        checked = check(entry, log_path)
        doc = manifest(steps, times, checked, time.perf_counter() - t0)
        shutil.copy2(log_path, entry / ENV_LOG)
        (entry / ENV_MANIFEST).write_text(json.dumps(doc, indent=2, sort_keys=True), "utf-8")
    except BaseException:
        shutil.rmtree(entry, ignore_errors=True)
        raise
    finally:
        log_path.unlink(missing_ok=True)
    size_mb = doc["size_bytes"] / 2**20
    say_both(say, f"{title} environment built in {doc['total_s']:.0f} s ({size_mb:.0f} MiB) -> "
                  f"{entry}")  # fmt: skip
    return doc


def ensure(
    entry: Path,
    title: str,
    read: Callable[[Path], E | None],
    make: Callable[[], E],
    failed: dict[Path, str],
    build_command: str,
    say: Log,
) -> E:
    """The venv in ``entry``: ``read`` it where complete, else ``make`` it under a lock (a
    process waiting for another's build reads what that one built). :class:`ExporterUnavailable`
    with the failure and ``build_command`` when it cannot be built here (no package index, no
    space); ``failed`` keeps that, so a process does not try twice."""
    found = read(entry)
    if found is not None:
        return found
    if entry in failed:
        raise ExporterUnavailable(failed[entry])
    try:
        with locks.exclusive(entry.parent / f".{entry.name}.lock", LOCK_TIMEOUT_S, say,
                             f"building {title}'s environment"):  # fmt: skip
            found = read(entry)  # built by the process we waited for
            if found is not None:
                return found
            return make()
    except (OSError, locks.LockTimeout, EnvBuildFailed) as exc:
        why = (f"{title}'s environment could not be built in {entry}: {exc}; build it "
               f"with: {build_command} (it needs a package index: PyPI or $PIP_INDEX_URL; where "
               f"PyPI's torch is a CUDA build, {TORCH_INDEX_ENV}="
               "https://download.pytorch.org/whl/cpu)")  # fmt: skip
        failed[entry] = why
        raise ExporterUnavailable(why) from exc

