"""What every converter home shares: the record of one conversion, the converter's refusal (an
outcome charged to the converter, not to a runtime), and running the converter offline.

A converter is a vendor's own tool that turns a team's checkpoint (a Hugging Face folder) into
the file its runtime reads: llama.cpp's ``convert_hf_to_gguf.py``, onnxruntime-genai's model
builder, OpenVINO's exporter, ... Each lives in its own module of :mod:`rtmatrix.converters`,
runs in a child process (the parent never imports torch or transformers), inside a network
namespace where the platform allows one (``unshare -n``), and is cached by checkpoint hash +
converter version + options. Nothing here imports a converter.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from rtmatrix.fixtures.spec import FixtureError

#: the tail of a converter's log kept in its record and in a refusal's message
LOG_TAIL_CHARS = 2500
#: a converter's own words when it tried to reach the network (a hub, a telemetry endpoint)
NETWORK_PATTERNS = (
    r"Network is unreachable",
    r"Temporary failure in name resolution",
    r"Name or service not known",
    r"Failed to establish a new connection",
    r"Max retries exceeded with url",
    r"urlopen error",
    r"Could not resolve host",
    r"ConnectionError",
)
_NETWORK = re.compile("|".join(NETWORK_PATTERNS))


@dataclass(frozen=True)
class Conversion:
    """How one file was converted: the converter, its version and options, the command line,
    its time and its own log; whether it ran offline and whether it tried the network."""

    converter: str  # the converter's home name, e.g. "llama_cpp"
    tool: str  # what the tool is, in the vendor's words: "convert_hf_to_gguf.py"
    distribution: str  # the package it came from, e.g. "llama-cpp-python"
    version: str
    options: dict[str, str]
    command: list[str]
    wall_s: float
    log_tail: str
    offline: str  # how it was kept offline, or why it was not
    network_attempts: list[str] = field(default_factory=list)
    #: the checkpoint it converted and its content hash
    source: str = ""
    source_sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "converter": self.converter,
            "tool": self.tool,
            "distribution": self.distribution,
            "version": self.version,
            "options": dict(self.options),
            "command": list(self.command),
            "wall_s": self.wall_s,
            "log_tail": self.log_tail,
            "offline": self.offline,
            "network_attempts": list(self.network_attempts),
            "source": self.source,
            "source_sha256": self.source_sha256,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Conversion:
        return cls(
            converter=str(data["converter"]),
            tool=str(data["tool"]),
            distribution=str(data["distribution"]),
            version=str(data["version"]),
            options={str(k): str(v) for k, v in dict(data["options"]).items()},
            command=[str(c) for c in data["command"]],
            wall_s=float(data["wall_s"]),
            log_tail=str(data["log_tail"]),
            offline=str(data["offline"]),
            network_attempts=[str(x) for x in data.get("network_attempts") or []],
            source=str(data.get("source") or ""),
            source_sha256=str(data.get("source_sha256") or ""),
        )

    def label(self) -> str:
        """``convert_hf_to_gguf.py (llama-cpp-python 0.3.36, outtype f16)``"""
        opts = ", ".join(f"{k} {v}" for k, v in sorted(self.options.items()))
        return f"{self.tool} ({self.distribution} {self.version}" + (f", {opts})" if opts else ")")


class ConverterRefused(FixtureError):
    """The converter did not produce the file: the cell's outcome is charged to the converter.

    ``conversion`` holds what ran (command, log, version), so the report can show the
    converter's own message next to the architecture it refused."""

    def __init__(self, message: str, conversion: Conversion) -> None:
        super().__init__(message)
        self.conversion = conversion


@cache
def offline_prefix() -> tuple[tuple[str, ...], str]:
    """The command prefix that runs a child without a network, and how it does so; an empty
    prefix and the reason where the platform has none (the child then runs as it is, with the
    hub's offline variables set, and any attempt it makes is still read from its log)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return (), "not isolated: util-linux's unshare is not on PATH"
    try:
        probe = subprocess.run([unshare, "-n", "true"], capture_output=True, text=True,
                               timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return (), f"not isolated: unshare -n could not start ({exc})"
    if probe.returncode != 0:
        why = (probe.stderr or "").strip()[-200:] or f"exit {probe.returncode}"
        return (), f"not isolated: unshare -n failed here ({why})"
    return (unshare, "-n", "--"), "a network namespace with no interfaces (unshare -n)"


def offline_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment with every hub told to stay offline (and no telemetry)."""
    env = dict(os.environ)
    env |= {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "PIP_NO_INDEX": "1",  # a converter that pip-installs on import finds no index
    }
    return env | (extra or {})


def network_attempts(log: str) -> list[str]:
    """The log lines that show the converter trying to reach the network."""
    return [line.strip()[:300] for line in log.splitlines() if _NETWORK.search(line)][:20]


@dataclass(frozen=True)
class ChildRun:
    """One converter child, finished: its exit status, time and log."""

    returncode: int
    wall_s: float
    log: str
    timed_out: bool = False

    @property
    def tail(self) -> str:
        return self.log.strip()[-LOG_TAIL_CHARS:]

    def how_it_ended(self) -> str:
        if self.timed_out:
            return "ran past its time limit and was killed"
        if self.returncode >= 0:
            return f"exit {self.returncode}"
        try:
            return f"killed by {signal.Signals(-self.returncode).name}"
        except ValueError:
            return f"killed by signal {-self.returncode}"


def run_offline(
    cmd: list[str], log_path: Path, timeout_s: float, env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ChildRun:  # fmt: skip
    """Run a converter's command in its own process group under :func:`offline_prefix`, its
    output (stdout and stderr together) written to ``log_path``; killed on timeout."""
    prefix, _how = offline_prefix()
    t0 = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        try:
            proc = subprocess.Popen(
                [*prefix, *cmd], stdout=log, stderr=subprocess.STDOUT, env=env or offline_env(),
                cwd=cwd, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            log.write(f"could not start {cmd[0]}: {exc}\n")
            return ChildRun(127, 0.0, log_path.read_text("utf-8", errors="replace"))
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wall = time.perf_counter() - t0
    text = log_path.read_text("utf-8", errors="replace")
    return ChildRun(proc.returncode, round(wall, 2), text, timed_out)
