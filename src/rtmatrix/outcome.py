"""Outcome and metric value types shared by the worker, runner, results and report."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """How a cell ended, classified from evidence only. Every cell gets exactly one."""

    OK = "ok"  # ran; parity holds (or there is no reference to check)
    WRONG_OUTPUT = "wrong-output"  # ran, but parity broken or logits non-finite
    ERROR = "error"  # the runtime raised a clean error (message kept)
    CRASH = "crash"  # the worker died by a signal or exited without a result
    OOM_KILLED = "oom-killed"  # killed for memory (SIGKILL under a memory cap)
    HANG = "hang"  # the wall-clock limit was hit; the process group was killed
    FALLBACK = "fallback"  # ran, but not where it was asked to (placement evidence)
    UNAVAILABLE = "unavailable"  # runtime or feature missing
    HOST_LOST = "host-lost"  # the host running the cell left the cluster mid-cell (rtmatrix.fleet)


class Verdict(StrEnum):
    """The outcome judged against the fixture's expectation."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    UNAVAILABLE = "unavailable"


class Expect(StrEnum):
    OK = "ok"
    ERROR = "error"


# expectation -> outcome -> verdict; a matrix may override entries per fixture
VERDICT_RULES: dict[Expect, dict[Status, Verdict]] = {
    Expect.OK: {
        Status.OK: Verdict.PASS,
        Status.WRONG_OUTPUT: Verdict.FAIL,
        Status.ERROR: Verdict.FAIL,
        Status.CRASH: Verdict.FAIL,
        Status.OOM_KILLED: Verdict.FAIL,
        Status.HANG: Verdict.FAIL,
        Status.FALLBACK: Verdict.FAIL,
        Status.UNAVAILABLE: Verdict.UNAVAILABLE,
        Status.HOST_LOST: Verdict.FAIL,
    },
    Expect.ERROR: {
        Status.OK: Verdict.FAIL,  # expected an error but it "succeeded"
        Status.WRONG_OUTPUT: Verdict.FAIL,  # silently returned garbage
        Status.ERROR: Verdict.PASS,  # clean, visible error
        Status.CRASH: Verdict.WARN,  # visible, but kills the host process
        Status.OOM_KILLED: Verdict.WARN,
        Status.HANG: Verdict.FAIL,
        Status.FALLBACK: Verdict.FAIL,
        Status.UNAVAILABLE: Verdict.UNAVAILABLE,
        Status.HOST_LOST: Verdict.FAIL,  # nothing was learnt about the runtime: not a pass
    },
}


class ErrorKind(StrEnum):
    """Why a runtime refused a cell, classified from its exception and message (the patterns
    live in each runtime's home, over the generic ones in :mod:`rtmatrix.errorkinds`)."""

    OUT_OF_MEMORY = "out-of-memory"
    UNSUPPORTED_OP = "unsupported-op"
    DYNAMIC_SHAPE = "dynamic-shape"
    BAD_FILE = "bad-file"
    MISSING_TENSOR = "missing-tensor"
    UNKNOWN_ARCH = "unknown-arch"
    CONTEXT_LENGTH = "context-length"
    #: the row's own converter refused the checkpoint (charged to the converter)
    CONVERTER_REFUSED = "converter-refused"
    #: a message no pattern recognises: visible as its own kind, never taken for an expected one
    UNCLASSIFIED = "unclassified"

    @classmethod
    def parse(cls, value: str) -> ErrorKind:
        try:
            return cls(value)
        except ValueError:
            msg = f"unknown error kind {value!r}; valid: {', '.join(k.value for k in cls)}"
            raise ValueError(msg) from None


def verdict(expect: Expect, status: Status, overrides: dict[str, str] | None = None) -> Verdict:
    """Judge an outcome; ``overrides`` maps outcome names to verdict names for one fixture."""
    if overrides and str(status) in overrides:
        return Verdict(overrides[str(status)])
    return VERDICT_RULES[expect][status]


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    #: why the verdict is not what the outcome alone would give (e.g. the wrong error kind)
    reason: str | None = None


def judge(
    expect: Expect,
    status: Status,
    overrides: dict[str, str] | None = None,
    expect_kinds: Sequence[str] = (),
    observed_kind: str | None = None,
    message: str = "",
) -> Judgement:
    """The verdict, also checking the error kind: an expected failure passes only for the
    expected reason. A clean error of another kind is WARN, naming the kind and message."""
    base = verdict(expect, status, overrides)
    if overrides and str(status) in overrides:
        return Judgement(base)
    if expect is not Expect.ERROR or not expect_kinds or status is not Status.ERROR:
        return Judgement(base)
    if observed_kind in expect_kinds:
        return Judgement(base)
    seen = observed_kind or ErrorKind.UNCLASSIFIED
    why = (
        f"failed, but not for the expected reason: expected {' or '.join(expect_kinds)}, "
        f"got {seen}: {message[:200]}"
    )
    return Judgement(Verdict.WARN if base is Verdict.PASS else base, why)


class Source(StrEnum):
    """Where a metric value came from."""

    RUNTIME_COUNTER = "runtime-counter"
    HARDWARE_COUNTER = "hardware-counter"  # e.g. RAPL energy, NVML energy
    EXTERNAL_METER = "external-meter"  # a user's meter command (lab rig, USB meter)
    HARNESS_CLOCK = "harness-clock"
    OS_ACCOUNTING = "os-accounting"
    PACKAGE_METADATA = "package-metadata"
    MODELLED = "modelled"
    REFERENCE_TOOL = "reference-tool"  # the runtime's own benchmark tool (llama-bench)
    #: computed by rtmatrix from the runtime's outputs against the numpy reference (KLD, ...)
    HARNESS_COMPARISON = "harness-comparison"
    #: computed by rtmatrix from other figures and this host's measured limits (inputs in detail)
    DERIVED = "derived"
    UNAVAILABLE = "unavailable"


def summarize(samples: Sequence[float]) -> dict[str, float | int]:
    """mean / sd / median / min / max / n of the counted samples."""
    vals = [float(v) for v in samples]
    return {
        "n": len(vals),
        "mean": statistics.fmean(vals),
        "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
    }


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, ``q`` in [0, 100]."""
    vals = sorted(float(v) for v in samples)
    if not vals:
        msg = "percentile of no samples"
        raise ValueError(msg)
    k = (len(vals) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


@dataclass(frozen=True)
class Metric:
    """One value with its unit and provenance; ``value`` is None only when unavailable."""

    value: float | int | str | None
    unit: str
    source: Source
    reason: str | None = None
    samples: list[float] | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.source is Source.UNAVAILABLE) != (self.value is None):
            msg = "a metric is unavailable exactly when it has no value"
            raise ValueError(msg)
        if self.source is Source.UNAVAILABLE and not self.reason:
            msg = "an unavailable metric needs a reason"
            raise ValueError(msg)

    @classmethod
    def measured(cls, samples: Sequence[float], unit: str, source: Source, **detail: Any) -> Metric:
        """The median of repeated samples, with the raw samples kept."""
        stats = summarize(samples)
        return cls(
            stats["median"],
            unit,
            source,
            samples=[float(s) for s in samples],
            detail={"stats": stats, **detail},
        )

    @classmethod
    def unavailable(cls, unit: str, reason: str) -> Metric:
        return cls(None, unit, Source.UNAVAILABLE, reason=reason)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "unit": self.unit, "source": str(self.source)}
        if self.reason:
            out["reason"] = self.reason
        if self.samples is not None:
            out["samples"] = self.samples
        if self.detail:
            out |= self.detail
        return out
