"""What a team will accept and what it cares about first: the hard limits a selection excludes
candidates by, and the order of priorities it ranks the rest by.

A matrix's ``[selection]`` table (:meth:`Constraints.from_table`) and ``KEY=VALUE`` flags
(:meth:`Constraints.with_overrides`, a TOML value or else a string, as ``rtmatrix compare``'s
``--a-option``) set them over the defaults (:data:`LIMITS`, :data:`DEFAULT_LICENSES`,
:data:`DEFAULT_MUST_BEHAVE`, :data:`DEFAULT_PRIORITIES`). Every constraint, default or not, is
reported with where it came from (:meth:`Constraints.lines`). A bad key or value raises
:class:`SelectionError` naming the key, the value and the valid choices.

A figure limit is a number in the unit its key names, ``"off"`` to lift it, ``"N@AT"`` or
``{ value = N, at = "AT" }`` to read it at another fixture and shape of the candidate's row:
``AT`` is a glob over ``FIXTURE|TAG`` (``small-long-context|*p1984*``) or over the fixture name
alone (``small-long-context``).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rtmatrix.fixtures.variants import VARIANTS
from rtmatrix.metrics import registry
from rtmatrix.names import M, Scenario
from rtmatrix.outcome import Expect

OFF = ("off", "none")
_MIB = 2.0**-20


class SelectionError(ValueError):
    """A constraint that cannot be used: ``key``, the ``value`` given and the ``problem`` (which
    names the valid choices)."""

    def __init__(self, key: str, value: object, problem: str) -> None:
        self.key, self.value, self.problem = key, value, problem
        where = f"selection.{key}" if key else "selection"
        super().__init__(f"{where} = {value!r}: {problem}")


def choices(name: str, valid: Iterable[str], meant: str | None = None) -> str:
    """``; did you mean 'x'? valid: a, b`` (the closest valid name, or ``meant``), else
    ``; valid: a, b``."""
    names = list(valid)
    prefixed = [v for v in names if name and v.startswith(name)][:1]
    close = [meant] if meant else prefixed or difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ";"
    return f"{hint} valid: {', '.join(names)}"


# --------------------------------------------------------------------------- figure limits


@dataclass(frozen=True)
class Limit:
    """A bound on one figure (in its key's unit), read at the candidate's own headline cell or,
    with ``at``, at the row's cells whose ``FIXTURE|TAG`` (or fixture name) matches the glob."""

    value: float
    at: str | None = None

    def text(self, unit: str) -> str:
        where = f" at {self.at}" if self.at else ""
        return f"{self.value:g} {unit}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "at": self.at}


@dataclass(frozen=True)
class LimitSpec:
    """One limit key: the metric it bounds, ``max`` or ``min``, the unit it is given in (the
    record's value times ``scale``), its default and why that default."""

    key: str
    metric: str
    bound: str  # "max" or "min"
    unit: str
    label: str
    default: Limit | None
    why: str
    scale: float = 1.0
    per_row: bool = False  # a figure of the runtime's distribution, not of a cell: no ``at``
    most: float | None = None  # the largest value that makes sense (a percentage: 100)

    def passes(self, figure: float, limit: Limit) -> bool:
        shown = figure * self.scale
        return shown <= limit.value if self.bound == "max" else shown >= limit.value


LIMITS: tuple[LimitSpec, ...] = (
    LimitSpec(
        "max_peak_memory_mib", M.PEAK_RSS_OS, "max", "MiB", "peak memory", Limit(2048.0),
        "an app on a 4–6 GB phone is killed at about 2–3 GB (iOS jetsam, Android's low-memory "
        "killer); 2 GiB leaves the app itself some room", _MIB,
    ),
    LimitSpec(
        "max_package_size_mib", M.PACKAGE_SIZE, "max", "MiB", "package size", Limit(512.0),
        "the figure is the installed Python distribution (compilers and tools included), not "
        "the runtime an app ships, so the default only rules out stacks no app download would "
        "carry; tighten it to your store's limit (Google Play: 200 MB base module)", _MIB,
        per_row=True,
    ),
    LimitSpec(
        "max_cold_start_s", M.COLD_TOTAL, "max", "s", "cold start", Limit(10.0),
        "process start to first token; twice Android's 5 s 'not responding' limit: loading "
        "runs behind a progress indicator, but a first answer later than this reads as broken",
    ),
    LimitSpec(
        "min_tg_tps", M.TG_TPS, "min", "tokens/s", "TG", Limit(10.0),
        "about twice reading speed (250 words/min is about 5 tokens/s), so streamed text never "
        "makes a reader wait",
    ),
    LimitSpec(
        "min_pp_tps", M.PP_TPS, "min", "tokens/s", "PP", None,
        "not limited: what a user feels of prefill is the time to first token (max_ttft_s)",
    ),
    LimitSpec(
        "max_ttft_s", M.TTFT, "max", "s", "TTFT", Limit(1.0),
        "1 s keeps a user's flow of thought (Nielsen's response-time limits); at the run's "
        "headline prompt unless `at` names another shape",
    ),
    LimitSpec(
        "max_kld", M.KLD_MEAN, "max", "nats", "KLD", Limit(0.1),
        "mean KL divergence from the f32 reference; 0.1 nats is about llama.cpp's 3-bit "
        "quantizations of an 8B model (Q8_0 ~0.001, Q4_K_M ~0.03): beyond it, text visibly "
        "drifts from the model's own",
    ),
    LimitSpec(
        "min_same_top_pct", M.SAME_TOP, "min", "%", "same top", None,
        "not limited: max_kld already bounds the same divergence", most=100.0,
    ),
)  # fmt: skip
LIMIT_KEYS = {s.key: s for s in LIMITS}

# --------------------------------------------------------------------------- licences

#: SPDX ids rtmatrix recognises (plus any ``LicenseRef-...``)
KNOWN_SPDX = (
    "0BSD", "AFL-3.0", "AGPL-3.0-only", "AGPL-3.0-or-later", "Apache-1.1", "Apache-2.0",
    "Artistic-2.0", "BSD-1-Clause", "BSD-2-Clause", "BSD-3-Clause", "BSD-3-Clause-Clear",
    "BSL-1.0", "CC-BY-4.0", "CC0-1.0", "CDDL-1.0", "EPL-1.0", "EPL-2.0", "EUPL-1.2",
    "GPL-2.0-only", "GPL-2.0-or-later", "GPL-3.0-only", "GPL-3.0-or-later", "ISC",
    "LGPL-2.1-only", "LGPL-2.1-or-later", "LGPL-3.0-only", "LGPL-3.0-or-later", "MIT", "MIT-0",
    "MPL-2.0", "MS-PL", "NCSA", "OpenSSL", "PSF-2.0", "Python-2.0", "UPL-1.0", "Unlicense",
    "W3C", "WTFPL", "X11", "Zlib", "ZPL-2.1",
)  # fmt: skip
#: permissive licences: an on-device app ships the runtime inside its own binary, where a
#: copyleft licence (GPL, LGPL, MPL) puts conditions on the app
DEFAULT_LICENSES = (
    "MIT", "MIT-0", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "Zlib", "BSL-1.0",
    "0BSD", "Unlicense", "PSF-2.0", "NCSA", "X11", "UPL-1.0",
)  # fmt: skip
LICENSES_WHY = (
    "permissive licences only: an on-device app ships the runtime inside its own binary, "
    "where a copyleft licence (GPL, LGPL, MPL) puts conditions on the app"
)
#: what package metadata says (``License``, trove classifiers) -> the SPDX id it means
_ALIASES = {
    "mit license": "MIT",
    "the mit license": "MIT",
    "apache software license": "Apache-2.0",
    "apache 2.0": "Apache-2.0",
    "apache license 2.0": "Apache-2.0",
    "apache license, version 2.0": "Apache-2.0",
    "apache license version 2.0": "Apache-2.0",
    "apache 2": "Apache-2.0",
    "bsd 3-clause": "BSD-3-Clause",
    "bsd-3-clause license": "BSD-3-Clause",
    "new bsd license": "BSD-3-Clause",
    "bsd 2-clause": "BSD-2-Clause",
    "simplified bsd license": "BSD-2-Clause",
    "isc license": "ISC",
    "isc license (iscl)": "ISC",
    "zlib license": "Zlib",
    "boost software license 1.0 (bsl-1.0)": "BSL-1.0",
    "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
    "the unlicense (unlicense)": "Unlicense",
    "python software foundation license": "PSF-2.0",
}
_BY_FOLDED = {s.casefold(): s for s in KNOWN_SPDX}


def spdx_id(text: str) -> str | None:
    """The SPDX id a licence name means (an id in any case, or a metadata alias), else None."""
    t = text.strip().strip("()").strip()
    if t.startswith("LicenseRef-"):
        return t
    return _BY_FOLDED.get(t.casefold()) or _ALIASES.get(t.casefold())


def license_alternatives(value: str) -> list[list[str | None]]:
    """A recorded licence as alternatives (``OR``, ``;``) of conjunctions (``AND``) of SPDX ids
    (None for a part no id is known for); ``X WITH exception`` counts as ``X``."""
    out = []
    for alt in re.split(r"\s+OR\s+|;", value.replace("(", " ").replace(")", " ")):
        parts = [p.split(" WITH ")[0] for p in re.split(r"\s+AND\s+", alt.strip()) if p.strip()]
        if parts:
            out.append([spdx_id(p) for p in parts])
    return out


def license_allowed(value: str, allowed: Sequence[str]) -> bool:
    """Whether some alternative of the recorded licence has only allowed ids."""
    return any(
        all(p is not None and p in allowed for p in alt) for alt in license_alternatives(value)
    )


# --------------------------------------------------------------------------- fixture classes

#: the classes ``must_behave`` takes besides variant and lifecycle-scenario names
CLASS_GROUPS = {
    "failing": "every fixture expected to fail (expect = error): each must fail visibly",
    "file": "damaged files: " + ", ".join(n for n, v in VARIANTS.items() if v.kind == "file"),
    "format": "what the format or runtime cannot express: "
    + ", ".join(n for n, v in VARIANTS.items() if v.kind == "format"),
    "weights": "damaged weights: "
    + ", ".join(n for n, v in VARIANTS.items() if v.kind == "weights"),
    "memory": "fixtures expected to fail for memory (expect_kind out-of-memory)",
    "boundary": "the row's other shapes expected to run (1-token prompt, full and long context)",
    "lifecycle": "lifecycle scenarios: " + ", ".join(s.value for s in Scenario.lifecycle()),
}
CLASSES = (*CLASS_GROUPS, *VARIANTS, *(s.value for s in Scenario.lifecycle()))
#: the error classes ``failing_fixtures_visible = false`` drops
_ERROR_CLASSES = frozenset(
    {"failing", "file", "format", "weights", "memory"}
    | {n for n, v in VARIANTS.items() if v.expect is Expect.ERROR}
)
DEFAULT_MUST_BEHAVE = ("file", "format", "missing-tensor", "memory", "boundary", "lifecycle")
MUST_BEHAVE_WHY = (
    "every fixture of these classes must get the verdict its expectation asks for (PASS or "
    "WARN, never FAIL): a damaged file, an unknown format or a missing tensor must fail "
    "visibly. nan-weights is not required by default: no runtime scans weights for NaN at "
    "load, the first logits show it (rtmatrix flags them wrong-output) and an app can check "
    'them as cheaply; add "nan-weights" (or "failing") to require the runtime to refuse them'
)

# --------------------------------------------------------------------------- priorities

#: criterion -> (metric, what it means); the order is the default order of priorities
CRITERIA: dict[str, tuple[str, str]] = {
    "quality": (M.KLD_MEAN, "lower KLD against the f32 reference"),
    "tg": (M.TG_TPS, "higher decode speed (TG tokens/s)"),
    "memory": (M.PEAK_RSS_OS, "lower peak memory"),
    "ttft": (M.TTFT, "lower time to first token"),
    "pp": (M.PP_TPS, "higher prefill speed (PP tokens/s)"),
    "cold_start": (M.COLD_TOTAL, "lower cold start"),
    "package_size": (M.PACKAGE_SIZE, "smaller package"),
}
DEFAULT_PRIORITIES = tuple(CRITERIA)
PRIORITIES_WHY = (
    "after the Pareto front over quality × speed × memory; a criterion left out follows in "
    "this default order"
)
NEGLIGIBLE_KLD = 0.01
NEGLIGIBLE_WHY = (
    "two KLDs both at or below this count as equal quality (llama.cpp's Q8_0/Q6_K level: no "
    "reader tells the texts apart); the figure has no noise estimate of its own"
)
MAX_TG_CV_PCT = registry.threshold_of(M.TG_TPS) * 100.0
CV_WHY = (
    "with several runs: TG's run-to-run spread above the threshold rtmatrix diff calls a "
    "change in TG makes a candidate inconsistent"
)
CONSISTENCY_WHY = (
    "with several runs, consistent candidates (spread within max_tg_cv_pct, every regression "
    "explained by a recorded change) rank above inconsistent ones: a consistent second place "
    "whose regressions remain explainable beats a one-time winner that cannot be diagnosed"
)


# --------------------------------------------------------------------------- constraints


@dataclass(frozen=True)
class Constraints:
    """Hard limits (a candidate that misses one is excluded, with its figure) and priorities
    (how the eligible ones are ordered after the Pareto front)."""

    max_peak_memory_mib: Limit | None = LIMIT_KEYS["max_peak_memory_mib"].default
    max_package_size_mib: Limit | None = LIMIT_KEYS["max_package_size_mib"].default
    max_cold_start_s: Limit | None = LIMIT_KEYS["max_cold_start_s"].default
    min_tg_tps: Limit | None = LIMIT_KEYS["min_tg_tps"].default
    min_pp_tps: Limit | None = LIMIT_KEYS["min_pp_tps"].default
    max_ttft_s: Limit | None = LIMIT_KEYS["max_ttft_s"].default
    max_kld: Limit | None = LIMIT_KEYS["max_kld"].default
    min_same_top_pct: Limit | None = LIMIT_KEYS["min_same_top_pct"].default
    #: allowed SPDX ids; None: any licence
    licenses: tuple[str, ...] | None = DEFAULT_LICENSES
    must_behave: tuple[str, ...] = DEFAULT_MUST_BEHAVE
    priorities: tuple[str, ...] = DEFAULT_PRIORITIES
    negligible_kld: float = NEGLIGIBLE_KLD
    max_tg_cv_pct: float = MAX_TG_CV_PCT
    consistency_rule: bool = True
    #: key -> where its value came from ("matrix", "flag"); a key not listed is the default
    origin: Mapping[str, str] = field(default_factory=dict, compare=False)

    def limit(self, key: str) -> Limit | None:
        value = getattr(self, key)
        return value if isinstance(value, Limit) else None

    @classmethod
    def from_table(cls, table: Mapping[str, Any], origin: str = "matrix") -> Constraints:
        """A matrix's ``[selection]`` table over the defaults."""
        return cls().updated(table, origin)

    def updated(self, table: Mapping[str, Any], origin: str) -> Constraints:
        """These constraints with ``table``'s keys set (SelectionError for a bad one)."""
        if not isinstance(table, Mapping):
            key, msg = "", "expected a table of constraints, e.g. max_kld = 0.1"
            raise SelectionError(key, table, msg)
        out, where = self, dict(self.origin)
        for key, raw in table.items():
            parse = _PARSERS.get(str(key))
            if parse is None:
                msg = f"unknown key{choices(str(key), _PARSERS)}"
                raise SelectionError(str(key), raw, msg)
            out = parse(out, str(key), raw)
            where[str(key)] = origin
        return replace(out, origin=where)

    def with_overrides(self, specs: Sequence[str], origin: str = "flag") -> Constraints:
        """``KEY=VALUE`` flags over these constraints."""
        return self.updated(dict(parse_override(s) for s in specs), origin)

    def lines(self) -> list[tuple[str, str, str, str]]:
        """(key, value as text, origin, why) for every constraint, limits first."""
        out = []
        for s in LIMITS:
            lim = self.limit(s.key)
            text = lim.text(s.unit) if lim else "off"
            out.append((s.key, text, self._origin(s.key), s.why))
        lic = ", ".join(self.licenses) if self.licenses is not None else "any"
        out += [
            ("licenses", lic, self._origin("licenses"), LICENSES_WHY),
            ("must_behave", ", ".join(self.must_behave) or "off", self._origin("must_behave"),
             MUST_BEHAVE_WHY),
            ("priorities", ", ".join(self.priorities), self._origin("priorities"),
             PRIORITIES_WHY),
            ("negligible_kld", f"{self.negligible_kld:g} nats", self._origin("negligible_kld"),
             NEGLIGIBLE_WHY),
            ("max_tg_cv_pct", f"{self.max_tg_cv_pct:g} %", self._origin("max_tg_cv_pct"),
             CV_WHY),
            ("consistency_rule", "on" if self.consistency_rule else "off",
             self._origin("consistency_rule"), CONSISTENCY_WHY),
        ]  # fmt: skip
        return out

    def summary(self) -> str:
        """The constraints in one line: hard limits, licences, classes, priorities."""
        limits = []
        for s in LIMITS:
            lim = self.limit(s.key)
            if lim is not None:
                sign = "≤" if s.bound == "max" else "≥"
                limits.append(f"{s.label} {sign} {lim.text(s.unit)}")
        lic = ", ".join(self.licenses) if self.licenses is not None else "any"
        behave = ", ".join(self.must_behave) or "none"
        order = " > ".join(self.priorities)
        figures = "; ".join(limits) or "no hard limit on figures"
        return f"{figures}; licence: {lic}; must behave: {behave}; priorities: {order}"

    def _origin(self, key: str) -> str:
        if key == "must_behave" and "failing_fixtures_visible" in self.origin:
            return self.origin["failing_fixtures_visible"]
        return self.origin.get(key, "default")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Limit):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            elif f.name == "origin":
                value = {k: self._origin(k) for k in (*LIMIT_KEYS, *_OTHER_KEYS)}
            out[f.name] = value
        return out


def parse_override(spec: str) -> tuple[str, Any]:
    """``KEY=VALUE``: VALUE as a TOML value (``0.01``, ``["MIT"]``, ``true``) or else a string
    (``20@small-long-context``, ``tg,memory``)."""
    key, sep, raw = spec.partition("=")
    if not sep or not key.strip():
        key, msg = "", "expected KEY=VALUE, e.g. max_kld=0.01"
        raise SelectionError(key, spec, msg)
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.strip(), value


# --------------------------------------------------------------------------- value parsers


def _is_off(raw: Any) -> bool:
    return raw is False or (isinstance(raw, str) and raw.strip().lower() in OFF)


def _number(key: str, raw: Any, want: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise SelectionError(key, raw, want)
    try:
        value = float(raw)
    except ValueError:
        raise SelectionError(key, raw, want) from None
    if value != value or value < 0 or value == float("inf"):
        raise SelectionError(key, raw, want)
    return value


def _limit(c: Constraints, key: str, raw: Any) -> Constraints:
    s = LIMIT_KEYS[key]
    at_ok = "" if s.per_row else ', "N@FIXTURE|TAG" or { value = N, at = "FIXTURE|TAG" }'
    want = f'expected a number of {s.unit} ≥ 0{at_ok}, or "off"; e.g. {key} = ' + (
        f"{s.default.value:g}" if s.default else "1"
    )
    if _is_off(raw):
        return _set(c, key, None)
    at: Any = None
    value: Any = raw
    if isinstance(raw, Mapping):
        extra = sorted(set(raw) - {"value", "at"})
        if extra or "value" not in raw:
            raise SelectionError(key, raw, want)
        value, at = raw["value"], raw.get("at")
    elif isinstance(raw, str) and "@" in raw:
        value, _, at = raw.partition("@")
    if at is not None and (s.per_row or not isinstance(at, str) or not at.strip()):
        why = "a per-row figure has no fixture to read it at" if s.per_row else want
        raise SelectionError(key, raw, why)
    number = _number(key, value, want)
    if s.most is not None and number > s.most:
        raise SelectionError(key, raw, f"expected at most {s.most:g} {s.unit}")
    return _set(c, key, Limit(number, at.strip() if isinstance(at, str) else None))


def _set(c: Constraints, key: str, limit: Limit | None) -> Constraints:
    values: dict[str, Any] = {key: limit}
    return replace(c, **values)


def _names(key: str, raw: Any, example: str) -> list[str]:
    if isinstance(raw, str):
        return [p.strip() for p in raw.split(",") if p.strip()]
    if isinstance(raw, list) and all(isinstance(p, str) for p in raw):
        return [p.strip() for p in raw]
    raise SelectionError(key, raw, f"expected a list of names, e.g. {example}")


def _licenses(c: Constraints, key: str, raw: Any) -> Constraints:
    if _is_off(raw) or raw == "any":
        return replace(c, licenses=None)
    out = []
    for name in _names(key, raw, '["MIT", "Apache-2.0"]'):
        if name in KNOWN_SPDX or name.startswith("LicenseRef-"):
            out.append(name)
            continue
        msg = (f"{name!r} is not an SPDX id{choices(name, KNOWN_SPDX, spdx_id(name))} "
               '(or LicenseRef-...), or "any"')  # fmt: skip
        raise SelectionError(key, raw, msg)
    return replace(c, licenses=tuple(dict.fromkeys(out)))


def _must_behave(c: Constraints, key: str, raw: Any) -> Constraints:
    if _is_off(raw):
        return replace(c, must_behave=())
    names = _names(key, raw, '["file", "format", "memory"]')
    for name in names:
        if name not in CLASSES:
            msg = f"unknown fixture class {name!r}{choices(name, CLASSES)}"
            raise SelectionError(key, raw, msg)
    return replace(c, must_behave=tuple(dict.fromkeys(names)))


def _failing_visible(c: Constraints, key: str, raw: Any) -> Constraints:
    if not isinstance(raw, bool):
        msg = ("expected true (every failing fixture must fail visibly: adds the class "
               "'failing' to must_behave) or false")  # fmt: skip
        raise SelectionError(key, raw, msg)
    if raw:
        return replace(c, must_behave=tuple(dict.fromkeys(("failing", *c.must_behave))))
    return replace(c, must_behave=tuple(n for n in c.must_behave if n not in _ERROR_CLASSES))


def _priorities(c: Constraints, key: str, raw: Any) -> Constraints:
    names = _names(key, raw, '["quality", "tg", "memory"]')
    for name in names:
        if name not in CRITERIA:
            msg = f"unknown criterion {name!r}{choices(name, CRITERIA)}"
            raise SelectionError(key, raw, msg)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SelectionError(key, raw, f"listed twice: {', '.join(twice)}")
    rest = [n for n in DEFAULT_PRIORITIES if n not in names]
    return replace(c, priorities=(*names, *rest))


def _negligible(c: Constraints, key: str, raw: Any) -> Constraints:
    value = _number(key, raw, "expected a number of nats ≥ 0, e.g. 0.01")
    return replace(c, negligible_kld=value)


def _cv(c: Constraints, key: str, raw: Any) -> Constraints:
    value = _number(key, raw, "expected a percentage > 0, e.g. 10")
    if value <= 0:
        raise SelectionError(key, raw, "expected a percentage > 0, e.g. 10")
    return replace(c, max_tg_cv_pct=value)


def _rule(c: Constraints, key: str, raw: Any) -> Constraints:
    if not isinstance(raw, bool):
        raise SelectionError(key, raw, "expected true or false")
    return replace(c, consistency_rule=raw)


_Parser = Callable[[Constraints, str, Any], Constraints]
_OTHER: dict[str, _Parser] = {
    "licenses": _licenses,
    "must_behave": _must_behave,
    "failing_fixtures_visible": _failing_visible,
    "priorities": _priorities,
    "negligible_kld": _negligible,
    "max_tg_cv_pct": _cv,
    "consistency_rule": _rule,
}
_OTHER_KEYS = tuple(k for k in _OTHER if k != "failing_fixtures_visible")
_PARSERS: dict[str, _Parser] = {**{s.key: _limit for s in LIMITS}, **_OTHER}
KEYS = tuple(_PARSERS)
