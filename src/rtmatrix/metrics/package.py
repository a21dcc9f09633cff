"""Package size, version and license of a runtime's distribution, from its installed metadata."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from rtmatrix.outcome import Metric, Source


def _dist(distribution: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None


def version(distribution: str) -> str | None:
    dist = _dist(distribution)
    return dist.version if dist else None


def package_size(distribution: str) -> Metric:
    """Installed bytes of every file the distribution's RECORD lists, wherever it put them
    (llama-cpp-python writes ``lib/`` and ``include/`` beside its package)."""
    dist = _dist(distribution)
    if dist is None:
        return Metric.unavailable("bytes", f"distribution {distribution!r} is not installed")
    files = dist.files
    if not files:
        return Metric.unavailable("bytes", f"{distribution} has no RECORD file list")
    total, counted, missing = 0, 0, 0
    for f in files:
        path = Path(str(dist.locate_file(f)))
        try:
            total += path.stat().st_size
            counted += 1
        except OSError:
            missing += 1
    return Metric(
        total,
        "bytes",
        Source.PACKAGE_METADATA,
        detail={"files": counted, "files_missing": missing, "method": "RECORD"},
    )


def license_of(distribution: str) -> Metric:
    """License-Expression, else License, else the trove classifiers."""
    dist = _dist(distribution)
    if dist is None:
        return Metric.unavailable("spdx", f"distribution {distribution!r} is not installed")
    md = dist.metadata
    expr = (md.get_all("License-Expression") or [None])[0]
    if expr:
        return Metric(expr, "spdx", Source.PACKAGE_METADATA, detail={"field": "License-Expression"})
    lic = (md.get_all("License") or [None])[0]
    if lic and len(lic) < 200:
        return Metric(lic.strip(), "text", Source.PACKAGE_METADATA, detail={"field": "License"})
    classifiers = [
        c.split("::")[-1].strip()
        for c in md.get_all("Classifier") or []
        if c.startswith("License ::")
    ]
    if classifiers:
        return Metric(
            "; ".join(classifiers), "text", Source.PACKAGE_METADATA, detail={"field": "Classifier"}
        )
    return Metric.unavailable("spdx", f"{distribution} metadata declares no license")
