"""Google's LiteRT exporter (litert-torch) as a converter home, without a network or its venv:
the venv's build steps and key, the command line, the conversion key, refusals (kept or not) and
an environment that cannot be built (unavailable, with the command that builds it). A stand-in
``litert-torch`` in a fake venv takes the whole path: offline child, cache, refusal cache."""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path

import pytest

from rtmatrix.converters import HOMES, dtypes, home, toolenv
from rtmatrix.converters import litert_torch as lt
from rtmatrix.converters.base import ChildRun, ConverterRefused
from rtmatrix.fixtures.cache import key_hash
from rtmatrix.fixtures.prepare import unconvertible
from rtmatrix.fixtures.spec import ExporterUnavailable, FixtureError

#: a stand-in for litert-torch: writes the file(s) for a qwen3 folder as export_hf names them,
#: refuses a gemma3 one with a traceback, misses a module for a gpt2 one, writes nothing (exit 0)
#: for a phi3 one
FAKE_CLI = """#!{python}
import json, sys
from pathlib import Path

args = sys.argv[1:]
assert args[0] == "export_hf", args
model, out = Path(args[1]), Path(args[2])
kind = json.loads((model / "config.json").read_text())["model_type"]
print("Loading model " + str(model))
if kind == "gemma3_text":
    print("Traceback (most recent call last):")
    print('  File "litert_torch/_convert/conversion.py", line 1, in convert')
    print("RuntimeError: Unsupported op: aten.sliding_window_mask")
    raise SystemExit(1)
if kind == "gpt2":
    print("ModuleNotFoundError: No module named 'tensorflow'")
    raise SystemExit(1)
if kind != "phi3":
    (out / "model.tflite").write_bytes(b"TFL3" * 8)
    if "--quantization_recipe=dynamic_wi8_afp32" in args:
        (out / "model_quantized.tflite").write_bytes(b"TFL3" * 4)
    (out / "tokenizer.json").write_text("{{}}")
print("exported " + " ".join(args[3:]))
"""


def fake_env(root: Path, cli: str = FAKE_CLI) -> Path:
    """A built-looking venv in ``env_dir(root)``: manifest, bin/python, bin/litert-torch and the
    metadata of a few distributions."""
    entry = lt.env_dir(root)
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "python").symlink_to(sys.executable)
    script = entry / "bin" / "litert-torch"
    script.write_text(cli.format(python=sys.executable), "utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    site = entry / "lib" / "python3.11" / "site-packages"
    for name, version in (("litert_torch", "0.10.0"), ("transformers", "5.5.4")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    manifest = {
        "key": lt.env_key(),
        "key_sha256": key_hash(lt.env_key()),
        "versions": {"litert-torch": "0.10.0", "transformers": "5.5.4"},
    }
    (entry / toolenv.ENV_MANIFEST).write_text(json.dumps(manifest), "utf-8")
    return entry


def checkpoint(root: Path, model_type: str, name: str | None = None) -> Path:
    folder = root / (name or f"{model_type}-ckpt")
    folder.mkdir(parents=True)
    config = {"model_type": model_type, "architectures": ["XForCausalLM"], "eos_token_id": 2}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1}))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


# -- registry and dtypes ------------------------------------------------------------------------
def test_the_home_is_registered_and_names_its_dtypes() -> None:
    assert HOMES["litert_torch"] == "rtmatrix.converters.litert_torch"
    mod = home("litert_torch")
    assert mod is lt and (lt.DISTRIBUTION, lt.EXTRA, lt.CONTAINER) == ("litert-torch", None,
                                                                       "tflite")  # fmt: skip
    assert lt.DTYPES == {"f32": "none", "litert-int8": "dynamic_wi8_afp32",
                         "litert-int4": "dynamic_wi4_afp32"}  # fmt: skip
    assert set(lt.OUTPUTS) == set(lt.RECIPES)
    assert lt.check_recipe("dynamic_wi8_afp32") == "dynamic_wi8_afp32"
    with pytest.raises(ValueError, match=re.escape("none, dynamic_wi8_afp32, dynamic_wi4_afp32")):
        lt.check_recipe("weight_only_wi4_afp32")


def test_the_litert_row_names_this_converter_and_what_it_cannot_write() -> None:
    from rtmatrix.runtimes.litert.adapter import LiteRtAdapter

    assert LiteRtAdapter.converter == "litert_torch"
    assert dtypes.owner("litert-int8") == "litert_torch" and dtypes.bits("litert-int8") == 8
    assert dtypes.with_bits("litert_torch", 4) == "litert-int4"
    assert lt.VENDOR_DTYPES[0].option == "--quantization_recipe dynamic_wi8_afp32"
    assert unconvertible("litert_torch", "litert-int8", None) is None
    why = unconvertible("litert_torch", "q8_0", None)
    assert why is not None and "litert-torch export_hf writes no 'q8_0'" in why


def test_the_shapes_are_those_of_rtmatrixs_own_tflite_export() -> None:
    from rtmatrix.fixtures import tflite_export

    assert (lt.PREFILL_LENGTH, lt.CACHE_LENGTH) == (tflite_export.PREFILL_CHUNK,
                                                    tflite_export.MAX_CTX)  # fmt: skip


# -- the environment ----------------------------------------------------------------------------
def test_the_venv_is_built_in_steps_torch_first_then_the_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(toolenv.TORCH_INDEX_ENV, raising=False)
    entry = tmp_path / "venv"
    cmds = [c for _what, c in lt.build_steps(entry)]
    assert cmds[0] == [sys.executable, "-m", "venv", str(entry)]
    pip = [str(entry / "bin" / "python"), "-m", "pip", "install"]
    assert all(c[:4] == pip for c in cmds[1:])
    assert cmds[1][-1] == "torch==2.13.0"  # alone first: its index may be PyTorch's CPU one
    # then litert-torch with its own requirements, at transformers 5.5.4 and with TensorFlow
    assert cmds[2][-4:] == ["torch==2.13.0", "litert-torch==0.10.0", "transformers==5.5.4",
                            "tensorflow-cpu==2.21.0"]  # fmt: skip
    monkeypatch.setenv(toolenv.TORCH_INDEX_ENV, "https://download.pytorch.org/whl/cpu")
    torch_step = lt.build_steps(entry)[1][1]
    assert torch_step[-2:] == ["--index-url", "https://download.pytorch.org/whl/cpu"]


def test_the_venv_lives_in_the_tools_cache_keyed_by_its_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTMATRIX_TOOLS_DIR", str(tmp_path))
    first = lt.env_dir()
    assert first.parent == tmp_path and first.name.startswith("litert-torch-0.10.0-")
    monkeypatch.setitem(lt.PINS, "transformers", "5.5.3")
    assert lt.env_dir() != first


def test_the_upgrade_flow_picks_litert_torchs_version_by_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTMATRIX_TOOLS_DIR", str(tmp_path))
    first = lt.env_dir()
    monkeypatch.setenv(lt.VERSION_ENV, "0.9.0")
    other = lt.env_dir()
    assert other != first and other.name.startswith("litert-torch-0.9.0-")
    assert "litert-torch==0.9.0" in lt.build_steps(other)[-1][1]
    assert lt.env_key()["pins"]["transformers"] == lt.PINS["transformers"]  # the others stay
    monkeypatch.setenv(lt.VERSION_ENV, "0.9; rm -rf /")
    with pytest.raises(ExporterUnavailable, match="not a version"):
        lt.env_dir()


def test_a_venv_without_its_manifest_or_cli_is_not_built(tmp_path: Path) -> None:
    entry = fake_env(tmp_path)
    env = lt.read_env(entry)
    assert env is not None and env.version == "0.10.0" and env.cli == entry / "bin/litert-torch"
    assert env.packages() == {"litert-torch": "0.10.0", "transformers": "5.5.4"}
    (entry / "bin" / "litert-torch").unlink()
    assert lt.read_env(entry) is None
    assert lt.read_env(tmp_path / "nothing") is None


def test_a_venv_of_other_pins_is_not_this_one(tmp_path: Path) -> None:
    entry = fake_env(tmp_path)
    manifest = json.loads((entry / toolenv.ENV_MANIFEST).read_text())
    manifest["key"]["pins"]["litert-torch"] = "0.9.0"
    (entry / toolenv.ENV_MANIFEST).write_text(json.dumps(manifest))
    assert lt.read_env(entry) is None


def test_a_venv_that_cannot_be_built_is_unavailable_tried_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    failing = [sys.executable, "-c", "print('ERROR: No matching distribution found for "
               "tensorflow-cpu==2.21.0'); raise SystemExit(1)"]  # fmt: skip
    calls: list[Path] = []

    def steps(entry: Path) -> list[tuple[str, list[str]]]:
        calls.append(entry)
        return [("tensorflow-cpu", failing)]

    monkeypatch.setattr(lt, "build_steps", steps)
    monkeypatch.setattr(lt, "_FAILED", {})
    with pytest.raises(ExporterUnavailable) as first:
        lt.environment(root=tmp_path)
    message = str(first.value)
    assert "litert-torch's environment could not be built" in message
    assert "tensorflow-cpu failed (exit 1)" in message and "No matching distribution" in message
    assert f"build it with: {lt.BUILD_COMMAND}" in message
    assert lt.BUILD_COMMAND.endswith("-m rtmatrix.converters.litert_torch")
    assert not lt.env_dir(tmp_path).exists()  # the half-built venv is removed
    assert "litert-torch environment [1/2] tensorflow-cpu" in capsys.readouterr().err
    with pytest.raises(ExporterUnavailable) as second:
        lt.environment(root=tmp_path)
    assert str(second.value) == message and len(calls) == 1  # not tried again in this process


VERSIONS = {"versions": {"litert-torch": "0.10.0"}}


@pytest.mark.parametrize(
    ("source", "versions", "error"),
    [
        (f"import json; print({toolenv.CHECK_PREFIX!r} + json.dumps({VERSIONS!r}))",
         VERSIONS["versions"], None),
        ("raise ImportError('cannot import name is_torch_fx_available from transformers')",
         None, "ImportError: cannot import name is_torch_fx_available"),
    ],
)  # fmt: skip
def test_the_venvs_check_imports_the_exporter_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str,
    versions: dict[str, str] | None, error: str | None,
) -> None:  # fmt: skip
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(lt, "_CHECK_SOURCE", source)
    log = tmp_path / "build.log"
    if error is None:
        assert lt._check_env(tmp_path, log) == versions
    else:
        with pytest.raises(toolenv.EnvBuildFailed, match="does not import in the new venv") as exc:
            lt._check_env(tmp_path, log)
        assert error in str(exc.value)
    assert "litert-torch export_hf check" in log.read_text()


# -- the command and the key --------------------------------------------------------------------
def test_the_command_is_export_hf_at_the_rows_shapes(tmp_path: Path) -> None:
    env = lt.read_env(fake_env(tmp_path))
    assert env is not None
    cmd = lt.command(env, Path("/ckpt"), "none", Path("/out"))
    assert cmd == [str(env.cli), "export_hf", "/ckpt", "/out", "--prefill_lengths=32",
                   "--cache_length=512", "--quantization_recipe=none",
                   "--bundle_litert_lm=False", "--keep_temporary_files=True"]  # fmt: skip
    quantized = lt.command(env, Path("/ckpt"), "dynamic_wi8_afp32", Path("/out"))
    assert "--quantization_recipe=dynamic_wi8_afp32" in quantized


def test_the_key_changes_with_checkpoint_options_and_packages(tmp_path: Path) -> None:
    env = lt.read_env(fake_env(tmp_path / "tools"))
    assert env is not None
    folder = checkpoint(tmp_path, "qwen3")
    packages = env.packages()
    key = lt.conversion_key(folder, "none", env, packages)
    assert key["version"] == "0.10.0" and key["python_packages"] == packages
    assert key["options"] == {"quantization_recipe": "none", "prefill_lengths": "32",
                              "cache_length": "512"}  # fmt: skip
    assert key_hash(lt.conversion_key(folder, "none", env, dict(packages))) == key_hash(key)
    others = [
        lt.conversion_key(folder, "dynamic_wi8_afp32", env, packages),
        lt.conversion_key(folder, "none", env, packages | {"tensorflow-cpu": "2.22.0"}),
    ]
    (folder / "model.safetensors").write_bytes(b"other weights")
    others.append(lt.conversion_key(folder, "none", env, packages))
    assert len({key_hash(k) for k in [key, *others]}) == 4


# -- refusals -----------------------------------------------------------------------------------
LONGROPE = """Traceback (most recent call last):
  File "litert_torch/generative/export_hf/core/export_lib.py", line 51, in verify
    raise NotImplementedError('Dynamic and longrope are not supported yet.')
NotImplementedError: Dynamic and longrope are not supported yet.
"""


@pytest.mark.parametrize(
    ("run", "kept", "says"),
    [
        (ChildRun(1, 9.0, LONGROPE), True, "NotImplementedError: Dynamic and longrope"),
        (ChildRun(-9, 9.0, "Converting model...\n"), False, "killed by SIGKILL"),
        (ChildRun(-9, 9.0, "Converting\n", timed_out=True), False, "ran past its time limit"),
        (ChildRun(1, 1.0, "ModuleNotFoundError: No module named 'tensorflow'\n"), False,
         "is incomplete: delete it and run"),
        (ChildRun(0, 9.0, "Exporting\n"), True, "exited 0 but wrote no model.tflite"),
    ],
)  # fmt: skip
def test_only_a_refusal_a_retry_would_repeat_is_kept(
    tmp_path: Path, run: ChildRun, kept: bool, says: str
) -> None:
    env = lt.read_env(fake_env(tmp_path / "tools"))
    assert env is not None
    folder = checkpoint(tmp_path, "phi3")
    message, keep = lt.refusal(env, folder, "none", run, "model.tflite")
    assert keep is kept and says in message
    assert message.startswith(
        "LiteRT's exporter (litert-torch export_hf, litert-torch 0.10.0, transformers 5.5.4) "
        f"refused {folder}, model_type phi3 (XForCausalLM), recipe none"
    )


# -- the whole path, with a stand-in exporter ---------------------------------------------------
def test_a_conversion_runs_offline_is_recorded_and_cached(tmp_path: Path) -> None:
    fake_env(tmp_path / "tools")
    folder = checkpoint(tmp_path, "qwen3")
    said: list[str] = []
    done = lt.convert_artifact(folder, "none", tmp_path / "cache", said.append,
                               env_root=tmp_path / "tools")  # fmt: skip
    assert done.built and done.path.name == "model.tflite" and done.path.is_file()
    conv = done.conversion
    made = (conv.converter, conv.tool, conv.distribution, conv.version)
    assert made == ("litert_torch", "litert-torch export_hf", "litert-torch", "0.10.0")
    assert conv.options["quantization_recipe"] == "none" and conv.network_attempts == []
    assert conv.command[-8:-6] == ["export_hf", str(folder)]  # then the (temporary) entry
    flags = ["--cache_length=512", "--quantization_recipe=none", "--bundle_litert_lm=False",
             "--keep_temporary_files=True"]  # fmt: skip
    assert conv.command[-4:] == flags
    assert "exported --prefill_lengths=32 --cache_length=512" in conv.log_tail
    out = done.path.parent
    assert json.loads((out / "config.json").read_text())["eos_token_id"] == 2  # the row's eos
    assert (out / "generation_config.json").is_file()
    assert done.manifest["copied_from_checkpoint"] == ["config.json", "generation_config.json"]
    assert set(done.manifest["files"]) >= {"model.tflite", "tokenizer.json", "convert.log"}
    assert any("converting" in s for s in said) and said[-1].startswith("converted: ")
    again = lt.convert_artifact(folder, "none", tmp_path / "cache", env_root=tmp_path / "tools")
    assert not again.built and again.path == done.path and again.conversion == conv


def test_the_quantized_recipe_is_read_from_its_own_file(tmp_path: Path) -> None:
    fake_env(tmp_path / "tools")
    folder = checkpoint(tmp_path, "qwen3")
    done = lt.convert_artifact(folder, "dynamic_wi8_afp32", tmp_path / "cache",
                               env_root=tmp_path / "tools")  # fmt: skip
    assert done.path.name == "model_quantized.tflite" and done.path.stat().st_size == 16
    assert done.conversion.options["quantization_recipe"] == "dynamic_wi8_afp32"


def test_the_exporters_refusal_is_its_own_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTMATRIX_TOOLS_DIR", str(tmp_path / "tools"))
    fake_env(tmp_path / "tools")
    folder = checkpoint(tmp_path, "gemma3_text")
    with pytest.raises(ConverterRefused) as first:
        lt.convert(folder, "none", tmp_path / "cache")
    assert "RuntimeError: Unsupported op: aten.sliding_window_mask" in str(first.value)
    assert "model_type gemma3_text" in str(first.value)
    assert first.value.conversion.tool == lt.TOOL
    with pytest.raises(ConverterRefused, match="cached refusal"):
        lt.convert(folder, "none", tmp_path / "cache")
    assert list((tmp_path / "cache").glob("litert-torch-gemma3_text-ckpt-none-*.refused.log"))


def test_no_file_written_is_a_refusal_kept(tmp_path: Path) -> None:
    fake_env(tmp_path / "tools")
    folder = checkpoint(tmp_path, "phi3")
    with pytest.raises(ConverterRefused, match=r"exited 0 but wrote no model\.tflite"):
        lt.convert_artifact(folder, "none", tmp_path / "cache", env_root=tmp_path / "tools")
    assert list((tmp_path / "cache").glob("*.refused.json"))


def test_a_package_missing_from_the_venv_is_not_kept(tmp_path: Path) -> None:
    fake_env(tmp_path / "tools")
    folder = checkpoint(tmp_path, "gpt2")
    for _ in range(2):  # not cached: the exporter runs again
        with pytest.raises(ConverterRefused, match="is incomplete: delete it") as exc:
            lt.convert_artifact(folder, "none", tmp_path / "cache", env_root=tmp_path / "tools")
        assert "cached refusal" not in str(exc.value)
    assert not list((tmp_path / "cache").glob("*.refused.json"))


def test_a_folder_without_config_json_is_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match=r"no config\.json"):
        lt.convert_artifact(tmp_path, "none", tmp_path / "cache", env_root=tmp_path / "tools")
