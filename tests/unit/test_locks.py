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
