"""Memory cgroups for the low-memory case: a worker placed in a cgroup with a hard limit is
OOM-killed by the kernel when it exceeds it (the seed's low-memory case as it happens on a
device), unlike RLIMIT_AS, which makes allocations fail inside the runtime.

cgroup v2 (``memory.max``) where the memory controller is delegated to us, else cgroup v1
(``memory.limit_in_bytes``). Creating one needs write access to the cgroup tree; where that is
not possible, :func:`create` says why and the cell is recorded as ``unavailable``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path(os.environ.get("RTMATRIX_CGROUP_ROOT", "/sys/fs/cgroup"))


class CgroupUnavailable(OSError):
    """No memory cgroup can be created here; the message says what was tried."""


@dataclass(frozen=True)
class MemoryCgroup:
    path: Path
    version: int
    limit_bytes: int

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def oom_kills(self) -> int | None:
        """Kernel OOM kills inside this cgroup so far (None if the kernel does not say)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = (self.path / name).read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, val = line.partition(" ")
            if key == "oom_kill":
                return int(val)
        return None

    def peak_bytes(self) -> int | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text().strip())
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _own_cgroups() -> dict[str, str]:
    """controller (or '' for v2) -> path of this process's cgroup."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for ctrl in parts[1].split(",") if parts[1] else [""]:
                out[ctrl] = parts[2]
    return out


def _candidates() -> list[tuple[int, Path, str]]:
    own = _own_cgroups()
    cands = []
    if "" in own:
        for base in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
            parent = base / own[""].lstrip("/")
            ctrl = parent / "cgroup.controllers"
            if ctrl.exists() and "memory" in ctrl.read_text().split():
                cands.append((2, parent, "memory.max"))
    if "memory" in own:
        parent = CGROUP_ROOT / "memory" / own["memory"].lstrip("/")
        if (parent / "memory.limit_in_bytes").exists():
            cands.append((1, parent, "memory.limit_in_bytes"))
    return cands


def create(limit_bytes: int, name: str) -> MemoryCgroup:
    """A new child cgroup of ours with ``limit_bytes``; raises CgroupUnavailable with reasons."""
    reasons = []
    for version, parent, limit_file in _candidates():
        path = parent / name
        try:
            path.mkdir()
        except OSError as exc:
            reasons.append(f"v{version} {parent}: {exc.strerror}")
            continue
        try:
            (path / limit_file).write_text(str(limit_bytes))
            if version == 1:  # no swap escape hatch
                with contextlib.suppress(OSError):
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        except OSError as exc:
            reasons.append(f"v{version} {path / limit_file}: {exc.strerror}")
            with contextlib.suppress(OSError):
                path.rmdir()
            continue
        return MemoryCgroup(path, version, limit_bytes)
    why = "; ".join(reasons) or "no cgroup with the memory controller is available to this process"
    msg = f"cannot create a memory cgroup: {why}"
    raise CgroupUnavailable(msg)


def join(procs_path: str) -> None:
    """Move the calling process into a cgroup (the worker does this first thing)."""
    Path(procs_path).write_text(str(os.getpid()))
