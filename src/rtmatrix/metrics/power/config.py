"""The matrix's ``[power]`` table: its keys, their defaults, and validation."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any, NoReturn

from rtmatrix.metrics.power.devices import METER_KINDS, SYSTEM_KIND, Device, DeviceError

SOURCE_NAMES = ("rapl", "nvml", "external", "modelled")
RAPL_DOMAINS = ("package", "dram", "psys", "core", "uncore")

# The keys of the matrix's [power] table with their defaults (TOML has no null: "" / 0 mean unset).
POWER_DEFAULTS: dict[str, Any] = {
    # order in which sources are tried (an earlier one wins a device two would meter); omit one
    # to skip it
    "sources": list(SOURCE_NAMES),
    "rapl_domains": ["package", "dram"],  # powercap zones summed (core/uncore are inside package)
    "nvml_devices": [],  # NVML device indices summed; [] = all
    "meter": "",  # external meter command (string, shell-split, or list of args); "" = none
    # what the external meter measures: ["system"] (the whole machine: a wall or USB meter),
    # or the devices it is wired to: "cpu", "gpu" (every GPU), "gpu:N"
    "meter_devices": [SYSTEM_KIND],
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


class PowerConfigError(ValueError):
    """A bad ``[power]`` table; ``key`` is the key at fault."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


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


def _meter_devices(val: Any) -> list[str]:
    """``[power].meter_devices``: a device or a list of them, each of :data:`METER_KINDS`."""
    key = "meter_devices"
    forms = '"system" (the whole machine), "cpu", "gpu" (every GPU) or "gpu:N"'
    items = [val] if isinstance(val, str) else val
    if not isinstance(items, list) or not items:
        _fail(key, f"expected what the external meter measures, a list of {forms}; got {val!r}")
    devs: list[Device] = []
    for item in items:
        try:
            dev = Device.parse(item)
        except DeviceError as exc:
            _fail(key, f"{exc}; expected {forms}")
        if dev.kind not in METER_KINDS or dev.ref:
            _fail(key, f"{item!r}: a meter measures {forms}")
        if dev in devs:
            _fail(key, f"{item!r} listed twice")
        devs.append(dev)
    if len(devs) > 1 and any(d.kind == SYSTEM_KIND for d in devs):
        _fail(key, '"system" is the whole machine: it stands alone')
    return [str(d) for d in devs]


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
    cfg["meter_devices"] = _meter_devices(cfg["meter_devices"])
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
