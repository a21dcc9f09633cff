"""TLS for the cluster: required unless every address involved is on loopback.

A Dask worker runs whatever it is sent, so the scheduler, its workers and the client must
authenticate each other. Certificates come from the matrix's ``[cluster]`` table
(``ca_file``, ``cert_file``, ``key_file``), else the environment (``RTMATRIX_TLS_CA_FILE``,
``RTMATRIX_TLS_CERT_FILE``, ``RTMATRIX_TLS_KEY_FILE``), else Dask's own configuration
(``distributed.comm.tls.ca-file`` / ``client.cert`` / ``client.key``, e.g. from
``DASK_DISTRIBUTED__COMM__TLS__CA_FILE``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rtmatrix.matrix import ClusterConfig

ENV = {
    "ca_file": "RTMATRIX_TLS_CA_FILE",
    "cert_file": "RTMATRIX_TLS_CERT_FILE",
    "key_file": "RTMATRIX_TLS_KEY_FILE",
}
DASK_KEYS = {
    "ca_file": "distributed.comm.tls.ca-file",
    "cert_file": "distributed.comm.tls.client.cert",
    "key_file": "distributed.comm.tls.client.key",
}


class FleetError(ValueError):
    """A cluster that cannot be used as configured: the message says what and the fix."""


@dataclass(frozen=True)
class TlsFiles:
    ca_file: str
    cert_file: str
    key_file: str
    #: where they came from: "matrix", "environment" or "dask config"
    source: str


def host_of(address: str) -> tuple[str, str]:
    """``tls://10.0.0.5:8786`` -> ("tls", "10.0.0.5"); a bare ``host:port`` is ``tcp``."""
    text = address if "://" in address else f"tcp://{address}"
    parts = urlsplit(text)
    if not parts.hostname:
        msg = f"cluster address {address!r}: expected tls://HOST:PORT (or tcp:// on loopback)"
        raise FleetError(msg)
    return parts.scheme, parts.hostname


def is_loopback(address: str) -> bool:
    """Whether the address's host is this machine's loopback (by name or every resolved IP)."""
    _, hostname = host_of(address)
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(hostname, None)
    except OSError:
        return False
    ips = {info[4][0] for info in infos}
    return bool(ips) and all(ipaddress.ip_address(str(ip)).is_loopback for ip in ips)


def _from(source: str, values: dict[str, str | None]) -> TlsFiles | None:
    if not any(values.values()):
        return None
    missing = [k for k, v in values.items() if not v]
    if missing:
        msg = f"TLS from the {source}: {', '.join(missing)} missing (give all three files)"
        raise FleetError(msg)
    for key, value in values.items():
        if not Path(str(value)).is_file():
            msg = f"TLS from the {source}: {key} {value} is not a file"
            raise FleetError(msg)
    return TlsFiles(
        str(values["ca_file"]), str(values["cert_file"]), str(values["key_file"]), source
    )


def tls_files(cluster: ClusterConfig | None, env: dict[str, str] | None = None) -> TlsFiles | None:
    """The certificate files to use, or None when none are configured anywhere."""
    environ = os.environ if env is None else env
    if cluster is not None:
        found = _from(
            "matrix [cluster]",
            {k: str(getattr(cluster, k)) if getattr(cluster, k) else None for k in ENV},
        )
        if found:
            return found
    found = _from("environment", {k: environ.get(v) for k, v in ENV.items()})
    if found:
        return found
    import dask.config

    return _from("dask config", {k: dask.config.get(v, None) for k, v in DASK_KEYS.items()})


def security_for(
    address: str, cluster: ClusterConfig | None, env: dict[str, str] | None = None
) -> tuple[Any, TlsFiles | None]:
    """The ``distributed.security.Security`` to connect with (None: plain TCP on loopback).

    A non-loopback address must be ``tls://`` with certificates; a ``tls://`` address without
    certificates is refused as well."""
    scheme, hostname = host_of(address)
    files = tls_files(cluster, env)
    if scheme != "tls":
        if not is_loopback(address):
            msg = (
                f"cluster address {address}: {hostname} is not loopback, so TLS is required; "
                "start the scheduler and workers with --protocol tls and certificates, and "
                "connect to tls://HOST:PORT (see README, 'A fleet of target devices')"
            )
            raise FleetError(msg)
        return None, None
    if files is None:
        msg = (
            f"cluster address {address} is TLS but no certificates are configured: set "
            f"[cluster] ca_file/cert_file/key_file or {', '.join(ENV.values())}"
        )
        raise FleetError(msg)
    from distributed.security import Security

    sec = Security(
        tls_ca_file=files.ca_file,
        tls_client_cert=files.cert_file,
        tls_client_key=files.key_file,
        require_encryption=True,
    )
    return sec, files


def check_workers(address: str, tls: bool, workers: list[str]) -> None:
    """Plain TCP only when every worker is on loopback too (a scheduler listening on all
    interfaces may have been joined from elsewhere)."""
    if tls:
        return
    remote = [w for w in workers if not is_loopback(w)]
    if remote:
        msg = (
            f"scheduler {address} (no TLS) has worker(s) off loopback: {', '.join(remote)}; "
            "a worker runs whatever it is sent, so use TLS (tls://) for a fleet"
        )
        raise FleetError(msg)
