"""Linux powercap (RAPL): ``energy_uj`` of the wanted zones, summed, across counter wraps."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtmatrix.metrics.power.base import HARDWARE, EnergySource, PowerError
from rtmatrix.metrics.power.config import RAPL_DOMAINS
from rtmatrix.metrics.power.devices import CPU

POWERCAP_ROOT = Path("/sys/class/powercap")
POWERCAP_ENV = "RTMATRIX_POWERCAP_ROOT"

# RAPL: sysfs reports microjoules; the hardware's energy status unit is typically 2^-16 J
# (15.3 uJ; 2^-14 J on some parts) and the counter updates about every millisecond.
RAPL_RESOLUTION_J = 2.0**-16
RAPL_UPDATE_S = 0.001
RAPL_GUARD_S = 1.0  # read at least this often so a wrap is never missed


class _Zone:
    def __init__(self, path: Path, name: str, max_uj: int | None) -> None:
        self.path, self.name, self.max_uj = path, name, max_uj
        self.last: int | None = None
        self.acc_uj = 0
        self.wraps = 0

    def raw(self) -> int:
        return int((self.path / "energy_uj").read_text().strip())

    def update(self) -> None:
        now = self.raw()
        if self.last is not None:
            if now >= self.last:
                self.acc_uj += now - self.last
            elif self.max_uj:
                self.acc_uj += self.max_uj - self.last + now
                self.wraps += 1
            else:
                msg = f"{self.path}/energy_uj went backwards and max_energy_range_uj is unknown"
                raise PowerError(msg)
        self.last = now


def _domain(zone_name: str) -> str | None:
    if re.fullmatch(r"package-\d+", zone_name):
        return "package"
    return zone_name if zone_name in RAPL_DOMAINS else None


def _powercap_zones(root: Path) -> list[Path]:
    """Zone directories holding ``energy_uj``, each once (sysfs lists subzones twice)."""
    found: dict[Path, Path] = {}
    stack = [(p, 0) for p in sorted(root.iterdir(), reverse=True)]
    while stack:
        path, depth = stack.pop()
        if ":" not in path.name or not path.is_dir():
            continue
        real = path.resolve()
        if (path / "energy_uj").exists() and real not in found:
            found[real] = path
        if depth < 2:
            stack.extend((p, depth + 1) for p in sorted(path.iterdir(), reverse=True))
    zones = list(found.values())
    # intel-rapl-mmio duplicates the MSR package zone: keep it only when there is no other
    msr = [z for z in zones if "mmio" not in z.name]
    return msr or zones


class RaplSource(EnergySource):
    name = "rapl"
    source = HARDWARE
    resolution_j = RAPL_RESOLUTION_J
    update_interval_s = RAPL_UPDATE_S
    devices = (CPU,)  # package (and dram) zones of every socket

    def __init__(self, root: Path, zones: list[_Zone]) -> None:
        self.root = root
        self.zones = zones
        self._lock = threading.Lock()
        for z in zones:
            z.update()

    @classmethod
    def probe(cls, cfg: Mapping[str, Any]) -> RaplSource | str:
        root = Path(os.environ.get(POWERCAP_ENV) or POWERCAP_ROOT)
        if not root.is_dir():
            return f"no {root}"
        try:
            paths = _powercap_zones(root)
        except OSError as exc:
            return f"cannot list {root}: {exc.strerror or exc}"
        wanted = set(cfg["rapl_domains"])
        zones: list[_Zone] = []
        seen: list[str] = []
        for path in paths:
            try:
                zname = (path / "name").read_text().strip()
            except OSError:
                continue
            seen.append(zname)
            if _domain(zname) not in wanted:
                continue
            try:
                max_uj: int | None = int((path / "max_energy_range_uj").read_text().strip())
            except (OSError, ValueError):
                max_uj = None
            zone = _Zone(path, zname, max_uj)
            try:
                zone.raw()
            except PermissionError:
                return (
                    f"{path}/energy_uj is not readable by uid {os.getuid()} (root-only since the "
                    "Linux 5.10 RAPL mitigation; grant read access or run as root)"
                )
            except (OSError, ValueError) as exc:
                return f"cannot read {path}/energy_uj: {exc}"
            zones.append(zone)
        if not zones:
            found = ", ".join(seen) if seen else "none"
            return f"no {'/'.join(cfg['rapl_domains'])} zone under {root} (zones found: {found})"
        return cls(root, zones)

    def read_j(self) -> float:
        with self._lock:
            try:
                for z in self.zones:
                    z.update()
            except (OSError, ValueError) as exc:
                msg = f"cannot read RAPL counter: {exc}"
                raise PowerError(msg) from exc
            return sum(z.acc_uj for z in self.zones) * 1e-6

    @property
    def poll_interval_s(self) -> float | None:
        return RAPL_GUARD_S  # cheap, and a wrap between two reads is then impossible

    def describe(self) -> dict[str, Any]:
        return {
            "powercap_root": str(self.root),
            "zones": [
                {"zone": z.path.name, "name": z.name, "max_energy_range_uj": z.max_uj}
                for z in self.zones
            ],
            "counter_unit_j": 1e-6,
            "wraps": sum(z.wraps for z in self.zones),
        }
