"""Outcome classification: how a cell ended, from process evidence and the worker's result only.

:func:`classify` reads the launch (timeout, signal, exit code) and the typed worker result;
:func:`refine` turns an ``ok`` whose output is wrong, whose lifecycle checks failed or that ran
somewhere else than asked into ``wrong-output`` / ``fallback``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rtmatrix.converters.base import ConverterRefused
from rtmatrix.outcome import ErrorKind, Status
from rtmatrix.protocol import WorkerResult
from rtmatrix.runner.process import Launch

_OOM_HINTS = (
    "bad_alloc",
    "out of memory",
    "cannot allocate memory",
    "failed to allocate",
    "unable to allocate",
    "memoryerror",
    "failed to mmap",
    "mmap failed",
)


@dataclass(frozen=True)
class CellOutcome:
    """How one cell ended (the record's ``outcome``)."""

    status: Status
    message: str
    phase: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    error_type: str | None = None
    error_kind: str | None = None
    fix: str | None = None
    runtime_version: str | None = None
    #: whether the process fields (exit_code, signal) are known: False before a worker ran
    process: bool = True
    #: who the failure is charged to when it is not the runtime: "converter" (the vendor's
    #: converter refused the checkpoint) or "input" (the user's file or text); None: the runtime
    charged_to: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": str(self.status), "phase": self.phase}
        if self.process:
            out |= {"exit_code": self.exit_code, "signal": self.signal}
        out["message"] = self.message
        optional = {
            "error_type": self.error_type,
            "error_kind": self.error_kind,
            "fix": self.fix,
            "runtime_version": self.runtime_version,
            "charged_to": self.charged_to,
        }
        # error_type was always present (maybe null) on worker-reported errors
        if self.status is Status.ERROR and self.process:
            out["error_type"] = self.error_type
            optional.pop("error_type")
        return out | {k: v for k, v in optional.items() if v is not None}

    def with_status(self, status: Status, message: str) -> CellOutcome:
        return replace(self, status=status, message=message)


def not_run(status: Status, phase: str, message: str, charged_to: str | None = None) -> CellOutcome:
    """The outcome of a cell that ended before a worker was started."""
    return CellOutcome(status=status, message=message, phase=phase, process=False,
                       charged_to=charged_to)  # fmt: skip


def converter_refused(exc: ConverterRefused) -> CellOutcome:
    """A cell whose checkpoint the row's own converter refused: an error of its own kind,
    charged to the converter (its version and command are in the message and the record)."""
    conv = exc.conversion
    return CellOutcome(
        status=Status.ERROR,
        message=str(exc),
        phase="convert",
        error_kind=str(ErrorKind.CONVERTER_REFUSED),
        fix=f"the checkpoint's architecture needs a {conv.tool} that supports it (an upgrade of "
        f"{conv.distribution}), or another row",
        process=False,
        charged_to="converter",
    )


def error_kind(result: WorkerResult) -> str | None:
    """The worker's classification; for a result without one, the parent's memory hints."""
    if result.error_kind:
        return result.error_kind
    blob = " ".join(
        [
            str(result.message),
            str(result.error_type),
            str((result.evidence or {}).get("log_tail", "")),
        ]
    ).lower()
    return "out-of-memory" if any(h in blob for h in _OOM_HINTS) else None


def _from_worker(lau: Launch, result: WorkerResult, extra: str | None) -> CellOutcome:
    status = Status(result.status)
    msg = str(result.message or ("completed" if status is Status.OK else status))
    out = CellOutcome(
        status=status,
        message=msg,
        phase=result.phase,
        exit_code=lau.returncode,
        signal=None,
    )
    if status is Status.ERROR:
        out = replace(out, error_type=result.error_type, error_kind=error_kind(result))
    if status is Status.UNAVAILABLE and extra:
        out = replace(out, fix=f"pip install 'rtmatrix[{extra}]'")
    return out


def classify(
    lau: Launch,
    result: WorkerResult | None,
    phase: str | None,
    cap_mb: int,
    extra: str | None,
    cgroup_oom: bool = False,
    problem: str | None = None,
) -> CellOutcome:
    """The outcome as the process evidence shows it: hang > the worker's own report > signal >
    bare exit code. ``problem`` says why a result file that exists could not be used."""
    if lau.timed_out:
        return CellOutcome(
            status=Status.HANG,
            message=f"no result within {lau.wall_s:.1f} s; process group killed "
            f"during phase '{phase}'",
            phase=phase,
            exit_code=lau.returncode,
            signal=lau.signal,
        )
    if result is not None and result.status in ("ok", "error", "unavailable"):
        return _from_worker(lau, result, extra)
    stderr_last = lau.stderr_tail.strip().splitlines()[-1:] or [""]
    detail = f": {stderr_last[0][:300]}" if stderr_last[0] else ""
    if lau.signal:
        oom = lau.signal == "SIGKILL" and bool(cap_mb or cgroup_oom)
        why = " (the kernel OOM killer, memory cgroup limit)" if cgroup_oom else ""
        return CellOutcome(
            status=Status.OOM_KILLED if oom else Status.CRASH,
            message=f"worker killed by {lau.signal}{why} during phase '{phase}'{detail}",
            phase=phase,
            exit_code=lau.returncode,
            signal=lau.signal,
            error_kind=str(ErrorKind.OUT_OF_MEMORY) if oom else None,
        )
    what = f"an unreadable result ({problem})" if problem else "no result"
    return CellOutcome(
        status=Status.CRASH,
        message=f"worker exited with code {lau.returncode} and {what} during phase "
        f"'{phase}'{detail}",
        phase=phase,
        exit_code=lau.returncode,
    )


def refine(outcome: CellOutcome, par: dict[str, Any], result: WorkerResult | None) -> CellOutcome:
    """An ok run whose output is wrong, or that did not run where it was asked, is not ok."""
    if outcome.status is not Status.OK or result is None:
        return outcome
    failed = [c for c in (result.scenario or {}).get("checks", []) if not c["ok"]]
    if failed:
        detail = "; ".join(f"{c['name']}: {c.get('detail', '')}" for c in failed)
        return outcome.with_status(Status.WRONG_OUTPUT, f"lifecycle check failed: {detail}")
    nonfinite = sum(r.nonfinite_steps for r in result.reps)
    if nonfinite:
        return outcome.with_status(Status.WRONG_OUTPUT, f"non-finite logits on {nonfinite} step(s)")
    conv = par.get("conversion") or {}
    if par.get("status") == "measured" and conv.get("changed_the_model"):
        return replace(
            outcome.with_status(Status.WRONG_OUTPUT, f"the conversion changed the model: "
                                f"{conv.get('summary')}"),
            charged_to="converter",
        )  # fmt: skip
    if par.get("status") == "measured" and not par.get("within_tolerance"):
        return outcome.with_status(
            Status.WRONG_OUTPUT,
            f"parity broken: {par['tokens_agree']}/{par['tokens_compared']} tokens agree "
            f"(first divergence at {par.get('first_divergence')}), "
            f"max|Δlogit| {par.get('max_abs_logit_err')}",
        )
    placement = (result.evidence or {}).get("placement") or {}
    if placement.get("fallback"):
        return outcome.with_status(
            Status.FALLBACK,
            "ran, but not where asked: requested "
            f"{placement.get('requested')}, used {placement.get('used')}"
            + (f" ({placement['detail']})" if placement.get("detail") else ""),
        )
    return outcome
