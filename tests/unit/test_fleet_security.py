"""TLS unless everything is on loopback; certificates from the matrix or the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.fleet.security import (
    ENV,
    FleetError,
    check_workers,
    is_loopback,
    security_for,
    tls_files,
)
from rtmatrix.matrix import ClusterConfig


@pytest.fixture(autouse=True)
def _no_tls_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV.values():
        monkeypatch.delenv(var, raising=False)


def certs(tmp_path: Path) -> dict[str, Path]:
    files = {k: tmp_path / f"{k}.pem" for k in ENV}
    for p in files.values():
        p.write_text("-----BEGIN-----\n")
    return files


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("tcp://127.0.0.1:8786", True),
        ("127.0.0.5:8786", True),
        ("tls://[::1]:8786", True),
        ("tcp://localhost:8786", True),
        ("tcp://10.0.0.5:8786", False),
        ("tls://192.168.1.20:8786", False),
    ],
)
def test_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_plain_tcp_only_on_loopback() -> None:
    assert security_for("tcp://127.0.0.1:8786", None) == (None, None)
    with pytest.raises(FleetError, match="not loopback, so TLS is required"):
        security_for("tcp://10.0.0.5:8786", None)


def test_tls_needs_certificates() -> None:
    with pytest.raises(FleetError, match="no certificates are configured"):
        security_for("tls://10.0.0.5:8786", None)


def test_certificates_from_the_matrix_win_over_the_environment(tmp_path: Path) -> None:
    files = certs(tmp_path)
    env = {ENV[k]: str(tmp_path / "nope.pem") for k in ENV}
    cluster = ClusterConfig(
        ca_file=files["ca_file"], cert_file=files["cert_file"], key_file=files["key_file"]
    )
    found = tls_files(cluster, env)
    assert found is not None and found.source == "matrix [cluster]"
    sec, used = security_for("tls://10.0.0.5:8786", cluster)
    assert used == found and sec.require_encryption and sec.tls_ca_file == str(files["ca_file"])


def test_certificates_from_the_environment(tmp_path: Path) -> None:
    files = certs(tmp_path)
    found = tls_files(None, {ENV[k]: str(p) for k, p in files.items()})
    assert found is not None and found.source == "environment"
    with pytest.raises(FleetError, match="key_file missing"):
        tls_files(None, {ENV["ca_file"]: str(files["ca_file"]), ENV["cert_file"]: "x"})
    with pytest.raises(FleetError, match="is not a file"):
        tls_files(None, {ENV[k]: str(tmp_path / "absent") for k in ENV})


def test_plain_tcp_refused_when_a_worker_joined_from_elsewhere() -> None:
    check_workers("tcp://127.0.0.1:8786", False, ["tcp://127.0.0.1:4000"])
    check_workers("tls://127.0.0.1:8786", True, ["tls://10.0.0.9:4000"])
    with pytest.raises(FleetError, match=r"off loopback: tcp://10\.0\.0\.9:4000"):
        check_workers("tcp://127.0.0.1:8786", False, ["tcp://10.0.0.9:4000"])
