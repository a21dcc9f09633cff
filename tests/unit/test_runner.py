"""The parent side with test adapters in real worker processes (no runtime needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from rtmatrix.matrix import MatrixError, parse_matrix
from rtmatrix.results import load_run
from rtmatrix.runner import run_matrix
from tests.helpers.metrics import GENERATE_METRICS, SOURCES

HELPERS = "tests.helpers.adapters"


def matrix_text(*adapters: str, run: str = "timeout_s = 20", fixtures: str = "") -> str:
    rts = "".join(
        f"[[runtimes]]\nname = '{a.lower()}'\nadapter = '{HELPERS}:{a}'\n" for a in adapters
    )
    fixtures = fixtures or "[[fixtures]]\nmodel = 'tiny'\n"
    return (
        f"[run]\nrepetitions = 2\nwarmup = 1\n{run}\n"
        "[params]\nn_ctx = 64\nprompt_tokens = 6\ngen_tokens = 5\n"
        f"{rts}{fixtures}"
    )


def run(tmp_path: Path, repo: Path, text: str) -> dict[str, Any]:
    m = parse_matrix(text, tmp_path / "m.toml")
    lines: list[str] = []
    path = run_matrix(m, tmp_path / "results", progress=lines.append, cwd=repo)
    rec = cast(dict[str, Any], load_run(path))
    rec["_progress"] = lines
    return rec


def by_runtime(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["runtime"]: c for c in rec["cells"]}


def test_every_misbehaviour_is_a_recorded_outcome_and_the_run_continues(
    tmp_path: Path, repo: Path
) -> None:
    rec = run(
        tmp_path,
        repo,
        matrix_text(
            "SegfaultAdapter",
            "AbortAdapter",
            "RaisingAdapter",
            "MissingRuntimeAdapter",
            "NumpyAdapter",
        ),
    )
    cells = by_runtime(rec)
    assert rec["status"] == "complete" and len(rec["cells"]) == 5
    seg = cells["segfaultadapter"]["outcome"]
    assert seg["status"] == "crash" and seg["signal"] == "SIGSEGV" and seg["phase"] == "load"
    abort = cells["abortadapter"]["outcome"]
    assert abort["status"] == "crash" and abort["signal"] == "SIGABRT"
    assert abort["phase"] == "generate"
    err = cells["raisingadapter"]["outcome"]
    assert err["status"] == "error" and "unsupported model architecture" in err["message"]
    assert "ValueError" in cells["raisingadapter"]["evidence"]["traceback_tail"]
    missing = cells["missingruntimeadapter"]["outcome"]
    assert missing["status"] == "unavailable"
    assert missing["fix"] == "pip install 'rtmatrix[imaginary]'"
    ok = cells["numpyadapter"]
    assert ok["outcome"]["status"] == "ok"
    assert ok["parity"]["all_tokens_agree"] and ok["parity"]["max_abs_logit_err"] < 1e-4
    assert any("[5/5]" in line for line in rec["_progress"])


def test_crashed_cell_keeps_what_was_measured(tmp_path: Path, repo: Path) -> None:
    cell = by_runtime(run(tmp_path, repo, matrix_text("SegfaultAdapter")))["segfaultadapter"]
    m = cell["metrics"]
    assert m["cold_start_import_s"]["source"] == "harness-clock"
    assert m["cold_start_load_s"]["value"] is None
    assert m["peak_rss_os_bytes"]["value"] > 0
    assert cell["parity"]["status"] == "unavailable"
    assert "Segmentation fault" in cell["evidence"]["stderr_tail"]  # faulthandler's report


def test_hang_is_killed_at_the_timeout(tmp_path: Path, repo: Path) -> None:
    rec = run(tmp_path, repo, matrix_text("HangAdapter", run="timeout_s = 3"))
    out = rec["cells"][0]["outcome"]
    assert out["status"] == "hang" and out["phase"] == "load"
    assert rec["cells"][0]["verdict"] == "FAIL"
    assert 3 <= rec["cells"][0]["wall_s"] < 10


def test_memory_cap_gives_a_clean_out_of_memory_error(tmp_path: Path, repo: Path) -> None:
    rec = run(tmp_path, repo, matrix_text("HogAdapter", run="address_space_cap_mb = 1024"))
    out = rec["cells"][0]["outcome"]
    assert out["status"] == "error" and out["error_kind"] == "out-of-memory"
    assert "Unable to allocate" in out["message"]


def test_metrics_all_carry_a_source(tmp_path: Path, repo: Path) -> None:
    cell = run(tmp_path, repo, matrix_text("NumpyAdapter"))["cells"][0]
    assert set(cell["metrics"]) == GENERATE_METRICS
    for name, m in cell["metrics"].items():
        assert m["source"] in SOURCES, name
        assert (m["value"] is None) == (m["source"] == "unavailable"), name
    # the numpy adapter has no runtime counters: unavailable, never 0
    assert cell["metrics"]["tg_tps_counter"]["value"] is None
    assert cell["metrics"]["tg_tps"]["value"] > 0
    assert len(cell["metrics"]["tg_tps"]["samples"]) == 2


def test_user_model_has_no_reference(tmp_path: Path, repo: Path) -> None:
    from rtmatrix.fixtures import prepare_fixture

    fx = prepare_fixture("tiny", "tiny", "f32", None, "gguf")
    fixtures = f"[[fixtures]]\nname = 'mine'\npath = '{fx.path}'\n"
    cell = run(tmp_path, repo, matrix_text("NumpyAdapter", fixtures=fixtures))["cells"][0]
    assert cell["outcome"]["status"] == "ok"
    assert cell["parity"] == {
        "status": "unavailable",
        "reason": "user-supplied model file: no numpy reference for it",
    }


def test_missing_user_model_is_refused_at_load_and_one_gone_later_is_an_error_cell(
    tmp_path: Path, repo: Path
) -> None:
    gone = tmp_path / "gone.gguf"
    text = matrix_text("NumpyAdapter", fixtures=f"[[fixtures]]\nname = 'mine'\npath = '{gone}'\n")
    with pytest.raises(MatrixError, match=r"fixtures\[0\]\.path: .*does not exist; fix 'path'"):
        parse_matrix(text, tmp_path / "m.toml")
    gone.write_bytes(b"GGUF....")
    m = parse_matrix(text, tmp_path / "m.toml")
    gone.unlink()  # removed after the load: the cell says so
    rec = cast(dict[str, Any], load_run(run_matrix(m, tmp_path / "results", lambda _: None, repo)))
    cell = rec["cells"][0]
    assert cell["outcome"]["status"] == "error" and "does not exist" in cell["outcome"]["message"]


def test_unimportable_adapter_is_an_error_cell(tmp_path: Path, repo: Path) -> None:
    text = matrix_text().replace(
        "[[fixtures]]", "[[runtimes]]\nname='x'\nadapter='no_such_mod:X'\n[[fixtures]]"
    )
    cell = run(tmp_path, repo, text)["cells"][0]
    assert cell["outcome"]["status"] == "error"
    assert "cannot be imported" in cell["outcome"]["message"]


def test_interrupted_run_keeps_finished_cells(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rtmatrix import runner

    real = runner.run_cell
    calls = {"n": 0}

    def flaky(ctx: Any, cell: Any) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(ctx, cell)

    monkeypatch.setattr(runner.orchestrate, "run_cell", flaky)
    m = parse_matrix(matrix_text("NumpyAdapter", "RaisingAdapter"), tmp_path / "m.toml")
    with pytest.raises(KeyboardInterrupt):
        run_matrix(m, tmp_path / "res", progress=lambda _: None, cwd=repo)
    (path,) = (tmp_path / "res").glob("*.json")
    rec = load_run(path)
    assert rec["status"] == "interrupted" and len(rec["cells"]) == 1


def test_garbage_result_and_output_flood_are_recorded(tmp_path: Path, repo: Path) -> None:
    rec = run(tmp_path, repo, matrix_text("GarbageResultAdapter", "FloodAdapter"))
    cells = by_runtime(rec)
    garbage = cells["garbageresultadapter"]["outcome"]
    assert garbage["status"] == "crash" and "unreadable result" in garbage["message"]
    flood = cells["floodadapter"]
    assert flood["outcome"]["status"] == "ok"
    assert flood["evidence"]["stdout_tail"].endswith("LAST-STDOUT-LINE\n")
    assert len(flood["evidence"]["stdout_tail"]) <= 4000


def test_non_finite_logits_are_wrong_output(tmp_path: Path, repo: Path) -> None:
    rec = run(tmp_path, repo, matrix_text("NaNAdapter"))
    cell = rec["cells"][0]
    assert cell["outcome"]["status"] == "wrong-output"
    assert "non-finite logits" in cell["outcome"]["message"]
    assert cell["verdict"] == "FAIL"


def test_expectation_and_verdict_overrides(tmp_path: Path, repo: Path) -> None:
    fixtures = (
        "[[fixtures]]\nmodel = 'tiny'\nname = 'bad'\nexpect = 'error'\n"
        "[[fixtures]]\nmodel = 'tiny'\nname = 'lenient'\nexpect = 'error'\n"
        "verdicts = {crash = 'PASS'}\n"
    )
    rec = run(tmp_path, repo, matrix_text("SegfaultAdapter", "RaisingAdapter", fixtures=fixtures))
    v = {(c["runtime"], c["fixture"]["name"]): c["verdict"] for c in rec["cells"]}
    assert v[("segfaultadapter", "bad")] == "WARN"  # visible, but kills the process
    assert v[("segfaultadapter", "lenient")] == "PASS"  # the matrix's own rule
    assert v[("raisingadapter", "bad")] == "PASS"  # a clean error was expected


def test_memory_cgroup_oom_kill(tmp_path: Path, repo: Path) -> None:
    from rtmatrix import memcap

    try:
        memcap.create(2**20, "rtmatrix-probe").remove()
    except memcap.CgroupUnavailable as exc:
        rec = run(tmp_path, repo, matrix_text("GreedyAdapter", run="memory_cgroup_mb = 300"))
        out = rec["cells"][0]["outcome"]
        assert out["status"] == "unavailable" and "cannot create a memory cgroup" in out["message"]
        pytest.skip(f"this machine gives no memory cgroup: {exc}")
    rec = run(tmp_path, repo, matrix_text("GreedyAdapter", run="memory_cgroup_mb = 300"))
    cell = rec["cells"][0]
    assert cell["outcome"]["status"] == "oom-killed", cell["outcome"]
    assert cell["outcome"]["signal"] == "SIGKILL"
    assert cell["evidence"]["memory_cgroup"]["oom_kills"] >= 1
    assert not Path(cell["evidence"]["memory_cgroup"]["path"]).exists()  # cleaned up


@pytest.mark.usefixtures("ctrl_c")
def test_ctrl_c_keeps_finished_cells_kills_the_worker_and_resume_finishes(
    tmp_path: Path, repo: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    text = matrix_text("NumpyAdapter", "HangAdapter", run="timeout_s = 60")
    matrix = tmp_path / "m.toml"
    matrix.write_text(text)
    results = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=str(repo))
    cmd = [
        sys.executable,
        "-m",
        "rtmatrix",
        "run",
        str(matrix),
        "--results",
        str(results),
        "--no-report",
    ]
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    workers: list[psutil.Process] = []
    while time.monotonic() < deadline and not workers:
        time.sleep(0.2)
        workers = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if "HangAdapter" in " ".join(_job_adapter(p))
        ]
    assert workers, "the hanging worker never started"
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        _, err = proc.communicate()
        msg = f"rtmatrix run did not stop within 90 s of SIGINT: {err[-2000:]}"
        raise AssertionError(msg) from exc
    assert proc.returncode == 130, err
    assert "--resume" in err
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    (path,) = results.glob("*.json")
    rec = load_run(path)
    assert rec["status"] == "interrupted" and len(rec["cells"]) == 1
    matrix.write_text(text.replace("timeout_s = 60", "timeout_s = 2"))
    done = subprocess.run(
        [*cmd, "--resume", str(path)],
        cwd=repo,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rec = load_run(path)
    assert rec["status"] == "complete" and len(rec["cells"]) == 2
    assert [c["outcome"]["status"] for c in rec["cells"]] == ["ok", "hang"]


def _job_adapter(p: Any) -> list[str]:
    try:
        job = Path(p.cmdline()[-1])
        return [json.loads(job.read_text())["adapter"]] if job.name == "job.json" else []
    except Exception:
        return []


def test_os_peak_refuses_a_maxrss_inherited_from_the_parent() -> None:
    from rtmatrix.runner import os_peak

    assert os_peak(500, 100, 300) == (500, "ru_maxrss of the reaped worker (wait4)")
    value, method = os_peak(100, 900, 300)
    assert value == 300 and "VmHWM" in method
    assert os_peak(100, 900, 0)[0] is None


def _alive_with(mark: str) -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if any(mark in part for part in p.info["cmdline"] or []):
            out.append(p.info["pid"])
    return out


def test_a_detached_child_is_killed_and_recorded(tmp_path: Path, repo: Path) -> None:
    from tests.helpers.adapters import DetachedChildAdapter

    rec = run(tmp_path, repo, matrix_text("DetachedChildAdapter"))
    cell = rec["cells"][0]
    assert _alive_with(DetachedChildAdapter.MARK) == []
    leaked = cell["evidence"]["leaked_processes"]
    assert len(leaked) == 1 and leaked[0]["killed"]
    assert any(DetachedChildAdapter.MARK in part for part in leaked[0]["cmdline"])
    assert cell["outcome"]["status"] == "ok" and cell["verdict"] == "WARN"
    assert "outlived the cell" in cell["verdict_reason"]


def test_a_well_behaved_cell_leaks_nothing(tmp_path: Path, repo: Path) -> None:
    cell = run(tmp_path, repo, matrix_text("NumpyAdapter"))["cells"][0]
    assert cell["evidence"]["leaked_processes"] == [] and cell["verdict"] == "PASS"


def test_an_expected_failure_passes_only_for_the_expected_kind(tmp_path: Path, repo: Path) -> None:
    fixtures = (
        "[[fixtures]]\nmodel = 'tiny'\nname = 'arch'\nexpect = 'error'\n"
        "expect_kind = 'unknown-arch'\n"
        "[[fixtures]]\nmodel = 'tiny'\nname = 'oom'\nexpect = 'error'\n"
        "expect_kind = ['out-of-memory']\n"
    )
    rec = run(tmp_path, repo, matrix_text("RaisingAdapter", fixtures=fixtures))
    cells = {c["fixture"]["name"]: c for c in rec["cells"]}
    assert cells["arch"]["outcome"]["error_kind"] == "unknown-arch"
    assert cells["arch"]["verdict"] == "PASS" and "verdict_reason" not in cells["arch"]
    assert cells["oom"]["verdict"] == "WARN" and cells["oom"]["expect_kind"] == ["out-of-memory"]
    assert "not for the expected reason" in cells["oom"]["verdict_reason"]
    assert "unknown-arch" in cells["oom"]["verdict_reason"]


def test_a_cpu_hog_beside_the_cell_marks_it_contended(tmp_path: Path, repo: Path) -> None:
    import subprocess
    import sys

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        rec = run(
            tmp_path,
            repo,
            matrix_text(
                "NumpyAdapter",
                run="timeout_s = 60",
                fixtures="[[fixtures]]\nmodel = 'tiny'\nrun = { repetitions = 8 }\n",
            ),
        )
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    cell = rec["cells"][0]
    busy = cell["metrics"]["host_busy_cores"]
    assert busy["source"] == "os-accounting" and busy["value"] > 0.25
    assert cell["contended"] is True and busy["contended"] is True
    assert any("CONTENDED" in line for line in rec["_progress"])
