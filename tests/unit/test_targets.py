"""``[[targets]]`` and ``[cluster]``: parsing, cell keys with and without targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmatrix.matrix import MatrixError, Target, key_with_target, parse_matrix
from rtmatrix.matrix.targets import ClusterConfig

BASE = """
[[runtimes]]
name = "llama_cpp"
{row}
[[fixtures]]
model = "tiny"
"""
TARGETS = """
[[targets]]
label = "rk3588"
os = "Linux"
arch = "aarch64"
[[targets]]
label = "laptop"
arch = "x86_64"
"""


def parse(text: str) -> object:
    return parse_matrix(text, Path("/m/m.toml"))


def test_without_targets_keys_are_unchanged() -> None:
    m = parse_matrix(BASE.format(row=""), Path("m.toml"))
    (cell,) = m.cells()
    assert cell.target is None and cell.key == "llama_cpp|tiny/f32|t2-c512-p128-g64"
    assert m.targets == () and m.cluster is None


def test_targets_multiply_cells_and_enter_the_key() -> None:
    m = parse_matrix(TARGETS + BASE.format(row=""), Path("m.toml"))
    keys = [c.key for c in m.cells()]
    assert keys == [
        "llama_cpp@rk3588|tiny/f32|t2-c512-p128-g64",
        "llama_cpp@laptop|tiny/f32|t2-c512-p128-g64",
    ]
    assert m.target("rk3588") == Target("rk3588", "Linux", "aarch64")
    assert key_with_target("llama_cpp|tiny/f32|t2", "laptop") == "llama_cpp@laptop|tiny/f32|t2"


def test_a_row_runs_on_the_targets_it_names() -> None:
    m = parse_matrix(TARGETS + BASE.format(row='targets = ["laptop"]'), Path("m.toml"))
    assert [c.target for c in m.cells()] == ["laptop"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TARGETS + BASE.format(row='targets = ["rk3399"]'), "unknown target(s) ['rk3399']"),
        (BASE.format(row='targets = ["a"]'), "declares no [[targets]]"),
        ("[[targets]]\nlabel = 'a=1'\n" + BASE.format(row=""), "targets[0].label"),
        ("[[targets]]\nlabel = 'a'\n[[targets]]\nlabel = 'a'\n" + BASE.format(row=""), "twice"),
        ("[[targets]]\nlabel = 'a'\ncpu = 'x'\n" + BASE.format(row=""), "unknown key(s) cpu"),
        ("[cluster]\naddres = 'x'\n" + BASE.format(row=""), "valid: address"),
        ("[cluster]\nno_workers_timeout_s = 0\n" + BASE.format(row=""), "positive number"),
    ],
)
def test_bad_entries_name_the_key_and_the_valid_choices(text: str, message: str) -> None:
    with pytest.raises(MatrixError, match=r"m\.toml: ") as exc:
        parse(text)
    assert message in str(exc.value)


def test_cluster_table_resolves_files_next_to_the_matrix() -> None:
    text = "[cluster]\naddress = 'tls://h:8786'\nca_file = 'certs/ca.pem'\nhost_lost_retries = 1\n"
    m = parse_matrix(text + BASE.format(row=""), Path("/m/m.toml"))
    assert m.cluster == ClusterConfig(
        address="tls://h:8786", ca_file=Path("/m/certs/ca.pem"), host_lost_retries=1
    )


def test_a_host_is_checked_against_what_its_target_expects() -> None:
    t = Target("rk3588", "linux", "arm64")
    assert t.mismatch({"os": "Linux", "arch": "aarch64"}) is None  # case and alias
    why = t.mismatch({"os": "Darwin", "arch": "x86_64"})
    assert (
        why == "target 'rk3588' expects os 'linux' (host: Darwin) and arch 'arm64' (host: x86_64)"
    )
    assert Target("any").mismatch({"os": "Windows", "arch": "AMD64"}) is None
