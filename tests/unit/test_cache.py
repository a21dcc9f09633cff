from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from rtmatrix import locks
from rtmatrix.fixtures import cache
from rtmatrix.fixtures.cache import cache_root, cached_build, key_hash


def _writer(calls: list[int]) -> Any:
    def build(path: Path) -> dict[str, Any]:
        calls.append(1)
        path.write_bytes(b"x" * 10)
        return {"note": "built"}

    return build


def test_builds_once_then_hits(tmp_path: Path) -> None:
    calls: list[int] = []
    a = cached_build("t", {"k": 1}, "f.bin", _writer(calls), tmp_path)
    b = cached_build("t", {"k": 1}, "f.bin", _writer(calls), tmp_path)
    assert calls == [1] and a.built and not b.built
    assert b.manifest["note"] == "built" and b.manifest["size_bytes"] == 10


def test_truncated_entry_is_rebuilt(tmp_path: Path) -> None:
    calls: list[int] = []
    a = cached_build("t", {"k": 1}, "f.bin", _writer(calls), tmp_path)
    a.path.write_bytes(b"x")  # size no longer matches the manifest
    b = cached_build("t", {"k": 1}, "f.bin", _writer(calls), tmp_path)
    assert calls == [1, 1] and b.built and b.path.read_bytes() == b"x" * 10


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    def boom(path: Path) -> dict[str, Any]:
        path.write_bytes(b"half")
        msg = "disk full"
        raise OSError(msg)

    with pytest.raises(OSError, match="disk full"):
        cached_build("t", {"k": 2}, "f.bin", boom, tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.suffix != ".lock"] == []


def _slow_build(root: Path, started: Any) -> None:
    def build(path: Path) -> dict[str, Any]:
        with (root / "builds.txt").open("a") as fh:
            fh.write("1")
        started.set()
        time.sleep(0.5)
        path.write_bytes(b"y" * 20)
        return {}

    art = cached_build("t", {"k": 3}, "f.bin", build, root)
    assert art.path.read_bytes() == b"y" * 20


def test_two_processes_building_one_entry_take_turns(tmp_path: Path) -> None:
    """The second builder waits for the first and reads its entry: one build, no failed
    rename onto a full folder, no entry replaced under the first one's reader."""
    ctx = multiprocessing.get_context("fork")
    started = ctx.Event()
    first = ctx.Process(target=_slow_build, args=(tmp_path, started))
    first.start()
    assert started.wait(30)
    second = ctx.Process(target=_slow_build, args=(tmp_path, ctx.Event()))
    second.start()
    first.join(30)
    second.join(30)
    assert (first.exitcode, second.exitcode) == (0, 0)
    assert (tmp_path / "builds.txt").read_text() == "1"


def test_key_hash_is_order_independent() -> None:
    assert key_hash({"a": 1, "b": 2}) == key_hash({"b": 2, "a": 1})


def test_cache_root_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RTMATRIX_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path / "fixtures"


def test_a_builder_holding_the_lock_too_long_is_an_oserror_naming_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError, so a cell whose fixture waits too long records a fixture error (the runner's
    fixture step catches OSError) instead of aborting the run."""
    monkeypatch.setattr(cache, "LOCK_TIMEOUT_S", 0.3)
    calls: list[int] = []
    entry = f"t-{key_hash({'k': 4})[:16]}"
    held = locks.exclusive(tmp_path / f".{entry}.lock", 5)  # "another process" building it
    why = rf"held the lock .*{entry}\.lock \(building t\)"
    with held, pytest.raises(OSError, match=why):
        cached_build("t", {"k": 4}, "f.bin", _writer(calls), tmp_path)
    assert calls == []
