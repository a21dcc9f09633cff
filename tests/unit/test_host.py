from __future__ import annotations

from pathlib import Path

from rtmatrix.metrics.host import machine_info, project_info


def test_machine_info_has_the_os_and_chip_rows() -> None:
    info = machine_info()
    for key in ("os", "kernel", "arch", "cpu_model", "cores_logical", "ram_bytes"):
        assert info[key], key
    assert isinstance(info["cpu_features"], list)


def test_project_info_outside_git_is_unknown_not_invented(tmp_path: Path) -> None:
    info = project_info(tmp_path)
    assert info["commit"] is None and info["dirty"] is None


def test_project_info_in_this_repo(repo: Path) -> None:
    info = project_info(repo)
    assert info["commit"] and len(info["commit"]) == 40
    assert isinstance(info["dirty"], bool)
