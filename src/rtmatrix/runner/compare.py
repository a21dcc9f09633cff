"""``rtmatrix compare``: two sides, K paired rounds of worker processes, one judged comparison.

A **side** is an environment — a Python executable with rtmatrix and that side's runtime
versions — optionally with its own runtime options (merged over every cell's options) or its own
adapter (replacing every selected runtime row's adapter). So one design compares an upgrade
(two venvs), a setting (``--b-option flash_attn=on``) or an injected slowdown in a test.

Each **round** runs every cell once per side, the two worker processes in a seeded random order
(AB or BA, drawn per round and cell from ``random.Random(seed)``), in one of three modes:

- ``alternate`` (the default): both processes at once, unpinned; each loads its model, then
  their repetitions (warm-up and counted) take turns, one at a time, in ABBA order
  (:mod:`rtmatrix.turns`). Both sides are measured within the same second or two, never at
  the same time. Measured on this 2-core VM (issue 31, A/A, interleaved with sequential rounds):
  the per-round sd of the TG log-ratio fell from 7.0 % to 3.6 % (1 thread, p16 g32) and from
  7.1 % to 3.9 % (2 threads, p128 g64), because one process's TG wanders by ~9 %
  over a minute (lag-1 autocorrelation 0.72) while the launch settings tried (address-space
  randomization off, pinning, weights read or in huge pages, warm-up 3) changed nothing. A round
  is used only where every repetition of both sides took its turn
  (``evidence.alternate``);
- ``sequential``: one process after the other (the design before issue 31);
- ``duet`` (after Bulej et al., ICPE 2020): both at once, each pinned to its own block of
  CPUs, the first in the order started first on the first block, so both see the same machine
  interference. It needs twice the cells' threads in CPUs; on this VM it did not lower the
  spread (the two sides interfere with each other). A duet round is used only where the two
  counted windows overlapped for at least :data:`DUET_MIN_OVERLAP` of the shorter one
  (``evidence.duet``).

A cell that is not ``ok`` on a side in the first round is not repeated: there are no figures to
compare, and its outcome is judged from that round. Before the first round each side's
interpreter is probed (its installed distributions, rtmatrix and protocol version, the size and
license of each runtime row's distribution — measured in that environment, not the parent's) and
its adapters are described with that interpreter; fixtures are prepared once, so the first
round's wall time is a fair estimate of the later ones.

**K**: ``rounds`` if given, else ``DEFAULT_ROUNDS`` (24, from the seeded simulation in
:mod:`rtmatrix.results.paired`: at 3 % between-process spread it finds a 10 % slowdown in every
check and 5 % in 94 %, with 2 false alarms in 1 200 A/A cells). With ``budget_s`` the first round
is timed and K = 1 + (budget − round 1) // (time of round 1's repeated cells), at least 2 (the
fewest a paired test can use) and at most ``rounds`` when that is given too.

The runtime's own benchmark tool (llama-bench after a llama.cpp cell, ``rtmatrix run``'s
reference figures) is not run in the rounds: the comparison judges the harness's figures, and a
tool run per cell and round would double its time.

Judging is :func:`rtmatrix.results.comparison.build`; each side's cells (its worst record per
cell over the rounds) are also saved as an ordinary run file, so ``rtmatrix report`` and
``rtmatrix diff`` read them as any run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from rtmatrix.adapters.base import AdapterError, resolve_adapter
from rtmatrix.fixtures import FixtureError, prepare_fixture
from rtmatrix.matrix import Cell, Matrix
from rtmatrix.names import M
from rtmatrix.protocol import PROTOCOL_VERSION
from rtmatrix.results import save_run
from rtmatrix.results.comparison import (
    DEFAULT_METRICS,
    Comparison,
    RoundRecord,
    build,
    worst,
)
from rtmatrix.results.paired import DEFAULT_ALPHA, DEFAULT_ROUNDS, MIN_ROUNDS, Criterion
from rtmatrix.results.records import CellRecord, evidence_of, value_of
from rtmatrix.runner import process
from rtmatrix.runner.orchestrate import RunContext, plan_cells, run_cell
from rtmatrix.runner.record import new_record
from rtmatrix.turns import DEFAULT_PATTERN, PATTERNS, TurnServer, coordinate

Progress = Callable[[str], None]
PROBE_TIMEOUT_S = 120
SIDE_NAMES = ("a", "b")
MODES = ("alternate", "sequential", "duet")
DEFAULT_MODE = "alternate"
#: a duet round is used only where the two sides' counted repetitions overlapped in time for at
#: least this share of the shorter of the two windows (``evidence.duet`` of each record)
DUET_MIN_OVERLAP = 0.8
CpuBlock = tuple[int, ...]
_PROBE = r"""
import json, platform, sys
from importlib import metadata
out = {"python": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix}
dists = {}
for d in metadata.distributions():
    name = d.metadata["Name"]
    if name:
        dists.setdefault(name, d.version)
out["distributions"] = dict(sorted(dists.items(), key=lambda kv: kv[0].lower()))
try:
    import rtmatrix
    from rtmatrix.protocol import PROTOCOL_VERSION
    from rtmatrix.metrics import package
    out["rtmatrix"] = {"version": rtmatrix.__version__, "path": rtmatrix.__file__,
                       "protocol": PROTOCOL_VERSION}
    out["packages"] = {
        dist: {"version": package.version(dist),
               "package_size_bytes": package.package_size(dist).to_dict(),
               "license": package.license_of(dist).to_dict()}
        for dist in sys.argv[1:]
    }
except Exception as exc:
    out["rtmatrix_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


class CompareError(ValueError):
    """Input a comparison cannot use (a side's interpreter, adapter or options); exit 4."""


@dataclass(frozen=True)
class SideSpec:
    """One side as the user gave it."""

    name: str  # "a" (base) or "b" (candidate)
    python: str
    options: dict[str, Any] = field(default_factory=dict)
    adapter: str | None = None
    label: str = ""

    def title(self) -> str:
        return self.label or ("A (base)" if self.name == "a" else "B (candidate)")


@dataclass(frozen=True)
class Settings:
    rounds: int | None = None  # fixed K; with budget_s, the most rounds
    budget_s: float | None = None
    alpha: float = DEFAULT_ALPHA
    seed: int = 0
    metrics: tuple[str, ...] = DEFAULT_METRICS
    #: relative margin / min effect per metric; the key "" applies to every metric
    margin: dict[str, float] = field(default_factory=dict)
    min_effect: dict[str, float] = field(default_factory=dict)
    #: "alternate" (both processes at once, their counted repetitions taking turns),
    #: "sequential" (one after the other) or "duet" (both at once, each on its own CPUs)
    mode: str = DEFAULT_MODE
    #: an alternate comparison's turn pattern (:data:`rtmatrix.turns.PATTERNS`)
    turns: str = DEFAULT_PATTERN

    def criteria(self) -> dict[str, Criterion]:
        def pick(table: Mapping[str, float], metric: str) -> float | None:
            return table.get(metric, table.get(""))

        return {
            m: Criterion.for_metric(m, pick(self.min_effect, m), pick(self.margin, m))
            for m in self.metrics
        }

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"metrics": list(self.metrics)}


@dataclass
class Side:
    """A side made ready: its environment, its matrix rows, cells and run context."""

    spec: SideSpec
    environment: dict[str, Any]
    matrix: Matrix
    describe: dict[str, dict[str, Any]]
    cells: dict[str, Cell]
    ctx: RunContext
    skipped: list[dict[str, str]]

    def describe_dict(self) -> dict[str, Any]:
        runtimes = {}
        for rt in self.matrix.runtimes:
            info = self.describe[rt.name]
            runtimes[rt.name] = {
                "adapter": rt.adapter,
                "distribution": info.get("distribution"),
                "version": self.ctx.record["runtimes"][rt.name]["version"],
            } | ({"error": info["error"]} if "error" in info else {})
        return {
            "name": self.spec.name,
            "label": self.spec.title(),
            "python": self.spec.python,
            "adapter": self.spec.adapter,
            "options": self.spec.options,
            "environment": self.environment,
            "runtimes": runtimes,
        }


# --------------------------------------------------------------------------- environments


def probe_environment(
    python: str, distributions: Sequence[str] = (), cwd: Path | None = None
) -> dict[str, Any]:
    """What ``python`` has installed (importlib.metadata in that interpreter), its rtmatrix and
    protocol version, and the version, size and license of ``distributions`` there."""
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE, *distributions],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            cwd=cwd,
            env=process.worker_env(),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = f"cannot run the side's python {python!r}: {exc}"
        raise CompareError(msg) from None
    try:
        info: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        msg = f"{python}: probe failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}"
        raise CompareError(msg) from None
    return info


def _check_rtmatrix(python: str, env: Mapping[str, Any]) -> None:
    if "rtmatrix_error" in env:
        msg = (
            f"{python} cannot import rtmatrix ({env['rtmatrix_error']}); install it there: "
            f"{python} -m pip install -e <rtmatrix checkout>"
        )
        raise CompareError(msg)
    theirs = env["rtmatrix"]["protocol"]
    if theirs != PROTOCOL_VERSION:
        msg = (
            f"{python} has rtmatrix {env['rtmatrix']['version']} speaking worker protocol "
            f"{theirs}; this rtmatrix speaks {PROTOCOL_VERSION}: reinstall it from this checkout"
        )
        raise CompareError(msg)


def _side_matrix(
    matrix: Matrix, spec: SideSpec, only: Callable[[Cell], bool] | None = None
) -> Matrix:
    """The matrix as this side runs it: only the runtime rows with a selected cell, each with
    the side's adapter and options."""
    selected = {c.runtime for c in matrix.cells() if only is None or only(c)}
    adapter = None
    if spec.adapter:
        try:
            adapter = resolve_adapter(spec.adapter)
        except AdapterError as exc:
            msg = f"--{spec.name}-adapter: {exc}"
            raise CompareError(msg) from None
    rows = [
        dataclasses.replace(rt, adapter=adapter or rt.adapter, options=rt.options | spec.options)
        for rt in matrix.runtimes
        if rt.name in selected
    ]
    if not rows:
        msg = f"{matrix.path}: no cell selected (check --runtime and --cell)"
        raise CompareError(msg)
    return dataclasses.replace(matrix, runtimes=rows)


def _package_fix(record: CellRecord, env: Mapping[str, Any], dist: str | None) -> None:
    """Package size and license as measured in the side's environment (the parent measured its
    own, which is the other side's or neither)."""
    pkg = (env.get("packages") or {}).get(dist or "")
    if pkg:
        record["metrics"][M.PACKAGE_SIZE] = pkg["package_size_bytes"]
        record["metrics"][M.LICENSE] = pkg["license"]


def prepare_side(
    spec: SideSpec,
    matrix: Matrix,
    cwd: Path | None = None,
    only: Callable[[Cell], bool] | None = None,
) -> Side:
    if shutil.which(spec.python) is None:
        msg = f"--{spec.name} {spec.python}: no such executable"
        raise CompareError(msg)
    side_matrix = _side_matrix(matrix, spec, only)
    describe = {
        rt.name: process.describe_adapter(rt.adapter, cwd, spec.python)
        for rt in side_matrix.runtimes
    }
    dists = sorted({str(d["distribution"]) for d in describe.values() if d.get("distribution")})
    env = probe_environment(spec.python, dists, cwd)
    _check_rtmatrix(spec.python, env)
    broken = [f"{n}: {d['error']}" for n, d in describe.items() if "error" in d]
    if spec.adapter and broken:
        msg = f"--{spec.name}-adapter {spec.adapter}: " + "; ".join(broken)
        raise CompareError(msg)
    planned, skipped = plan_cells(side_matrix, describe, only)
    cells = {c.key: dataclasses.replace(c, options=c.options | spec.options) for c in planned}
    record = new_record(side_matrix, describe)
    for entry in record["runtimes"].values():
        dist = entry.get("distribution")
        entry["version"] = (
            (env.get("packages", {}).get(dist) or {}).get("version") if dist else None
        )
        entry["python"] = spec.python
    record["skipped"] = skipped
    ctx = RunContext(side_matrix, record, describe, cwd, python=spec.python,
                     reference_runs=False, quality_runs=False)  # fmt: skip
    return Side(spec, env, side_matrix, describe, cells, ctx, skipped)


# --------------------------------------------------------------------------- rounds


def _warm_fixtures(cells: Sequence[Cell], describe: Mapping[str, Mapping[str, Any]]) -> None:
    """Build (or find cached) every cell's fixture before round 1; a failure is left for the
    cell itself to record."""
    for cell in cells:
        container = describe[cell.runtime].get("container")
        if not container:
            continue
        fx = cell.fixture
        try:
            prepare_fixture(fx.name, fx.model, fx.dtype, fx.path, str(container), fx.variant,
                            describe[cell.runtime].get("converter"))  # fmt: skip
        except (FixtureError, ValueError, OSError):
            continue


def _label(value: Any) -> str:
    return f"{value:.0f}" if isinstance(value, int | float) else "-"


def _progress_line(rnd: int, k: str, key: str, order: str, recs: Mapping[str, CellRecord]) -> str:
    def one(side: str) -> str:
        r = recs[side]
        busy = " contended" if r.get("contended") else ""
        tg = _label(value_of(r["metrics"].get(M.TG_TPS)))
        return f"{side.upper()} {r['outcome']['status']} TG {tg}{busy}"

    return f"[round {rnd}/{k}] {key} ({order.upper()}): {one('a')} · {one('b')}"


@dataclass
class Rounds:
    """The rounds as they run: records, the order generator, and how K was chosen."""

    sides: dict[str, Side]
    keys: list[str]
    settings: Settings
    progress: Progress
    records: list[RoundRecord] = field(default_factory=list)
    k: int = DEFAULT_ROUNDS
    k_how: str = ""
    round_s: list[float] = field(default_factory=list)
    #: a duet comparison's two CPU blocks (first-started side, second), else empty: sequential
    blocks: tuple[CpuBlock, ...] = ()
    #: an alternate comparison: both processes at once, counted repetitions taking turns
    alternate: bool = False

    def __post_init__(self) -> None:
        self.rng = random.Random(self.settings.seed)

    def run_round(self, rnd: int, keys: Sequence[str]) -> float:
        """One round over ``keys``; returns the wall time of the cells that will be repeated."""
        t_round, repeated = time.monotonic(), 0.0
        for key in keys:
            t0 = time.monotonic()
            order = "ab" if self.rng.random() < 0.5 else "ba"
            gen = self.sides["a"].cells[key].fixture.scenario == "generate"
            if self.alternate and gen:  # a lifecycle scenario has no counted repetitions
                recs = self._alternate(key, order)
            elif self.blocks:
                recs = self._duet(key, order)
            else:
                recs = self._sequential(key, order)
            for pos, name in enumerate(order):
                self.sides[name].ctx.record["cells"].append(recs[name])
                self.records.append(RoundRecord(key, rnd, name, pos, recs[name]))
            self.progress(_progress_line(rnd, str(self.k or "?"), key, order, recs))
            if all(r["outcome"]["status"] == "ok" for r in recs.values()):
                repeated += time.monotonic() - t0
        self.round_s.append(time.monotonic() - t_round)
        return repeated

    def _one(
        self, name: str, key: str, cpus: CpuBlock | None = None, turns: str | None = None
    ) -> CellRecord:
        side = self.sides[name]
        ctx = dataclasses.replace(side.ctx, cpus=cpus, turns=turns) if cpus or turns else side.ctx
        # run_cell builds the cell record the schema describes (runner.record), checked against
        # it when the side's run is saved (_save_side); the cast changes nothing
        rec = cast(CellRecord, run_cell(ctx, side.cells[key]))
        _package_fix(rec, side.environment, side.describe[rec["runtime"]].get("distribution"))
        return rec

    def _sequential(self, key: str, order: str) -> dict[str, CellRecord]:
        return {name: self._one(name, key) for name in order}

    def _duet(self, key: str, order: str) -> dict[str, CellRecord]:
        """Both sides' processes at once, the first in ``order`` started first on the first
        CPU block; each record gets ``evidence.duet`` (its CPUs, the overlap of the two
        counted windows, whether that passes :data:`DUET_MIN_OVERLAP`)."""
        blocks = dict(zip(order, self.blocks, strict=True))
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="rtmatrix-duet") as pool:
            futures = {name: pool.submit(self._one, name, key, blocks[name]) for name in order}
            recs = _await_both(futures)
        windows = {name: counted_window(rec) for name, rec in recs.items()}
        share = overlap(windows["a"], windows["b"])
        for pos, name in enumerate(order):
            recs[name].setdefault("evidence", {})["duet"] = {
                "cpus": list(blocks[name]),
                "partner_cpus": list(blocks["b" if name == "a" else "a"]),
                "started": "first" if pos == 0 else "second",
                "window_monotonic": windows[name],
                "overlap": share,
                "min_overlap": DUET_MIN_OVERLAP,
                "overlapped": share is not None and share >= DUET_MIN_OVERLAP,
            }
        return recs

    def _alternate(self, key: str, order: str) -> dict[str, CellRecord]:
        """Both sides' processes at once, unpinned, their counted repetitions taking turns in
        ABBA order (:mod:`rtmatrix.turns`); each record gets ``evidence.alternate`` (the turns
        granted, whether every counted repetition of both took its turn)."""
        cell = self.sides[order[0]].cells[key]
        # warm-up repetitions take turns too: two multi-threaded runtimes warming up at once
        # oversubscribe the CPUs (spinning thread pools) and slow the whole round
        reps = int(cell.run["repetitions"]) + int(cell.run["warmup"])
        timeout = float(cell.run["timeout_s"])
        servers = {name: TurnServer(name) for name in order}
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="rtmatrix-turns") as pool:
            futures = {
                name: pool.submit(self._one, name, key, None, servers[name].path) for name in order
            }
            try:
                info = coordinate(
                    servers,
                    order,
                    reps,
                    lambda n: not futures[n].done(),
                    timeout,
                    timeout,
                    self.settings.turns,
                )
            except BaseException:
                _settle(futures)
                for srv in servers.values():
                    srv.close()
                raise
            recs = _await_both(futures)
        gated = {n: _gated_reps(r) for n, r in recs.items()}
        for name in order:
            recs[name].setdefault("evidence", {})["alternate"] = info | {
                "gated_reps": gated,
                "alternated": bool(info["alternated"]) and all(g == reps for g in gated.values()),
            }
        return recs

    def repeated_keys(self) -> list[str]:
        first = {(r.key, r.side): r.record for r in self.records if r.round == 1}
        return [
            k for k in self.keys if all(first[(k, s)]["outcome"]["status"] == "ok" for s in "ab")
        ]


def _await_both(futures: Mapping[str, Future[CellRecord]]) -> dict[str, CellRecord]:
    """Both sides' records; on Ctrl-C (or any error) kill the running workers and wait for
    their supervising threads before raising (no process is left behind)."""
    try:
        return {name: f.result() for name, f in futures.items()}
    except BaseException:
        _settle(futures)
        raise


def _gated_reps(rec: CellRecord) -> int:
    return int((evidence_of(rec).get("turns") or {}).get("gated_reps", 0))


def _settle(futures: Mapping[str, Future[CellRecord]]) -> None:
    """Kill the running workers until every supervising thread has returned."""
    while not all(f.done() for f in futures.values()):
        process.kill_live()
        time.sleep(0.05)


def counted_window(rec: CellRecord) -> list[float] | None:
    """The monotonic [start, end] of a record's counted repetitions (the window its contention
    was read over), or None where the record has none."""
    busy: Mapping[str, Any] = rec["metrics"].get(M.HOST_BUSY_CORES) or {}
    window = busy.get("window_monotonic")
    if busy.get("window") != "the counted repetitions" or not window:
        return None
    return [float(window[0]), float(window[1])]


def overlap(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    """The share of the shorter window that the other covers (0 when apart), or None when a
    window is unknown."""
    if a is None or b is None:
        return None
    shorter = min(a[1] - a[0], b[1] - b[0])
    if shorter <= 0:
        return None
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) / shorter


def duet_blocks(threads: int, cpus: Iterable[int]) -> tuple[CpuBlock, CpuBlock] | None:
    """Two disjoint blocks of ``threads`` CPUs from ``cpus``, or None when there are fewer
    than twice ``threads``."""
    pool = sorted(cpus)
    if threads < 1 or len(pool) < 2 * threads:
        return None
    return tuple(pool[:threads]), tuple(pool[threads : 2 * threads])


def choose_mode(
    requested: str, threads: Iterable[int], cpus: Iterable[int]
) -> tuple[tuple[CpuBlock, ...], str]:
    """The CPU blocks of a duet comparison (empty for the other modes) and how the mode was
    chosen; CompareError for a duet on a host with fewer than twice the cells' threads."""
    if requested != "duet":
        return (), f"{requested} (--mode {requested})"
    pool = sorted(cpus)
    most = max(threads, default=1)
    blocks = duet_blocks(most, pool)
    if blocks is None:
        msg = (
            f"--mode duet: {len(pool)} CPU(s) here, a duet of {most}-thread cells needs "
            f"{2 * most}; use --mode alternate"
        )
        raise CompareError(msg)
    return blocks, f"duet, sides on CPUs {list(blocks[0])} and {list(blocks[1])} (--mode duet)"


def choose_k(settings: Settings, first_s: float, repeat_s: float) -> tuple[int, str]:
    """K and how it was chosen, from the settings and round 1's times."""
    if settings.budget_s is None:
        if settings.rounds is None:
            return DEFAULT_ROUNDS, f"default K = {DEFAULT_ROUNDS}"
        return settings.rounds, f"K = {settings.rounds} (--rounds)"
    if repeat_s <= 0:
        return 1, "nothing to repeat: no cell ended ok on both sides in round 1"
    fits = 1 + math.floor(max(0.0, settings.budget_s - first_s) / repeat_s)
    k = max(MIN_ROUNDS, fits)
    if settings.rounds is not None:
        k = min(k, max(settings.rounds, 1))
    why = (
        f"K = {k} from --budget-s {settings.budget_s:g}: round 1 took {first_s:.1f} s, "
        f"{repeat_s:.1f} s of it in cells that repeat"
    )
    if fits < MIN_ROUNDS <= k:
        why += f" (the budget fits {fits}; a paired test needs {MIN_ROUNDS})"
    if settings.rounds is not None and k == settings.rounds and fits > k:
        why += f" (capped by --rounds {settings.rounds})"
    return k, why


#: the parent's CPU sampling interval during an alternate comparison's counted repetitions: each
#: repetition's contention is read alone, so it needs samples inside it (the default 0.25 s is
#: longer than a small model's repetition)
TURN_SAMPLE_INTERVAL_S = 0.05


def _sample_turns_finely(sides: Mapping[str, Side], keys: Sequence[str]) -> None:
    for side in sides.values():
        for key in keys:
            cell = side.cells[key]
            every = min(float(cell.run["counted_sample_interval_s"]), TURN_SAMPLE_INTERVAL_S)
            side.cells[key] = dataclasses.replace(
                cell, run=dict(cell.run) | {"counted_sample_interval_s": every}
            )


def balanced_turns(warmup: int, counted: int) -> tuple[int, int]:
    """ABBA turns with as many counted repetitions of each side right after its own turn:
    (warm-up, counted) with at least one warm-up and an even count, made by turning the first
    counted repetitions into warm-ups (the total of turns is unchanged); as asked when that
    leaves fewer than two counted.

    In A B B A order the side first in the round's order follows itself at its turns 2, 4, ...
    and the other at its turns 1, 3, ... (0-based), so over an even count from turn 1 on each
    side has as many of each. With an odd count the side second in the order has one more:
    measured at the default shape (llama.cpp ``small`` f32, 2 threads, p128) a prefill right
    after the same process's turn ran ~12 % faster than one after the other process's, which
    made PP's per-round spread ~1.5 x what the balanced count gives (``benchmarks/pp_spread.py``;
    TG showed no such effect)."""
    w, n = warmup, counted
    while (w < 1 or n % 2) and n > 2:
        w, n = w + 1, n - 1
    return (w, n) if w >= 1 and n % 2 == 0 else (warmup, counted)


def _balance_turns(sides: Mapping[str, Side], keys: Sequence[str]) -> str:
    """Apply :func:`balanced_turns` to every cell of an ABBA comparison; what changed, in words
    (empty when nothing did)."""
    said: set[str] = set()
    for side in sides.values():
        for key in keys:
            cell = side.cells[key]
            w, n = int(cell.run["warmup"]), int(cell.run["repetitions"])
            bw, bn = balanced_turns(w, n)
            if (bw, bn) != (w, n):
                run = dict(cell.run) | {"warmup": bw, "repetitions": bn}
                side.cells[key] = dataclasses.replace(cell, run=run)
                said.add(f"{bn} counted after {bw} warm-up(s) where {n} after {w} were asked")
    if not said:
        return ""
    return (
        f"; {', '.join(sorted(said))}: an even count, so each side's counted repetitions "
        "follow its own turn as often as the other's"
    )


def _shared_keys(sides: Mapping[str, Side], progress: Progress) -> list[str]:
    a, b = sides["a"], sides["b"]
    for side, other in ((a, b), (b, a)):
        for key in side.cells.keys() - other.cells.keys():
            progress(f"rtmatrix compare: {key} planned on side {side.spec.name.upper()} only")
    return [k for k in a.cells if k in b.cells]


def _save_side(side: Side, records: Sequence[RoundRecord], results_dir: Path) -> Path:
    rec = side.ctx.record
    mine: dict[str, list[CellRecord]] = {}
    for r in records:
        if r.side == side.spec.name:
            mine.setdefault(r.key, []).append(r.record)
    rec["cells"] = [worst(recs) for recs in mine.values()]
    rec["matrix"]["n_cells"] = len(rec["cells"])
    rec["comparison_side"] = side.spec.name
    rec["status"] = "complete"
    rec["finished_utc"] = datetime.now(UTC).isoformat()
    path = results_dir / f"{rec['run_id']}-{side.spec.name}.json"
    results_dir.mkdir(parents=True, exist_ok=True)
    save_run(rec, path)
    return path


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_comparison(
    matrix: Matrix,
    a: SideSpec,
    b: SideSpec,
    settings: Settings,
    results_dir: Path,
    progress: Progress = _stderr,
    cwd: Path | None = None,
    only: Callable[[Cell], bool] | None = None,
) -> tuple[Comparison, dict[str, Path]]:
    """Run the comparison; returns it and the two sides' run files."""
    sides = {s.name: prepare_side(s, matrix, cwd, only) for s in (a, b)}
    keys = _shared_keys(sides, progress)
    for side in sides.values():
        _warm_fixtures([side.cells[k] for k in keys], side.describe)
    if settings.mode not in MODES:
        msg = f"mode {settings.mode!r}: expected one of {', '.join(MODES)}"
        raise CompareError(msg)
    if settings.turns not in PATTERNS:
        msg = f"turns {settings.turns!r}: expected one of {', '.join(PATTERNS)}"
        raise CompareError(msg)
    threads = [int(side.cells[k].params["threads"]) for side in sides.values() for k in keys]
    blocks, mode_how = choose_mode(settings.mode, threads, os.sched_getaffinity(0))
    alternate = settings.mode == "alternate"
    balanced = ""
    if alternate:
        _sample_turns_finely(sides, keys)
        mode_how += f", {settings.turns.upper()} turns"
        if settings.turns == "abba":
            balanced = _balance_turns(sides, keys)
            mode_how += balanced
    rounds = Rounds(sides, keys, settings, progress, blocks=blocks, alternate=alternate)
    rounds.k = (settings.rounds or DEFAULT_ROUNDS) if settings.budget_s is None else 0
    progress(f"rtmatrix compare: {len(keys)} cell(s), A = {a.python}, B = {b.python}")
    progress(f"rtmatrix compare: {mode_how}")
    repeat_s = rounds.run_round(1, keys)
    rounds.k, rounds.k_how = choose_k(settings, rounds.round_s[0], repeat_s)
    progress(f"rtmatrix compare: {rounds.k_how}")
    again = rounds.repeated_keys()
    for rnd in range(2, rounds.k + 1):
        rounds.run_round(rnd, again)
    paths = {name: _save_side(side, rounds.records, results_dir) for name, side in sides.items()}
    recorded = settings.to_dict() | {
        "k": rounds.k,
        "k_how": rounds.k_how,
        "mode_used": settings.mode,
        "mode_how": mode_how,
        "turns_balanced": bool(balanced),
        "matrix": str(matrix.path),
        "round_s": rounds.round_s,
        "runs": {name: str(p) for name, p in paths.items()},
        "run_ids": {name: str(side.ctx.record["run_id"]) for name, side in sides.items()},
    }
    comparison = build(
        rounds.records,
        {name: side.describe_dict() for name, side in sides.items()},
        recorded,
        settings.metrics,
        settings.criteria(),
        settings.alpha,
    )
    return comparison, paths
