from __future__ import annotations

import pytest

#: the unit tests of the host-limits probe itself, which set the variable as they need
_PROBE_TESTS = ("test_hostlimits", "test_hostprobe", "test_utilization")


@pytest.fixture(autouse=True)
def _no_host_probe(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests run fake adapters: their cells need no measured bandwidth, and a probe per
    run (a contended result is measured again by the next run) would cost seconds each. The
    integration tests measure the host for real and check the derived metrics."""
    if request.module.__name__.rsplit(".", 1)[-1] not in _PROBE_TESTS:
        monkeypatch.setenv("RTMATRIX_HOST_LIMITS", "off")
