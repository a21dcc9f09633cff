"""MNN-LLM's exporter (llmexport) as a converter home, without the exporter: its command line,
its environment (offline, its own folder on the path, pip stubbed), the cache key, refusals in
its own words, and a stand-in exporter run end to end through the home (it tries the network and
pip as MNN's telemetry does; both are recorded, neither reaches anything). No network, no torch."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtmatrix.converters import HOMES, home
from rtmatrix.converters import mnn_llmexport as mle
from rtmatrix.converters.base import ChildRun, ConverterRefused, offline_prefix
from rtmatrix.fixtures.prepare import unconvertible
from rtmatrix.fixtures.spec import ExporterUnavailable

SCRIPT = Path("/site/llmexport/llmexport.py")

#: a stand-in for llmexport.py: tries the network (a documentation address: never routed) and
#: pip (as MNN's telemetry does), then writes an export or fails as the test tells it
FAKE = r"""
import json, os, socket, sys
from pathlib import Path
args = sys.argv[1:]
dst = Path(args[args.index("--dst_path") + 1])
bits = int(args[args.index("--quant_bit") + 1])
try:
    socket.create_connection(("192.0.2.1", 80), timeout=1)
except OSError as exc:
    print(f"urlopen error {exc}", flush=True)
os.system("pip install -U aliyun-log-python-sdk")
Path(".export.log").write_text("Start to Convert Other Model Format To MNN Model...\n")
mode = json.loads((Path(args[args.index("--path") + 1]) / "config.json").read_text())["mode"]
if mode == "raise":
    print("Traceback (most recent call last):\n  File \"llmexport.py\", line 1\n"
          "KeyError: 'rope_scaling'", flush=True)
    sys.exit(1)
if mode == "silent":
    Path(".export.log").write_text("Error for node rotary_emb\nConverted Failed!\n")
    sys.exit(0)
dst.mkdir(parents=True, exist_ok=True)
for name in ("llm.mnn", "llm.mnn.weight", "tokenizer.mtok"):
    (dst / name).write_bytes(b"x" * 8)
(dst / "embeddings_bf16.bin").write_bytes(b"e" * 4)
(dst / "config.json").write_text(json.dumps({"llm_model": "llm.mnn"}))
(dst / "llm_config.json").write_text(json.dumps({"model_type": "llama"}))
(dst / "export_args.json").write_text(json.dumps({"quant_bit": bits, "path": "p", "dst_path": "d"}))
print("\x1b[32m\u2705 Done\x1b[0m export config to", dst, flush=True)
"""


def _checkpoint(folder: Path, mode: str = "ok") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "mode": mode}
    (folder / "config.json").write_text(json.dumps(config), "utf-8")
    (folder / "model.safetensors").write_bytes(b"w")
    (folder / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": 2}')
    return folder


@pytest.fixture
def fake_exporter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "site" / "llmexport" / "llmexport.py"
    script.parent.mkdir(parents=True)
    script.write_text(FAKE, "utf-8")
    monkeypatch.setattr(mle, "exporter_script", lambda: script)
    monkeypatch.setattr(mle, "python_packages", lambda: dict.fromkeys(mle.PYTHON_PACKAGES, "9.9"))
    return script


# -- command and environment --------------------------------------------------------------------
def test_the_command_runs_the_script_itself_with_every_option_explicit(tmp_path: Path) -> None:
    cmd = mle.command(SCRIPT, tmp_path / "ckpt", tmp_path / "out", "8")
    assert cmd[:2] == [sys.executable, str(SCRIPT)]  # not the broken console script
    flags = dict(zip(cmd[2::2], cmd[3::2], strict=True))
    assert flags == {"--path": str(tmp_path / "ckpt"), "--export": "mnn",
                     "--dst_path": str(tmp_path / "out"), "--quant_bit": "8",
                     "--quant_block": mle.QUANT_BLOCK, "--mnnconvert": ""}  # fmt: skip


def test_the_environment_is_offline_with_its_folder_on_the_path_and_pip_stubbed(
    tmp_path: Path,
) -> None:
    stubs = mle.write_pip_stubs(tmp_path / "stubs")
    env = mle.child_env(SCRIPT, stubs)
    assert env["PYTHONPATH"] == str(SCRIPT.parent)  # its `utils` package
    assert env["PATH"].split(os.pathsep)[0] == str(stubs)
    assert env["HF_HUB_OFFLINE"] == "1" and env["PIP_NO_INDEX"] == "1"
    found = shutil.which("pip", path=env["PATH"])
    assert found == str(stubs / "pip")
    proc = subprocess.run([found, "install", "-U", "aliyun-log-python-sdk"], capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip
    assert proc.returncode != 0
    assert proc.stderr.strip() == f"{mle.BLOCKED}pip install -U aliyun-log-python-sdk"
    assert mle.install_attempts(proc.stderr) == [proc.stderr.strip()]


def test_the_log_loses_its_spinner_not_its_words() -> None:
    raw = ("\x1b[0m\u280b export onnx model to   \r\u2819 export onnx model to\n"
           "\u2705 Done export onnx model to \x1b[33;4m/out/llm.onnx\x1b[0m\n\n"
           "KeyError: 'x'\n")  # fmt: skip
    assert mle.clean_log(raw) == "\u2705 Done export onnx model to /out/llm.onnx\nKeyError: 'x'\n"


# -- dtypes and the cache key -------------------------------------------------------------------
def test_only_16_8_and_4_bit_weights_and_the_row_says_so() -> None:
    assert HOMES["mnn_llmexport"] == "rtmatrix.converters.mnn_llmexport"
    assert home("mnn_llmexport") is mle
    assert mle.DTYPES == {"f16": "16", "mnn-q8": "8", "mnn-q4": "4"}
    assert [(d.name, d.option) for d in mle.VENDOR_DTYPES] == [
        ("mnn-q8", "--quant_bit 8"),
        ("mnn-q4", "--quant_bit 4"),
    ]
    assert all(f"blocks of {mle.QUANT_BLOCK}" in d.doc for d in mle.VENDOR_DTYPES)
    assert mle.check_quant_bit("4") == "4"
    with pytest.raises(ValueError, match="16, 8, 4-bit weights only"):
        mle.check_quant_bit("32")
    why = unconvertible("mnn_llmexport", "f32", None)
    assert why == "llmexport.py writes no 'f32' here (it writes f16, mnn-q8, mnn-q4)"
    assert unconvertible("mnn_llmexport", "mnn-q4", None) is None
    assert unconvertible("mnn_llmexport", "int4w", None) is not None  # rtmatrix's own name


def test_the_key_is_checkpoint_content_version_and_options(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "c")
    pkgs = dict.fromkeys(mle.PYTHON_PACKAGES, "1.0")
    key = mle.conversion_key(ckpt, "16", pkgs)
    assert key == mle.conversion_key(ckpt, "16", dict(pkgs))
    assert key["options"] == {"quant_bit": "16", "quant_block": mle.QUANT_BLOCK}
    assert (key["converter"], key["distribution"], key["version"]) == (
        "mnn_llmexport", "llmexport", "1.0")  # fmt: skip
    assert mle.conversion_key(ckpt, "4", pkgs) != key
    assert mle.conversion_key(ckpt, "16", pkgs | {"llmexport": "0.0.6"}) != key
    assert mle.conversion_key(ckpt, "16", pkgs | {"mnn": "3.7.0"}) != key
    (ckpt / "model.safetensors").write_bytes(b"changed")
    assert mle.conversion_key(ckpt, "16", pkgs)["source_sha256"] != key["source_sha256"]


def test_a_missing_exporter_is_unavailable_with_the_extra() -> None:
    packages = dict.fromkeys(mle.PYTHON_PACKAGES, "1.0") | {"llmexport": "absent"}
    with pytest.raises(ExporterUnavailable, match=re.escape("pip install 'rtmatrix[mnn-llm]'")):
        mle.require_exporter(packages)
    assert mle.require_exporter(dict.fromkeys(mle.PYTHON_PACKAGES, "0.0.5")) == "0.0.5"


def test_the_environment_check_names_what_changed() -> None:
    before = {"mnn": "3.6.1", "torch": "2.13.0"}
    assert mle.environment_change(before, dict(before))["unchanged"] is True
    after = before | {"aliyun-log-python-sdk": "0.9.0"}
    change = mle.environment_change(before, after)
    assert change["changed"] == ["aliyun-log-python-sdk absent -> 0.9.0"]
    assert not change["unchanged"]
    assert "pytest" in mle.installed_distributions()


# -- refusals -----------------------------------------------------------------------------------
TRACEBACK = """\u2705 Done load pretrained model /ckpt
\U0001f4a5 Failed export onnx model to
Traceback (most recent call last):
  File "utils/model.py", line 120, in forward
KeyError: 'rope_scaling'
rtmatrix-blocked: pip install -U aliyun-log-python-sdk
"""


@pytest.mark.parametrize(
    ("run", "kept", "said"),
    [
        (ChildRun(1, 1.0, TRACEBACK), True, "KeyError: 'rope_scaling'"),
        (ChildRun(1, 1.0, "ModuleNotFoundError: No module named 'utils'\n"), False,
         "ModuleNotFoundError: No module named 'utils'"),
        (ChildRun(-9, 1.0, "Loading\n"), False, "killed by SIGKILL"),
        (ChildRun(0, 1.0, "\u2705 Done export config\n"), True, "Converted Failed!"),
    ],
)  # fmt: skip
def test_only_a_refusal_a_retry_would_repeat_is_kept(
    tmp_path: Path, run: ChildRun, kept: bool, said: str
) -> None:
    ckpt = _checkpoint(tmp_path / "c")
    message, keep = mle.refusal("0.0.5", ckpt, "16", run, "llm.mnn", "Converted Failed!\n")
    assert keep is kept
    assert message.startswith(f"MNN-LLM's exporter (llmexport.py, llmexport 0.0.5) refused {ckpt}")
    assert "model_type llama (LlamaForCausalLM), at 16-bit weights" in message
    assert said in message


# -- a stand-in exporter, end to end ------------------------------------------------------------
def test_an_export_is_recorded_offline_with_its_attempts_and_cached(
    tmp_path: Path, fake_exporter: Path
) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt")
    done = mle.convert(ckpt, "16", root=tmp_path / "cache")
    assert done.built and done.path.name == mle.OUTPUT
    out = done.path.parent
    for name in (*mle.REQUIRED_FILES, mle.LOG_FILE, mle.MNNCONVERT_LOG, "generation_config.json"):
        assert (out / name).is_file(), name
    conv = done.conversion
    assert conv.command[-len(mle.command(fake_exporter, ckpt, out, "16")) :][:2] == [
        sys.executable, str(fake_exporter)]  # fmt: skip
    assert conv.offline == offline_prefix()[1]
    assert f"{mle.BLOCKED}pip install -U aliyun-log-python-sdk" in conv.network_attempts
    if offline_prefix()[0]:  # in a network namespace the connection cannot even start
        assert any("Network is unreachable" in a for a in conv.network_attempts)
    assert "\x1b[" not in conv.log_tail
    man = done.manifest
    assert man["environment"]["unchanged"] is True
    assert man["export_args"] == {"quant_bit": 16}
    assert man["embedding"]["precision"] == "bf16"
    assert man["copied_from_checkpoint"] == ["generation_config.json"]
    again = mle.convert(ckpt, "16", root=tmp_path / "cache")
    assert not again.built and again.path == done.path and again.conversion == conv


@pytest.mark.parametrize(("mode", "said"), [("raise", "KeyError: 'rope_scaling'"),
                                            ("silent", "Converted Failed!")])  # fmt: skip
def test_a_failed_export_is_the_exporters_refusal_kept(
    tmp_path: Path, fake_exporter: Path, mode: str, said: str
) -> None:
    ckpt = _checkpoint(tmp_path / mode, mode)
    with pytest.raises(ConverterRefused) as first:
        mle.convert(ckpt, "8", root=tmp_path / "cache")
    assert said in str(first.value)
    assert first.value.conversion.tool == mle.TOOL
    assert first.value.conversion.options["quant_bit"] == "8"
    with pytest.raises(ConverterRefused, match="cached refusal"):
        mle.convert(ckpt, "8", root=tmp_path / "cache")
    assert list((tmp_path / "cache").glob(f"mnn-llmexport-{mode}-q8-*.refused.log"))
