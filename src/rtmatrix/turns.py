"""Taking turns: two loaded worker processes whose repetitions alternate, A B B A …

``rtmatrix compare --mode alternate`` starts both sides' workers of a round at once; each loads
its model, then, before every repetition (warm-up and counted), waits for its turn on a Unix
socket the parent listens on. The parent grants turns one at a time in an ABBA pattern
(the round's drawn order, then reversed, …), so the two sides' repetitions are measured
interleaved within the same second or two and never at the same time. On this 2-core VM one
process's TG wanders by ~9 % (sd of log) over a minute with a lag-1 autocorrelation of 0.72 while
five consecutive repetitions agree to ~1 %: the spread between two processes run one after the
other comes from the machine drifting between them, which interleaving cancels.

The protocol is one byte each way: the parent sends ``g`` (go), the worker runs the repetition
and answers ``d`` (done). A worker that cannot connect (no listener: a retry, a control run, a
sequential comparison) or whose socket is closed runs ungated — never stuck; the parent closes
every connection when it is done or when a side fails, and a side that did not take every turn
is marked in its record (``evidence.alternate``) and its round is not used for figures.
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtmatrix.protocol import TurnsRecord

GO, DONE = b"g", b"d"
SOCKET_NAME = "turns.sock"
#: how long the parent waits for both workers to reach their first turn (they import and load)
DEFAULT_ARRIVE_S = 120.0


# --------------------------------------------------------------------------- worker side


class TurnGate:
    """The worker's end: :meth:`wait` before a repetition, :meth:`done` after it."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self.gated = 0
        self.released: str | None = None if path else "no turn socket in the job"

    def _connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(self.path))
        except OSError as exc:
            s.close()
            self.released = f"cannot connect to {self.path}: {exc.strerror or exc}"
            return
        self.sock = s

    def wait(self) -> None:
        """Block until the parent grants the next turn (or run ungated from now on)."""
        if self.released:
            return
        if self.sock is None:
            self._connect()
            if self.sock is None:
                return
        try:
            got = self.sock.recv(1)
        except OSError as exc:
            got, self.released = b"", f"turn socket error: {exc}"
        if got != GO:
            self.released = self.released or "the parent closed the turn socket"
            self.close()

    def done(self) -> None:
        if self.sock is None:
            return
        try:
            self.sock.sendall(DONE)
            self.gated += 1
        except OSError as exc:
            self.released = f"turn socket error: {exc}"
            self.close()

    def hold(self) -> None:
        """After the last repetition: wait until the parent lets go (it closes the
        socket once both sides took every turn), so this worker's teardown does not run during
        the other side's last repetition."""
        if self.sock is None:
            return
        with contextlib.suppress(OSError):
            while self.sock.recv(1):
                pass
        self.close()

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None

    def evidence(self) -> TurnsRecord:
        return TurnsRecord(gated_reps=self.gated, released=self.released or None)


# --------------------------------------------------------------------------- parent side


@dataclass
class TurnServer:
    """One side's listening socket (in a private temporary folder) and its connection."""

    name: str
    folder: tempfile.TemporaryDirectory[str] = field(
        default_factory=lambda: tempfile.TemporaryDirectory(prefix="rtmatrix-turns-")
    )
    conn: socket.socket | None = None
    granted: int = 0
    failure: str | None = None

    def __post_init__(self) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(0.05)

    @property
    def path(self) -> str:
        return str(Path(self.folder.name) / SOCKET_NAME)

    def try_accept(self) -> bool:
        if self.conn is not None:
            return True
        try:
            conn, _ = self.listener.accept()
        except TimeoutError:
            return False
        conn.settimeout(None)
        self.conn = conn
        with contextlib.suppress(OSError):
            self.listener.close()  # one worker per side: a retry or control run runs ungated
        return True

    def turn(self, timeout_s: float) -> bool:
        """Grant one turn and wait for it to end; False (with ``failure``) when it did not."""
        assert self.conn is not None
        try:
            self.conn.settimeout(timeout_s)
            self.conn.sendall(GO)
            got = self.conn.recv(1)
        except OSError as exc:
            self.failure = f"turn {self.granted + 1}: {type(exc).__name__}: {exc}"
            return False
        if got != DONE:
            self.failure = f"turn {self.granted + 1}: the worker ended without finishing it"
            return False
        self.granted += 1
        return True

    def close(self) -> None:
        for s in (self.conn, self.listener):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
        self.conn = None
        self.folder.cleanup()


#: the turn patterns: ``abba`` (the round's order, then reversed, alternately) and ``abab``
#: (strict alternation: the round's order every time)
PATTERNS = ("abba", "abab")
DEFAULT_PATTERN = "abba"


def turn_order(order: str, reps: int, pattern: str = DEFAULT_PATTERN) -> list[str]:
    """``reps`` pairs of turns in ``pattern`` (:data:`PATTERNS`), starting in the round's
    ``order``."""
    if pattern not in PATTERNS:
        msg = f"turn pattern {pattern!r}: expected one of {', '.join(PATTERNS)}"
        raise ValueError(msg)
    out: list[str] = []
    for i in range(reps):
        out += list(order if i % 2 == 0 or pattern == "abab" else order[::-1])
    return out


def coordinate(
    servers: Mapping[str, TurnServer],
    order: str,
    reps: int,
    running: Callable[[str], bool],
    arrive_s: float = DEFAULT_ARRIVE_S,
    turn_s: float = 600.0,
    pattern: str = DEFAULT_PATTERN,
) -> dict[str, Any]:
    """Wait for both workers at their first turn, then grant ``reps`` turns each in ABBA order.
    ``running(name)``: whether that side's worker is still being supervised (a side that ended
    before arriving has failed). Every connection is closed at the end, so a worker left waiting
    runs ungated. Returns what happened (the ``evidence.alternate`` both records get)."""
    deadline = time.monotonic() + arrive_s
    arrived: dict[str, bool] = dict.fromkeys(servers, False)
    failure = None
    while not all(arrived.values()):
        for name, srv in servers.items():
            arrived[name] = arrived[name] or srv.try_accept()
            if not arrived[name] and not running(name):
                failure = f"side {name.upper()}'s worker ended before its first turn"
        if failure or time.monotonic() > deadline:
            failure = failure or f"the workers did not both arrive within {arrive_s:g} s"
            break
    sequence = turn_order(order, reps, pattern) if failure is None else []
    for name in sequence:
        if not servers[name].turn(turn_s):
            failure = f"side {name.upper()}: {servers[name].failure}"
            break
    for srv in servers.values():
        srv.close()
    granted = {name: srv.granted for name, srv in servers.items()}
    out: dict[str, Any] = {
        "pattern": "".join(sequence[:4]) + ("…" if len(sequence) > 4 else ""),
        "turns": granted,
        "alternated": failure is None and all(g == reps for g in granted.values()),
    }
    if failure:
        out["failure"] = failure
    return out
