"""Machine and project provenance recorded once per run."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil

# ISA features the CPU backends of the runtimes care about
_ISA = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "avx_vnni",
    "asimd",
    "sve",
    "neon",
    "dotprod",
    "i8mm",
)


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text("utf-8", errors="replace")
    except OSError:
        return info
    for line in text.splitlines():
        key, sep, val = line.partition(":")
        key = key.strip()
        if sep and key not in info:
            info[key] = val.strip()
    return info


def machine_info() -> dict[str, Any]:
    cpu = _cpuinfo()
    flags = set((cpu.get("flags") or cpu.get("Features") or "").split())
    uname = platform.uname()
    return {
        "hostname": uname.node,
        "os": uname.system,
        "kernel": uname.release,
        "arch": uname.machine,
        "cpu_model": cpu.get("model name") or cpu.get("Hardware") or platform.processor() or None,
        "cpu_features": sorted(f for f in _ISA if f in flags),
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
    }


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def project_info(cwd: Path | None = None) -> dict[str, Any]:
    """Commit id, branch and dirty flag of the project the run was started from."""
    from rtmatrix import __version__

    where = cwd or Path.cwd()
    commit = _git(["rev-parse", "HEAD"], where)
    status = _git(["status", "--porcelain", "--untracked-files=no"], where)
    return {
        "rtmatrix_version": __version__,
        "commit": commit,
        "branch": _git(["rev-parse", "--abbrev-ref", "HEAD"], where) if commit else None,
        "dirty": bool(status) if status is not None else None,
    }
