from __future__ import annotations

import time
from pathlib import Path

import pytest

from rtmatrix import locks


def test_a_second_holder_waits_says_so_once_then_gives_up(tmp_path: Path) -> None:
    lock = tmp_path / "sub" / ".x.lock"
    said: list[str] = []
    with locks.exclusive(lock, 5, said.append, "building x"):
        t0 = time.monotonic()
        with (
            pytest.raises(locks.LockTimeout, match=r"held the lock .*\.x\.lock \(building x\)"),
            locks.exclusive(lock, 1.0, said.append, "building x"),
        ):
            pass  # pragma: no cover - never entered
        assert time.monotonic() - t0 >= 1.0
    assert len(said) == 1 and "waiting for another process (building x" in said[0]
    with locks.exclusive(lock, 0.5):  # released: free again
        pass


def test_a_file_has_one_writer_and_the_second_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    import multiprocessing as mp
    import os

    from rtmatrix.locks import WriterBusy, sole_writer

    path = tmp_path / "run.json"
    ready, done = mp.Event(), mp.Event()

    def hold() -> None:
        with sole_writer(path):
            ready.set()
            done.wait(30)

    child = mp.get_context("fork").Process(target=hold)
    child.start()
    try:
        assert ready.wait(30)
        with pytest.raises(WriterBusy, match=f"pid {child.pid}"), sole_writer(path):
            pass
    finally:
        done.set()
        child.join(30)
    with sole_writer(path):  # free again once the holder is gone
        assert os.getpid() > 0
