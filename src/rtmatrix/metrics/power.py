"""Energy and power per cell: measured where the hardware allows, modelled only when the matrix
says so, otherwise ``unavailable`` with a reason naming everything that was looked for.

Energy sources, tried in the order of ``[power].sources``; the first usable one meters the cell:

``rapl``
    Linux powercap: ``energy_uj`` of the ``package-N`` (and ``dram``) zones under
    ``/sys/class/powercap`` (``$RTMATRIX_POWERCAP_ROOT`` overrides the root, for tests), summed,
    with wrap-around at ``max_energy_range_uj`` (Intel and AMD both appear as ``intel-rapl``).
``nvml``
    NVIDIA GPUs through nvidia-ml-py (module ``pynvml``, imported lazily): the driver's total
    energy counter (Volta and newer), else board power sampled every ``sample_interval_s`` and
    integrated (trapezoids).
``external``
    ``[power].meter``, a command for lab rigs and USB meters. ``meter_unit = "J"``: it prints
    cumulative joules; ``"W"``: it prints watts, sampled and integrated. ``meter_mode = "poll"``:
    it is run once per reading and its last numeric line is the reading; ``"stream"``: it runs for
    the whole cell and prints one reading per line.
``modelled``
    Only with ``[power].modelled = true`` and ``tdp_w``. Formula (CPU only, accelerators are not
    modelled): ``E = tdp_w × process CPU seconds / logical CPUs``, i.e. TDP × utilisation × wall
    time, where utilisation = CPU seconds / (wall seconds × logical CPUs). Labelled ``modelled``,
    with ``tdp_w``, the CPU count and the CPU seconds of every phase in the metric.

The worker opens a :class:`PhaseMeter` with :func:`open_meter`, wraps the prefill and the decode of
each counted repetition in ``meter.phase(...)``, stores ``meter.take()`` in the repetition and
``meter.info()`` in its result; the parent turns those into metrics with :func:`power_metrics`
(``energy_prefill_j``, ``energy_decode_j``, ``energy_j``, ``power_w``, ``energy_per_token_j``).
A phase whose duration is under ``min_steps`` counter updates, or whose energy is under
``min_steps`` counter resolution steps, is kept but flagged ``resolved: false``.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import re
import shlex
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from rtmatrix.outcome import Metric, Source

# The kernel's RAPL counter and the NVIDIA driver's counter are hardware energy counters reported
# through the OS / driver; an external meter is the user's own instrument.
HARDWARE = Source.HARDWARE_COUNTER
EXTERNAL = Source.EXTERNAL_METER

POWERCAP_ROOT = Path("/sys/class/powercap")
POWERCAP_ENV = "RTMATRIX_POWERCAP_ROOT"
SOURCE_NAMES = ("rapl", "nvml", "external", "modelled")
RAPL_DOMAINS = ("package", "dram", "psys", "core", "uncore")

# The keys of the matrix's [power] table with their defaults (TOML has no null: "" / 0 mean unset).
POWER_DEFAULTS: dict[str, Any] = {
    "sources": list(SOURCE_NAMES),  # order in which sources are tried; omit one to skip it
    "rapl_domains": ["package", "dram"],  # powercap zones summed (core/uncore are inside package)
    "nvml_devices": [],  # NVML device indices summed; [] = all
    "meter": "",  # external meter command (string, shell-split, or list of args); "" = none
    "meter_unit": "J",  # "J": prints cumulative joules; "W": prints watts (sampled)
    "meter_mode": "poll",  # "poll": run per reading; "stream": one long run, a reading per line
    "meter_resolution_j": 0.0,  # the meter's smallest energy step, 0 = not known
    "meter_timeout_s": 5.0,  # limit for one poll run, and for the first line of a stream
    "sample_interval_s": 0.05,  # sampling of power (W) sources; RAPL wrap guard uses >= 1 s
    "min_steps": 5,  # a phase shorter than this many counter updates/steps is flagged
    "modelled": False,  # allow the modelled source (never chosen silently)
    "tdp_w": 0.0,  # CPU TDP in watts for the modelled source (all packages); required by it
}
POWER_KEYS = tuple(POWER_DEFAULTS)

# RAPL: sysfs reports microjoules; the hardware's energy status unit is typically 2^-16 J
# (15.3 uJ; 2^-14 J on some parts) and the counter updates about every millisecond.
RAPL_RESOLUTION_J = 2.0**-16
RAPL_UPDATE_S = 0.001
RAPL_GUARD_S = 1.0  # read at least this often so a wrap is never missed
NVML_RESOLUTION_J = 1e-3  # nvmlDeviceGetTotalEnergyConsumption counts millijoules

ENERGY_KEYS = ("energy_prefill_j", "energy_decode_j", "energy_j", "power_w", "energy_per_token_j")
_UNITS = {"power_w": "W"}


class PowerError(RuntimeError):
    """A meter that could not be read."""


class PowerConfigError(ValueError):
    """A bad ``[power]`` table; ``key`` is the key at fault."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


# --------------------------------------------------------------------------- configuration


def _fail(key: str, problem: str) -> NoReturn:
    raise PowerConfigError(key, problem)


def _number(key: str, val: Any, positive: bool) -> float:
    ok = isinstance(val, int | float) and not isinstance(val, bool) and math.isfinite(val)
    if not ok or val < 0 or (positive and val == 0):
        _fail(key, f"expected a {'positive' if positive else '>= 0'} number, got {val!r}")
    return float(val)


def _names(key: str, val: Any, valid: tuple[str, ...]) -> list[str]:
    if not isinstance(val, list) or not val or not all(isinstance(v, str) for v in val):
        _fail(key, f"expected a non-empty list of: {', '.join(valid)}")
    bad = [v for v in val if v not in valid]
    if bad:
        _fail(key, f"unknown {bad}; valid: {', '.join(valid)}")
    if len(set(val)) != len(val):
        _fail(key, f"listed twice in {val}")
    return list(val)


def normalize_config(table: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate a ``[power]`` table and fill in defaults; raises :class:`PowerConfigError`."""
    table = dict(table or {})
    unknown = sorted(set(table) - set(POWER_KEYS))
    if unknown:
        _fail(", ".join(unknown), f"unknown key(s); valid: {', '.join(POWER_KEYS)}")
    cfg = {**POWER_DEFAULTS, **table}
    cfg["sources"] = _names("sources", cfg["sources"], SOURCE_NAMES)
    cfg["rapl_domains"] = _names("rapl_domains", cfg["rapl_domains"], RAPL_DOMAINS)
    devs = cfg["nvml_devices"]
    if not isinstance(devs, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devs
    ):
        _fail("nvml_devices", f"expected a list of device indices, got {devs!r}")
    meter = cfg["meter"]
    if isinstance(meter, str):
        try:
            argv = shlex.split(meter)
        except ValueError as exc:
            _fail("meter", f"cannot split the command: {exc}")
    elif isinstance(meter, list) and all(isinstance(a, str) and a for a in meter):
        argv = list(meter)
    else:
        _fail("meter", f"expected a command string or list, got {meter!r}")
    cfg["meter"] = argv
    if cfg["meter_unit"] not in ("J", "W"):
        _fail("meter_unit", f'expected "J" or "W", got {cfg["meter_unit"]!r}')
    if cfg["meter_mode"] not in ("poll", "stream"):
        _fail("meter_mode", f'expected "poll" or "stream", got {cfg["meter_mode"]!r}')
    cfg["meter_resolution_j"] = _number("meter_resolution_j", cfg["meter_resolution_j"], False)
    for key in ("meter_timeout_s", "sample_interval_s"):
        cfg[key] = _number(key, cfg[key], True)
    steps = cfg["min_steps"]
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        _fail("min_steps", f"expected an integer >= 1, got {steps!r}")
    if not isinstance(cfg["modelled"], bool):
        _fail("modelled", f"expected true or false, got {cfg['modelled']!r}")
    cfg["tdp_w"] = _number("tdp_w", cfg["tdp_w"], False)
    if cfg["modelled"] and not cfg["tdp_w"]:
        _fail(
            "tdp_w", "the modelled source needs the CPU's TDP in watts; rtmatrix never guesses it"
        )
    if cfg["modelled"] and "modelled" not in cfg["sources"]:
        _fail("modelled", "modelled = true but 'modelled' is not in sources")
    if argv and "external" not in cfg["sources"]:
        _fail("meter", "a meter is given but 'external' is not in sources")
    return cfg


# --------------------------------------------------------------------------- sources


class EnergySource(ABC):
    """A cumulative energy reading in joules since the source was opened."""

    name: str = ""  # "rapl", "nvml", "external", "modelled"
    source: Source = Source.UNAVAILABLE  # provenance label of the values
    resolution_j: float | None = None  # smallest energy step it can show; None = not known
    update_interval_s: float | None = None  # how often the reading changes; None = not known
    sampled: bool = False  # energy integrated from power samples (not a counter)

    @abstractmethod
    def read_j(self) -> float:
        """Cumulative joules since open; monotonic non-decreasing."""

    def describe(self) -> dict[str, Any]:
        """JSON-able inputs recorded with every value (zones, devices, command, model inputs)."""
        return {}

    @property
    def poll_interval_s(self) -> float | None:
        """If set, :meth:`poll` is called this often in the background while the meter is open."""
        return None

    def poll(self) -> None:
        self.read_j()

    def sample_count(self) -> int | None:
        return None

    def close(self) -> None:  # noqa: B027 - most sources hold nothing
        pass


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


class SampledPower(EnergySource):
    """Energy integrated (trapezoids) from power samples taken in the background and at every
    read; ``update_interval_s`` is the sampling interval."""

    sampled = True

    def __init__(self, interval_s: float) -> None:
        self.update_interval_s = interval_s
        self._lock = threading.Lock()
        self._acc = 0.0
        self._n = 0
        self._last: tuple[float, float] | None = None
        self._sample()

    @abstractmethod
    def sample_w(self) -> float:
        """Instantaneous (or the device's short-average) power in watts."""

    def _sample(self) -> None:
        with self._lock:
            w = self.sample_w()
            t = time.perf_counter()
            if self._last is not None:
                t0, w0 = self._last
                self._acc += (w0 + w) / 2 * (t - t0)
            self._last = (t, w)
            self._n += 1

    def read_j(self) -> float:
        self._sample()
        return self._acc

    def poll(self) -> None:
        self._sample()

    @property
    def poll_interval_s(self) -> float | None:
        return self.update_interval_s

    def sample_count(self) -> int | None:
        return self._n


def _nvml() -> ModuleType | str:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return "pynvml (nvidia-ml-py) not installed"


def _text(val: Any) -> str:
    return val.decode() if isinstance(val, bytes) else str(val)


class _Nvml:
    """The NVML handles of the chosen devices; init/shutdown paired."""

    def __init__(self, nv: ModuleType, indices: list[int]) -> None:
        self.nv = nv
        self.indices = indices
        self.handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in indices]
        self.names = [_text(nv.nvmlDeviceGetName(h)) for h in self.handles]
        try:
            self.driver: str | None = _text(nv.nvmlSystemGetDriverVersion())
        except Exception:
            self.driver = None

    def describe(self) -> dict[str, Any]:
        return {"devices": self.indices, "device_names": self.names, "driver": self.driver}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()


class NvmlEnergy(EnergySource):
    name = "nvml"
    source = HARDWARE
    resolution_j = NVML_RESOLUTION_J

    def __init__(self, dev: _Nvml) -> None:
        self.dev = dev
        self._lock = threading.Lock()
        self._first = self._total_mj()

    def _total_mj(self) -> int:
        return sum(
            int(self.dev.nv.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.dev.handles
        )

    def read_j(self) -> float:
        with self._lock:
            try:
                return (self._total_mj() - self._first) * 1e-3
            except Exception as exc:
                msg = f"NVML energy read failed: {exc}"
                raise PowerError(msg) from exc

    def describe(self) -> dict[str, Any]:
        return self.dev.describe() | {"method": "nvmlDeviceGetTotalEnergyConsumption (mJ)"}

    def close(self) -> None:
        self.dev.close()


class NvmlPower(SampledPower):
    name = "nvml"
    source = HARDWARE

    def __init__(self, dev: _Nvml, interval_s: float) -> None:
        self.dev = dev
        super().__init__(interval_s)

    def sample_w(self) -> float:
        return sum(int(self.dev.nv.nvmlDeviceGetPowerUsage(h)) for h in self.dev.handles) * 1e-3

    def describe(self) -> dict[str, Any]:
        return self.dev.describe() | {
            "method": "nvmlDeviceGetPowerUsage (mW) sampled and integrated; the energy counter "
            "is not supported on this device",
            "samples": self._n,
        }

    def close(self) -> None:
        self.dev.close()


def probe_nvml(cfg: Mapping[str, Any]) -> EnergySource | str:
    nv = _nvml()
    if isinstance(nv, str):
        return nv
    try:
        nv.nvmlInit()
    except Exception as exc:
        return f"NVML did not initialise ({exc})"
    try:
        count = int(nv.nvmlDeviceGetCount())
        if count == 0:
            nv.nvmlShutdown()
            return "no NVML device"
        indices = list(cfg["nvml_devices"]) or list(range(count))
        bad = [i for i in indices if i >= count]
        if bad:
            nv.nvmlShutdown()
            return f"nvml_devices {bad} out of range: {count} NVML device(s)"
        dev = _Nvml(nv, indices)
    except Exception as exc:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
        return f"NVML device query failed ({exc})"
    try:
        return NvmlEnergy(dev)
    except Exception:  # NotSupported before Volta: fall back to sampled power
        pass
    try:
        return NvmlPower(dev, cfg["sample_interval_s"])
    except Exception as exc:
        dev.close()
        return f"NVML device(s) {dev.names} report neither energy nor power ({exc})"


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _parse_reading(text: str) -> float | None:
    """The first number of the last line that has one."""
    for line in reversed(text.strip().splitlines()):
        m = _NUMBER.search(line)
        if m:
            return float(m.group())
    return None


def _run_meter(argv: list[str], timeout_s: float) -> float:
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        msg = f"meter command {shlex.join(argv)!r} failed: {exc}"
        raise PowerError(msg) from None
    if proc.returncode != 0:
        tail = proc.stderr.strip()[-300:]
        msg = f"meter command {shlex.join(argv)!r} exited {proc.returncode}: {tail}"
        raise PowerError(msg)
    val = _parse_reading(proc.stdout)
    if val is None:
        msg = f"meter command {shlex.join(argv)!r} printed no number: {proc.stdout[-200:]!r}"
        raise PowerError(msg)
    return val


class _Stream:
    """A meter command running for the whole cell, one reading per line."""

    def __init__(self, argv: list[str], timeout_s: float) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._got = threading.Event()
        self.first: float | None = None
        self.latest: float | None = None
        self.times: list[float] = []
        self._thread = threading.Thread(target=self._read, name="rtmatrix-meter", daemon=True)
        self._thread.start()
        if not self._got.wait(timeout_s):
            self.close()
            msg = f"meter stream {shlex.join(argv)!r} printed no number within {timeout_s} s"
            raise PowerError(msg)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            val = _parse_reading(line)
            if val is None:
                continue
            with self._lock:
                if self.first is None:
                    self.first = val
                self.latest = val
                self.times.append(time.perf_counter())
            self._got.set()

    def value(self) -> float:
        if self.proc.poll() is not None and not self._thread.is_alive():
            msg = f"meter stream {shlex.join(self.argv)!r} ended (exit {self.proc.returncode})"
            raise PowerError(msg)
        with self._lock:
            assert self.latest is not None
            return self.latest

    def interval_s(self) -> float | None:
        with self._lock:
            t = self.times[-50:]
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class ExternalEnergy(EnergySource):
    """A meter printing cumulative joules (polled per read, or streamed)."""

    name = "external"
    source = EXTERNAL

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.argv: list[str] = list(cfg["meter"])
        self.timeout_s = float(cfg["meter_timeout_s"])
        self.mode = str(cfg["meter_mode"])
        self.resolution_j = cfg["meter_resolution_j"] or None
        self._stream = _Stream(self.argv, self.timeout_s) if self.mode == "stream" else None
        self._lock = threading.Lock()
        self._first = self._raw()

    def _raw(self) -> float:
        return self._stream.value() if self._stream else _run_meter(self.argv, self.timeout_s)

    def read_j(self) -> float:
        with self._lock:
            val = self._raw() - self._first
        if val < 0:
            msg = f"meter {shlex.join(self.argv)!r} went backwards ({val:+.6g} J since open)"
            raise PowerError(msg)
        if self._stream:
            self.update_interval_s = self._stream.interval_s()
        return val

    def describe(self) -> dict[str, Any]:
        return {"command": shlex.join(self.argv), "meter_unit": "J", "meter_mode": self.mode}

    def close(self) -> None:
        if self._stream:
            self._stream.close()


class ExternalPower(SampledPower):
    """A meter printing watts, sampled every ``sample_interval_s`` and integrated."""

    name = "external"
    source = EXTERNAL

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.argv: list[str] = list(cfg["meter"])
        self.timeout_s = float(cfg["meter_timeout_s"])
        self.mode = str(cfg["meter_mode"])
        self._stream = _Stream(self.argv, self.timeout_s) if self.mode == "stream" else None
        super().__init__(float(cfg["sample_interval_s"]))

    def sample_w(self) -> float:
        return self._stream.value() if self._stream else _run_meter(self.argv, self.timeout_s)

    def describe(self) -> dict[str, Any]:
        return {
            "command": shlex.join(self.argv),
            "meter_unit": "W",
            "meter_mode": self.mode,
            "method": "watts sampled and integrated (trapezoids)",
            "samples": self._n,
        }

    def close(self) -> None:
        if self._stream:
            self._stream.close()


def probe_external(cfg: Mapping[str, Any]) -> EnergySource | str:
    if not cfg["meter"]:
        return "no external meter configured ([power].meter)"
    try:
        return ExternalEnergy(cfg) if cfg["meter_unit"] == "J" else ExternalPower(cfg)
    except PowerError as exc:
        return str(exc)


MODEL_FORMULA = "tdp_w * process_cpu_s / logical_cpus (= TDP x utilisation x wall time; CPU only)"


class ModelledSource(EnergySource):
    """CPU TDP × utilisation, utilisation from this process's CPU time (all its threads)."""

    name = "modelled"
    source = Source.MODELLED

    def __init__(self, tdp_w: float, logical_cpus: int) -> None:
        self.tdp_w = tdp_w
        self.logical_cpus = logical_cpus
        clock = time.get_clock_info("process_time").resolution
        self.resolution_j = tdp_w * clock / logical_cpus
        self.update_interval_s = clock
        self._t0 = time.process_time()

    def read_j(self) -> float:
        return self.tdp_w * (time.process_time() - self._t0) / self.logical_cpus

    def describe(self) -> dict[str, Any]:
        return {
            "formula": MODEL_FORMULA,
            "tdp_w": self.tdp_w,
            "logical_cpus": self.logical_cpus,
            "cpu_time": "time.process_time() of the worker (all threads)",
        }


def probe_modelled(cfg: Mapping[str, Any]) -> EnergySource | str:
    if not cfg["modelled"]:
        return "modelled source not enabled ([power].modelled = false)"
    return ModelledSource(float(cfg["tdp_w"]), os.cpu_count() or 1)


def _probe(name: str, cfg: Mapping[str, Any]) -> EnergySource | str:
    if name == "rapl":
        return RaplSource.probe(cfg)
    if name == "nvml":
        return probe_nvml(cfg)
    if name == "external":
        return probe_external(cfg)
    return probe_modelled(cfg)


# --------------------------------------------------------------------------- phase meter


class PhaseMeter:
    """Energy of named phases (``with meter.phase("prefill"): ...``) from one source."""

    def __init__(
        self,
        source: EnergySource | None,
        tried: dict[str, str],
        cfg: Mapping[str, Any] | None = None,
    ) -> None:
        self.src = source
        self.tried = tried
        self.cfg = normalize_config(cfg)
        self.min_steps = int(self.cfg["min_steps"])
        self._open: dict[str, dict[str, Any]] = {}
        self._reps: list[dict[str, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._poll_errors = 0
        self._poll_error: str | None = None
        self._thread: threading.Thread | None = None
        self._thread_error: str | None = None
        interval = source.poll_interval_s if source else None
        if interval:
            thread = threading.Thread(
                target=self._poll, args=(interval,), name="rtmatrix-power", daemon=True
            )
            try:  # may fail under a tight address-space cap: then reads at phase edges only
                thread.start()
                self._thread = thread
            except RuntimeError as exc:
                self._thread_error = f"no background polling ({exc}): phase edges only"

    @property
    def available(self) -> bool:
        return self.src is not None

    @property
    def reason(self) -> str | None:
        if self.src is not None:
            return None
        return "no energy source: " + "; ".join(f"{k}: {v}" for k, v in self.tried.items())

    def _poll(self, interval: float) -> None:
        assert self.src is not None
        while not self._stop.wait(interval):
            try:
                self.src.poll()
            except Exception as exc:  # counted in info(); a broken source fails the edge reads
                self._poll_errors += 1
                self._poll_error = str(exc)

    def _read(self) -> tuple[float, float | None, str | None]:
        """(time at the middle of the read, joules, error)."""
        assert self.src is not None
        a = time.perf_counter()
        try:
            j, err = self.src.read_j(), None
        except Exception as exc:
            j, err = None, str(exc) or type(exc).__name__
        return (a + time.perf_counter()) / 2, j, err

    def resolved(self, joules: float, seconds: float) -> bool:
        """False when the phase is under ``min_steps`` updates or resolution steps."""
        src = self.src
        if src is None:
            return False
        if src.update_interval_s and seconds < self.min_steps * src.update_interval_s:
            return False
        return not (src.resolution_j and joules < self.min_steps * src.resolution_j)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Meter the enclosed block; repeated names within one repetition are summed."""
        if self.src is None:
            yield
            return
        c0 = time.process_time()
        n0 = self.src.sample_count()
        t0, j0, err0 = self._read()
        try:
            yield
        finally:
            t1, j1, err1 = self._read()
            c1 = time.process_time()
            n1 = self.src.sample_count()
            rec = self._open.setdefault(name, {"j": 0.0, "s": 0.0, "cpu_s": 0.0})
            rec["s"] += t1 - t0
            rec["cpu_s"] += c1 - c0
            if n0 is not None and n1 is not None:
                rec["samples"] = rec.get("samples", 0) + n1 - n0
            err = err0 or err1
            if err or j0 is None or j1 is None:
                rec["error"] = err or "no reading"
                rec["j"] = None
            elif rec["j"] is not None:
                rec["j"] += j1 - j0
            if rec["j"] is not None:
                rec["resolved"] = self.resolved(rec["j"], rec["s"])

    def take(self) -> dict[str, dict[str, Any]]:
        """The phases recorded since the last take: one repetition's ``energy`` entry."""
        rep, self._open = self._open, {}
        if rep:
            self._reps.append(rep)
        return rep

    def info(self) -> dict[str, Any]:
        """JSON-able description of the meter, stored once per cell in the worker's result."""
        if self.src is None:
            return {"meter": None, "reason": self.reason, "tried": self.tried}
        src = self.src
        return (
            {
                "meter": src.name,
                "source": str(src.source),
                "resolution_j": src.resolution_j,
                "update_interval_s": src.update_interval_s,
                "sampled": src.sampled,
                "min_steps": self.min_steps,
                "inputs": src.describe(),
                "tried": self.tried,
            }
            | ({"poll_thread": self._thread_error} if self._thread_error else {})
            | (
                {"poll_errors": self._poll_errors, "last_poll_error": self._poll_error}
                if self._poll_errors
                else {}
            )
        )

    def metrics(self, n_generated_tokens: int) -> dict[str, Metric]:
        """The energy metrics of every repetition taken (plus any phases not yet taken)."""
        reps = [*self._reps, *([self._open] if self._open else [])]
        return power_metrics(
            self.info(), [{"energy": e, "n_generated": n_generated_tokens} for e in reps]
        )

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.src is not None:
            self.src.close()

    def __enter__(self) -> PhaseMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_meter(config: Mapping[str, Any] | None = None) -> PhaseMeter:
    """The first usable source of ``config["sources"]``, or an unavailable meter whose reason
    names every source looked for and why it was not used."""
    cfg = normalize_config(config)
    tried: dict[str, str] = {}
    for name in cfg["sources"]:
        try:
            got = _probe(name, cfg)
        except Exception as exc:  # a broken probe makes that source unusable, not the cell
            got = f"probe failed: {type(exc).__name__}: {exc}"
        if isinstance(got, str):
            tried[name] = got
            continue
        tried[name] = "selected"
        return PhaseMeter(got, tried, cfg)
    return PhaseMeter(None, tried, cfg)


NULL_METER = PhaseMeter(None, {"none": "not metered"})  # for warm-up repetitions


# --------------------------------------------------------------------------- metrics


def _unavailable(reason: str) -> dict[str, Metric]:
    return {k: Metric.unavailable(_UNITS.get(k, "J"), reason) for k in ENERGY_KEYS}


def _n_generated(rep: Mapping[str, Any]) -> int:
    if "n_generated" in rep:
        return int(rep["n_generated"])
    return len(rep.get("tokens") or [])


def power_metrics(info: Mapping[str, Any] | None, reps: list[dict[str, Any]]) -> dict[str, Metric]:
    """``energy_prefill_j``, ``energy_decode_j``, ``energy_j`` (both phases), ``power_w``
    (their energy / their time) and ``energy_per_token_j`` (``energy_j`` / generated tokens), one
    sample per counted repetition, from :meth:`PhaseMeter.info` and the repetitions' ``energy``
    entries (:meth:`PhaseMeter.take`)."""
    if not info:
        return _unavailable(
            "the worker recorded no power measurement (it ended before the "
            "first counted repetition)"
        )
    if not info.get("meter"):
        return _unavailable(str(info.get("reason") or "no energy source"))
    if not reps:
        return _unavailable("no counted repetition finished")
    source = Source(str(info["source"]))
    base: dict[str, Any] = {
        "meter": info["meter"],
        "resolution_j": info.get("resolution_j"),
        "update_interval_s": info.get("update_interval_s"),
        "sampled": bool(info.get("sampled")),
        "min_steps": info.get("min_steps"),
    }
    if info.get("sampled"):
        base["sample_interval_s"] = info.get("update_interval_s")
    base |= {f"input_{k}": v for k, v in (info.get("inputs") or {}).items()}

    phases: dict[str, list[dict[str, Any]]] = {"prefill": [], "decode": []}
    for i, rep in enumerate(reps):
        energy = rep.get("energy") or {}
        for ph, recs in phases.items():
            rec = energy.get(ph)
            if rec is None:
                return _unavailable(f"repetition {i} has no metered {ph} phase")
            if rec.get("j") is None:
                return _unavailable(
                    f"meter read failed in repetition {i} ({ph}): {rec.get('error')}"
                )
            recs.append(rec)

    def flagged(recs: list[dict[str, Any]]) -> dict[str, Any]:
        bad = sum(1 for r in recs if not r.get("resolved", False))
        out: dict[str, Any] = {"resolved": bad == 0, "unresolved_reps": bad}
        if bad:
            out["note"] = (
                f"{bad} of {len(recs)} repetition(s) shorter than {info.get('min_steps')} counter "
                "updates or resolution steps: below what the meter resolves"
            )
        return out

    pp, dec = phases["prefill"], phases["decode"]
    both = [[a, b] for a, b in zip(pp, dec, strict=True)]
    cpu = {"cpu_s": [r["cpu_s"] for r in pp]}
    out: dict[str, Metric] = {}
    out["energy_prefill_j"] = Metric.measured(
        [r["j"] for r in pp],
        "J",
        source,
        **base,
        **flagged(pp),
        phase="prefill",
        seconds=[r["s"] for r in pp],
        **cpu,
    )
    out["energy_decode_j"] = Metric.measured(
        [r["j"] for r in dec],
        "J",
        source,
        **base,
        **flagged(dec),
        phase="decode",
        seconds=[r["s"] for r in dec],
        cpu_s=[r["cpu_s"] for r in dec],
    )
    total = [a["j"] + b["j"] for a, b in both]
    secs = [a["s"] + b["s"] for a, b in both]
    any_flag = flagged([r for pair in both for r in pair])
    out["energy_j"] = Metric.measured(
        total,
        "J",
        source,
        **base,
        **any_flag,
        phase="prefill+decode",
        seconds=secs,
        cpu_s=[a["cpu_s"] + b["cpu_s"] for a, b in both],
    )
    if all(s > 0 for s in secs):
        out["power_w"] = Metric.measured(
            [e / s for e, s in zip(total, secs, strict=True)],
            "W",
            source,
            **base,
            **any_flag,
            method="energy_j / metered seconds of prefill+decode",
        )
    else:
        out["power_w"] = Metric.unavailable("W", "a metered phase took no measurable time")
    gen = [_n_generated(r) for r in reps]
    if all(g > 0 for g in gen):
        out["energy_per_token_j"] = Metric.measured(
            [e / g for e, g in zip(total, gen, strict=True)],
            "J",
            source,
            **base,
            **any_flag,
            method="energy_j (prefill+decode) / generated tokens",
            generated_tokens=gen,
            decode_only_j_per_token=[
                b["j"] / (g - 1) if g > 1 else None for (_, b), g in zip(both, gen, strict=True)
            ],
        )
    else:
        out["energy_per_token_j"] = Metric.unavailable("J", "no generated token")
    return out
