"""A fleet on one machine: a Dask scheduler and labelled workers on loopback, as processes of
their own with temporary TLS certificates, running cells of the test adapters (the runtime does
not matter here). A worker killed mid-cell, a label nobody holds, a host of another protocol."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import psutil
import pytest

from rtmatrix.fleet import dispatch, local
from rtmatrix.fleet.payload import CellJob
from rtmatrix.matrix import parse_matrix
from rtmatrix.protocol import PROTOCOL_VERSION
from rtmatrix.results import load_run
from tests.conftest import REPO

LABELS = ("lab-a", "lab-b", "lab-c")
HELPERS = "tests.helpers.adapters"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[local.LocalCluster]:
    """Scheduler + three workers; every process of every tree is killed afterwards."""
    work = tmp_path_factory.mktemp("fleet")
    env = dict(os.environ, PYTHONPATH=_pythonpath(REPO))
    cl = local.start(LABELS, work, env=env)
    try:
        yield cl
    finally:
        cl.close()
        assert cl.survivors() == [], "a scheduler or worker process outlived the tests"


@pytest.fixture
def tls_env(cluster: local.LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in cluster.env.items():
        monkeypatch.setenv(k, v)


def matrix_text(targets: dict[str, str], run: str = "timeout_s = 30", extra: str = "") -> str:
    """``targets``: label -> test adapter class; one runtime row per adapter."""
    tg = "".join(f"[[targets]]\nlabel = '{lbl}'\nos = 'Linux'\n" for lbl in targets)
    by_adapter: dict[str, list[str]] = {}
    for lbl, adapter in targets.items():
        by_adapter.setdefault(adapter, []).append(lbl)
    rts = "".join(
        f"[[runtimes]]\nname = '{a.lower()}'\nadapter = '{HELPERS}:{a}'\ntargets = {lbls!r}\n"
        for a, lbls in by_adapter.items()
    )
    return (
        f"[run]\nrepetitions = 2\nwarmup = 1\n{run}\n"
        "[params]\nn_ctx = 64\nprompt_tokens = 6\ngen_tokens = 5\n"
        "[cluster]\nno_workers_timeout_s = 2\n"
        f"{tg}{rts}[[fixtures]]\nmodel = 'tiny'\n{extra}"
    )


def run(
    tmp_path: Path, repo: Path, cluster: local.LocalCluster, text: str, **kw: Any
) -> dict[str, Any]:
    m = parse_matrix(text, tmp_path / "m.toml")
    lines: list[str] = kw.pop("lines", [])
    path = dispatch.run_on_cluster(
        m, tmp_path / "results", cluster.address, progress=lines.append, cwd=repo, **kw
    )
    return cast(dict[str, Any], load_run(path))


def _cells(path: Path) -> dict[str, dict[str, Any]]:
    try:
        return {c["key"]: c for c in json.loads(path.read_text("utf-8"))["cells"]}
    except (OSError, ValueError):
        return {}


def _running_cell(proc: psutil.Process) -> bool:
    """Whether a cell's worker subprocess (python -m rtmatrix.worker JOB) runs under ``proc``."""
    for child in proc.children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "rtmatrix.worker" in cmd and "--describe" not in cmd:
            return True
    return False


class Killer(threading.Thread):
    """Kills the ``doomed`` worker once the other cells are saved and its cell is running."""

    def __init__(self, cluster: local.LocalCluster, results: Path, n_before: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.results, self.n_before = cluster, results, n_before
        self.before: dict[str, dict[str, Any]] = {}
        self.doomed_pids: list[int] = []

    def run(self) -> None:
        deadline = time.monotonic() + 60
        proc = psutil.Process(self.cluster.workers["doomed"].pid)
        while time.monotonic() < deadline:
            files = list(self.results.glob("*.json"))
            cells = _cells(files[0]) if files else {}
            done = [c for c in cells.values() if c["outcome"]["status"] == "ok"]
            if len(done) >= self.n_before and _running_cell(proc):
                self.before = {c["key"]: c for c in done}
                self.doomed_pids = [proc.pid] + [p.pid for p in proc.children(recursive=True)]
                self.cluster.kill_worker("doomed")
                return
            time.sleep(0.1)


@pytest.mark.usefixtures("tls_env")
def test_cells_spread_over_hosts_a_killed_host_is_host_lost_a_missing_label_unavailable(
    tmp_path: Path, repo: Path, cluster: local.LocalCluster
) -> None:
    cluster.add_worker("doomed", ["doomed"], dict(os.environ) | {"PYTHONPATH": _pythonpath(repo)})
    cluster.wait_for_workers(len(LABELS) + 1)
    doomed_address = _address_of(cluster, "doomed")
    targets = dict.fromkeys(LABELS, "NumpyAdapter") | {
        "doomed": "HangAdapter",
        "nobody": "NumpyAdapter",
    }
    killer = Killer(cluster, tmp_path / "results", n_before=len(LABELS))
    killer.start()
    rec = run(tmp_path, repo, cluster, matrix_text(targets))
    killer.join(5)
    cells = {c["target"]: c for c in rec["cells"]}
    assert rec["status"] == "complete" and set(cells) == set(targets)
    assert rec["fleet"]["tls"] is True and rec["fleet"]["allowed_failures"] == 0
    for label in LABELS:
        c = cells[label]
        assert c["key"].startswith(f"numpyadapter@{label}|tiny/f32|")
        assert c["outcome"]["status"] == "ok" and c["verdict"] == "PASS", c["outcome"]
        assert c["host"]["name"] == label and c["host"]["machine"]["os"] == "Linux"
        assert c["host"]["runtime"]["distribution"] == "numpy"
        assert c["parity"]["all_tokens_agree"]
    lost = cells["doomed"]
    assert lost["outcome"]["status"] == "host-lost" and lost["verdict"] == "FAIL"
    assert doomed_address in lost["outcome"]["message"] and "(doomed)" in lost["outcome"]["message"]
    assert lost["host"]["worker"] == doomed_address
    nobody = cells["nobody"]["outcome"]
    assert (
        nobody["status"] == "unavailable"
        and "no worker holding resource 'nobody'" in (nobody["message"])
    )
    # the cells that finished before the host died are in the file unchanged
    assert len(killer.before) == len(LABELS)
    assert all(rec_cell == _by_key(rec)[k] for k, rec_cell in killer.before.items())
    # the dead host's processes (its cell's worker subprocess too) are gone
    assert killer.doomed_pids and not [p for p in killer.doomed_pids if psutil.pid_exists(p)]


@pytest.mark.usefixtures("tls_env")
def test_a_host_of_another_protocol_version_is_unavailable_naming_both(
    tmp_path: Path, repo: Path, cluster: local.LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def job_v99(**kw: Any) -> CellJob:
        return dataclasses.replace(CellJob(**kw), protocol=99)

    monkeypatch.setattr(dispatch, "CellJob", job_v99)
    rec = run(tmp_path, repo, cluster, matrix_text({"lab-a": "NumpyAdapter"}))
    out = rec["cells"][0]["outcome"]
    assert out["status"] == "unavailable" and out["phase"] == "protocol"
    assert "protocol 99" in out["message"] and f"this rtmatrix {PROTOCOL_VERSION}" in out["message"]
    assert "(lab-a)" in out["message"]


@pytest.mark.usefixtures("tls_env")
def test_interrupt_keeps_finished_cells_and_resume_runs_the_rest(
    tmp_path: Path, repo: Path, cluster: local.LocalCluster
) -> None:
    text = matrix_text({"lab-b": "NumpyAdapter"}, extra="dtypes = ['f32', 'f16']\n")

    def interrupt_after_first(line: str) -> None:
        if line.startswith("[1/2]"):
            raise KeyboardInterrupt

    m = parse_matrix(text, tmp_path / "m.toml")
    with pytest.raises(KeyboardInterrupt):
        dispatch.run_on_cluster(
            m, tmp_path / "results", cluster.address, interrupt_after_first, cwd=repo
        )
    (path,) = (tmp_path / "results").glob("*.json")
    first = load_run(path)
    assert first["status"] == "interrupted" and len(first["cells"]) == 1
    rec = run(tmp_path, repo, cluster, text, resume=path)
    assert rec["status"] == "complete" and len(rec["cells"]) == 2
    assert rec["cells"][0] == first["cells"][0]
    assert {c["outcome"]["status"] for c in rec["cells"]} == {"ok"}
    assert {c["fixture"]["dtype"] for c in rec["cells"]} == {"f32", "f16"}


def _pythonpath(repo: Path) -> str:
    return os.pathsep.join([str(repo / "src"), str(repo)])


def _address_of(cluster: local.LocalCluster, name: str) -> str:
    from distributed import Client

    from rtmatrix.fleet.security import security_for

    security, _ = security_for(cluster.address, None, cluster.env)
    with Client(cluster.address, security=security, timeout=30) as client:
        workers = client.scheduler_info(n_workers=-1)["workers"]
    return str(next(a for a, w in workers.items() if w["name"] == name))


def _by_key(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["key"]: c for c in rec["cells"]}


class _StubClient:
    """Records submissions (the retry logic alone; the cluster tests above cover Dask)."""

    def __init__(self) -> None:
        self.submitted: list[dict[str, Any]] = []

    def submit(self, fn: Any, payload: dict[str, Any], **kw: Any) -> Any:
        self.submitted.append(kw | {"payload": payload})
        return type("Future", (), {"key": kw["key"]})()


def test_a_lost_host_is_resubmitted_only_as_often_as_the_matrix_allows(tmp_path: Path) -> None:
    from rtmatrix.runner.orchestrate import OpenedRun, RunContext

    text = matrix_text({"lab-a": "NumpyAdapter"}).replace(
        "[cluster]\n", "[cluster]\nhost_lost_retries = 1\n"
    )
    m = parse_matrix(text, tmp_path / "m.toml")
    (cell,) = m.cells()
    assert m.cluster is not None
    describe = {cell.runtime: {"container": "gguf", "distribution": "numpy"}}
    ctx = RunContext(m, {"run_id": "r1", "cells": []}, describe)
    stub = _StubClient()
    fleet = dispatch.Fleet(stub, "tls://s:1", OpenedRun(ctx, tmp_path, [cell], [cell]), m.cluster,
                           lambda _: None, names={"tls://w:1": "lab-a"})  # fmt: skip
    sub = dispatch.Submitted(cell, "lab-a")
    lost = type("KilledWorker", (), {"last_worker": type("W", (), {"address": "tls://w:1"})})()
    assert dispatch._host_lost(fleet, sub, lost) is None  # the one retry
    assert stub.submitted[-1]["resources"] == {"lab-a": 1}
    rec = dispatch._host_lost(fleet, sub, lost)
    assert rec is not None and rec["outcome"]["status"] == "host-lost"
    assert "attempt 2; lost before: tls://w:1 (lab-a)" in rec["outcome"]["message"]
    assert rec["host"]["lost"] == ["tls://w:1 (lab-a)", "tls://w:1 (lab-a)"]
    assert len(stub.submitted) == 1
