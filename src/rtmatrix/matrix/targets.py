"""``[[targets]]`` and ``[cluster]`` of a matrix file: the hosts a matrix runs on.

A target is a label (the Dask resource a host's worker holds, e.g. ``rk3588``) and what is
expected of the host behind it (``os``, ``arch``): a host that does not match is refused rather
than measured under the wrong name. Runtime rows name the targets they run on (``targets = [...]``;
all of them when absent). Without targets a matrix runs on one host, its cell keys unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET_KEYS = ("label", "os", "arch", "description")
CLUSTER_KEYS = (
    "address",
    "ca_file",
    "cert_file",
    "key_file",
    "no_workers_timeout_s",
    "connect_timeout_s",
    "host_lost_retries",
)
#: a Dask resource name: no ``=``, ``,`` or spaces (``--resources "a=1,b=1"``), no ``|`` or ``@``
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: the same chip under the names different OSes give it (``platform.machine()``)
ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8": "aarch64"}


class TargetError(ValueError):
    """A bad ``[[targets]]`` or ``[cluster]`` entry; ``key`` says which."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


@dataclass(frozen=True)
class Target:
    label: str
    os: str | None = None
    arch: str | None = None
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "os": self.os, "arch": self.arch}

    def mismatch(self, machine: dict[str, Any]) -> str | None:
        """Why a host's profile (:func:`rtmatrix.metrics.host.machine_info`) is not this target,
        or None when it matches every expectation."""
        wrong = []
        host_os, host_arch = str(machine.get("os") or "?"), str(machine.get("arch") or "?")
        if self.os and self.os.lower() != host_os.lower():
            wrong.append(f"os {self.os!r} (host: {host_os})")
        if self.arch and normal_arch(self.arch) != normal_arch(host_arch):
            wrong.append(f"arch {self.arch!r} (host: {host_arch})")
        if not wrong:
            return None
        return f"target {self.label!r} expects " + " and ".join(wrong)


def normal_arch(arch: str) -> str:
    a = arch.lower()
    return ARCH_ALIASES.get(a, a)


@dataclass(frozen=True)
class ClusterConfig:
    """``[cluster]``: where the scheduler is, the TLS files, how long to wait for hosts."""

    address: str | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    #: a label no worker holds for this long: its cells are recorded ``unavailable``
    no_workers_timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    #: resubmit a cell whose host was lost up to this many times (the last attempt is recorded)
    host_lost_retries: int = 0


def _label(value: Any, key: str) -> str:
    if not isinstance(value, str) or not LABEL.match(value):
        raise TargetError(
            key, f"expected a label of letters, digits, '_', '.', '-' (e.g. rk3588), got {value!r}"
        )
    return value


def _optional_str(entry: dict[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise TargetError(f"{where}.{key}", f"expected a string, got {value!r}")
    return value


def parse_targets(entries: Any) -> tuple[Target, ...]:
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise TargetError("targets", "expected [[targets]] tables")
    out = []
    for i, entry in enumerate(entries):
        where = f"targets[{i}]"
        if not isinstance(entry, dict):
            raise TargetError(where, 'expected a table with label = "..."')
        unknown = sorted(set(entry) - set(TARGET_KEYS))
        if unknown:
            raise TargetError(
                where, f"unknown key(s) {', '.join(unknown)}; valid: {', '.join(TARGET_KEYS)}"
            )
        out.append(
            Target(
                _label(entry.get("label"), f"{where}.label"),
                _optional_str(entry, "os", where),
                _optional_str(entry, "arch", where),
                _optional_str(entry, "description", where) or "",
            )
        )
    labels = [t.label for t in out]
    dupes = sorted({lbl for lbl in labels if labels.count(lbl) > 1})
    if dupes:
        raise TargetError("targets", f"label(s) listed twice: {', '.join(dupes)}")
    return tuple(out)


def row_targets(value: Any, where: str, declared: tuple[Target, ...]) -> tuple[str, ...]:
    """A runtime row's ``targets``: names of declared targets (all of them when absent)."""
    valid = [t.label for t in declared]
    if value is None:
        return tuple(valid)
    if not declared:
        raise TargetError(where, "names targets, but the matrix declares no [[targets]]")
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise TargetError(where, f"expected a non-empty list of target labels; valid: {valid}")
    bad = [v for v in value if v not in valid]
    if bad:
        raise TargetError(where, f"unknown target(s) {bad}; valid: {', '.join(valid)}")
    return tuple(dict.fromkeys(value))


def _seconds(table: dict[str, Any], key: str, default: float) -> float:
    val = table.get(key, default)
    if isinstance(val, bool) or not isinstance(val, int | float) or val <= 0:
        raise TargetError(f"cluster.{key}", f"expected a positive number of seconds, got {val!r}")
    return float(val)


def _file(table: dict[str, Any], key: str, base: Path) -> Path | None:
    val = table.get(key)
    if val is None:
        return None
    if not isinstance(val, str):
        raise TargetError(f"cluster.{key}", f"expected a path, got {val!r}")
    path = Path(val).expanduser()
    return path if path.is_absolute() else base / path


def parse_cluster(table: Any, base: Path) -> ClusterConfig | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise TargetError("cluster", f"expected a table, got {table!r}")
    unknown = sorted(set(table) - set(CLUSTER_KEYS))
    if unknown:
        raise TargetError(
            "cluster", f"unknown key(s) {', '.join(unknown)}; valid: {', '.join(CLUSTER_KEYS)}"
        )
    address = table.get("address")
    if address is not None and not isinstance(address, str):
        raise TargetError("cluster.address", f"expected 'tls://host:port', got {address!r}")
    retries = table.get("host_lost_retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise TargetError("cluster.host_lost_retries", f"expected an integer >= 0, got {retries!r}")
    return ClusterConfig(
        address=address,
        ca_file=_file(table, "ca_file", base),
        cert_file=_file(table, "cert_file", base),
        key_file=_file(table, "key_file", base),
        no_workers_timeout_s=_seconds(table, "no_workers_timeout_s", 30.0),
        connect_timeout_s=_seconds(table, "connect_timeout_s", 10.0),
        host_lost_retries=retries,
    )
