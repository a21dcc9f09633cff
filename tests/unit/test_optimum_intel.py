"""OpenVINO's exporter as a converter home, without a network or its venv: the venv's build steps
and key, the transformers a model type is converted with (an overlay where optimum-intel caps
its own), the command line, the conversion key, refusals (kept or not) and an environment that
cannot be built (unavailable, with the command that builds it). A stand-in ``optimum-cli`` in a
fake venv takes the whole path: offline child, cache, refusal cache, the overlay on its path."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from rtmatrix.converters import HOMES, home, toolenv
from rtmatrix.converters import optimum_intel as oi
from rtmatrix.converters.base import ChildRun, ConverterRefused
from rtmatrix.fixtures.cache import key_hash
from rtmatrix.fixtures.spec import ExporterUnavailable, FixtureError

GEMMA_RANGE = ["4.57", "5.0"]
RANGES = {"qwen3": ["4.57", None], "gemma3_text": GEMMA_RANGE, "old": ["4.51.0", "4.53.3"]}

#: a stand-in for optimum-cli: writes the IR for a qwen3 folder, refuses a gemma3 one unless the
#: overlay is on its path, crashes for a gpt2 one; says which PYTHONPATH it saw
FAKE_CLI = """#!{python}
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
print("PYTHONPATH=" + os.environ.get("PYTHONPATH", ""))
model = Path(args[args.index("--model") + 1])
out = Path(args[-1])
kind = json.loads((model / "config.json").read_text())["model_type"]
if kind == "gemma3_text" and "transformers-5.0.0" not in os.environ.get("PYTHONPATH", ""):
    raise ValueError("The current version of Transformers does not allow for the export of the "
                     "model. Maximum required is 5.0, got: 5.5.4")
if kind == "gpt2":
    raise ModuleNotFoundError("No module named 'nncf'")
(out / "openvino_model.xml").write_text("<net/>")
(out / "openvino_model.bin").write_bytes(b"w" * 16)
(out / "config.json").write_text((model / "config.json").read_text())
print("exported " + args[args.index("--weight-format") + 1])
"""


def fake_env(root: Path, cli: str = FAKE_CLI) -> Path:
    """A built-looking venv in ``env_dir(root)``: manifest, bin/python, bin/optimum-cli, the
    overlay folder and the metadata of a few distributions."""
    entry = oi.env_dir(root)
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "python").symlink_to(sys.executable)
    script = entry / "bin" / "optimum-cli"
    script.write_text(cli.format(python=sys.executable), "utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    site = entry / "lib" / "python3.11" / "site-packages"
    overlay = oi.overlay_dir(entry, "5.0.0")
    for where, name, version in ((site, "optimum_intel", "2.2.0"), (site, "transformers", "5.5.4"),
                                 (overlay, "transformers", "5.0.0")):  # fmt: skip
        info = where / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    manifest = {
        "key": oi.env_key(),
        "key_sha256": key_hash(oi.env_key()),
        "versions": {"optimum-intel": "2.2.0", "transformers": "5.5.4"},
        "ranges": RANGES,
        "overlays": {"5.0.0": {"path": str(overlay), "model_types": ["gemma3_text"]}},
    }
    (entry / toolenv.ENV_MANIFEST).write_text(json.dumps(manifest), "utf-8")
    return entry


def checkpoint(root: Path, model_type: str, name: str | None = None) -> Path:
    folder = root / (name or f"{model_type}-ckpt")
    folder.mkdir(parents=True)
    config = {"model_type": model_type, "architectures": ["XForCausalLM"]}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


# -- registry and dtypes ------------------------------------------------------------------------
def test_the_home_is_registered_and_names_its_dtypes() -> None:
    assert HOMES["optimum_intel"] == "rtmatrix.converters.optimum_intel"
    mod = home("optimum_intel")
    assert mod.DTYPES == {"f32": "fp32", "f16": "fp16", "ov-int8": "int8", "ov-int4": "int4"}
    assert [(d.name, d.option, d.bits) for d in mod.VENDOR_DTYPES] == [
        ("ov-int8", "--weight-format int8", 8),
        ("ov-int4", "--weight-format int4", 4),
    ]
    assert "groups of 128" in mod.VENDOR_DTYPES[1].doc  # NNCF's default: why SmolLM2 is refused
    assert set(mod.DTYPES.values()) == set(mod.WEIGHT_FORMATS)
    assert oi.check_weight_format("int4") == "int4"
    with pytest.raises(ValueError, match=re.escape("fp32, fp16, int8, int4")):
        oi.check_weight_format("q4_0")


def test_both_openvino_rows_name_this_converter() -> None:
    from rtmatrix.runtimes.openvino.adapter import OpenVinoAdapter
    from rtmatrix.runtimes.openvino_genai.adapter import OvGenaiAdapter

    assert OpenVinoAdapter.converter == OvGenaiAdapter.converter == "optimum_intel"


# -- the environment ----------------------------------------------------------------------------
def test_the_venv_is_built_in_steps_torch_first_without_torchvision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(toolenv.TORCH_INDEX_ENV, raising=False)
    entry = tmp_path / "venv"
    steps = oi.build_steps(entry)
    cmds = [c for _what, c in steps]
    assert cmds[0] == [sys.executable, "-m", "venv", str(entry)]
    pip = [str(entry / "bin" / "python"), "-m", "pip", "install"]
    assert all(c[:4] == pip for c in cmds[1:])
    assert cmds[1][-1] == "torch==2.13.0"
    pinned = {"optimum==2.3.0", "transformers==5.5.4", "openvino==2026.4.1",
              "openvino-tokenizers==2026.4.1.0", "nncf==3.4.0", "torch==2.13.0"}  # fmt: skip
    assert pinned <= set(cmds[2])
    assert cmds[3][-2:] == ["--no-deps", "optimum-intel==2.2.0"]
    target = str(oi.overlay_dir(entry, "5.0.0"))
    assert cmds[4][-4:] == ["--no-deps", "--target", target, "transformers==5.0.0"]
    assert not any("torchvision" in arg for c in cmds for arg in c)
    monkeypatch.setenv(toolenv.TORCH_INDEX_ENV, "https://download.pytorch.org/whl/cpu")
    torch_step = oi.build_steps(entry)[1][1]
    assert torch_step[-2:] == ["--index-url", "https://download.pytorch.org/whl/cpu"]


def test_the_venv_lives_in_the_tools_cache_keyed_by_its_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTMATRIX_TOOLS_DIR", str(tmp_path))
    first = oi.env_dir()
    assert first.parent == tmp_path and first.name.startswith("optimum-intel-2.2.0-")
    monkeypatch.setitem(oi.PINS, "transformers", "5.5.3")
    assert oi.env_dir() != first


def test_the_upgrade_flow_picks_optimum_intels_version_by_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTMATRIX_TOOLS_DIR", str(tmp_path))
    first = oi.env_dir()
    monkeypatch.setenv(oi.VERSION_ENV, "2.1.0")
    other = oi.env_dir()
    assert other != first and other.name.startswith("optimum-intel-2.1.0-")
    assert oi.env_key()["pins"]["transformers"] == oi.PINS["transformers"]  # the others stay
    (own,) = [cmd for what, cmd in oi.build_steps(other) if what.startswith("optimum-intel==")]
    assert own[-1] == "optimum-intel==2.1.0" and oi.PINS["optimum-intel"] == "2.2.0"
    monkeypatch.setenv(oi.VERSION_ENV, "2.1.0; rm -rf /")
    with pytest.raises(ExporterUnavailable, match="not a version"):
        oi.env_dir()


def test_a_venv_without_its_manifest_or_cli_is_not_built(tmp_path: Path) -> None:
    entry = fake_env(tmp_path)
    env = oi.read_env(entry)
    assert env is not None and env.version == "2.2.0" and env.transformers == "5.5.4"
    assert env.cli == entry / "bin" / "optimum-cli"
    (entry / "bin" / "optimum-cli").unlink()
    assert oi.read_env(entry) is None
    assert oi.read_env(tmp_path / "nothing") is None


def test_a_venv_of_other_pins_is_not_this_one(tmp_path: Path) -> None:
    entry = fake_env(tmp_path)
    manifest = json.loads((entry / toolenv.ENV_MANIFEST).read_text())
    manifest["key"]["pins"]["optimum-intel"] = "2.1.0"
    (entry / toolenv.ENV_MANIFEST).write_text(json.dumps(manifest))
    assert oi.read_env(entry) is None


def test_an_unbuilt_venv_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ExporterUnavailable, match=re.escape(oi.BUILD_COMMAND)):
        oi.find_environment(tmp_path)
    assert oi.BUILD_COMMAND.endswith("-m rtmatrix.converters.optimum_intel")


def test_a_venv_that_cannot_be_built_is_unavailable_tried_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    failing = [sys.executable, "-c", "print('ERROR: No matching distribution found for torch')"
               "; raise SystemExit(1)"]  # fmt: skip
    calls: list[Path] = []

    def steps(entry: Path) -> list[tuple[str, list[str]]]:
        calls.append(entry)
        return [("torch==2.13.0", failing)]

    monkeypatch.setattr(oi, "build_steps", steps)
    monkeypatch.setattr(oi, "_FAILED", {})
    with pytest.raises(ExporterUnavailable) as first:
        oi.environment(root=tmp_path)
    message = str(first.value)
    assert "could not be built" in message and "torch==2.13.0 failed (exit 1)" in message
    assert "No matching distribution found for torch" in message
    assert f"build it with: {oi.BUILD_COMMAND}" in message and toolenv.TORCH_INDEX_ENV in message
    assert not oi.env_dir(tmp_path).exists()  # the half-built venv is removed
    err = capsys.readouterr().err
    assert "optimum-intel environment [1/2] torch==2.13.0" in err  # progress on stderr
    assert "ERROR: No matching distribution" in err
    with pytest.raises(ExporterUnavailable) as second:
        oi.environment(root=tmp_path)
    assert str(second.value) == message and len(calls) == 1  # not tried again in this process


# -- which transformers -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "allowed", "ok"),
    [
        ("5.5.4", ["4.57", None], True),
        ("5.5.4", GEMMA_RANGE, False),
        ("5.0.0", GEMMA_RANGE, True),  # optimum-intel's own "> 5.0" check: 5.0.0 passes
        ("5.2.1", ["5.2.0", "5.2.99"], True),
        ("4.57.6", ["5.0", None], False),
        ("5.5.4", None, True),
        ("2.14.0+cpu", [None, "2.14"], True),
    ],
)
def test_a_version_is_within_optimum_intels_range_as_it_checks(
    version: str, allowed: list[str | None] | None, ok: bool
) -> None:
    assert oi.allows(version, allowed) is ok


def test_gemma3_takes_the_overlay_the_others_the_venvs_own(tmp_path: Path) -> None:
    env = oi.read_env(fake_env(tmp_path))
    assert env is not None
    version, overlay, why = env.transformers_for("qwen3")
    assert (version, overlay) == ("5.5.4", None) and "the venv's own" in why
    version, overlay, why = env.transformers_for("gemma3_text")
    assert (version, overlay) == ("5.0.0", oi.overlay_dir(env.root, "5.0.0"))
    assert "allows 4.57 to 5.0 for this model type, not 5.5.4" in why
    version, overlay, why = env.transformers_for("old")  # no overlay fits: its own refusal
    assert (version, overlay) == ("5.5.4", None) and "no installed one fits" in why
    assert env.transformers_for("unknown-to-optimum")[0] == "5.5.4"


def test_the_packages_are_read_from_the_venv_an_overlay_first(tmp_path: Path) -> None:
    env = oi.read_env(fake_env(tmp_path))
    assert env is not None
    assert env.packages() == {"optimum-intel": "2.2.0", "transformers": "5.5.4"}
    assert env.packages(env.overlay("5.0.0"))["transformers"] == "5.0.0"


# -- the command and the key --------------------------------------------------------------------
def test_the_command_is_optimum_clis_export_with_the_overlay_said(tmp_path: Path) -> None:
    env = oi.read_env(fake_env(tmp_path))
    assert env is not None
    folder, out = Path("/ckpt"), Path("/out")
    cmd = oi.command(env, folder, "int8", out)
    assert cmd == [str(env.cli), "export", "openvino", "--model", "/ckpt", "--task",
                   "text-generation-with-past", "--weight-format", "int8", "/out"]  # fmt: skip
    overlay = env.overlay("5.0.0")
    assert oi.command(env, folder, "fp32", out, overlay)[:3] == [
        "env", f"PYTHONPATH={overlay}", str(env.cli)]  # fmt: skip


def test_the_key_changes_with_checkpoint_options_and_packages(tmp_path: Path) -> None:
    env = oi.read_env(fake_env(tmp_path / "tools"))
    assert env is not None
    folder = checkpoint(tmp_path, "qwen3")
    packages = env.packages()
    key = oi.conversion_key(folder, "fp32", env, "5.5.4", packages)
    assert key["version"] == "2.2.0" and key["python_packages"] == packages
    assert key["options"] == {"task": "text-generation-with-past", "weight_format": "fp32",
                              "transformers": "5.5.4"}  # fmt: skip
    assert key["environment"] == env.manifest["key_sha256"]
    same = oi.conversion_key(folder, "fp32", env, "5.5.4", dict(packages))
    assert key_hash(same) == key_hash(key)
    others = [
        oi.conversion_key(folder, "int8", env, "5.5.4", packages),
        oi.conversion_key(folder, "fp32", env, "5.0.0", packages),
        oi.conversion_key(folder, "fp32", env, "5.5.4", packages | {"nncf": "3.5.0"}),
    ]
    (folder / "model.safetensors").write_bytes(b"other weights")
    others.append(oi.conversion_key(folder, "fp32", env, "5.5.4", packages))
    assert len({key_hash(k) for k in [key, *others]}) == 5


# -- refusals -----------------------------------------------------------------------------------
CAP = """Traceback (most recent call last):
  File "optimum/exporters/openvino/convert.py", line 233, in _check
    raise ValueError(
ValueError: The current version of Transformers does not allow for the export of the model. \
Maximum required is 4.57.6, got: 5.5.4
"""


@pytest.mark.parametrize(
    ("run", "kept", "says"),
    [
        (ChildRun(1, 9.0, CAP), True, "Maximum required is 4.57.6, got: 5.5.4"),
        (ChildRun(-9, 9.0, "Exporting\n"), False, "killed by SIGKILL"),
        (ChildRun(-9, 9.0, "Exporting\n", timed_out=True), False, "ran past its time limit"),
        (ChildRun(1, 1.0, "ModuleNotFoundError: No module named 'nncf'\n"), False,
         "is incomplete: delete it and run"),
        (ChildRun(0, 9.0, "Exported\n"), True, "exited 0 but wrote no openvino_model.bin"),
    ],
)  # fmt: skip
def test_only_a_refusal_a_retry_would_repeat_is_kept(
    tmp_path: Path, run: ChildRun, kept: bool, says: str
) -> None:
    folder = checkpoint(tmp_path, "baichuan")
    message, keep = oi.refusal("2.2.0", "5.5.4", folder, "fp32", run, "openvino_model.bin",
                               tmp_path / "venv")  # fmt: skip
    assert keep is kept and says in message
    assert message.startswith(
        "OpenVINO's exporter (optimum-cli export openvino, optimum-intel 2.2.0, transformers "
        f"5.5.4) refused {folder}, model_type baichuan (XForCausalLM), at fp32"
    )


# -- the whole path, with a stand-in exporter ---------------------------------------------------
def test_a_conversion_runs_offline_is_recorded_and_cached(tmp_path: Path) -> None:
    fake_env(tmp_path / "tools")
    folder = checkpoint(tmp_path, "qwen3")
    said: list[str] = []
    done = oi.convert_artifact(folder, "fp32", tmp_path / "cache", said.append,
                               env_root=tmp_path / "tools")  # fmt: skip
    assert done.built and done.path.name == "openvino_model.xml" and done.path.is_file()
    conv = done.conversion
    made = (conv.converter, conv.tool, conv.distribution, conv.version)
    assert made == ("optimum_intel", "optimum-cli export openvino", "optimum-intel", "2.2.0")
    assert conv.options["transformers"] == "5.5.4" and conv.network_attempts == []
    args = ["export", "openvino", "--model", str(folder), "--task", "text-generation-with-past",
            "--weight-format", "fp32"]  # fmt: skip
    assert conv.command[-9:-1] == args and conv.command[-10] == str(
        oi.env_dir(tmp_path / "tools") / "bin" / "optimum-cli"
    )
    assert "exported fp32" in conv.log_tail and "PYTHONPATH=\n" in conv.log_tail + "\n"
    assert set(done.manifest["files"]) >= {"openvino_model.xml", "openvino_model.bin",
                                           "convert.log"}  # fmt: skip
    assert done.manifest["transformers"]["overlay"] is None
    assert any("converting" in s for s in said) and said[-1].startswith("converted: ")
    again = oi.convert_artifact(folder, "fp32", tmp_path / "cache", env_root=tmp_path / "tools")
    assert not again.built and again.path == done.path and again.conversion == conv


def test_gemma3_converts_with_the_overlay_on_its_path(tmp_path: Path) -> None:
    entry = fake_env(tmp_path / "tools")
    folder = checkpoint(tmp_path, "gemma3_text")
    done = oi.convert_artifact(folder, "fp32", tmp_path / "cache", env_root=tmp_path / "tools")
    overlay = oi.overlay_dir(entry, "5.0.0")
    assert done.conversion.options["transformers"] == "5.0.0"
    assert f"PYTHONPATH={overlay}" in done.conversion.log_tail
    assert f"PYTHONPATH={overlay}" in done.conversion.command
    assert done.manifest["transformers"]["overlay"] == str(overlay)
    assert done.manifest["python_packages"]["transformers"] == "5.0.0"


def test_the_exporters_refusal_is_its_own_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oi, "OVERLAY_TRANSFORMERS", ())  # no overlay fits gemma3 here
    monkeypatch.setenv("RTMATRIX_TOOLS_DIR", str(tmp_path / "tools"))
    entry = fake_env(tmp_path / "tools")
    manifest = json.loads((entry / toolenv.ENV_MANIFEST).read_text())
    (entry / toolenv.ENV_MANIFEST).write_text(json.dumps(manifest | {"overlays": {}}))
    folder = checkpoint(tmp_path, "gemma3_text")
    with pytest.raises(ConverterRefused) as first:
        oi.convert(folder, "fp32", tmp_path / "cache")
    assert "Maximum required is 5.0, got: 5.5.4" in str(first.value)
    assert "transformers 5.5.4) refused" in str(first.value)
    assert "model_type gemma3_text" in str(first.value)
    assert first.value.conversion.tool == oi.TOOL
    with pytest.raises(ConverterRefused, match="cached refusal"):
        oi.convert(folder, "fp32", tmp_path / "cache")
    assert list((tmp_path / "cache").glob("optimum-intel-gemma3_text-ckpt-fp32-*.refused.log"))


def test_a_package_missing_from_the_venv_is_not_kept(tmp_path: Path) -> None:
    fake_env(tmp_path / "tools")
    folder = checkpoint(tmp_path, "gpt2")
    for _ in range(2):  # not cached: the exporter runs again
        with pytest.raises(ConverterRefused, match="is incomplete: delete it") as exc:
            oi.convert_artifact(folder, "fp32", tmp_path / "cache", env_root=tmp_path / "tools")
        assert "cached refusal" not in str(exc.value)
    assert not list((tmp_path / "cache").glob("*.refused.json"))


def test_a_folder_without_config_json_is_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match=r"no config\.json"):
        oi.convert_artifact(tmp_path, "fp32", tmp_path / "cache", env_root=tmp_path / "tools")


def test_the_child_gets_no_python_path_of_rtmatrixs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere/src")
    monkeypatch.setenv("VIRTUAL_ENV", "/work/main/.venv")
    env = toolenv.child_env()
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
    assert env["HF_HUB_OFFLINE"] == "1" and env["PYTHONNOUSERSITE"] == "1"
    assert os.environ["PYTHONPATH"] == "/somewhere/src"
