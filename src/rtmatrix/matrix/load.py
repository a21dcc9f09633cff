"""Load and validate a matrix file; expand it into cells.

Errors name the file, the key and the valid choices, e.g.
``matrix/default.toml: runtimes[0].name: unknown runtime 'llamacpp'; did you mean 'llama_cpp'?``
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtmatrix.adapters.base import AdapterError, load_adapter_class, resolve_adapter
from rtmatrix.converters import dtypes as converter_dtypes
from rtmatrix.fixtures.onnx_export import WEIGHT_ONLY
from rtmatrix.fixtures.prepare import is_converted
from rtmatrix.fixtures.sources import SOURCE_PREFIX
from rtmatrix.fixtures.spec import known_models
from rtmatrix.fixtures.variants import VARIANTS
from rtmatrix.matrix import dtypes as matrix_dtypes
from rtmatrix.matrix.targets import (
    ClusterConfig,
    Target,
    TargetError,
    parse_cluster,
    parse_targets,
    row_targets,
)
from rtmatrix.metrics.contention import DEFAULT_THRESHOLD_CORES
from rtmatrix.metrics.power import PowerConfigError, normalize_config
from rtmatrix.names import Scenario
from rtmatrix.options import options_text as options_text
from rtmatrix.options import value_text
from rtmatrix.outcome import ErrorKind, Expect, Status, Verdict
from rtmatrix.selection.constraints import Constraints, SelectionError

RUN_DEFAULTS: dict[str, Any] = {
    "repetitions": 5,
    "warmup": 1,
    "timeout_s": 600.0,
    "address_space_cap_mb": 0,
    "memory_cgroup_mb": 0,
    "sample_interval_s": 0.02,
    # the supervisor's sampling interval while the counted repetitions run (it stays out of
    # the way of what it times; the OS's own peak RSS is exact either way)
    "counted_sample_interval_s": 0.25,
    # CPU used on the host outside the cell's processes (cores) above which a cell is contended
    "contention_threshold_cores": DEFAULT_THRESHOLD_CORES,
    # rerun a contended cell up to this many times (the last attempt is recorded)
    "contended_retries": 0,
}
PARAM_DEFAULTS: dict[str, Any] = {
    "threads": 2,
    "n_ctx": 512,
    "prompt_tokens": 128,
    "gen_tokens": 64,
}
FILL = "fill"  # prompt_tokens = "fill": n_ctx - gen_tokens, the context exactly full
TOP_KEYS = (
    "description",
    "run",
    "params",
    "runtimes",
    "fixtures",
    "power",
    "gate",
    "selection",
    "targets",
    "cluster",
)
RUNTIME_KEYS = (
    "name",
    "adapter",
    "options",
    "expect",
    "expect_kind",
    "verdicts",
    "skip_variants",
    "targets",
    "sweep",
    "crash_control",
)
FIXTURE_KEYS = (
    "model",
    "dtypes",
    "name",
    "path",
    "variant",
    "expect",
    "expect_kind",
    "params",
    "run",
    "verdicts",
    "options",
    "scenario",
    "source",
    "prompt",
    "prompt_file",
    "runtimes",
)


class MatrixError(ValueError):
    """A matrix file that cannot be used; the message says where and what is valid."""


@dataclass(frozen=True)
class RuntimeEntry:
    name: str
    adapter: str
    options: dict[str, Any] = field(default_factory=dict)
    expect: Expect | None = None  # overrides every fixture's expectation for this row
    verdicts: dict[str, str] = field(default_factory=dict)
    # variants that do not apply to this row (e.g. a JIT row never opens the compiled file)
    skip_variants: tuple[str, ...] = ()
    expect_kinds: tuple[str, ...] = ()  # with expect = "error": the error kinds that PASS
    #: the [[targets]] labels this row runs on (all declared ones when the row names none)
    targets: tuple[str, ...] = ()
    #: the [[runtimes]] name this row came from: itself, or the table a ``sweep`` expanded
    base: str = ""
    #: this row's values of the swept options (also merged into ``options``)
    swept: dict[str, Any] = field(default_factory=dict)
    #: the options a crashed cell is rerun with: None = what the adapter declares, False = no
    #: control run, a table = these options (see :class:`rtmatrix.adapters.base.CrashControl`)
    crash_control: dict[str, Any] | bool | None = None

    @property
    def base_name(self) -> str:
        return self.base or self.name


@dataclass(frozen=True)
class FixtureEntry:
    """A canonical model (optionally a variant) in one dtype, or a user's own model file."""

    name: str
    dtype: str | None
    model: str | None = None
    path: Path | None = None
    variant: str | None = None
    expect: Expect = Expect.OK
    params: dict[str, list[int | str]] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # merged over the runtime's options
    scenario: str = Scenario.GENERATE.value
    expect_kinds: tuple[str, ...] = ()  # with expect = "error": the error kinds that PASS
    #: a real model's prompt ``(what, text)``: ``prompt = "…"`` or ``prompt_file`` (a path, or
    #: one of rtmatrix's own texts by name); None: the quality text's first ids
    prompt: tuple[str, str] | None = None
    #: the [[runtimes]] rows that run this fixture (by name; a swept table's name: every row its
    #: sweep made); empty: every row
    runtimes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.name}/{self.dtype}" if self.dtype else self.name


@dataclass(frozen=True)
class Cell:
    runtime: str
    adapter: str
    fixture: FixtureEntry
    params: dict[str, int]
    run: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    expect: Expect = Expect.OK
    verdicts: dict[str, str] = field(default_factory=dict)
    expect_kinds: tuple[str, ...] = ()
    #: the [[targets]] label of the host this cell runs on; None in a matrix without targets
    target: str | None = None
    #: the row's ``crash_control`` (:attr:`RuntimeEntry.crash_control`)
    crash_control: dict[str, Any] | bool | None = None

    @property
    def key(self) -> str:
        p = self.params
        tag = f"t{p['threads']}-c{p['n_ctx']}-p{p['prompt_tokens']}-g{p['gen_tokens']}"
        return f"{targeted(self.runtime, self.target)}|{self.fixture.label}|{tag}"


def targeted(runtime: str, target: str | None) -> str:
    """The first part of a cell key: ``runtime``, or ``runtime@target`` on a declared target."""
    return f"{runtime}@{target}" if target else runtime


def key_with_target(key: str, target: str) -> str:
    """A key of a run without targets, as the same cell on ``target`` (``rtmatrix merge``)."""
    runtime, sep, rest = key.partition("|")
    return f"{targeted(runtime, target)}{sep}{rest}"


def _combos(params: dict[str, list[int | str]]) -> list[dict[str, int]]:
    names = list(params)
    out = []
    for vals in itertools.product(*(params[n] for n in names)):
        combo: dict[str, Any] = dict(zip(names, vals, strict=True))
        if combo["prompt_tokens"] == FILL:
            combo["prompt_tokens"] = combo["n_ctx"] - combo["gen_tokens"]
        out.append(combo)
    return out


def adapter_distribution(adapter: str) -> str:
    """The PyPI distribution a row's adapter declares (imports the adapter, not its runtime)."""
    return load_adapter_class(adapter).distribution


def adapter_converter(adapter: str) -> str | None:
    """The converter a row's adapter names (its ``converter``; None where rtmatrix writes its
    files itself)."""
    return load_adapter_class(adapter).converter


@dataclass(frozen=True)
class Matrix:
    path: Path
    run: dict[str, Any]
    params: dict[str, list[int | str]]
    runtimes: list[RuntimeEntry]
    fixtures: list[FixtureEntry]
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    power: dict[str, Any] = field(default_factory=normalize_config)
    targets: tuple[Target, ...] = ()
    cluster: ClusterConfig | None = None

    def target(self, label: str) -> Target:
        return next(t for t in self.targets if t.label == label)

    def row_names(self) -> set[str]:
        """Names ``--runtime`` accepts: every row's, and each swept table's own name."""
        return {rt.name for rt in self.runtimes} | {rt.base_name for rt in self.runtimes}

    def rows_selected(
        self,
        names: set[str],
        distributions: AbstractSet[str] = frozenset(),
        converters: AbstractSet[str] = frozenset(),
    ) -> set[str]:
        """The rows ``--runtime NAME`` selects (the row NAME, or every row its sweep made), those
        ``--distribution DIST`` selects (every row whose adapter declares DIST) and those
        ``--converter NAME`` selects (every row whose adapter names converter NAME)."""
        return {
            rt.name
            for rt in self.runtimes
            if rt.name in names or rt.base_name in names
            or (distributions and adapter_distribution(rt.adapter) in distributions)
            or (converters and adapter_converter(rt.adapter) in converters)
        }  # fmt: skip

    def distributions(self) -> set[str]:
        """The PyPI distributions this matrix's rows run, as their adapters declare them."""
        return {adapter_distribution(rt.adapter) for rt in self.runtimes}

    def converters(self) -> set[str]:
        """The converters that feed this matrix's rows, as their adapters name them."""
        return {c for rt in self.runtimes if (c := adapter_converter(rt.adapter)) is not None}

    def cells(self) -> list[Cell]:
        cells = []
        for rt in self.runtimes:
            for target in rt.targets or (None,):
                for fx in self.fixtures:
                    if not fx.runtimes or {rt.name, rt.base_name} & set(fx.runtimes):
                        cells += self._cells(rt, fx, target)
        return cells

    def _cells(self, rt: RuntimeEntry, fx: FixtureEntry, target: str | None) -> list[Cell]:
        run = self.run | fx.run
        options = rt.options | fx.options
        expect = rt.expect or fx.expect
        kinds = rt.expect_kinds if rt.expect else fx.expect_kinds
        verdicts = fx.verdicts | rt.verdicts
        return [
            Cell(
                rt.name,
                rt.adapter,
                fx,
                combo,
                run,
                options,
                expect,
                verdicts,
                kinds,
                target,
                rt.crash_control,
            )
            for combo in _combos(self.params | fx.params)
        ]


class _Ctx:
    def __init__(self, path: Path) -> None:
        self.path = path
        #: problems gathered without stopping (every one is listed at the end of the load)
        self.problems: list[str] = []

    def fail(self, key: str, problem: str) -> MatrixError:
        return MatrixError(f"{self.path}: {key}: {problem}")

    def note(self, key: str, problem: str) -> None:
        """A problem that does not stop the load: all are raised together at its end."""
        self.problems.append(f"{self.path}: {key}: {problem}")

    def raise_problems(self) -> None:
        if len(self.problems) == 1:
            raise MatrixError(self.problems[0])
        if self.problems:
            head = f"{self.path}: {len(self.problems)} problems; nothing was run:"
            raise MatrixError("\n".join([head, *(f"  - {p}" for p in self.problems)]))

    def check_keys(self, table: dict[str, Any], key: str, valid: tuple[str, ...]) -> None:
        unknown = sorted(set(table) - set(valid))
        if unknown:
            raise self.fail(key, f"unknown key(s) {', '.join(unknown)}; valid: {', '.join(valid)}")

    def table(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a table, got {value!r}")
        return value


def _positive_int(ctx: _Ctx, key: str, value: Any, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok:
        bound = ">= 0" if allow_zero else ">= 1"
        raise ctx.fail(key, f"expected an integer {bound}, got {value!r}")
    return int(value)


def _run_table(
    ctx: _Ctx, table: dict[str, Any], where: str = "run", defaults: dict[str, Any] | None = None
) -> dict[str, Any]:
    ctx.check_keys(table, where, tuple(RUN_DEFAULTS))
    run = (RUN_DEFAULTS if defaults is None else defaults) | table
    for key in ("repetitions",):
        if key in run:
            _positive_int(ctx, f"{where}.{key}", run[key])
    for key in ("warmup", "address_space_cap_mb", "memory_cgroup_mb", "contended_retries"):
        if key in run:
            _positive_int(ctx, f"{where}.{key}", run[key], allow_zero=True)
    for key in ("timeout_s", "sample_interval_s", "counted_sample_interval_s"):
        if key not in run:
            continue
        val = run[key]
        if isinstance(val, bool) or not isinstance(val, int | float) or val <= 0:
            raise ctx.fail(f"{where}.{key}", f"expected a positive number of seconds, got {val!r}")
        run[key] = float(val)
    if "contention_threshold_cores" in run:
        val = run["contention_threshold_cores"]
        if isinstance(val, bool) or not isinstance(val, int | float) or val < 0:
            raise ctx.fail(
                f"{where}.contention_threshold_cores", f"expected cores >= 0, got {val!r}"
            )
        run["contention_threshold_cores"] = float(val)
    return run


def _params_table(
    ctx: _Ctx, table: dict[str, Any], where: str = "params", defaults: dict[str, Any] | None = None
) -> dict[str, list[int | str]]:
    ctx.check_keys(table, where, tuple(PARAM_DEFAULTS))
    out: dict[str, list[int | str]] = {}
    for key, default in (PARAM_DEFAULTS if defaults is None else defaults).items():
        if key not in table and defaults is not None:
            continue
        val = table.get(key, default)
        vals = val if isinstance(val, list) else [val]
        if not vals:
            raise ctx.fail(f"{where}.{key}", "an empty list gives no cells")
        out[key] = [
            v if (key == "prompt_tokens" and v == FILL) else _positive_int(ctx, f"{where}.{key}", v)
            for v in vals
        ]
    return out


def _runtimes(ctx: _Ctx, entries: Any, targets: tuple[Target, ...] = ()) -> list[RuntimeEntry]:
    if not isinstance(entries, list) or not entries:
        raise ctx.fail("runtimes", "expected at least one [[runtimes]] table")
    out = []
    for i, entry in enumerate(entries):
        where = f"runtimes[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ctx.fail(where, 'each [[runtimes]] needs name = "<runtime>"')
        ctx.check_keys(entry, where, RUNTIME_KEYS)
        adapter = entry.get("adapter", entry["name"])
        if not isinstance(adapter, str):
            raise ctx.fail(f"{where}.adapter", f"expected 'module:Class', got {adapter!r}")
        try:
            target = resolve_adapter(adapter)
        except AdapterError as exc:
            raise ctx.fail(f"{where}.name", str(exc)) from None
        options = ctx.table(entry.get("options", {}), f"{where}.options")
        expect, verdicts = _expectations(ctx, where, entry, None)
        rt_expect = expect if "expect" in entry else None
        kinds = _expect_kinds(ctx, where, entry, expect)
        skip = entry.get("skip_variants", [])
        bad = [v for v in skip if v not in VARIANTS] if isinstance(skip, list) else [skip]
        if bad:
            raise ctx.fail(
                f"{where}.skip_variants", f"unknown variant(s) {bad}; valid: {', '.join(VARIANTS)}"
            )
        try:
            on = row_targets(entry.get("targets"), f"{where}.targets", targets)
        except TargetError as exc:
            raise ctx.fail(exc.key, exc.problem) from None
        control = _crash_control(ctx, where, entry.get("crash_control"))
        sweeps = _sweep(ctx, where, entry.get("sweep"), options)
        _check_options(ctx, where, target, [options | swept for swept in sweeps])
        for swept in sweeps:
            out.append(
                RuntimeEntry(
                    sweep_name(entry["name"], swept) if swept else entry["name"],
                    target, options | swept, rt_expect, verdicts, tuple(skip), kinds, on,
                    base=entry["name"] if swept else "", swept=swept, crash_control=control,
                )
            )  # fmt: skip
    names = [r.name for r in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ctx.fail("runtimes", f"runtime name(s) listed twice: {', '.join(dupes)}")
    return out


def _check_options(
    ctx: _Ctx, where: str, target: str, variants: list[dict[str, Any]]
) -> None:
    """Every option of a row (each sweep value too) against what its home declares: unknown
    keys ("did you mean") and wrong values are problems of the matrix, found before any work."""
    from rtmatrix.options import declared

    decl = declared(target)
    if decl is None:  # a third-party adapter: its own configure() judges its options
        return
    seen: set[tuple[str, str]] = set()
    for opts in variants:
        for key, problem in decl.problems(opts):
            if (key, problem) not in seen:
                seen.add((key, problem))
                ctx.note(f"{where}.options.{key}", problem)


def _crash_control(ctx: _Ctx, where: str, raw: Any) -> dict[str, Any] | bool | None:
    """``crash_control = { option = value, ... }`` (rerun a crashed cell with these options),
    ``false`` (never), ``true`` or absent (the adapter's own control setting, if it has one)."""
    if raw is None or raw is True:
        return None
    if raw is False:
        return False
    table = ctx.table(raw, f"{where}.crash_control")
    if not table:
        raise ctx.fail(
            f"{where}.crash_control",
            "an empty table reruns nothing; give the options to rerun a crashed cell with "
            "(e.g. { extra_buffer_types = false }), or false for no control run",
        )
    return table


def sweep_name(name: str, swept: dict[str, Any]) -> str:
    """The row name of one sweep combination: ``llama_cpp[flash_attn=off,use_mmap=false]``."""
    return f"{name}[{options_text(swept, ',')}]"


def _sweep(ctx: _Ctx, where: str, raw: Any, options: dict[str, Any]) -> list[dict[str, Any]]:
    """``sweep = { flash_attn = ["on", "off"], use_mmap = [true, false] }``: every combination
    of the listed option values becomes a row of its own (lists multiply cells), named
    :func:`sweep_name`. No sweep: one row, no swept values."""
    if raw is None:
        return [{}]
    table = ctx.table(raw, f"{where}.sweep")
    if not table:
        raise ctx.fail(f"{where}.sweep", "an empty sweep gives no rows; drop it or list values")
    for key, values in table.items():
        if key in options:
            raise ctx.fail(
                f"{where}.sweep.{key}",
                f"{key!r} is set in options too; give it in one place (options or sweep)",
            )
        if not isinstance(values, list) or not values:
            raise ctx.fail(
                f"{where}.sweep.{key}", f"expected a non-empty list of values, got {values!r}"
            )
        if any(isinstance(v, list | dict) for v in values):
            raise ctx.fail(
                f"{where}.sweep.{key}",
                "each value must be a string, number or boolean (a list option goes in options)",
            )
        if len({value_text(v) for v in values}) != len(values):
            raise ctx.fail(f"{where}.sweep.{key}", f"a value is listed twice: {values!r}")
    keys = list(table)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*table.values())]


def _expect_kinds(ctx: _Ctx, where: str, entry: dict[str, Any], expect: str) -> tuple[str, ...]:
    """``expect_kind = "bad-file"`` or a list: the error kinds an expected failure may have."""
    raw = entry.get("expect_kind", [])
    kinds = [raw] if isinstance(raw, str) else raw
    valid = ", ".join(k.value for k in ErrorKind)
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise ctx.fail(
            f"{where}.expect_kind", f"expected a kind or a list of kinds; valid: {valid}"
        )
    bad = [k for k in kinds if k not in {e.value for e in ErrorKind}]
    if bad:
        raise ctx.fail(f"{where}.expect_kind", f"unknown error kind(s) {bad}; valid: {valid}")
    if kinds and expect != Expect.ERROR:
        raise ctx.fail(f"{where}.expect_kind", 'an error kind needs expect = "error"')
    return tuple(kinds)


def _expectations(
    ctx: _Ctx, where: str, entry: dict[str, Any], variant: str | None
) -> tuple[Expect, dict[str, str]]:
    default = VARIANTS[variant].expect if variant else Expect.OK
    expect = entry.get("expect", str(default))
    if expect not in {e.value for e in Expect}:
        raise ctx.fail(f"{where}.expect", f"expected one of ok, error; got {expect!r}")
    verdicts = ctx.table(entry.get("verdicts", {}), f"{where}.verdicts")
    statuses, verdict_names = {s.value for s in Status}, {v.value for v in Verdict}
    for k, v in verdicts.items():
        if k not in statuses:
            raise ctx.fail(
                f"{where}.verdicts",
                f"unknown outcome {k!r}; valid: " + ", ".join(s.value for s in Status),
            )
        if v not in verdict_names:
            raise ctx.fail(
                f"{where}.verdicts.{k}",
                f"unknown verdict {v!r}; valid: " + ", ".join(v.value for v in Verdict),
            )
    return Expect(expect), verdicts


def _names(ctx: _Ctx, where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ctx.fail(
            where, f'expected a list of [[runtimes]] names like ["llama_cpp"], got {value!r}'
        )
    return tuple(value)


def _prompt(
    ctx: _Ctx, where: str, entry: dict[str, Any], model: str | None, base: Path
) -> tuple[str, str] | None:
    """A real model's text prompt: ``prompt = "…"``, or ``prompt_file`` = a path (relative to
    the matrix) or the name of one of rtmatrix's own texts; read here, so a missing file fails
    before anything runs."""
    from rtmatrix.fixtures.gguf_folder import HF_VIEWS
    from rtmatrix.fixtures.sources import REAL_MODELS
    from rtmatrix.fixtures.tokenizer import TEXTS, shipped_text

    if "prompt" not in entry and "prompt_file" not in entry:
        return None
    if "prompt" in entry and "prompt_file" in entry:
        raise ctx.fail(where, "give prompt or prompt_file, not both")
    # a real model by name (not located here: loading a matrix downloads nothing)
    real = model is not None and (model.startswith(SOURCE_PREFIX) or model in REAL_MODELS
                                  or model in HF_VIEWS)  # fmt: skip
    key = "prompt" if "prompt" in entry else "prompt_file"
    if not real:
        why = 'a text prompt needs a real checkpoint (model = "smollm2-135m" or source = "PATH")'
        raise ctx.fail(f"{where}.{key}", f"{why}: seeded models take seeded ids")
    value = entry[key]
    if not isinstance(value, str) or not value.strip():
        raise ctx.fail(f"{where}.{key}", f"expected a non-empty string, got {value!r}")
    if key == "prompt":
        return "the fixture's prompt", value
    if value in TEXTS:
        return f"rtmatrix's text {value}", shipped_text(value)
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base / path
    try:
        return f"prompt_file {path.name}", path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fix = f"give a UTF-8 text file, or one of rtmatrix's own texts: {', '.join(TEXTS)}"
        raise ctx.fail(f"{where}.prompt_file", f"cannot read {path}: {exc}; {fix}") from None


def _check_source(ctx: _Ctx, key: str, src: Path) -> bool:
    """A checkpoint given as ``source``: what the importer would refuse (missing file, header,
    architecture, fields, tensors), from its metadata and tensor names — before any work.
    Whether it reaches the runtimes through their converters (False: rtmatrix's own importer
    takes it, or it is refused here)."""
    from rtmatrix.fixtures.importer import CheckpointError, check_checkpoint

    try:
        check_checkpoint(src)
    except (CheckpointError, OSError, ValueError) as exc:
        if src.is_dir():  # another architecture: the runtimes' own converters, if transformers
            from rtmatrix.fixtures.checkpoints import refusal  # can load it as the reference

            why = refusal(src)
            if why is None:
                return True
            ctx.note(key, f"checkpoint {src}: {why}; fix 'source' (a Hugging Face folder of an "
                     "architecture transformers can load, or a llama-architecture .gguf file)")
            return False
        if src.is_file():  # a GGUF transformers' loader dequantizes: the converters' route
            from rtmatrix.fixtures.gguf_folder import gguf_refusal

            why = gguf_refusal(src)
            if why is None:
                return True
            exc = ValueError(f"{exc}; transformers' GGUF loader: {why}")
        ctx.note(key, f"{exc}; fix 'source' (a llama-architecture .gguf file or HF folder)")
    return False


#: the first bytes of a model file per suffix (a file expected to run must start with them)
_MAGIC = {".gguf": b"GGUF"}


def _check_model_file(ctx: _Ctx, key: str, path: Path, expect: Expect) -> None:
    """A user's model file given as ``path``: it must exist and be readable (a folder: exist);
    one expected to run must have its format's header. A file meant to fail (expect = "error")
    may be damaged on purpose."""
    if not path.exists():
        ctx.note(key, f"{path} does not exist; fix 'path' (a model file or folder)")
        return
    if path.is_dir():
        return
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        ctx.note(key, f"{path} cannot be read ({exc.strerror}); fix 'path' or its permissions")
        return
    magic = _MAGIC.get(path.suffix.lower())
    if expect is Expect.OK and magic is not None and not head.startswith(magic):
        fix = "fix 'path', or set expect = \"error\" to test a damaged file"
        what = f"{path} starts with {head[:4]!r}, not {magic!r}: not a {path.suffix} file"
        ctx.note(key, f"{what}; {fix}")


@dataclass(frozen=True)
class _Parsed:
    """One ``[[fixtures]]`` table: its entries (one per dtype), and whether its model reaches
    the runtimes through their converters (the rows' dtypes are checked against that)."""

    entries: list[FixtureEntry]
    converted: bool = False


def _fixture(ctx: _Ctx, i: int, entry: Any, base: Path) -> _Parsed:
    where = f"fixtures[{i}]"
    if not isinstance(entry, dict):
        raise ctx.fail(where, "expected a [[fixtures]] table")
    ctx.check_keys(entry, where, FIXTURE_KEYS)
    variant = entry.get("variant")
    if variant is not None and variant not in VARIANTS:
        raise ctx.fail(
            f"{where}.variant", f"unknown variant {variant!r}; valid: {', '.join(VARIANTS)}"
        )
    expect, verdicts = _expectations(ctx, where, entry, variant)
    extra: dict[str, Any] = {
        "variant": variant,
        "expect": expect,
        "expect_kinds": _expect_kinds(ctx, where, entry, expect),
        "verdicts": verdicts,
        "params": _params_table(
            ctx,
            ctx.table(entry.get("params", {}), f"{where}.params"),
            f"{where}.params",
            defaults=PARAM_DEFAULTS,
        ),
        "run": _run_table(
            ctx, ctx.table(entry.get("run", {}), f"{where}.run"), f"{where}.run", defaults={}
        ),
        "options": ctx.table(entry.get("options", {}), f"{where}.options"),
        "scenario": entry.get("scenario", Scenario.GENERATE.value),
        "runtimes": _names(ctx, f"{where}.runtimes", entry.get("runtimes", [])),
    }
    if extra["scenario"] not in tuple(Scenario):
        raise ctx.fail(
            f"{where}.scenario",
            f"unknown scenario {extra['scenario']!r}; valid: {', '.join(Scenario)}",
        )
    if "path" in entry:
        name = entry.get("name")
        if not isinstance(name, str) or not isinstance(entry["path"], str):
            raise ctx.fail(where, 'a model file fixture needs name = "..." and path = "..."')
        if "model" in entry or "dtypes" in entry or variant:
            raise ctx.fail(where, "give either model (+ dtypes, variant) or name + path, not both")
        if "prompt" in entry or "prompt_file" in entry:
            fix = 'give source = "PATH" instead of path (it is imported into every format)'
            raise ctx.fail(where, f"a text prompt needs a checkpoint to tokenize with: {fix}")
        path = Path(entry["path"]).expanduser()
        path = path if path.is_absolute() else base / path
        _check_model_file(ctx, f"{where}.path", path, expect)
        return _Parsed([FixtureEntry(name=name, dtype=None, path=path, **extra)])
    model = entry.get("model")
    converted = False
    if "source" in entry:  # a user's checkpoint, imported into every format
        if model is not None or not isinstance(entry["source"], str):
            raise ctx.fail(
                f"{where}.source",
                'give source = "PATH" (a .gguf file or a HF-style folder) instead of model',
            )
        src = Path(entry["source"]).expanduser()
        src = src if src.is_absolute() else base / src
        converted = _check_source(ctx, f"{where}.source", src)
        model = f"{SOURCE_PREFIX}{src}"
        entry = {"name": src.stem if src.suffix else src.name} | entry
    elif model not in (known := known_models()):
        raise ctx.fail(
            f"{where}.model", f"unknown fixture model {model!r}; valid: {', '.join(known)}"
        )
    else:
        converted = is_converted(model)
    extra["prompt"] = _prompt(ctx, where, entry, model, base)
    dtypes = entry.get("dtypes", ["f32"])
    if not isinstance(dtypes, list) or not dtypes:
        valid = ", ".join(matrix_dtypes.valid())
        raise ctx.fail(f"{where}.dtypes", f"expected a non-empty list; valid: {valid}")
    bad = matrix_dtypes.unknown(dtypes)
    if bad:
        raise ctx.fail(f"{where}.dtypes", bad)
    name = entry.get("name", model if not variant else f"{model}-{variant}")
    if not isinstance(name, str):
        raise ctx.fail(f"{where}.name", f"expected a string, got {name!r}")
    entries = [FixtureEntry(name=name, dtype=d, model=model, **extra) for d in dtypes]
    return _Parsed(entries, converted)


def _check_row_dtypes(ctx: _Ctx, parsed: list[_Parsed], runtimes: list[RuntimeEntry]) -> None:
    """Each fixture's dtypes against the rows that run it (:mod:`rtmatrix.matrix.dtypes`): a
    converter's own dtype on another converter's row, or rtmatrix's own weight-only one on a
    converted checkpoint, is a problem of the matrix; all are listed at the end of the load."""
    checked = [(i, fx, group.converted) for i, group in enumerate(parsed) for fx in group.entries
               if _row_checked(fx, group.converted)]  # fmt: skip
    if not checked:
        return
    rows = {rt.name: row for rt in runtimes if (row := _row(rt)) is not None}
    seen: set[tuple[int, str]] = set()
    for i, fx, converted in checked:
        assert fx.dtype is not None and fx.model is not None  # checked by _row_checked
        owner = converter_dtypes.owner(fx.dtype)
        feeds = list(dict.fromkeys(rt.base_name for rt in runtimes if rt.name in rows
                                   and owner and rows[rt.name].converter == owner))  # fmt: skip
        for rt in runtimes:
            chosen = not fx.runtimes or {rt.name, rt.base_name} & set(fx.runtimes)
            if rt.name not in rows or not chosen:
                continue
            why = matrix_dtypes.problem(fx.dtype, fx.model, converted, rows[rt.name], feeds)
            if why and (i, why) not in seen:
                seen.add((i, why))
                ctx.note(f"fixtures[{i}].dtypes", why)


def _row_checked(fx: FixtureEntry, converted: bool) -> bool:
    """Whether ``fx``'s dtype needs the rows' converters to be judged: a converter's own dtype,
    or rtmatrix's own weight-only one on a converted checkpoint."""
    if fx.dtype is None or fx.model is None:
        return False
    return (converted and fx.dtype in WEIGHT_ONLY) or converter_dtypes.owner(fx.dtype) is not None


def _row(rt: RuntimeEntry) -> matrix_dtypes.Row | None:
    """The row and the converter its adapter names (importing the adapter, not its runtime);
    None for a third-party adapter that does not import here: its cells judge their dtypes."""
    try:
        return matrix_dtypes.Row(rt.name, adapter_converter(rt.adapter))
    except AdapterError:
        return None


def parse_matrix(text: str, path: Path) -> Matrix:
    ctx = _Ctx(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ctx.fail("(syntax)", f"not valid TOML: {exc}") from None
    ctx.check_keys(raw, "(top level)", TOP_KEYS)
    fixtures_raw = raw.get("fixtures")
    if not isinstance(fixtures_raw, list) or not fixtures_raw:
        raise ctx.fail("fixtures", "expected at least one [[fixtures]] table")
    parsed = [_fixture(ctx, i, e, path.parent) for i, e in enumerate(fixtures_raw)]
    fixtures = [fx for group in parsed for fx in group.entries]
    labels = [f.label for f in fixtures]
    dupes = sorted({lbl for lbl in labels if labels.count(lbl) > 1})
    if dupes:
        raise ctx.fail(
            "fixtures", f"fixture(s) listed twice: {', '.join(dupes)}; give each a distinct name"
        )
    try:
        power = normalize_config(ctx.table(raw.get("power", {}), "power"))
    except PowerConfigError as exc:
        raise ctx.fail(f"power.{exc.key}", exc.problem) from None
    _gate_table(ctx, ctx.table(raw.get("gate", {}), "gate"))
    _selection_table(ctx, ctx.table(raw.get("selection", {}), "selection"))
    try:
        targets = parse_targets(raw.get("targets"))
        cluster = parse_cluster(raw.get("cluster"), path.parent)
    except TargetError as exc:
        raise ctx.fail(exc.key, exc.problem) from None
    runtimes = _runtimes(ctx, raw.get("runtimes"), targets)
    names = list(dict.fromkeys([*(rt.name for rt in runtimes), *(rt.base_name for rt in runtimes)]))
    for i, fx in enumerate(fixtures_raw):
        unknown = sorted(set(fx.get("runtimes", [])) - set(names))
        if unknown:
            why = f"unknown row(s) {', '.join(unknown)}; valid: {', '.join(names)}"
            raise ctx.fail(f"fixtures[{i}].runtimes", why)
    _check_row_dtypes(ctx, parsed, runtimes)
    ctx.raise_problems()
    return Matrix(
        power=power,
        path=path,
        run=_run_table(ctx, ctx.table(raw.get("run", {}), "run")),
        params=_params_table(ctx, ctx.table(raw.get("params", {}), "params")),
        runtimes=runtimes,
        fixtures=fixtures,
        description=str(raw.get("description", "")),
        raw=raw,
        targets=targets,
        cluster=cluster,
    )


def _selection_table(ctx: _Ctx, table: dict[str, Any]) -> None:
    """``[selection]``: the constraints and priorities ``rtmatrix select`` and the report's
    answer read (:mod:`rtmatrix.selection.constraints`), checked at load."""
    try:
        Constraints.from_table(table)
    except SelectionError as exc:
        raise ctx.fail(f"selection.{exc.key}" if exc.key else "selection", exc.problem) from None


def _gate_table(ctx: _Ctx, table: dict[str, Any]) -> None:
    """``[gate] fail = ["tg_tps:5%", ...]``: thresholds ``rtmatrix gate`` applies to this run."""
    from rtmatrix.results.diff import CheckError, parse_checks

    ctx.check_keys(table, "gate", ("fail",))
    fail = table.get("fail", [])
    if not isinstance(fail, list) or not all(isinstance(f, str) for f in fail):
        raise ctx.fail("gate.fail", f'expected a list like ["tg_tps:5%"], got {fail!r}')
    try:
        parse_checks(fail)
    except CheckError as exc:
        raise ctx.fail("gate.fail", str(exc)) from None


def load_matrix(path: Path) -> Matrix:
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        msg = f"{path}: cannot read matrix file ({exc.strerror}); see matrix/default.toml"
        raise MatrixError(msg) from None
    return parse_matrix(text, path)
