"""The child process that runs one cell: the only place an adapter (and so a runtime) is imported
and the only place a model file is opened.

``python -m rtmatrix.worker JOB.json`` reads the job, runs warm-up and counted repetitions of the
generation loop and writes ``result.json`` beside the job. Phases are appended to ``events.jsonl``
as they start, so a parent whose child died knows where it died. Exit codes: 0 ok, 3 error
recorded, 4 runtime unavailable, 2 bad job file.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

T_ENTRY = time.monotonic()

EXIT_OK, EXIT_BAD_JOB, EXIT_ERROR, EXIT_UNAVAILABLE = 0, 2, 3, 4


class Events:
    """Append-only phase log, flushed line by line so it survives a crash."""

    def __init__(self, path: Path) -> None:
        self._fh = path.open("a", encoding="utf-8", buffering=1)

    def _write(self, event: dict[str, Any]) -> None:
        self._fh.write(json.dumps(event) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def phase(self, name: str, **info: Any) -> None:
        self._write({"phase": name, "t": time.monotonic(), **info})

    def mark(self, name: str, t: float) -> None:
        """A cold-start timeline mark, kept even if the process dies later."""
        self._write({"mark": name, "t": t})

    def close(self) -> None:
        self._fh.close()


def _cap_address_space(cap_mb: int | None) -> None:
    if cap_mb:
        limit = int(cap_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def _run_repetition(
    adapter: Any, prompt: list[int], n_gen: int, banned: list[int], meter: Any = None
) -> dict[str, Any]:
    """One generation: prefill the prompt, then greedy-decode; every runtime call is timed.
    ``meter`` (counted repetitions) meters the prefill (to the first token id) and the decode."""
    import numpy as np

    from rtmatrix.fixtures.model import greedy_pick
    from rtmatrix.metrics.power import NULL_METER

    meter = meter or NULL_METER

    clock = time.perf_counter
    adapter.reset()
    with meter.phase("prefill"):
        t0 = clock()
        adapter.prefill(prompt)
        t_pp = clock()
        logits = adapter.last_logits()
        first_logits = logits
        nonfinite = 0 if np.isfinite(logits).all() else 1
        tokens = [greedy_pick(logits, banned)]
        t_first = clock()
        mono_first = time.monotonic()
    decode_s: list[float] = []
    step_s: list[float] = []
    with meter.phase("decode"):
        t_prev = clock()  # t_first, less the meter's read
        for _ in range(n_gen - 1):
            d0 = clock()
            adapter.decode(tokens[-1])
            decode_s.append(clock() - d0)
            logits = adapter.last_logits()
            if not np.isfinite(logits).all():
                nonfinite += 1
            tokens.append(greedy_pick(logits, banned))
            now = clock()
            step_s.append(now - t_prev)
            t_prev = now
    return {
        "pp_s": t_pp - t0,
        "pp_tokens": len(prompt),
        "ttft_s": t_first - t0,
        "decode_s": decode_s,
        "step_s": step_s,
        "tokens": tokens,
        "counters": adapter.counters(),
        "nonfinite_steps": nonfinite,
        "first_logits": first_logits,
        "first_token_monotonic": mono_first,
        "energy": meter.take(),
    }


def run_job(job: dict[str, Any], job_dir: Path, events: Events) -> tuple[int, dict[str, Any]]:
    import numpy as np

    from rtmatrix.adapters.base import LoadParams, RuntimeUnavailable, load_adapter_class
    from rtmatrix.adapters.capabilities import collect_evidence
    from rtmatrix.fixtures.model import make_prompt
    from rtmatrix.metrics import power

    result: dict[str, Any] = {"timeline": {}, "reps": [], "warmup": []}

    def mark(name: str, t: float) -> None:
        result["timeline"][name] = t
        events.mark(name, t)

    mark("worker_start", T_ENTRY)
    phase = "adapter"
    adapter = None
    meter: power.PhaseMeter | None = None
    try:
        events.phase(phase)
        adapter = load_adapter_class(job["adapter"])()
        adapter.configure(job.get("options", {}))
        phase = "import"
        events.phase(phase)
        result["runtime_version"] = adapter.import_runtime()
        mark("imported", time.monotonic())
        phase = "load"
        events.phase(phase)
        p = job["params"]
        params = LoadParams(n_ctx=p["n_ctx"], threads=p["threads"], options=job.get("options", {}))
        adapter.load(Path(job["model_path"]), params)
        mark("loaded", time.monotonic())
        ids = adapter.special_ids
        result["vocab_size"] = adapter.vocab_size
        result["special_ids"] = ids
        bos = ids.get("bos", -1)
        prompt = make_prompt(p["prompt_tokens"], adapter.vocab_size, bos if bos >= 0 else 1)
        banned = [ids["eos"]] if ids.get("eos", -1) >= 0 else []
        scenario = job.get("scenario", "generate")
        if scenario != "generate":
            from rtmatrix.scenarios import run_scenario

            phase = f"scenario:{scenario}"
            events.phase(phase)
            result["scenario"] = run_scenario(scenario, adapter, job, prompt, banned, mark)
        else:
            for i in range(p["warmup"] + p["repetitions"]):
                counted = i >= p["warmup"]
                if counted and meter is None:
                    phase = "power"
                    events.phase(phase)
                    meter = power.open_meter(job.get("power"))
                phase = "generate"
                events.phase(phase, repetition=i, counted=counted)
                rep = _run_repetition(
                    adapter, prompt, p["gen_tokens"], banned, meter if counted else None
                )
                if i == 0:
                    mark("first_token", rep["first_token_monotonic"])
                first_logits = rep.pop("first_logits")
                if counted and not result["reps"]:
                    np.save(job_dir / "first_logits.npy", first_logits)
                result["reps" if counted else "warmup"].append(rep)
        phase = "evidence"
        events.phase(phase)
        result["evidence"] = collect_evidence(adapter)
        phase = "close"
        events.phase(phase)
        adapter.close()
        result["status"] = "ok"
        return EXIT_OK, result
    except KeyboardInterrupt:
        raise
    except RuntimeUnavailable as exc:
        result |= {"status": "unavailable", "phase": phase, "message": str(exc)}
        return EXIT_UNAVAILABLE, result
    except Exception as exc:  # every failure becomes a recorded outcome
        result |= {
            "status": "error",
            "phase": phase,
            "error_type": type(exc).__name__,
            "message": str(exc) or type(exc).__name__,
            "traceback_tail": traceback.format_exc()[-4000:],
        }
        if adapter is not None:
            try:
                result["evidence"] = collect_evidence(adapter)
            except Exception as ev_exc:  # evidence is best effort after a failure
                result["evidence"] = {"error": f"evidence unavailable: {ev_exc}"}
        return EXIT_ERROR, result
    finally:
        if meter is not None:
            result["power"] = meter.info()
            meter.close()


def describe(target: str) -> dict[str, Any]:
    """The adapter's declared metadata, without importing its runtime."""
    from rtmatrix.adapters.base import load_adapter_class

    cls = load_adapter_class(target)
    return {k: getattr(cls, k, None) for k in ("name", "distribution", "extra", "container")}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--describe":
        try:
            print(json.dumps(describe(args[1])))
        except Exception as exc:
            print(json.dumps({"error": str(exc)}))
            return EXIT_ERROR
        return EXIT_OK
    if len(args) != 1:
        usage = "usage: python -m rtmatrix.worker JOB.json | --describe module:Class"
        print(usage, file=sys.stderr)
        return EXIT_BAD_JOB
    job_path = Path(args[0])
    try:
        job = json.loads(job_path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        print(f"rtmatrix.worker: cannot read job file {job_path}: {exc}", file=sys.stderr)
        return EXIT_BAD_JOB
    if job.get("cgroup_procs"):
        from rtmatrix.memcap import join

        join(job["cgroup_procs"])  # before anything big is allocated
    _cap_address_space(job.get("address_space_cap_mb"))
    events = Events(job_path.parent / "events.jsonl")
    try:
        code, result = run_job(job, job_path.parent, events)
    finally:
        events.close()
    _write_json(job_path.parent / "result.json", result)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
