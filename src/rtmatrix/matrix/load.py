"""Load and validate a matrix file; expand it into cells.

Errors name the file, the key and the valid choices, e.g.
``matrix/default.toml: runtimes[0].name: unknown runtime 'llamacpp'; did you mean 'llama_cpp'?``
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtmatrix.adapters.base import AdapterError, resolve_adapter
from rtmatrix.fixtures.gguf_export import DTYPES
from rtmatrix.fixtures.spec import builtin_specs

RUN_DEFAULTS: dict[str, Any] = {
    "repetitions": 5,
    "warmup": 1,
    "timeout_s": 600.0,
    "address_space_cap_mb": 0,
    "sample_interval_s": 0.02,
}
PARAM_DEFAULTS: dict[str, Any] = {
    "threads": 2,
    "n_ctx": 512,
    "prompt_tokens": 128,
    "gen_tokens": 64,
}
TOP_KEYS = ("description", "run", "params", "runtimes", "fixtures")
RUNTIME_KEYS = ("name", "adapter")
FIXTURE_KEYS = ("model", "dtypes", "name", "path")


class MatrixError(ValueError):
    """A matrix file that cannot be used; the message says where and what is valid."""


@dataclass(frozen=True)
class FixtureEntry:
    """A canonical model in one dtype, or a user's own model file (no reference then)."""

    name: str
    dtype: str | None
    model: str | None = None
    path: Path | None = None

    @property
    def label(self) -> str:
        return f"{self.name}/{self.dtype}" if self.dtype else self.name


@dataclass(frozen=True)
class Cell:
    runtime: str
    adapter: str
    fixture: FixtureEntry
    params: dict[str, int]

    @property
    def key(self) -> str:
        p = self.params
        tag = f"t{p['threads']}-c{p['n_ctx']}-p{p['prompt_tokens']}-g{p['gen_tokens']}"
        return f"{self.runtime}|{self.fixture.label}|{tag}"


@dataclass(frozen=True)
class Matrix:
    path: Path
    run: dict[str, Any]
    params: dict[str, list[int]]
    runtimes: list[tuple[str, str]]
    fixtures: list[FixtureEntry]
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    def cells(self) -> list[Cell]:
        names = list(self.params)
        combos = [
            dict(zip(names, vals, strict=True))
            for vals in itertools.product(*(self.params[n] for n in names))
        ]
        return [
            Cell(rt, target, fx, combo)
            for rt, target in self.runtimes
            for fx in self.fixtures
            for combo in combos
        ]


class _Ctx:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> MatrixError:
        return MatrixError(f"{self.path}: {key}: {problem}")

    def check_keys(self, table: dict[str, Any], key: str, valid: tuple[str, ...]) -> None:
        unknown = sorted(set(table) - set(valid))
        if unknown:
            raise self.fail(key, f"unknown key(s) {', '.join(unknown)}; valid: {', '.join(valid)}")


def _positive_int(ctx: _Ctx, key: str, value: Any, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok:
        bound = ">= 0" if allow_zero else ">= 1"
        raise ctx.fail(key, f"expected an integer {bound}, got {value!r}")
    return int(value)


def _run_table(ctx: _Ctx, table: dict[str, Any]) -> dict[str, Any]:
    ctx.check_keys(table, "run", tuple(RUN_DEFAULTS))
    run = RUN_DEFAULTS | table
    for key in ("repetitions",):
        _positive_int(ctx, f"run.{key}", run[key])
    for key in ("warmup", "address_space_cap_mb"):
        _positive_int(ctx, f"run.{key}", run[key], allow_zero=True)
    for key in ("timeout_s", "sample_interval_s"):
        val = run[key]
        if isinstance(val, bool) or not isinstance(val, int | float) or val <= 0:
            raise ctx.fail(f"run.{key}", f"expected a positive number of seconds, got {val!r}")
        run[key] = float(val)
    return run


def _params_table(ctx: _Ctx, table: dict[str, Any]) -> dict[str, list[int]]:
    ctx.check_keys(table, "params", tuple(PARAM_DEFAULTS))
    out: dict[str, list[int]] = {}
    for key, default in PARAM_DEFAULTS.items():
        val = table.get(key, default)
        vals = val if isinstance(val, list) else [val]
        if not vals:
            raise ctx.fail(f"params.{key}", "an empty list gives no cells")
        out[key] = [_positive_int(ctx, f"params.{key}", v) for v in vals]
    return out


def _runtimes(ctx: _Ctx, entries: Any) -> list[tuple[str, str]]:
    if not isinstance(entries, list) or not entries:
        raise ctx.fail("runtimes", "expected at least one [[runtimes]] table")
    out = []
    for i, entry in enumerate(entries):
        where = f"runtimes[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ctx.fail(where, 'each [[runtimes]] needs name = "<runtime>"')
        ctx.check_keys(entry, where, RUNTIME_KEYS)
        try:
            adapter = entry.get("adapter", entry["name"])
            if not isinstance(adapter, str):
                raise ctx.fail(f"{where}.adapter", f"expected 'module:Class', got {adapter!r}")
            target = resolve_adapter(adapter)
        except AdapterError as exc:
            raise ctx.fail(f"{where}.name", str(exc)) from None
        out.append((entry["name"], target))
    return out


def _fixture(ctx: _Ctx, i: int, entry: Any, base: Path) -> list[FixtureEntry]:
    where = f"fixtures[{i}]"
    if not isinstance(entry, dict):
        raise ctx.fail(where, "expected a [[fixtures]] table")
    ctx.check_keys(entry, where, FIXTURE_KEYS)
    if "path" in entry:
        name = entry.get("name")
        if not isinstance(name, str) or not isinstance(entry["path"], str):
            raise ctx.fail(where, 'a model file fixture needs name = "..." and path = "..."')
        if "model" in entry or "dtypes" in entry:
            raise ctx.fail(where, "give either model (+ dtypes) or name + path, not both")
        path = Path(entry["path"]).expanduser()
        path = path if path.is_absolute() else base / path
        return [FixtureEntry(name=name, dtype=None, path=path)]
    specs = builtin_specs()
    model = entry.get("model")
    if model not in specs:
        raise ctx.fail(
            f"{where}.model", f"unknown fixture model {model!r}; valid: {', '.join(sorted(specs))}"
        )
    dtypes = entry.get("dtypes", ["f32"])
    if not isinstance(dtypes, list) or not dtypes:
        raise ctx.fail(f"{where}.dtypes", f"expected a non-empty list; valid: {', '.join(DTYPES)}")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise ctx.fail(f"{where}.dtypes", f"unknown dtype(s) {bad}; valid: {', '.join(DTYPES)}")
    name = entry.get("name", model)
    if not isinstance(name, str):
        raise ctx.fail(f"{where}.name", f"expected a string, got {name!r}")
    return [FixtureEntry(name=name, dtype=d, model=model) for d in dtypes]


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
    fixtures = [fx for i, e in enumerate(fixtures_raw) for fx in _fixture(ctx, i, e, path.parent)]
    labels = [f.label for f in fixtures]
    dupes = sorted({lbl for lbl in labels if labels.count(lbl) > 1})
    if dupes:
        raise ctx.fail("fixtures", f"fixture(s) listed twice: {', '.join(dupes)}")
    return Matrix(
        path=path,
        run=_run_table(ctx, raw.get("run", {})),
        params=_params_table(ctx, raw.get("params", {})),
        runtimes=_runtimes(ctx, raw.get("runtimes")),
        fixtures=fixtures,
        description=str(raw.get("description", "")),
        raw=raw,
    )


def load_matrix(path: Path) -> Matrix:
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        msg = f"{path}: cannot read matrix file ({exc.strerror}); see matrix/default.toml"
        raise MatrixError(msg) from None
    return parse_matrix(text, path)
