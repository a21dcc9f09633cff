"""No process outlives its cell: real workers that leave detached processes behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rtmatrix import memcap, proctrack
from rtmatrix.proctrack import FoundAt, FoundBy, Tracker

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")

# where a net can be switched off: each real test runs with the cgroup and without it
MODES = {"cgroup": True, "descendants+marker": False}


@pytest.fixture
def tag() -> Iterator[str]:
    """A unique word in the leaked processes' command lines; anything left is killed after."""
    word = f"rtmatrix-leak-{uuid.uuid4().hex[:10]}"
    yield word
    for p in _with_tag(word):
        p.kill()


def _with_tag(word: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if any(word in a for a in p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _sleeper(tag: str) -> str:
    return f"import time; time.sleep(60)  # {tag}"


def _session_leaver(tag: str) -> str:
    """A worker that starts a child in a new session and exits without waiting for it."""
    return (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {_sleeper(tag)!r}], start_new_session=True)\n"
        "time.sleep(0.3)\n"
    )


def _daemonizer(tag: str) -> str:
    """A worker whose child double-forks (fork, setsid, fork) and exits at once."""
    return (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', {_sleeper(tag)!r}])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
    )


def _well_behaved(tag: str) -> str:
    return (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', 'print(1)  # {tag}'], check=True)\n"
    )


def _run_cell(code: str, tr: Tracker, interval: float = 0.02) -> None:
    """The runner's supervision loop in miniature: spawn, start, poll, reap."""
    p = subprocess.Popen([sys.executable, "-c", code], env=os.environ | tr.env())
    tr.start(p.pid)
    while True:
        pid, _, _ = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = 0
            return
        tr.poll()
        time.sleep(interval)


def _tracker(mode: str) -> Tracker:
    tr = Tracker(use_cgroup=MODES[mode])
    if mode == "cgroup" and tr.cgroup is None:
        tr.close()
        pytest.skip(f"no cgroup here: {tr.cgroup_reason}")
    return tr


@pytest.mark.parametrize("mode", MODES)
def test_a_child_in_a_new_session_is_found_and_killed(mode: str, tag: str) -> None:
    tr = _tracker(mode)
    _run_cell(_session_leaver(tag), tr)
    assert _with_tag(tag), "the detached child should still be running before finish()"
    leaks = tr.finish()
    assert not _with_tag(tag)
    assert len(leaks) == 1
    leak = leaks[0]
    assert any(tag in a for a in leak.cmdline)
    assert leak.killed and leak.found_at is FoundAt.CELL_END
    assert leak.found_by is (FoundBy.CGROUP if mode == "cgroup" else FoundBy.DESCENDANTS)
    assert json.loads(json.dumps(leak.to_dict()))["found_at"] == "cell-end"


@pytest.mark.parametrize("mode", MODES)
def test_a_double_forked_daemon_is_found_and_killed(mode: str, tag: str) -> None:
    tr = _tracker(mode)
    _run_cell(_daemonizer(tag), tr)
    assert _with_tag(tag)
    leaks = tr.finish(FoundAt.INTERRUPT)
    assert not _with_tag(tag)
    assert [any(tag in a for a in x.cmdline) for x in leaks] == [True]
    assert leaks[0].killed and leaks[0].found_at is FoundAt.INTERRUPT
    # whichever net saw it first names it (a poll may catch the daemon before it leaves the
    # tree); without a cgroup, one that left between two polls is found by the marker
    assert leaks[0].found_by in (FoundBy.CGROUP, FoundBy.DESCENDANTS, FoundBy.ENV_MARKER)


def test_the_descendant_set_alone_finds_a_child_seen_while_in_the_tree(tag: str) -> None:
    tr = Tracker(use_cgroup=False, env_marker=False)
    _run_cell(_session_leaver(tag), tr)
    leaks = tr.finish()
    assert [x.found_by for x in leaks] == [FoundBy.DESCENDANTS]
    assert not _with_tag(tag)


@pytest.mark.parametrize("mode", MODES)
def test_a_well_behaved_worker_leaks_nothing(mode: str, tag: str) -> None:
    tr = _tracker(mode)
    _run_cell(_well_behaved(tag), tr)
    assert tr.finish() == []


def test_the_cgroup_is_removed_after_finish(tag: str) -> None:
    tr = _tracker("cgroup")
    assert tr.cgroup is not None
    path = tr.cgroup.path
    _run_cell(_session_leaver(tag), tr)
    tr.finish()
    assert not path.exists()
    assert tr.describe()["cgroup"]["path"] == str(path)  # still says how it was tracked


def test_close_without_finish_kills_what_is_left(tag: str) -> None:
    with Tracker(use_cgroup=False) as tr:
        _run_cell(_session_leaver(tag), tr)
        assert _with_tag(tag)
    assert not _with_tag(tag)


def test_no_cgroup_falls_back_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memcap, "CGROUP_ROOT", tmp_path / "none")
    tr = Tracker()
    assert tr.cgroup is None
    assert tr.cgroup_reason and "cannot create a cgroup" in tr.cgroup_reason
    d = tr.describe()
    assert d["nets"] == ["descendants", "env-marker"] and "cgroup" not in d
    assert tr.finish() == []


def test_a_folder_that_is_not_a_cgroup_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "me").mkdir()
    (tmp_path / "me" / "cgroup.controllers").write_text("")
    monkeypatch.setattr(memcap, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(memcap, "_own_cgroups", lambda: {"": "/me"})
    with pytest.raises(memcap.CgroupUnavailable, match="not a cgroup file system"):
        proctrack.create_cgroup("cell")
    assert not (tmp_path / "me" / "cell").exists()


def test_a_v2_memory_cgroup_is_shared_not_duplicated(tmp_path: Path) -> None:
    mem = memcap.MemoryCgroup(tmp_path, 2, 2**20)
    cg = proctrack.create_cgroup("cell", shared=mem)
    assert cg.path == tmp_path and not cg.owned


@pytest.mark.parametrize("mode", MODES)
def test_tree_lists_the_worker_first_then_its_processes(mode: str, tag: str) -> None:
    tr = _tracker(mode)
    p = subprocess.Popen([sys.executable, "-c", _session_leaver(tag)], env=os.environ | tr.env())
    try:
        tr.start(p.pid)
        deadline = time.monotonic() + 20
        tree = tr.tree()
        while not any(tag in " ".join(x.cmdline()) for x in tree[1:]):
            assert time.monotonic() < deadline, "the worker's child never showed in tree()"
            time.sleep(0.02)
            tree = tr.tree()
        assert tree[0].pid == p.pid
        tr.poll(tree)
        assert tr.describe()["seen"] >= 1
    finally:
        p.wait()
        tr.finish()
    assert not _with_tag(tag)


def test_a_child_forked_before_the_worker_was_moved_into_the_cgroup_is_moved_too(tag: str) -> None:
    # the parent is slow to call start() (a loaded machine): the worker has already started a
    # child outside the cgroup; start() moves the worker's descendants too, so the cgroup names it
    tr = _tracker("cgroup")
    p = subprocess.Popen([sys.executable, "-c", _session_leaver(tag)], env=os.environ | tr.env())
    deadline = time.monotonic() + 10
    while not psutil.Process(p.pid).children() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert psutil.Process(p.pid).children(), "the worker did not start its child"
    tr.start(p.pid)
    p.wait()
    leaks = tr.finish()
    assert [lk.found_by for lk in leaks] == [FoundBy.CGROUP]
    assert not _with_tag(tag)
