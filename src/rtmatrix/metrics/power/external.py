"""``[power].meter``: a command printing joules or watts, run per reading (poll) or for the
whole cell (stream)."""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Any

from rtmatrix.metrics.power.base import EXTERNAL, EnergySource, PowerError, SampledPower
from rtmatrix.metrics.power.devices import parse_devices

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
        self.devices = parse_devices(cfg["meter_devices"])  # what the user says it measures
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
        self.devices = parse_devices(cfg["meter_devices"])  # what the user says it measures
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
