"""llama.cpp tool build and llama-bench, without building anything: command lines, the JSON of a
real llama-bench run (captured from the binary built from the llama-cpp-python 0.3.36 sdist), the
cache entry, the lock and the process handling."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rtmatrix.runtimes.llama_cpp import reftool as rt

DATA = Path(__file__).resolve().parent.parent / "data" / "llama_bench"
# llama-bench -m tiny-f32.gguf -t 2 -p 16 -n 8 -r 3 -o json -ngl 0 -fa off (see README there)
CAPTURED = DATA / "tiny_f32_p16_n8_r3.json"


def _captured() -> str:
    return CAPTURED.read_text("utf-8")


# -- command line ---------------------------------------------------------------------------------
def _cmd(**kw: Any) -> list[str]:
    base: dict[str, Any] = {"threads": 2, "n_prompt": 128, "n_gen": 64, "repetitions": 5}
    return rt.bench_command(Path("/t/llama-bench"), Path("/m/x.gguf"), **(base | kw))


def test_command_leaves_unset_settings_to_the_tool() -> None:
    assert _cmd() == [
        "/t/llama-bench", "-m", "/m/x.gguf", "-t", "2", "-p", "128", "-n", "64", "-r", "5",
        "-o", "json", "-ngl", "0",
    ]  # fmt: skip


def test_command_passes_every_setting() -> None:
    cmd = _cmd(flash_attn=0, n_batch=512, n_ubatch=256, use_mmap=False, extra=["--poll", "0"])
    tail = cmd[cmd.index("-ngl") + 2 :]
    assert tail == ["-fa", "off", "-b", "512", "-ub", "256", "-lm", "none", "--poll", "0"]
    assert _cmd(use_mmap=True)[-2:] == ["-lm", "mmap"]


@pytest.mark.parametrize(
    ("value", "arg"),
    [(1, "on"), (0, "off"), (-1, "auto"), ("ON", "on"), ("auto", "auto"), (None, None)],
)
def test_flash_attn_values(value: str | int | None, arg: str | None) -> None:
    assert rt.flash_attn_arg(value) == arg


def test_flash_attn_rejects_nonsense_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="valid: 'on', 'off', 'auto'"):
        rt.flash_attn_arg("yes please")


# -- JSON of a real run ---------------------------------------------------------------------------
def test_captured_json_gives_pp_and_tg_samples() -> None:
    phases, raw = rt.parse_bench_json(_captured())
    assert set(phases) == {"pp", "tg"} and len(raw) == 2
    pp, tg = phases["pp"], phases["tg"]
    assert (pp.n_prompt, pp.n_gen, tg.n_prompt, tg.n_gen) == (16, 0, 0, 8)
    for p in (pp, tg):
        assert len(p.samples_tps) == len(p.samples_ns) == 3
        assert min(p.samples_tps) <= p.avg_tps <= max(p.samples_tps)
        assert p.stddev_tps >= 0 and all(s > 0 for s in p.samples_tps)


def test_samples_are_the_tools_own_not_recomputed() -> None:
    phases, raw = rt.parse_bench_json(_captured())
    tg_raw = next(t for t in raw if t["n_gen"] > 0)
    assert list(phases["tg"].samples_tps) == tg_raw["samples_ts"]
    assert phases["tg"].avg_tps == tg_raw["avg_ts"]


def test_settings_are_what_the_tool_reports() -> None:
    _, raw = rt.parse_bench_json(_captured())
    s = rt.settings_of(raw)
    assert s["n_threads"] == 2 and s["flash_attn"] == 0 and s["n_gpu_layers"] == 0
    assert s["poll"] == 50 and s["type_k"] == "f16" and s["build_commit"]


def test_repeated_phase_gets_a_numbered_key() -> None:
    raw = json.loads(_captured())
    phases, _ = rt.parse_bench_json(json.dumps([*raw, raw[1]]))
    assert set(phases) == {"pp", "tg", "tg#2"}


def test_pg_test_is_its_own_phase() -> None:
    test = json.loads(_captured())[0] | {"n_prompt": 16, "n_gen": 8}
    assert rt.phase_of(test) == "pg"


@pytest.mark.parametrize(
    ("text", "match"),
    [("llama-bench: error", "printed no JSON"), ('{"a": 1}', "not a list"), ("[{}]", "lacks")],
)
def test_bad_json_is_unavailable_with_the_reason(text: str, match: str) -> None:
    with pytest.raises(rt.ToolUnavailable, match=match):
        rt.parse_bench_json(text)


# -- build options and the cache entry ------------------------------------------------------------
def test_cmake_args_of_the_binding_build_are_honoured_less_its_own_options() -> None:
    opts = rt.cmake_options("-DLLAVA_BUILD=OFF -DGGML_NATIVE:BOOL=OFF -G Ninja -DGGML_BLAS=ON")
    assert opts["GGML_NATIVE"] == "OFF" and opts["GGML_BLAS"] == "ON"
    assert "LLAVA_BUILD" not in opts and opts["LLAMA_CURL"] == "OFF"


def test_the_key_names_version_options_and_host(tmp_path: Path) -> None:
    a = rt.build_key("0.3.36", rt.cmake_options(""))
    b = rt.build_key("0.3.36", rt.cmake_options("-DGGML_NATIVE=OFF"))
    c = rt.build_key("0.3.35", rt.cmake_options(""))
    dirs = {rt.entry_dir(tmp_path, k["version"], k) for k in (a, b, c)}
    assert len(dirs) == 3
    assert rt.entry_dir(tmp_path, "0.3.36", a).name.startswith("llama.cpp-0.3.36-")
    assert a["host_cpu"] and a["targets"] == ["llama-bench", "llama-server", "llama-perplexity"]


def test_tools_root_follows_the_rtmatrix_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rt.TOOLS_DIR_ENV, raising=False)
    monkeypatch.setenv("RTMATRIX_CACHE_DIR", "/c")
    assert rt.tools_root() == Path("/c/tools")
    monkeypatch.setenv(rt.TOOLS_DIR_ENV, "/shared/tools")
    assert rt.tools_root() == Path("/shared/tools")


def _fake_entry(entry: Path) -> dict[str, Any]:
    (entry / "bin").mkdir(parents=True)
    binaries = {}
    for name in rt.BINARIES:
        (entry / "bin" / name).write_bytes(b"\x7fELF" + name.encode())
        binaries[name] = {"size_bytes": 4 + len(name), "version_output": f"version: 1 ({name})"}
    manifest = {"binaries": binaries, "total_s": 1.0}
    (entry / rt.MANIFEST).write_text(json.dumps(manifest), "utf-8")
    return manifest


def test_a_complete_entry_is_reused_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    key = rt.build_key("9.9.9", rt.cmake_options())
    manifest = _fake_entry(rt.entry_dir(tmp_path, "9.9.9", key))

    def no_build(*_a: Any) -> None:
        pytest.fail("a complete entry was rebuilt")

    monkeypatch.setattr(rt, "_build_into", no_build)
    got = rt.build_tools("9.9.9", tmp_path)
    assert not got.built and got.manifest == manifest
    assert got.llama_server == got.root / "bin" / "llama-server"
    assert got.tool_version() == "version: 1 (llama-bench)"


def test_a_truncated_binary_makes_the_entry_invalid(tmp_path: Path) -> None:
    entry = tmp_path / "e"
    _fake_entry(entry)
    assert rt.read_valid(entry) is not None
    (entry / "bin" / "llama-server").write_bytes(b"x")
    assert rt.read_valid(entry) is None
    assert rt.read_valid(tmp_path / "missing") is None


def test_no_cmake_is_unavailable_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(rt.ToolUnavailable, match="cmake is not on PATH"):
        rt.build_tools("9.9.9", tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-built left behind


def test_uninstalled_binding_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rt, "DISTRIBUTION", "surely-not-installed-rtmatrix-dist")
    with pytest.raises(rt.ToolUnavailable, match="is not installed"):
        rt.installed_version()


def test_a_failed_step_carries_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    cmd = [sys.executable, "-c", "print('error: no such header llama.h'); raise SystemExit(3)"]
    with pytest.raises(rt.ToolUnavailable, match=r"(?s)cmake --build failed \(exit 3\).*llama\.h"):
        rt._step(cmd, log, 60, "cmake --build")


def test_a_builder_still_holding_the_lock_makes_the_tools_unavailable(tmp_path: Path) -> None:
    lock = tmp_path / ".x.lock"
    said: list[str] = []
    with (
        rt.build_lock(lock, 5, said.append),
        pytest.raises(rt.ToolUnavailable, match="tool build lock: another process held"),
        rt.build_lock(lock, 0.5, said.append),
    ):
        pass  # pragma: no cover - never entered
    assert said and "building the tools" in said[0]


def test_tool_env_puts_the_tools_libraries_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/site-packages/llama_cpp/lib")
    env = rt.tool_env(Path("/tools/bin"))
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        "/tools/bin",
        "/site-packages/llama_cpp/lib",
    ]


# -- the process group ----------------------------------------------------------------------------
def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    t0 = time.monotonic()
    with pytest.raises(rt.ToolUnavailable, match="ran past 1 s and was killed"):
        rt.run_group(["sh", "-c", script], dict(os.environ), 1.0)
    assert time.monotonic() - t0 < 10
    child = int(pidfile.read_text().strip())
    for _ in range(50):  # the grandchild is killed with the group (reaped by init)
        if not Path(f"/proc/{child}").exists() or "Z" in _state(child):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {child} survived the timeout")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
