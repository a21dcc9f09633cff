"""One registry of the core metrics: what each one is, said once and read by everyone.

A :class:`MetricSpec` per name of :class:`rtmatrix.names.M` holds its unit, its better
direction, its default diff threshold and whether the gate checks it, the label the report shows
and how a plot draws it. ``results/diff.py`` (``KNOWN_METRICS``, ``default_checks``),
``results/paired.py``, the CLI's ``--metric`` check, ``report/plots.py`` and ``metrics/cell.py``
read it; adding a metric is one entry here (plus the code that measures it).

Scenario-specific families (``stream_*``, ``cancel_<mode>_*``, ``serve_c<N>_*``) are declared
as a :class:`MetricFamily` by their scenario's spec (``rtmatrix.scenarios.SPECS``): the prefix,
the parameter a name carries (a cancel mode, a concurrency level) and its members, so a reader
asks the family (:meth:`MetricFamily.values`) instead of parsing names. Their direction comes
from the name's suffix (:data:`SUFFIX_DIRECTION`), their threshold is :data:`FALLBACK_THRESHOLD`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from rtmatrix.names import M


class Direction(StrEnum):
    HIGHER = "higher"  # higher is better
    LOWER = "lower"


#: the diff threshold of a numeric metric that has no default (relative: 0.10 = 10 %)
FALLBACK_THRESHOLD = 0.10
#: the better direction of a metric without an entry, by how its name ends
SUFFIX_DIRECTION: tuple[tuple[str, Direction], ...] = (
    ("_tps", Direction.HIGHER),
    ("_s", Direction.LOWER),
    ("_bytes", Direction.LOWER),
    ("_j", Direction.LOWER),
    ("_w", Direction.LOWER),
)
#: plot groups: metrics drawn side by side (throughput) or stacked (cold start) in one
#: figure, in registry order
GROUP_THROUGHPUT = "throughput"
GROUP_COLD_START = "cold start"


@dataclass(frozen=True)
class Axis:
    """How a plot draws a metric: the axis label and the factor from the stored unit to it."""

    label: str
    scale: float = 1.0


@dataclass(frozen=True)
class MetricSpec:
    """One metric: stored unit, better direction (None: neither), default diff threshold
    (relative; None: not compared by default, :data:`FALLBACK_THRESHOLD` applies), whether the
    gate checks it by default, the report's label, its plot group and plot axis."""

    name: M
    unit: str
    label: str
    direction: Direction | None = None
    threshold: float | None = None
    gated: bool = False
    group: str | None = None
    axis: Axis | None = None
    #: its place among the metrics the report ranks (the selection's best/ties) and the history
    #: follows (1 first); 0: not ranked
    ranked: int = 0
    #: its per-round noise is measured by the A/A ledger (``rtmatrix compare``)
    noise: bool = False


_H, _L = Direction.HIGHER, Direction.LOWER
_TPS, _MIB, _MS = "tokens/s", 2.0**-20, 1e3

# order matters: the compared metrics first, in the order diff, the gate and the CLI list them
_SPECS = (
    MetricSpec(M.PP_TPS, _TPS, "PP", _H, 0.10, True, GROUP_THROUGHPUT, Axis("PP tokens/s"),
               ranked=1, noise=True),
    MetricSpec(M.TG_TPS, _TPS, "TG", _H, 0.10, True, GROUP_THROUGHPUT, Axis("TG tokens/s"),
               ranked=2, noise=True),
    MetricSpec(M.PP_TPS_COUNTER, _TPS, "PP ctr", _H, 0.10),
    MetricSpec(M.TG_TPS_COUNTER, _TPS, "TG ctr", _H, 0.10),
    MetricSpec(M.TTFT, "s", "TTFT", _L, 0.10, ranked=3),
    MetricSpec(M.TPOT, "s", "TPOT", _L, 0.10, ranked=4),
    MetricSpec(M.TOKEN_P50, "s", "p50", _L, 0.25),
    MetricSpec(M.TOKEN_P90, "s", "p90", _L, 0.25),
    MetricSpec(M.COLD_PROCESS, "s", "process", _L, 0.50, group=GROUP_COLD_START),
    MetricSpec(M.COLD_IMPORT, "s", "import", _L, 0.50, group=GROUP_COLD_START),
    MetricSpec(M.COLD_LOAD, "s", "load", _L, 0.50, group=GROUP_COLD_START),
    MetricSpec(M.COLD_FIRST_TOKEN, "s", "first token", _L, 0.50, group=GROUP_COLD_START),
    MetricSpec(
        M.COLD_TOTAL, "s", "cold start", _L, 0.50, axis=Axis("cold start (ms)", _MS), ranked=6
    ),
    MetricSpec(M.PEAK_RSS_SAMPLED, "bytes", "peak RSS sampled", _L, 0.10),
    MetricSpec(
        M.PEAK_RSS_OS, "bytes", "peak RSS", _L, 0.10, True, axis=Axis("peak RSS (MiB)", _MIB),
        ranked=5,
    ),
    MetricSpec(M.PACKAGE_SIZE, "bytes", "package size", _L, 0.20, True),
    MetricSpec(M.ENERGY, "J", "energy", _L, 0.10, ranked=7),
    MetricSpec(M.POWER, "W", "power", _L, 0.10),
    # measured, but not compared by default
    MetricSpec(M.ENERGY_PREFILL, "J", "prefill energy", _L),
    MetricSpec(M.ENERGY_DECODE, "J", "decode energy", _L),
    MetricSpec(M.ENERGY_PER_TOKEN, "J", "energy per token", _L),
    # the reference tool's own figures: context for the ratios, never judged (no direction)
    MetricSpec(M.PP_TPS_REFERENCE, _TPS, "PP ref"),
    MetricSpec(M.TG_TPS_REFERENCE, _TPS, "TG ref"),
    MetricSpec(M.PP_REFERENCE_RATIO, "ratio", "PP ÷ reference"),
    MetricSpec(M.TG_REFERENCE_RATIO, "ratio", "TG ÷ reference"),
    MetricSpec(M.LICENSE, "spdx", "license"),
    MetricSpec(M.HOST_BUSY_CORES, "cores", "host busy cores"),
    MetricSpec(M.HOST_STEAL_CORES, "cores", "host steal cores"),
    MetricSpec(M.LIFECYCLE_CHECKS, "checks passed", "lifecycle checks"),
    MetricSpec(M.KLD_MEAN, "nats", "KLD"),
    MetricSpec(M.KLD_P99, "nats", "KLD p99"),
    MetricSpec(M.SAME_TOP, "%", "same top"),
    MetricSpec(M.PPL, "ppl", "ppl"),
    MetricSpec(M.PPL_REFERENCE, "ppl", "ppl ref"),
    MetricSpec(M.KLD_REFERENCE, "nats", "tool KLD"),
    MetricSpec(M.SAME_TOP_REFERENCE, "%", "tool same top"),
    MetricSpec(M.KLD_REFERENCE_RATIO, "ratio", "KLD ÷ tool"),
    MetricSpec(M.SAME_TOP_REFERENCE_DIFF, "points", "same top − tool"),
    # derived from the cell's figures and this host's measured limits: shown, never compared
    MetricSpec(M.TG_BANDWIDTH_UTIL, "ratio", "TG ÷ host bandwidth", _H),
    MetricSpec(M.PP_COMPUTE_UTIL, "ratio", "PP ÷ host matmul peak", _H),
)
METRICS: dict[str, MetricSpec] = {str(s.name): s for s in _SPECS}


@dataclass(frozen=True)
class MetricFamily:
    """A scenario's metric names: ``prefix`` + (where the family has a parameter) ``tag`` + the
    parameter's value + ``_`` + a member: ``serve_`` ``c`` 4 ``_ttft_p50_s``, ``cancel_`` (no tag)
    ``close`` ``_stop_latency_s``, ``stream_`` ``ttft_s`` (no parameter)."""

    prefix: str
    #: what the parameter is (``level``, ``mode``); "" for a family without one
    param: str = ""
    #: the text before the parameter's value (``c`` of ``serve_c4_``)
    tag: str = ""
    #: the value's pattern (digits for a level, a lower-case word for a mode)
    value_pattern: str = r"[a-z0-9]+"
    #: the members a parameterised name may end with (None: any)
    members: tuple[str, ...] | None = None

    def _regex(self) -> re.Pattern[str]:
        member = "|".join(map(re.escape, self.members)) if self.members else ".+"
        return re.compile(rf"{re.escape(self.prefix + self.tag)}({self.value_pattern})_({member})")

    def owns(self, name: str) -> bool:
        """Whether ``name`` is one of this family's metrics."""
        return str(name).startswith(self.prefix)

    def split(self, name: str) -> tuple[str, str] | None:
        """(parameter value, member) of a parameterised name; None for any other name."""
        if not self.param:
            return None
        found = self._regex().fullmatch(str(name))
        return (found.group(1), found.group(2)) if found else None

    def values(self, names: Iterable[str], member: str | None = None) -> list[str]:
        """The parameter values ``names`` carry (of ``member`` only, when given), in order."""
        out = []
        for name in names:
            got = self.split(name)
            if got is not None and (member is None or got[1] == member):
                out.append(got[0])
        return list(dict.fromkeys(out))

    def name(self, value: str | int, member: str) -> str:
        """The metric name of ``member`` at parameter ``value``."""
        return f"{self.prefix}{self.tag}{value}_{member}"


def spec(name: str) -> MetricSpec:
    """The entry of a core metric; a KeyError naming the close ones for any other name."""
    if name in METRICS:
        return METRICS[name]
    close = difflib.get_close_matches(name, list(METRICS), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    msg = f"unknown metric {name!r}{hint}; valid: {', '.join(METRICS)}"
    raise KeyError(msg)


def unit_of(name: str) -> str:
    return spec(name).unit


def ranked() -> tuple[M, ...]:
    """The metrics the report ranks and the history follows, in registry order."""
    return tuple(s.name for s in sorted((s for s in _SPECS if s.ranked), key=lambda s: s.ranked))


def noise_metrics() -> tuple[str, ...]:
    """The metrics whose per-round noise the A/A ledger measures."""
    return tuple(str(s.name) for s in _SPECS if s.noise)


def direction_of(name: str) -> Direction | None:
    """The entry's direction; for any other name, the one its suffix implies (or None)."""
    if name in METRICS:
        return METRICS[name].direction
    return next((d for suffix, d in SUFFIX_DIRECTION if name.endswith(suffix)), None)


def threshold_of(name: str) -> float:
    """The default diff threshold, :data:`FALLBACK_THRESHOLD` where there is none."""
    found = METRICS.get(name)
    return FALLBACK_THRESHOLD if found is None or found.threshold is None else found.threshold


def compared() -> dict[str, tuple[Direction, float, bool]]:
    """Name -> (direction, default threshold, gated) of every metric compared by default."""
    return {
        name: (s.direction, s.threshold, s.gated)
        for name, s in METRICS.items()
        if s.direction is not None and s.threshold is not None
    }


def gated() -> tuple[str, ...]:
    """The metrics whose significant regression fails the gate by default."""
    return tuple(name for name, (_, _, gate) in compared().items() if gate)


def in_group(group: str) -> tuple[MetricSpec, ...]:
    """The members of a plot group, in registry order."""
    return tuple(s for s in METRICS.values() if s.group == group)


def axis_of(name: str) -> Axis:
    """How a plot draws the metric; a KeyError for a metric no plot draws."""
    found = spec(name).axis
    if found is None:
        msg = f"metric {name!r} has no plot axis"
        raise KeyError(msg)
    return found
