"""The llama.cpp server driver without llama.cpp: it serves the model with the adapter's own load
settings (one rule for both) and writes the config ``llama_cpp.server`` reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtmatrix.adapters.base import LoadParams
from rtmatrix.runtimes.llama_cpp.adapter import (
    CRASH_CONTROL,
    LlamaCppAdapter,
    extra_buffer_types,
    load_settings,
)
from rtmatrix.runtimes.llama_cpp.server import LlamaCppServer, missing_deps, server_model


@pytest.mark.parametrize(("n_ctx", "n_batch", "ubatch"), [(128, 512, 128), (2048, 512, 512)])
def test_load_settings_are_the_one_rule(n_ctx: int, n_batch: int, ubatch: int) -> None:
    params = LoadParams(n_ctx=n_ctx, threads=3, n_batch=n_batch, options={"use_mmap": False})
    s = load_settings(Path("/m/model.gguf"), params)
    assert s["n_batch"] == n_ctx and s["n_ubatch"] == ubatch and s["use_mmap"] is False
    assert s["n_threads"] == s["n_threads_batch"] == 3 and s["n_gpu_layers"] == 0
    assert load_settings(Path("m"), LoadParams(n_ctx=64, threads=1))["use_mmap"] is True


def test_the_server_gets_the_adapters_settings(tmp_path: Path) -> None:
    if missing_deps():
        pytest.skip(f"llama-cpp-python[server] extras missing: {missing_deps()}")
    settings = load_settings(tmp_path / "model.gguf", LoadParams(n_ctx=256, threads=2))
    driver = LlamaCppServer(LlamaCppAdapter(), settings)
    launch = driver.launch(tmp_path, "srv", 4321, interrupt=False)
    cfg = json.loads((tmp_path / "srv.json").read_text("utf-8"))
    assert cfg == launch.settings and launch.argv[-1] == str(tmp_path / "srv.json")
    assert launch.argv[1:4] == ["-m", "llama_cpp.server", "--config_file"]
    (model,) = cfg["models"]
    assert model == server_model(settings)
    assert model["model"] == str(tmp_path / "model.gguf") and "model_path" not in model
    assert {k: v for k, v in model.items() if k != "model"} == {
        k: v for k, v in settings.items() if k != "model_path"
    }
    assert cfg["interrupt_requests"] is False and cfg["port"] == 4321
    assert "interrupt_requests" not in driver.launch(tmp_path, "d", 1, interrupt=None).settings
    assert driver.logged_disconnect("... Disconnected from client (via refresh/close) ...")


def test_extra_buffer_types_off_serves_through_the_launcher(tmp_path: Path) -> None:
    if missing_deps():
        pytest.skip(f"llama-cpp-python[server] extras missing: {missing_deps()}")
    settings = load_settings(tmp_path / "model.gguf", LoadParams(n_ctx=256, threads=2))
    driver = LlamaCppServer(LlamaCppAdapter(), settings, extra_bufts=False)
    argv = driver.launch(tmp_path, "srv", 4321, interrupt=None).argv
    assert argv[1:5] == ["-m", "rtmatrix.runtimes.llama_cpp.server_main", "--no-extra-bufts",
                         "--config_file"]  # fmt: skip
    assert "extra_buffer_types" not in json.loads((tmp_path / "srv.json").read_text("utf-8"))


def test_extra_buffer_types_is_a_boolean_defaulting_to_llama_cpps_own() -> None:
    assert extra_buffer_types({}) is True
    assert extra_buffer_types({"extra_buffer_types": False}) is False
    with pytest.raises(ValueError, match=r"options\.extra_buffer_types 'off': valid: true"):
        extra_buffer_types({"extra_buffer_types": "off"})
    assert CRASH_CONTROL.options == {"extra_buffer_types": False}
    assert LlamaCppAdapter.crash_control is CRASH_CONTROL
