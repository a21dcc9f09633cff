"""An exclusive advisory lock on a file, for a build that two processes may start at once (a
fixture in the shared cache, llama.cpp's tools). ``flock`` locks die with their process, so a
crashed builder never leaves a stale lock behind."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path


class LockTimeout(TimeoutError):
    """Another process held the lock for longer than the caller would wait."""


@contextlib.contextmanager
def exclusive(
    path: Path,
    timeout_s: float,
    log: Callable[[str], None] | None = None,
    what: str = "a build",
) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; wait (polling) up to ``timeout_s`` for a process
    that holds it, saying once through ``log`` that it waits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        deadline = time.monotonic() + timeout_s
        told = False
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    msg = (
                        f"another process held the lock {path} ({what}) for {timeout_s:.0f} s; "
                        "wait for it to finish or stop it (the lock goes with its process)"
                    )
                    raise LockTimeout(msg) from None
                if log is not None and not told:
                    log(f"waiting for another process ({what}, lock {path})")
                    told = True
                time.sleep(0.2 if timeout_s < 10 else 1.0)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


class WriterBusy(LockTimeout):
    """Another live process is writing the file (its pid is in the message)."""


@contextlib.contextmanager
def sole_writer(path: Path, what: str = "this results file") -> Iterator[None]:
    """Hold the one writer's lock of ``path`` (a hidden ``.<name>.lock`` beside it, with the
    holder's pid) for the block; refuse at once, naming the holder, when a live process holds
    it. The lock dies with its process: a killed run leaves nothing to clean up."""
    lock = path.with_name(f".{path.name}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            msg = (f"{path}: another process (pid {holder}) is writing {what}; wait for it to "
                   f"finish or stop it (kill {holder}), then resume")  # fmt: skip
            raise WriterBusy(msg) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fh.truncate(0)
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
