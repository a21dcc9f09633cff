from __future__ import annotations

from importlib import metadata
from pathlib import Path

from rtmatrix.metrics.package import license_of, package_size, version


def test_package_size_sums_every_recorded_file() -> None:
    dist = metadata.distribution("jinja2")
    expected = sum(
        Path(str(dist.locate_file(f))).stat().st_size
        for f in dist.files or []
        if Path(str(dist.locate_file(f))).exists()
    )
    m = package_size("jinja2")
    assert m.value == expected and m.source == "package-metadata" and expected > 100_000


def test_missing_distribution_is_unavailable() -> None:
    for m in (package_size("no-such-dist-xyz"), license_of("no-such-dist-xyz")):
        assert m.value is None and "not installed" in str(m.reason)
    assert version("no-such-dist-xyz") is None


def test_license_comes_from_metadata() -> None:
    m = license_of("jinja2")
    assert m.source == "package-metadata" and "BSD" in str(m.value)
