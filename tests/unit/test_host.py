from __future__ import annotations

import platform
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest

from rtmatrix.metrics import host
from rtmatrix.metrics.host import machine_info, project_info


def test_machine_info_has_the_os_and_chip_rows() -> None:
    info = machine_info()
    for key in ("os", "kernel", "arch", "cpu_model", "cores_logical", "ram_bytes"):
        assert info[key], key
    assert isinstance(info["cpu_features"], list)


def test_project_info_outside_git_is_unknown_not_invented(tmp_path: Path) -> None:
    info = project_info(tmp_path)
    assert info["commit"] is None and info["dirty"] is None


def test_project_info_in_this_repo(repo: Path) -> None:
    info = project_info(repo)
    assert info["commit"] and len(info["commit"]) == 40
    assert isinstance(info["dirty"], bool)


def test_machine_info_has_os_release_vendor_and_gpu_rows() -> None:
    info = machine_info()
    assert "os_release" in info and "cpu_vendor" in info
    assert isinstance(info["gpus"], list)
    assert info["gpu_detection"]
    if not info["gpus"]:  # says how it looked, never nvidia-smi
        assert info["gpu_detection"].startswith("none detected (nvml: ")
        assert "nvidia-smi" not in info["gpu_detection"]


def _card(sys_root: Path, n: int, vendor: str, device: str, driver: str) -> None:
    dev = sys_root / "devices" / f"pci{n}"
    (dev / "driver").parent.mkdir(parents=True, exist_ok=True)
    (dev / "vendor").write_text(vendor + "\n")
    (dev / "device").write_text(device + "\n")
    drv = sys_root / "bus" / "pci" / "drivers" / driver
    drv.mkdir(parents=True, exist_ok=True)
    (dev / "driver").symlink_to(drv)
    card = sys_root / "class" / "drm" / f"card{n}"
    card.mkdir(parents=True)
    (card / "device").symlink_to(dev)
    (sys_root / "class" / "drm" / f"card{n}-HDMI-A-1").mkdir()  # a connector, not a card


def test_gpu_info_without_nvml_reads_drm_and_the_nvidia_proc_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: not installed
    sys_root, proc_root = tmp_path / "sys", tmp_path / "proc"
    gpus, how = host.gpu_info(proc_root, sys_root)
    assert gpus == [] and how.startswith("none detected (nvml: pynvml (nvidia-ml-py) not ")
    assert "class/drm: 0 card(s)" in how and "nvidia/version: absent" in how
    _card(sys_root, 0, "0x1002", "0x744c", "amdgpu")
    _card(sys_root, 1, "0x10de", "0x2335", "nvidia")
    (proc_root / "driver" / "nvidia").mkdir(parents=True)
    (proc_root / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Thu Jan 1 2025\n"
    )
    gpus, how = host.gpu_info(proc_root, sys_root)
    assert [(g["vendor"], g["driver"], g["via"]) for g in gpus] == [
        ("amd", "amdgpu", "drm"),
        ("nvidia", "nvidia", "drm"),
    ]
    assert gpus[0]["name"] == "PCI 0x1002:0x744c"
    assert gpus[1]["driver_version"] == "570.86.15"
    assert "class/drm: 2 card(s)" in how and not how.startswith("none")


class _FakeNvml:
    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"570.86.15"

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return type("Mem", (), {"total": 150_000_000_000})()


def test_gpu_info_from_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", cast(ModuleType, _FakeNvml()))
    gpus, how = host.gpu_info(tmp_path / "proc", tmp_path / "sys")
    assert how == "nvml"
    assert gpus == [
        {
            "index": 0,
            "vendor": "nvidia",
            "name": "NVIDIA H200",
            "driver": "570.86.15",
            "memory_bytes": 150_000_000_000,
            "via": "nvml",
        }
    ]


def test_machine_info_on_macos_reads_sysctl(monkeypatch: pytest.MonkeyPatch) -> None:
    uname = platform.uname_result("Darwin", "mac", "24.1.0", "Darwin Kernel", "arm64")
    monkeypatch.setattr(platform, "uname", lambda: uname)
    monkeypatch.setattr(host, "_cpuinfo", dict)
    sysctl = {
        "machdep.cpu.brand_string": "Apple M3 Pro",
        "hw.optional.neon": "1",
        "hw.optional.AdvSIMD": "1",
        "hw.optional.arm.FEAT_DotProd": "1",
        "hw.optional.arm.FEAT_I8MM": "0",
    }
    monkeypatch.setattr(host, "_sysctl", lambda *names: sysctl)
    info = host.machine_info()
    assert info["os"] == "Darwin" and info["kernel"] == "24.1.0"
    assert info["cpu_model"] == "Apple M3 Pro" and info["cpu_vendor"] == "Apple"
    assert info["cpu_features"] == ["asimd", "dotprod", "neon"]
