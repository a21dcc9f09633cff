"""What the ``serve`` scenario's two ways share, through a server (:mod:`.serve`) and in process
(:mod:`.batch`): the typed options, the typed result (the dict form crosses to the parent), the
state of one run, and the per-round record of the client's view. Nothing here imports a
runtime."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypedDict

from rtmatrix.names import Scenario
from rtmatrix.protocol import Job
from rtmatrix.scenarios import invariance
from rtmatrix.scenarios.spec import ABSENT_WHEN_NONE, Lifecycle, ScenarioOptions, ScenarioResult
from rtmatrix.scenarios.trace import RequestTrace, check, clock, gaps, trace_checks


@dataclass(frozen=True)
class ServeOptions(ScenarioOptions):
    serve_concurrency: list[int] = field(default_factory=lambda: [1, 2, 4])
    serve_rounds: int = 2
    #: tokens per request (None: the job's ``gen_tokens``)
    serve_tokens: int | None = None
    serve_slow_delay_s: float = 0.05
    serve_slow_tokens: int = 16
    serve_interrupt_requests: bool = False
    serve_interrupt_probe: bool = True
    serve_start_timeout_s: float = 90.0
    serve_request_timeout_s: float = 60.0
    serve_invariance: bool = True
    # the batch-invariance phase's (rtmatrix.scenarios.invariance.DEFAULTS)
    invariance_requests: int = invariance.DEFAULTS["invariance_requests"]
    invariance_tie_margin: float = invariance.DEFAULTS["invariance_tie_margin"]
    invariance_n_probs: int = invariance.DEFAULTS["invariance_n_probs"]

    @classmethod
    def from_job(cls, job: Job) -> Self:
        known = cls.defaults()
        opts = {**known, **{k: v for k, v in job.options.items() if k in known}}
        levels = opts["serve_concurrency"]
        if not (
            isinstance(levels, list)
            and levels
            and all(isinstance(n, int) and 0 < n <= 16 for n in levels)
        ):
            msg = f"options.serve_concurrency must be a list of 1..16, got {levels!r}"
            raise ValueError(msg)
        return cls(
            serve_concurrency=list(levels),
            serve_rounds=int(opts["serve_rounds"]),
            serve_tokens=int(opts["serve_tokens"]) if opts["serve_tokens"] else None,
            serve_slow_delay_s=float(opts["serve_slow_delay_s"]),
            serve_slow_tokens=int(opts["serve_slow_tokens"]),
            serve_interrupt_requests=bool(opts["serve_interrupt_requests"]),
            serve_interrupt_probe=bool(opts["serve_interrupt_probe"]),
            serve_start_timeout_s=float(opts["serve_start_timeout_s"]),
            serve_request_timeout_s=float(opts["serve_request_timeout_s"]),
            serve_invariance=bool(opts["serve_invariance"]),
            invariance_requests=int(opts["invariance_requests"]),
            invariance_tie_margin=float(opts["invariance_tie_margin"]),
            invariance_n_probs=int(opts["invariance_n_probs"]),
        )


class ServeRound(TypedDict):
    """One round of N concurrent requests, per request (the client's view)."""

    ttft_s: list[float | None]
    tpot_s: list[float | None]
    tokens: list[int]
    terminal: list[str | None]
    wall_s: float
    errors: int


#: the dict form's keys with a server (the order the run sets them) ...
SERVER_KEYS = (
    "scenario", "runtime", "api", "counters_doc", "counter_labels", "prompt_tokens",
    "max_tokens", "masked_token_ids", "skipped", "server_settings", "server_argv", "startup_s",
    "endpoints", "rss_start", "levels", "server_levels", "invariance", "disconnect", "slow",
    "malformed", "rss_after_abuse", "survival", "stop", "server_log_tail", "interrupt_probe",
    "findings", "traces", "checks",
)  # fmt: skip
#: ... and in process (a BatchEngine: rtmatrix.scenarios.batch)
BATCH_KEYS = (
    "scenario", "runtime", "api", "in_process", "prompt_tokens", "max_tokens",
    "masked_token_ids", "skipped", "levels", "startup_s", "startup_method", "startup_error",
    "invariance", "engine_state", "findings", "traces", "checks",
)  # fmt: skip


@dataclass
class ServeResult(ScenarioResult):
    """What the worker's half of ``serve`` found, through a server or in process
    (``in_process``); its dict form crosses to the parent. ``levels``: concurrency -> its
    rounds; ``server_levels``: concurrency -> what the server's own counters and slots said
    (``ServerCounters``); a phase that did not run is absent (``skipped`` says why)."""

    scenario: str = Scenario.SERVE.value
    runtime: str | None = None
    api: str | None = None
    in_process: bool = False
    counters_doc: str | None = None
    #: the server's words for a neutral counter, where the detail says them (ServerCounters)
    counter_labels: dict[str, str] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    masked_token_ids: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    server_settings: dict[str, Any] | None = None
    server_argv: list[str] | None = None
    startup_s: float | None = None
    startup_method: str | None = None
    startup_error: str | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    endpoints: dict[str, int | None] = field(default_factory=dict)
    rss_start: int | None = None
    levels: dict[str, list[ServeRound]] = field(default_factory=dict)
    server_levels: dict[str, dict[str, Any]] = field(default_factory=dict)
    invariance: dict[str, Any] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    disconnect: dict[str, Any] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    slow: dict[str, Any] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    malformed: dict[str, Any] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    rss_after_abuse: int | None = None
    survival: dict[str, Any] | None = None
    stop: dict[str, Any] | None = None
    server_log_tail: str | None = None
    interrupt_probe: dict[str, Any] | None = field(default=None, metadata=ABSENT_WHEN_NONE)
    engine_state: dict[str, Any] | None = None
    findings: list[str] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)

    def key_order(self) -> Sequence[str]:
        return BATCH_KEYS if self.in_process else SERVER_KEYS

    def lifecycle(self) -> Lifecycle:
        extra = {"invariance": invariance.summary(self.invariance)} if self.invariance else {}
        return Lifecycle(self.api, self.checks, self.findings, self.skipped, self.traces, extra)


@dataclass
class ServeRun:
    """What the phases of one ``serve`` run share: options, budget, the result being filled,
    the traces and checks so far, the request body."""

    job: Job
    opts: ServeOptions
    res: ServeResult
    n_tok: int
    timeout: float
    budget: float
    origin: float
    text: str = ""
    bias: dict[str, float] = field(default_factory=dict)
    traces: list[RequestTrace] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, job: Job) -> Self:
        opts = ServeOptions.from_job(job)
        return cls(
            job,
            opts,
            ServeResult(),
            n_tok=int(opts.serve_tokens or job.params.gen_tokens),
            timeout=opts.serve_request_timeout_s,
            budget=0.8 * job.timeout_s,
            origin=clock(),
        )

    def time_left(self, phase: str) -> bool:
        if clock() < self.origin + self.budget:
            return True
        self.res.skipped[phase] = (
            f"time budget ({self.budget:.0f} s = 0.8 x the cell timeout) spent"
        )
        return False

    def payload(self, max_tokens: int, prompt_text: str | None = None) -> dict[str, Any]:
        return {
            "prompt": self.text if prompt_text is None else prompt_text,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "logit_bias": self.bias,
        }

    def finish(self, found: list[str]) -> ServeResult:
        """The findings, the stored traces and their checks: the result is complete."""
        self.res.findings = found
        stored = [t.to_dict(self.origin) for t in self.traces]
        self.checks += trace_checks(stored, need_release=True, label="serve")
        self.res.traces = stored
        self.res.checks = self.checks
        return self.res


def ttft(tr: RequestTrace) -> float | None:
    if tr.first_token is None or tr.queued is None:
        return None
    return tr.first_token - tr.queued


def tpot(tr: RequestTrace) -> float | None:
    g = gaps(tr.tokens)
    return sum(g) / len(g) if g else None


def round_record(trs: list[RequestTrace]) -> ServeRound:
    t_first = min(t.queued for t in trs if t.queued is not None)
    t_last = max(t.terminal_t for t in trs if t.terminal_t is not None)
    return {
        "ttft_s": [ttft(t) for t in trs],
        "tpot_s": [tpot(t) for t in trs],
        "tokens": [len(t.tokens) for t in trs],
        "terminal": [t.terminal for t in trs],
        "wall_s": t_last - t_first,
        "errors": sum(1 for t in trs if t.terminal == "failed"),
    }


def completed_check(traces: list[RequestTrace], what: str) -> dict[str, Any]:
    """Every request of the concurrency levels completed."""
    sweep = [t for t in traces if t.name.startswith("c")]
    bad = [f"{t.name}: {t.terminal} {t.info}" for t in sweep if t.terminal != "completed"]
    return check(
        "serve_requests_completed",
        not bad and bool(sweep),
        f"{len(sweep) - len(bad)}/{len(sweep)} {what}"
        + (f"; {'; '.join(bad[:4])}"[:400] if bad else ""),
    )
