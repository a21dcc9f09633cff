"""The typed, versioned contract between the runner (parent) and a worker (child).

The parent writes a :class:`Job` to ``job.json``; the worker appends :class:`PhaseEvent` lines to
``events.jsonl`` as it goes and writes a :class:`WorkerResult` (with its :class:`Repetition` list)
to ``result.json``. Every document carries ``protocol``: a worker refuses a job of another
protocol version, and the parent refuses a result of another version, each with a message that
names both versions and the fix — a job written by one rtmatrix and read by another either works
or is refused, never misread. A missing or unknown key is refused the same way, naming the key.

Bump :data:`PROTOCOL_VERSION` when a field is added, removed, renamed or changes meaning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from rtmatrix.doc import (
    PROTOCOL_VERSION,
    QUALITY_LOGITS,
    Doc,
    ProtocolError,
    _Doc,
    check_version,
)
from rtmatrix.numerics import StackReport

__all__ = ["PROTOCOL_VERSION", "QUALITY_LOGITS", "Doc", "ProtocolError", "check_version"]


@dataclass(frozen=True)
class JobParams(_Doc):
    """The cell's parameters as the worker needs them."""

    _what: ClassVar[str] = "job.params"

    n_ctx: int
    threads: int
    prompt_tokens: int
    gen_tokens: int
    repetitions: int
    warmup: int


@dataclass(frozen=True)
class Job(_Doc):
    """What one worker process runs: one cell."""

    _nested: ClassVar[dict[str, type[_Doc]]] = {"params": JobParams}
    _what: ClassVar[str] = "job"

    adapter: str
    model_path: str
    params: JobParams
    scenario: str = "generate"
    #: ``cell`` (load the model, run the scenario) or ``reference`` (run the runtime's own
    #: benchmark tool on the file with the cell's settings: Adapter ReferenceBenchmark)
    task: str = "cell"
    options: dict[str, Any] = field(default_factory=dict)
    power: dict[str, Any] = field(default_factory=dict)
    address_space_cap_mb: int | None = None
    cgroup_procs: str | None = None
    timeout_s: float = 600.0
    #: a real model's whole quality text as token ids (the harness's tokenization) and the text:
    #: after the timed generation, the worker feeds the ids teacher-forced and keeps the logits
    quality_ids: list[int] | None = None
    quality_text: str | None = None
    #: how many of ``quality_ids`` to score (the first positions + 1 are fed)
    quality_positions: int = 0
    #: the timed generation's prompt as ids (a real model's text), instead of the seeded ids
    prompt_ids: list[int] | None = None
    #: a ``reference`` task of a real model: the runtime's own quality tool judges the cell's
    #: file against this base file (the f32 export) over the first ``anchor_n_ctx`` ids of
    #: ``quality_text`` (Adapter ReferenceQuality)
    anchor_base_path: str | None = None
    anchor_n_ctx: int = 0
    #: a Unix socket to take turns on before each counted repetition (``compare --mode
    #: alternate``, :mod:`rtmatrix.turns`); None: run the repetitions freely
    turns: str | None = None
    #: the cell's requested dtype (None: a user's file): the runtime's home judges its kernels
    #: and numerics against it (a quantized file's weights decompressed, f32 computed in bf16)
    dtype: str | None = None
    protocol: int = PROTOCOL_VERSION

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict()), "utf-8")

    @classmethod
    def read(cls, path: Path) -> Job:
        """Read and check a job file; :class:`ProtocolError` names the file and the problem."""
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            msg = f"cannot read job file {path}: {exc}"
            raise ProtocolError(msg) from exc
        if not isinstance(data, dict):
            msg = f"job file {path}: expected a JSON object"
            raise ProtocolError(msg)
        check_version(data, f"job file {path}")
        return cls.from_dict(data, f"job file {path}")


@dataclass(frozen=True)
class Repetition(_Doc):
    """One timed generation: prefill, first token, then single-token decode calls."""

    _what: ClassVar[str] = "result.reps[]"

    pp_s: float
    pp_tokens: int
    ttft_s: float
    decode_s: list[float]
    step_s: list[float]
    tokens: list[int]
    counters: dict[str, float]
    nonfinite_steps: int
    first_token_monotonic: float
    #: monotonic start and end of the repetition (the window contention is measured over)
    t_start: float
    t_end: float
    energy: dict[str, Any] | None = None


@dataclass
class QualityPass(_Doc):
    """The teacher-forced pass over ``Job.quality_ids`` (its logits are ``QUALITY_LOGITS``
    beside the result): positions scored, wall time, the runtime's tokenizer against the
    harness's, or why the pass failed (the timed figures stand)."""

    _what: ClassVar[str] = "result.quality"

    positions: int = 0
    wall_s: float | None = None
    #: ``agree``, token counts and the first mismatch; or ``{"unavailable": why}``
    tokenizer: dict[str, Any] | None = None
    error: str | None = None
    traceback_tail: str | None = None


@dataclass(frozen=True)
class TurnsRecord(_Doc):
    """How the counted repetitions took turns (``Job.turns``, ``compare --mode alternate``)."""

    _what: ClassVar[str] = "result.turns"

    #: repetitions run on a granted turn (warm-up included)
    gated_reps: int = 0
    #: why the worker stopped waiting for turns (None: it never did)
    released: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gated_reps": self.gated_reps}
        if self.released:
            out["released"] = self.released
        return out


@dataclass(frozen=True)
class ProbeRound(_Doc):
    """One round of the prompt-cache probe, each generation timed as a counted repetition is:
    per pair, a fresh prompt of the timed prompt's length (other ids), then the timed prompt
    twice — the first brings it back after the fresh one (``rewarm``: a cache that holds one
    prompt has just lost it), the second repeats it right after itself, as the counted
    repetitions do (``repeat``)."""

    _what: ClassVar[str] = "result.self_check.rounds[]"

    fresh_ttft_s: list[float]
    repeat_ttft_s: list[float]
    rewarm_ttft_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class LogitGap(_Doc):
    """Where a counted repetition's ids left the parity pass's (the first counted repetition):
    the parity pass replayed to that position, and the runtime's own logit of the parity
    pass's id there minus that of the repetition's id (a near tie, or a clear margin)."""

    _what: ClassVar[str] = "result.self_check.gaps[]"

    rep: int
    position: int
    parity_id: int
    rep_id: int
    logit_gap: float | None = None
    #: why there is no gap (an id outside the logits, the replay failed)
    why_not: str | None = None


@dataclass
class SelfCheckProbe(_Doc):
    """What the worker measured for the parent's self-checks (:mod:`rtmatrix.metrics.selfcheck`)
    beyond the counted repetitions: how the ids were produced, the prompt-cache probe, and the
    runtime's logit gap where a counted repetition's ids left the parity pass's."""

    _nested: ClassVar[dict[str, type[_Doc]]] = {"rounds": ProbeRound, "gaps": LogitGap}
    _what: ClassVar[str] = "result.self_check"

    #: ``harness`` (the harness's prefill/decode loop picks the ids, banned ids masked) or
    #: ``engine`` (the runtime's own loop, EngineGeneration)
    loop: str = "harness"
    #: the ids the loop was told never to pick (end of sequence)
    banned: list[int] = field(default_factory=list)
    #: the runtime home's word on prompt caching (PromptCaching), None where it says nothing
    caches_prompts: bool | None = None
    cache_setting: str | None = None
    #: ids generated per probe generation (1 on the harness's loop: TTFT ends at the first)
    probe_gen_tokens: int = 0
    rounds: list[ProbeRound] = field(default_factory=list)
    #: why the probe did not run, or stopped (a 1-token prompt, the runtime's error)
    probe_skipped: str | None = None
    gaps: list[LogitGap] = field(default_factory=list)


@dataclass
class PowerRecord(_Doc):
    """The worker's energy meter (:meth:`rtmatrix.metrics.power.PhaseMeter.info`): the sources
    it opened, each with the devices it meters, or why none opened."""

    _what: ClassVar[str] = "result.power"

    #: the open sources' names joined by ``+``; None: no source opened (``reason``)
    meter: str | None = None
    #: per open source: name, source kind, devices, resolution and update interval
    meters: list[dict[str, Any]] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    min_steps: int | None = None
    #: every source tried, with why it did not open
    tried: dict[str, str] = field(default_factory=dict)
    reason: str | None = None
    #: why the background polling thread could not start (phase edges only)
    poll_thread: str | None = None


@dataclass
class ReferenceFigures(_Doc):
    """A ``reference`` task's figures: the runtime's own benchmark tool's per-repetition PP and
    TG (``ReferenceBenchmark``; a phase it did not report is empty), the tool's evidence
    (tool, version, command, settings), and, when asked, the quality tool's figures."""

    _what: ClassVar[str] = "result.reference"

    pp_tps: list[float] = field(default_factory=list)
    tg_tps: list[float] = field(default_factory=list)
    #: the tool's own record (free-form per tool: ``tool``, ``tool_version``, ``command``, ...)
    evidence: dict[str, Any] = field(default_factory=dict)
    #: the quality tool's figures (``kld_mean``, ``same_top_pct`` with uncertainties and its
    #: evidence), or ``{"unavailable": reason}``; None: not asked
    quality: dict[str, Any] | None = None


class WorkerStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    UNAVAILABLE = "unavailable"


@dataclass
class WorkerResult(_Doc):
    """What the worker reports about its cell (``result.json``)."""

    _nested: ClassVar[dict[str, type[_Doc]]] = {
        "reps": Repetition,
        "warmup": Repetition,
        "stack": StackReport,
        "quality": QualityPass,
        "turns": TurnsRecord,
        "self_check": SelfCheckProbe,
        "reference": ReferenceFigures,
        "power": PowerRecord,
    }
    _what: ClassVar[str] = "result"

    status: str = WorkerStatus.ERROR.value
    phase: str | None = None
    message: str | None = None
    error_type: str | None = None
    #: the failure's kind (rtmatrix.outcome.ErrorKind), classified in the worker
    error_kind: str | None = None
    traceback_tail: str | None = None
    runtime_version: str | None = None
    vocab_size: int | None = None
    special_ids: dict[str, int] = field(default_factory=dict)
    timeline: dict[str, float] = field(default_factory=dict)
    reps: list[Repetition] = field(default_factory=list)
    warmup: list[Repetition] = field(default_factory=list)
    #: the adapter's debug/placement evidence (free-form, runtime-specific)
    evidence: dict[str, Any] | None = None
    #: backend, kernels and effective numerics as the runtime's home reports them
    #: (capability StackReporting); None when the adapter does not offer it or nothing ran
    stack: StackReport | None = None
    #: why ``stack`` is None (the capability missing, or the report failed)
    stack_unavailable: str | None = None
    #: a lifecycle scenario's result (see rtmatrix.scenarios)
    scenario: dict[str, Any] | None = None
    #: the worker's energy meter (its sources and their devices, or why none opened)
    power: PowerRecord | None = None
    #: how the counted repetitions took turns (``Job.turns``): gated count, why released
    turns: TurnsRecord | None = None
    #: a ``reference`` task's figures (the runtime's own benchmark and quality tools)
    reference: ReferenceFigures | None = None
    #: the teacher-forced pass over ``Job.quality_ids`` (positions, wall time, tokenizer check)
    quality: QualityPass | None = None
    #: what the parent's self-checks need beyond the counted repetitions (prompt-cache probe,
    #: logit gaps where a repetition's ids left the parity pass's); None: no timed generation
    self_check: SelfCheckProbe | None = None
    protocol: int = PROTOCOL_VERSION

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict()), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def parse(cls, data: object, where: str) -> WorkerResult:
        if not isinstance(data, dict):
            msg = f"{where}: expected a JSON object"
            raise ProtocolError(msg)
        check_version(data, where)
        return cls.from_dict(data, where)


@dataclass(frozen=True)
class PhaseEvent(_Doc):
    """One line of ``events.jsonl``: a phase the worker entered, a cold-start mark, or one line
    the runtime logged (``log``: ``[level, text]``), written as it arrives so that a worker
    killed by a signal still leaves the runtime's last words behind."""

    _what: ClassVar[str] = "event"

    t: float
    phase: str | None = None
    mark: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    log: list[str] | None = None

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in self.to_dict().items() if v not in (None, {})})


def read_events(path: Path) -> list[PhaseEvent]:
    """The events a worker wrote, skipping a last line cut short by a crash."""
    try:
        lines = path.read_text("utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(PhaseEvent.from_dict(json.loads(line)))
        except (ValueError, ProtocolError):
            continue
    return out


def read_log_lines(path: Path) -> list[str]:
    """The runtime log lines a worker wrote to its events (``[level] text``), in order."""
    return [f"[{e.log[0]}] {e.log[1]}" for e in read_events(path) if e.log and len(e.log) == 2]
