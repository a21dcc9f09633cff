"""What the converter homes share: the checkpoint facts a key and a message need, the
converter's last word in its log, and the refusal cache (a refusal a retry would repeat is kept
beside the entry and read back instead of running the converter again)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.converters.base import (
    ChildRun,
    Conversion,
    Converted,
    ConverterRefused,
    VendorDtype,
    build_unless_refused,
    cached_refusal,
    dtype_map,
    error_line,
    keep_refusal,
    model_type,
    offline_prefix,
    other_files_sha256,
    package_versions,
    refusal_message,
    refusal_paths,
    refuse,
)
from rtmatrix.fixtures.cache import cached_build

CONV = Conversion(
    converter="toy", tool="toy_convert.py", distribution="toy-dist", version="1.2.3",
    options={"dtype": "f32"}, command=["python", "toy_convert.py"], wall_s=0.5,
    log_tail="ValueError: no", offline="not isolated: test",
)  # fmt: skip
KEY = {"converter": "toy", "source_sha256": "0" * 64}
LOG_ERROR = re.compile(r"^ERROR:[\w.-]+:(.*)$")


# -- the checkpoint -----------------------------------------------------------------------------
def _config(folder: Path, config: object) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), "utf-8")
    return folder


def test_model_type_names_the_model_type_else_its_first_architecture(tmp_path: Path) -> None:
    both = _config(tmp_path / "a", {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]})
    assert model_type(both) == "qwen3"
    assert model_type(both, with_architecture=True) == "qwen3 (Qwen3ForCausalLM)"
    arch_only = _config(tmp_path / "b", {"architectures": ["FooForCausalLM"]})
    assert model_type(arch_only) == "FooForCausalLM"
    assert model_type(arch_only, with_architecture=True) == "? (FooForCausalLM)"
    neither = _config(tmp_path / "c", {})
    assert model_type(neither) == "?"
    assert model_type(neither, with_architecture=True) == "? (?)"


def test_model_type_says_what_is_wrong_with_config_json(tmp_path: Path) -> None:
    assert model_type(tmp_path) == "no readable config.json"
    (tmp_path / "config.json").write_text("{not json", "utf-8")
    assert model_type(tmp_path, with_architecture=True) == "no readable config.json"
    assert model_type(_config(tmp_path / "list", ["x"])) == "config.json is not an object"


def test_other_files_hash_covers_what_content_hash_leaves_out(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}", "utf-8")
    (tmp_path / "model.safetensors").write_bytes(b"w")
    (tmp_path / "sub").mkdir()
    empty = other_files_sha256(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{64}", empty)
    (tmp_path / "config.json").write_text('{"a": 1}', "utf-8")  # content_sha256's, not this one's
    (tmp_path / "sub" / "x.bin").write_bytes(b"x")  # only the folder's own files
    assert other_files_sha256(tmp_path) == empty
    (tmp_path / "tokenizer.model").write_bytes(b"sp")
    with_sp = other_files_sha256(tmp_path)
    assert with_sp != empty
    (tmp_path / "tokenizer.model").write_bytes(b"sp2")
    assert other_files_sha256(tmp_path) != with_sp
    (tmp_path / "tokenizer.model").rename(tmp_path / "spm.model")  # the name counts too
    assert other_files_sha256(tmp_path) not in (empty, with_sp)


def test_package_versions_reads_metadata_and_says_absent() -> None:
    got = package_versions(["pytest", "no-such-distribution-rtmatrix"])
    assert got["pytest"] == pytest.__version__
    assert got["no-such-distribution-rtmatrix"] == "absent"
    assert list(got) == ["pytest", "no-such-distribution-rtmatrix"]


# -- the converter's own words ------------------------------------------------------------------
TRACEBACK = """Loading model
Traceback (most recent call last):
  File "a.py", line 1, in <module>
    main()
ValueError: first
Traceback (most recent call last):
  File "b.py", line 9, in build
    if config["rope_type"] == "yarn":
       ~~~~~~^^^^^^^^^^^^^
KeyError: 'rope_type'
ERROR:toy:after the traceback
"""


def test_the_error_line_is_the_last_tracebacks_exception() -> None:
    assert error_line(TRACEBACK) == "KeyError: 'rope_type'"
    assert error_line(TRACEBACK, log_error=LOG_ERROR) == "KeyError: 'rope_type'"
    long = "Traceback (most recent call last):\n  x\nRuntimeError: " + "y" * 600
    assert error_line(long) == long.splitlines()[-1][:500]


def test_without_a_traceback_a_logged_error_where_asked_else_the_last_line() -> None:
    log = "INFO:toy:start\nERROR:toy:Model Foo is not supported\nINFO:toy:cleanup\n\n"
    assert error_line(log, log_error=LOG_ERROR) == "Model Foo is not supported"
    assert error_line(log) == "INFO:toy:cleanup"
    assert error_line("ERROR:toy:   \nlast\n", log_error=LOG_ERROR) == "last"  # empty: passed over
    assert error_line("") == "it printed nothing"
    assert error_line("\n  \n") == "it printed nothing"


def test_a_probes_lines_are_not_the_converters() -> None:
    log = "something failed\nPROBE: gguf /x/gguf.py\n"
    assert error_line(log) == "PROBE: gguf /x/gguf.py"
    assert error_line(log, skip_prefix="PROBE: ") == "something failed"
    assert error_line("PROBE: only\n", skip_prefix="PROBE: ") == "it printed nothing"


# -- refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("run", "said", "kept", "tail"),
    [
        (ChildRun(1, 1.0, ""), "KeyError: 'x'", True, ": KeyError: 'x'"),
        (ChildRun(0, 1.0, ""), "done", True, ": it exited 0 but wrote no m.bin; last line: done"),
        (ChildRun(-9, 1.0, ""), "layer 0", False, ": it killed by SIGKILL; last line: layer 0"),
        (ChildRun(-9, 9.0, "", timed_out=True), "layer 0", False,
         ": it ran past its time limit and was killed; last line: layer 0"),
        (ChildRun(1, 1.0, ""), "ModuleNotFoundError: No module named 'x'", False,
         f": ModuleNotFoundError: No module named 'x' (install it in this environment: "
         f"{sys.executable})"),
    ],
)  # fmt: skip
def test_only_a_refusal_a_retry_would_repeat_is_kept(
    run: ChildRun, said: str, kept: bool, tail: str
) -> None:
    assert refusal_message("toy refused /ckpt", run, said, "m.bin") == (
        f"toy refused /ckpt{tail}", kept
    )  # fmt: skip


def test_a_refusal_is_kept_beside_the_entry_cached_build_would_make(tmp_path: Path) -> None:
    def build(path: Path) -> dict[str, Any]:
        path.write_bytes(b"x")
        return {}

    entry = cached_build("toy:/a b", KEY, "f.bin", build, tmp_path).path.parent
    paths = refusal_paths("toy:/a b", KEY, tmp_path)
    assert paths == (
        tmp_path / f"{entry.name}.refused.json",
        tmp_path / f"{entry.name}.refused.log",
    )
    assert refusal_paths("toy:/a b", {**KEY, "v": 2}, tmp_path) != paths


def test_a_kept_refusal_reads_back_with_how_to_retry(tmp_path: Path) -> None:
    paths = refusal_paths("toy", KEY, tmp_path / "deep")
    assert cached_refusal(paths[0]) is None
    keep_refusal(paths, "toy refused: no", CONV, "the whole log\n")
    assert paths[1].read_text("utf-8") == "the whole log\n"
    record = json.loads(paths[0].read_text("utf-8"))
    assert record["message"] == "toy refused: no" and "refused_at" in record
    assert not [p for p in paths[0].parent.iterdir() if p.name.endswith(".tmp")]
    again = cached_refusal(paths[0])
    assert again is not None and again.conversion == CONV
    assert str(again) == f"toy refused: no (cached refusal; delete {paths[0]} to retry)"
    paths[0].write_text('{"message": "m"}', "utf-8")  # no conversion: not a refusal
    assert cached_refusal(paths[0]) is None
    paths[0].write_text("[", "utf-8")
    assert cached_refusal(paths[0]) is None


@pytest.mark.parametrize("keep", [True, False])
def test_refuse_keeps_only_what_it_is_told_to(tmp_path: Path, keep: bool) -> None:
    paths = refusal_paths("toy", KEY, tmp_path)
    exc = refuse(paths, "toy refused", CONV, "log", keep=keep)
    assert isinstance(exc, ConverterRefused) and str(exc) == "toy refused"
    assert exc.conversion == CONV
    assert paths[0].is_file() is keep and paths[1].is_file() is keep


def test_a_kept_refusal_is_raised_without_building_again(tmp_path: Path) -> None:
    calls: list[Path] = []

    def refusing(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        calls.append(path)
        raise refuse(refused, "toy refused", CONV, "log", keep=True)

    with pytest.raises(ConverterRefused, match=r"^toy refused$"):
        build_unless_refused("toy", KEY, "f.bin", refusing, tmp_path)
    with pytest.raises(ConverterRefused, match="cached refusal") as again:
        build_unless_refused("toy", KEY, "f.bin", refusing, tmp_path)
    assert len(calls) == 1 and again.value.conversion == CONV
    assert not list(tmp_path.glob("toy-*/f.bin"))


def test_a_refusal_not_kept_is_tried_again_and_a_success_is_cached(tmp_path: Path) -> None:
    calls: list[Path] = []

    def flaky(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        calls.append(path)
        if len(calls) == 1:
            raise refuse(refused, "killed", CONV, "log", keep=False)
        path.write_bytes(b"gguf")
        return {"conversion": CONV.to_dict()}

    with pytest.raises(ConverterRefused, match=r"^killed$"):
        build_unless_refused("toy", KEY, "f.bin", flaky, tmp_path)
    first = Converted.from_artifact(build_unless_refused("toy", KEY, "f.bin", flaky, tmp_path))
    second = Converted.from_artifact(build_unless_refused("toy", KEY, "f.bin", flaky, tmp_path))
    assert len(calls) == 2 and first.built and not second.built
    assert first.path == second.path and first.path.read_bytes() == b"gguf"
    assert second.conversion == CONV and second.manifest["size_bytes"] == 4


# -- the record ---------------------------------------------------------------------------------
def test_the_record_of_a_run_is_what_ran_offline() -> None:
    log = "converting\nurllib3: Max retries exceeded with url: /api/models\nValueError: no\n"
    run = ChildRun(1, 2.5, log)
    conv = Conversion.of_run(
        run, ["python", "toy.py"], converter="toy", tool="toy.py", distribution="toy-dist",
        version="1.0", options={"dtype": "f32"}, source=Path("/ckpt"), source_sha256="ab",
    )  # fmt: skip
    prefix, how = offline_prefix()
    assert conv.command == [*prefix, "python", "toy.py"] and conv.offline == how
    assert (conv.wall_s, conv.log_tail, conv.source, conv.source_sha256) == (
        2.5, run.tail, "/ckpt", "ab"
    )  # fmt: skip
    assert conv.network_attempts == ["urllib3: Max retries exceeded with url: /api/models"]
    assert Conversion.from_dict(conv.to_dict()) == conv
    assert conv.label() == "toy.py (toy-dist 1.0, dtype f32)"


def test_a_vendor_dtype_says_its_converters_option_and_joins_the_homes_dtypes() -> None:
    q4 = VendorDtype("x-q4", "--bits", "4", 4, "4-bit weights, blocks of 32")
    assert q4.option == "--bits 4"
    assert dtype_map({"f32": "32"}, [q4]) == {"f32": "32", "x-q4": "4"}
