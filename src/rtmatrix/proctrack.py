"""No process outlives its cell: find and kill everything a worker started.

Three nets, used together; a process caught by any of them is leaked if it is alive when the
cell ends (the worker itself excepted):

- **cgroup** — the worker is moved into a cgroup of its own right after it is spawned; every
  descendant stays in it whatever it does with its process group or session (``setsid``, double
  fork). cgroup v2 (the unified hierarchy, also the ``unified`` mount of a hybrid setup) where we
  may create one, with ``cgroup.kill`` (Linux >= 5.14) to kill it atomically; else a v1
  ``freezer`` or ``pids`` hierarchy. Needs write access to the cgroup tree (root, or a delegated
  subtree); where there is none, the reason is kept and the other two nets still work.
- **descendants** — :meth:`Tracker.poll` (called at the parent's sampling rate) remembers every
  pid + create time ever seen under the worker, so a process that left the tree later is known.
- **env-marker** — a token in the worker's environment, inherited by every descendant that
  does not replace its environment; :meth:`Tracker.finish` scans all processes for it. This
  catches a double-forked daemon that left the tree between two polls, without a cgroup.

The parent is deliberately *not* made a child subreaper (``PR_SET_CHILD_SUBREAPER``): orphans
would then become the parent's children, and reaping them safely would need the parent to tell
them from its own ``subprocess`` children (a stray ``waitpid`` steals a ``Popen``'s status).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
import uuid
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from rtmatrix import memcap

MARKER_ENV = "RTMATRIX_CELL_TOKEN"
KILL_ROUNDS = 5  # find + kill until nothing is left (a forking process may add more)
WAIT_S = 2.0  # how long a killed process may take to disappear
_names = itertools.count()


class FoundAt(StrEnum):
    CELL_END = "cell-end"
    INTERRUPT = "interrupt"


class FoundBy(StrEnum):
    CGROUP = "cgroup"
    DESCENDANTS = "descendants"
    ENV_MARKER = "env-marker"


@dataclass(frozen=True)
class LeakedProcess:
    """A process of the cell still alive when the cell ended; ``killed``: gone after SIGKILL."""

    pid: int
    cmdline: list[str]
    create_time: float  # seconds since the epoch (psutil)
    found_at: FoundAt
    found_by: FoundBy
    killed: bool

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["found_at"], out["found_by"] = str(self.found_at), str(self.found_by)
        return out


@dataclass(frozen=True)
class TrackCgroup:
    path: Path
    version: int
    owned: bool  # created by the tracker (and removed by it), not shared with memcap

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def members(self) -> set[int]:
        """Pids in this cgroup and in any cgroup below it."""
        pids: set[int] = set()
        for f in [self.procs, *self.path.rglob("*/cgroup.procs")]:
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(x) for x in f.read_text().split()}
        return pids

    def kill_all(self) -> bool:
        """``cgroup.kill`` (atomic against forks); False where the kernel has none."""
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            return False
        return True


def create_cgroup(name: str, shared: memcap.MemoryCgroup | None = None) -> TrackCgroup:
    """A cgroup for one worker; raises memcap.CgroupUnavailable with what was tried.

    ``shared``: the memory cgroup the worker will join; a v2 one is used as is (in cgroup v2 a
    process is in one cgroup only, so a second one would lose the worker when it joins)."""
    if shared is not None and shared.version == 2:
        return TrackCgroup(shared.path, 2, owned=False)
    reasons: list[str] = []
    for version, parent in _candidate_parents():
        path = parent / name
        try:
            path.mkdir()
        except OSError as exc:
            reasons.append(f"v{version} {parent}: {exc.strerror}")
            continue
        if (path / "cgroup.procs").exists():
            return TrackCgroup(path, version, owned=True)
        reasons.append(f"v{version} {path}: not a cgroup file system (no cgroup.procs)")
        with contextlib.suppress(OSError):
            path.rmdir()
    why = "; ".join(reasons) or "no cgroup hierarchy is mounted for this process"
    msg = f"cannot create a cgroup to track the worker: {why}"
    raise memcap.CgroupUnavailable(msg)


def _candidate_parents() -> list[tuple[int, Path]]:
    own = memcap._own_cgroups()
    root = memcap.CGROUP_ROOT
    out: list[tuple[int, Path]] = []
    if "" in own:
        for base in (root, root / "unified"):
            parent = base / own[""].lstrip("/")
            if (parent / "cgroup.controllers").exists():
                out.append((2, parent))
    for ctrl in ("freezer", "pids"):
        if ctrl in own and (root / ctrl / "cgroup.procs").exists():
            out.append((1, root / ctrl / own[ctrl].lstrip("/")))
    return out


class Tracker:
    """Track one worker's processes: create, spawn the worker with :meth:`env`, :meth:`start`
    it, :meth:`poll` while it runs, :meth:`finish` after it has been reaped."""

    def __init__(
        self,
        name: str | None = None,
        *,
        use_cgroup: bool = True,
        shared: memcap.MemoryCgroup | None = None,
        env_marker: bool = True,
    ) -> None:
        self.name = name or f"rtmatrix-track-{os.getpid()}-{next(_names)}"
        self.token = uuid.uuid4().hex if env_marker else None
        self.cgroup: TrackCgroup | None = None
        self.cgroup_reason: str | None = "not asked for" if not use_cgroup else None
        if use_cgroup:
            try:
                self.cgroup = create_cgroup(self.name, shared)
            except memcap.CgroupUnavailable as exc:
                self.cgroup_reason = str(exc)
        self._cgroup_info: dict[str, Any] | None = None
        self._nets = self._which_nets()
        self._root: psutil.Process | None = None
        self._worker: tuple[int, float] | None = None
        self._seen: dict[tuple[int, float], list[str]] = {}
        self._procs: dict[int, psutil.Process] = {}
        self._done = False

    def __enter__(self) -> Tracker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def env(self) -> dict[str, str]:
        """Variables to add to the worker's environment (the marker), or none."""
        return {MARKER_ENV: self.token} if self.token else {}

    def start(self, pid: int) -> None:
        """Right after the worker is spawned: move it into the cgroup, remember who it is.
        A child the worker started before the move (the parent was slow to get here: a busy
        machine) would stay outside the cgroup, so the worker's descendants are moved too."""
        with contextlib.suppress(psutil.Error):
            self._root = psutil.Process(pid)
            self._worker = (pid, self._root.create_time())
        if self.cgroup is None:
            return
        try:
            self.cgroup.procs.write_text(str(pid))
        except OSError as exc:
            self.cgroup_reason = f"cannot move the worker into {self.cgroup.path}: {exc.strerror}"
            self._drop_cgroup()
            self._nets = self._which_nets()
            return
        early: list[psutil.Process] = []
        if self._root is not None:
            with contextlib.suppress(psutil.Error):
                early = self._root.children(recursive=True)
        for child in early:
            with contextlib.suppress(OSError):  # gone meanwhile: nothing to move
                self.cgroup.procs.write_text(str(child.pid))

    def tree(self) -> list[psutil.Process]:
        """The cell's live processes now, the worker first if alive: the cgroup's members where
        there is one (one file read; detached processes included), else a walk of the worker's
        descendants. Pass it to :meth:`poll` and to the parent's other per-sample readers."""
        root = self._root
        if self.cgroup is not None:
            head = [root] if root is not None and root.is_running() else []
            others = self.cgroup.members() - {p.pid for p in head}
            return head + [p for pid in sorted(others) if (p := self._process(pid)) is not None]
        if root is None:
            return []
        try:
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def poll(self, tree: list[psutil.Process] | None = None) -> None:
        """Remember every process now in the cell (pid + create time, command line);
        ``tree`` is :meth:`tree`'s list when the caller already has it."""
        for p in self.tree() if tree is None else tree:
            with contextlib.suppress(psutil.Error):
                key = (p.pid, p.create_time())
                if key not in self._seen and key != self._worker:
                    self._seen[key] = p.cmdline()

    def _process(self, pid: int) -> psutil.Process | None:
        p = self._procs.get(pid)
        if p is not None and p.is_running():
            return p
        try:
            p = self._procs[pid] = psutil.Process(pid)
        except psutil.Error:
            self._procs.pop(pid, None)
            return None
        return p

    def describe(self) -> dict[str, Any]:
        """How this cell was tracked, for the evidence."""
        out: dict[str, Any] = {"nets": [str(n) for n in self._nets], "seen": len(self._seen)}
        if self._cgroup_info:
            out["cgroup"] = self._cgroup_info
        else:
            out["cgroup_unavailable"] = self.cgroup_reason
        return out

    def finish(self, found_at: FoundAt = FoundAt.CELL_END) -> list[LeakedProcess]:
        """After the worker was reaped: every live process of the cell, SIGKILLed and waited for.

        Called before the worker's process group is killed, so processes left in the group
        are listed too. Removes the cgroup it created."""
        found: dict[tuple[int, float], tuple[psutil.Process, FoundBy, list[str]]] = {}
        for _ in range(KILL_ROUNDS):
            new = {k: v for k, v in self._candidates().items() if k not in found}
            if not new:
                break
            found |= new
            self._kill([p for p, _, _ in new.values()])
        gone = _wait_gone([p for p, _, _ in found.values()])
        self._done = True
        self._drop_cgroup()
        return [
            LeakedProcess(pid, cmd, ctime, FoundAt(found_at), by, (pid, ctime) in gone)
            for (pid, ctime), (_, by, cmd) in sorted(found.items())
        ]

    def close(self) -> None:
        """Kill whatever is left (if :meth:`finish` was not called) and remove the cgroup."""
        if not self._done:
            self.finish(FoundAt.INTERRUPT)

    def _which_nets(self) -> list[FoundBy]:
        cg = self.cgroup
        self._cgroup_info = {"path": str(cg.path), "version": cg.version} if cg else None
        nets = [FoundBy.DESCENDANTS]
        if cg is not None:
            nets.insert(0, FoundBy.CGROUP)
        if self.token:
            nets.append(FoundBy.ENV_MARKER)
        return nets

    def _candidates(self) -> dict[tuple[int, float], tuple[psutil.Process, FoundBy, list[str]]]:
        out: dict[tuple[int, float], tuple[psutil.Process, FoundBy, list[str]]] = {}
        if self.cgroup is not None:
            self._add(out, _processes(self.cgroup.members()), FoundBy.CGROUP)
        self._add(out, _processes({pid for pid, _ in self._seen}), FoundBy.DESCENDANTS, seen=True)
        if self.token:
            self._add(out, _with_marker(self.token), FoundBy.ENV_MARKER)
        return out

    def _add(
        self,
        out: dict[tuple[int, float], tuple[psutil.Process, FoundBy, list[str]]],
        procs: list[psutil.Process],
        by: FoundBy,
        seen: bool = False,
    ) -> None:
        for p in procs:
            try:
                key = (p.pid, p.create_time())
                if key == self._worker or key in out or p.status() == psutil.STATUS_ZOMBIE:
                    continue
                if seen and key not in self._seen:
                    continue  # the pid was reused by a process that is not ours
            except psutil.Error:
                continue
            out[key] = (p, by, self._cmdline(p, key))

    def _cmdline(self, p: psutil.Process, key: tuple[int, float]) -> list[str]:
        """The command line now (a poll may have caught the process between fork and exec,
        when it still showed its parent's), else the one seen while it lived."""
        try:
            now = p.cmdline()
        except psutil.Error:
            now = []
        return now or self._seen.get(key, [])

    def _kill(self, procs: list[psutil.Process]) -> None:
        if self.cgroup is not None and self.cgroup.version == 2:
            self.cgroup.kill_all()  # and each one below too: some were found by the other nets
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGKILL)  # psutil refuses a pid that was reused

    def _drop_cgroup(self) -> None:
        cg, self.cgroup = self.cgroup, None
        if cg is None or not cg.owned:
            return
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                cg.path.rmdir()
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)


def _processes(pids: set[int]) -> list[psutil.Process]:
    out = []
    for pid in sorted(pids):
        with contextlib.suppress(psutil.Error):
            out.append(psutil.Process(pid))
    return out


def _with_marker(token: str) -> list[psutil.Process]:
    """Every process whose environment carries ``token`` (unreadable ones are skipped)."""
    me = os.getpid()
    out = []
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get(MARKER_ENV) == token:
                out.append(p)
    return out


def _wait_gone(procs: list[psutil.Process]) -> set[tuple[int, float]]:
    """Wait for killed processes to disappear; reap our own children. A zombie whose parent
    has not reaped it yet is dead and counts as gone. Returns the (pid, create time) gone."""
    keys = {}
    for p in procs:
        with contextlib.suppress(psutil.Error):
            keys[p.pid] = (p.pid, p.create_time())
    deadline = time.monotonic() + WAIT_S
    left = {p.pid: p for p in procs if p.pid in keys}
    gone: set[tuple[int, float]] = set()
    while left:
        for pid, p in list(left.items()):
            if _is_gone(p):
                gone.add(keys[pid])
                del left[pid]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return gone


def _is_gone(p: psutil.Process) -> bool:
    try:
        if p.ppid() == os.getpid():  # only if the parent adopted it; never one of its Popens
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p.pid, os.WNOHANG)
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True
