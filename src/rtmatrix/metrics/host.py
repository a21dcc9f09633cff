"""Machine and project provenance recorded once per run."""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import re
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


# hw.optional.* sysctl names on macOS -> the names used above
_DARWIN_ISA = {
    "hw.optional.neon": "neon",
    "hw.optional.AdvSIMD": "asimd",
    "hw.optional.arm.FEAT_DotProd": "dotprod",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
    "hw.optional.arm.FEAT_SVE": "sve",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.avx512f": "avx512f",
    "hw.optional.fma": "fma",
}

# PCI vendor ids of display/compute devices under /sys/class/drm
_PCI_VENDORS = {
    "0x10de": "nvidia",
    "0x1002": "amd",
    "0x8086": "intel",
    "0x5143": "qualcomm",
    "0x13b5": "arm",
    "0x1af4": "virtio",
    "0x1234": "qemu",
    "0x15ad": "vmware",
    "0x1414": "microsoft",
}


def _sysctl(*names: str) -> dict[str, str]:
    """``sysctl`` values on macOS / BSD; {} where there is no sysctl."""
    try:
        out = subprocess.run(
            ["sysctl", *names], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    vals: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, val = line.partition(":")
        if sep:
            vals[key.strip()] = val.strip()
    return vals


def _os_release(system: str) -> str | None:
    """The distribution / OS version: PRETTY_NAME of /etc/os-release, or macOS's version."""
    if system == "Darwin":
        ver = platform.mac_ver()[0]
        return f"macOS {ver}" if ver else None
    for path in (Path("/etc/os-release"), Path("/usr/lib/os-release")):
        try:
            text = path.read_text("utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, val = line.partition("=")
            if key.strip() == "PRETTY_NAME":
                return val.strip().strip('"') or None
    return None


def _nvml_gpus() -> list[dict[str, Any]] | str:
    """GPUs as NVML lists them, or why NVML could not be asked."""
    try:
        nv = importlib.import_module("pynvml")
    except ImportError:
        return "pynvml (nvidia-ml-py) not installed"
    try:
        nv.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return f"NVML did not initialise ({exc})"
    try:
        raw = nv.nvmlSystemGetDriverVersion()
        driver = raw.decode() if isinstance(raw, bytes) else str(raw)
        gpus: list[dict[str, Any]] = []
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            gpus.append(
                {
                    "index": i,
                    "vendor": "nvidia",
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "driver": driver,
                    "memory_bytes": int(nv.nvmlDeviceGetMemoryInfo(h).total),
                    "via": "nvml",
                }
            )
    except Exception as exc:
        return f"NVML query failed ({exc})"
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
    return gpus if gpus else "NVML lists no device"


def _drm_gpus(sys_root: Path) -> list[dict[str, Any]]:
    """Display/compute devices the kernel's DRM subsystem lists (card0, card1, ...)."""
    gpus: list[dict[str, Any]] = []
    drm = sys_root / "class" / "drm"
    try:
        cards = sorted(p for p in drm.iterdir() if re.fullmatch(r"card\d+", p.name))
    except OSError:
        return gpus
    for card in cards:
        dev = card / "device"

        def read(name: str, dev: Path = dev) -> str | None:
            try:
                return (dev / name).read_text().strip() or None
            except OSError:
                return None

        vendor_id = read("vendor")
        driver_link = dev / "driver"
        driver = driver_link.resolve().name if driver_link.exists() else None
        gpus.append(
            {
                "index": int(card.name[4:]),
                "vendor": _PCI_VENDORS.get(vendor_id or "", vendor_id),
                "name": read("product_name") or f"PCI {vendor_id}:{read('device')}",
                "driver": driver,
                "via": "drm",
            }
        )
    return gpus


def gpu_info(
    proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys")
) -> tuple[list[dict[str, Any]], str]:
    """(GPUs, how they were looked for). NVML first (name, driver, memory); else the kernel's
    DRM cards and the NVIDIA driver's /proc entry. Never runs nvidia-smi."""
    looked: list[str] = []
    nvml = _nvml_gpus()
    drm = _drm_gpus(sys_root)
    if not isinstance(nvml, str):  # NVML for NVIDIA; other vendors' cards from DRM
        others = [g for g in drm if g["vendor"] != "nvidia"]
        return nvml + others, "nvml" + (f"; {sys_root}/class/drm (non-NVIDIA)" if others else "")
    looked.append(f"nvml: {nvml}")
    gpus = drm
    looked.append(f"{sys_root}/class/drm: {len(gpus)} card(s)")
    nv_version = proc_root / "driver" / "nvidia" / "version"
    try:
        m = re.search(r"Kernel Module\s+(\S+)", nv_version.read_text())
        nv_driver = m.group(1) if m else None
        looked.append(f"{nv_version}: driver {nv_driver}")
        for g in gpus:
            if g["vendor"] == "nvidia" and nv_driver:
                g["driver_version"] = nv_driver
    except OSError:
        looked.append(f"{nv_version}: absent")
    how = "; ".join(looked)
    return gpus, (how if gpus else f"none detected ({how})")


def cpu_model() -> str | None:
    """The CPU's model name: /proc/cpuinfo, else macOS's brand string, else the platform's."""
    cpu = _cpuinfo()
    model = cpu.get("model name") or cpu.get("Hardware")
    if not model and platform.system() == "Darwin":
        model = _sysctl("machdep.cpu.brand_string").get("machdep.cpu.brand_string")
    return model or platform.processor() or None


def machine_info() -> dict[str, Any]:
    cpu = _cpuinfo()
    flags = set((cpu.get("flags") or cpu.get("Features") or "").split())
    uname = platform.uname()
    model = cpu.get("model name") or cpu.get("Hardware")
    vendor = cpu.get("vendor_id") or cpu.get("CPU implementer")
    if uname.system == "Darwin":
        ctl = _sysctl("machdep.cpu.brand_string", "machdep.cpu.vendor", *_DARWIN_ISA)
        model = model or ctl.get("machdep.cpu.brand_string")
        vendor = (
            vendor
            or ctl.get("machdep.cpu.vendor")
            or ("Apple" if "Apple" in (model or "") else None)
        )
        flags |= {name for key, name in _DARWIN_ISA.items() if ctl.get(key) == "1"}
    gpus, gpu_how = gpu_info()
    return {
        "hostname": uname.node,
        "os": uname.system,
        "os_release": _os_release(uname.system),
        "kernel": uname.release,
        "arch": uname.machine,
        "cpu_model": model or platform.processor() or None,
        "cpu_vendor": vendor,
        "cpu_features": sorted(f for f in _ISA if f in flags),
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_bytes": psutil.virtual_memory().total,
        "gpus": gpus,
        "gpu_detection": gpu_how,
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
