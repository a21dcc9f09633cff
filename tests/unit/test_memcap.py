from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix import memcap


def test_v1_cgroup_in_a_fake_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = tmp_path / "memory" / "me"
    parent.mkdir(parents=True)
    (parent / "memory.limit_in_bytes").write_text("9223372036854771712")
    monkeypatch.setattr(memcap, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(memcap, "_own_cgroups", lambda: {"memory": "/me"})
    # a fake tree has no kernel to create the control files: mkdir gives an empty folder
    cg = memcap.create(300 * 2**20, "cell")
    assert cg.version == 1 and (cg.path / "memory.limit_in_bytes").read_text() == str(300 * 2**20)
    (cg.path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert cg.oom_kills() == 2
    assert cg.peak_bytes() is None


def test_no_cgroup_gives_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memcap, "_own_cgroups", lambda: {})
    with pytest.raises(memcap.CgroupUnavailable, match="no cgroup with the memory controller"):
        memcap.create(2**20, "x")


def test_unwritable_parent_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memcap, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(memcap, "_own_cgroups", lambda: {"memory": "/missing"})
    with pytest.raises(memcap.CgroupUnavailable):
        memcap.create(2**20, "x")
