"""OpenVINO's own exporter (``optimum-cli export openvino``, optimum-intel), the vendor's converter
from a Hugging Face checkpoint to the stateful OpenVINO IR both OpenVINO rows read.

**Its own environment.** optimum-intel pins transformers below rtmatrix's (``< 5.6``; its Gemma
export configs cap it at 5.0), so it cannot live in rtmatrix's venv. :func:`environment` builds a
dedicated venv on first use in the tools cache (``<tools>/optimum-intel-<version>-<hash of the
pins>/``, the folder llama.cpp's tools use: ``$RTMATRIX_TOOLS_DIR``, else beside the fixture
cache), under a lock, with its progress on stderr, in four steps (:func:`build_steps`): a venv of
rtmatrix's own Python; ``pip install torch==2.13.0`` (its CPU build: where PyPI's torch is a CUDA
build, set ``$RTMATRIX_TORCH_INDEX_URL`` to ``https://download.pytorch.org/whl/cpu``); the pinned
packages (:data:`PINS`) and optimum-intel's other declared requirements; optimum-intel itself
with ``--no-deps`` (at ``$RTMATRIX_OPTIMUM_INTEL_VERSION`` where set, :data:`VERSION_ENV`: another
venv beside this one). torchvision, which optimum-intel declares, is left out: PyPI's torchvision
is built against CUDA torch and fails to import beside the CPU one (``operator torchvision::nms does
not exist``), which breaks transformers' import; no LLM export imports it. Then transformers
:data:`OVERLAY_TRANSFORMERS` goes into ``overlays/transformers-<v>/`` (``pip install --no-deps
--target``), and a check in the venv imports the exporter and reads, per ``model_type``, the
transformers range optimum-intel's export config allows. The venv's manifest (``tool-env.json``,
written last: a folder without it is rebuilt) records the commands, versions, step times, its
size and that range table. A venv that cannot be built is
:class:`~rtmatrix.fixtures.spec.ExporterUnavailable` naming the step, its log and the command that
builds it (:data:`BUILD_COMMAND`); a process tries once.

**A conversion** runs ``<venv>/bin/optimum-cli export openvino --model FOLDER --task
text-generation-with-past --weight-format fp32|fp16|int8|int4 OUT`` in a child without a network
(:func:`rtmatrix.converters.base.run_offline`). Where the checkpoint's ``model_type`` is outside
the main transformers' range and inside an overlay's (Gemma 3: at most 5.0), that overlay is first
on ``PYTHONPATH`` (recorded as the option ``transformers``). The folder it writes holds
``openvino_model.xml``/``.bin`` (a stateful decoder: inputs ``input_ids``, ``attention_mask``,
``position_ids``, ``beam_idx``; the KV cache is the model's state), OpenVINO tokenizer models and
the checkpoint's config files. It is cached (:func:`rtmatrix.converters.base.build_unless_refused`)
by the checkpoint's content hash, optimum-intel's version, every package version in the venv (read
from its metadata: nothing is imported here), the options and :data:`KEY_VERSION`; the
:class:`~rtmatrix.converters.base.Conversion` record is in the entry's manifest, the exporter's
full log beside the model (``convert.log``). An exporter that exits non-zero or writes no
``openvino_model.xml``/``.bin`` raises :class:`~rtmatrix.converters.base.ConverterRefused` with its
own last error line, cached like the other homes' refusals.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rtmatrix.converters import base, toolenv
from rtmatrix.converters.base import ChildRun, Conversion, Converted, Log, VendorDtype, dtype_map
from rtmatrix.converters.toolenv import CHECK_PREFIX, ENV_MANIFEST, TORCH
from rtmatrix.fixtures.cache import key_hash
from rtmatrix.fixtures.sources import content_sha256
from rtmatrix.fixtures.spec import ExporterUnavailable, FixtureError
from rtmatrix.runtimes.llama_cpp.reftool import tools_root

NAME = "optimum_intel"
TOOL = "optimum-cli export openvino"
DISTRIBUTION = "optimum-intel"
CONTAINER = "openvino-ir"
#: no rtmatrix extra installs it: it lives in its own venv (below), built on first use
EXTRA: str | None = None
TASK = "text-generation-with-past"
WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")
#: the exporter's own quantizations (its ``--weight-format``, nothing else given: optimum-intel
#: 2.2.0's ``prepare_wc_config`` and ``_DEFAULT_4BIT_WQ_CONFIG`` for a checkpoint its per-model
#: table does not name, a local folder among them), NNCF's data-free weight compression
#: (round to nearest, no dataset): int8 is ``INT8_ASYM`` per output channel on every weight,
#: the embedding and the LM head included; int4 is ``INT4_ASYM`` in groups of 128 along the
#: input with ratio 1.0, the embedding and the last MatMul (the LM head) at the backup
#: precision ``int8_asym`` per channel. A layer whose input is not a multiple of 128 is refused
#: (``InvalidGroupSizeError``: SmolLM2-135M's width is 576), a converter outcome
VENDOR_DTYPES = (
    VendorDtype("ov-int8", "--weight-format", "int8", 8,
                "NNCF int8 asymmetric, per output channel, every weight (embedding and LM head "
                "too), data-free"),
    VendorDtype("ov-int4", "--weight-format", "int4", 4,
                "NNCF int4 asymmetric, groups of 128, ratio 1.0; embedding and LM head int8 "
                "asymmetric per channel (backup precision), data-free"),
)  # fmt: skip
#: rtmatrix dtype -> ``--weight-format``. fp16 stores the weights in f16 (decompressed to the
#: inference precision at load)
DTYPES = dtype_map({"f32": "fp32", "f16": "fp16"}, VENDOR_DTYPES)
#: bump when the key or what a conversion records changes
KEY_VERSION = "1"
OUTPUT = "openvino_model.xml"
WEIGHTS = "openvino_model.bin"
LOG_FILE = "convert.log"
CONVERT_TIMEOUT_S = 3600.0

# -- the environment ----------------------------------------------------------------------------
#: the pinned packages of the venv: optimum-intel 2.2.0 (the newest) and the optimum it requires;
#: transformers 5.5.4, the newest it allows (< 5.6), which reads the configs and weights
#: transformers 5.x writes (5.0.0 misreads a partial-rotary LongRoPE config and Qwen3-MoE's
#: fused experts); OpenVINO and its tokenizers at the version of rtmatrix's OpenVINO rows
PINS = {
    "optimum-intel": "2.2.0",
    "optimum": "2.3.0",
    "transformers": "5.5.4",
    "nncf": "3.4.0",
    "openvino": "2026.4.1",
    "openvino-tokenizers": "2026.4.1.0",
}
#: optimum-intel at another version than :data:`PINS` says (the converter upgrade flow, ``nox -s
#: upgrade_diff -- optimum-intel OLD NEW``): only optimum-intel's pin changes, the others stay, so a
#: version they do not fit fails the venv's check and the cells are unavailable with that reason
VERSION_ENV = "RTMATRIX_OPTIMUM_INTEL_VERSION"
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+!-]*")
#: installed first, alone, so its index can be PyTorch's CPU one (``$RTMATRIX_TORCH_INDEX_URL``)
#: optimum-intel 2.2.0's other requirements as it declares them, less torchvision (see above)
DECLARED = ("huggingface-hub>=0.23.2,<1.22", "requests>=2.33,<3.0", "setuptools")
#: transformers versions kept beside the main one for the model types optimum-intel caps below
#: it: 5.0.0 for Gemma, Gemma 2 and Gemma 3 (``GemmaOpenVINOConfig.MAX_TRANSFORMERS_VERSION``;
#: with falcon_mamba, gemma3n_text, glm, lfm2, lfm2_moe and mamba in 2.2.0: the venv's manifest
#: lists them, ``overlays``)
OVERLAY_TRANSFORMERS = ("5.0.0",)
ENV_KEY_VERSION = "1"
#: what the venv's check prints: versions and, per model_type, optimum-intel's transformers range
_CHECK_SOURCE = f"""
import json
from importlib import metadata
import optimum.exporters.openvino  # registers the OpenVINO export configs
from optimum.exporters.tasks import TasksManager

ranges = {{}}
for model_type, exporters in TasksManager._SUPPORTED_MODEL_TYPE.items():
    ctor = (exporters.get("openvino") or {{}}).get({TASK!r})
    cls = getattr(ctor, "func", ctor)
    if cls is not None:
        ranges[model_type] = [str(getattr(cls, "MIN_TRANSFORMERS_VERSION", None) or "") or None,
                              str(getattr(cls, "MAX_TRANSFORMERS_VERSION", None) or "") or None]
names = ("optimum-intel", "optimum", "transformers", "torch", "openvino", "nncf")
print({CHECK_PREFIX!r} + json.dumps({{"versions": {{n: metadata.version(n) for n in names}},
                                     "ranges": ranges}}))
"""
#: the one command that builds the venv (what an unavailable cell says to run)
BUILD_COMMAND = f"{shlex.quote(sys.executable)} -m rtmatrix.converters.optimum_intel"
#: the environments a process failed to build (entry -> why): tried once per process
_FAILED: dict[Path, str] = {}


@dataclass(frozen=True)
class Environment(toolenv.ToolEnvironment):
    """optimum-intel's venv (:class:`rtmatrix.converters.toolenv.ToolEnvironment`) and its
    transformers overlays."""

    CLI: ClassVar[str] = "optimum-cli"
    DISTRIBUTION: ClassVar[str] = "optimum-intel"

    @property
    def transformers(self) -> str:
        return str(self.manifest["versions"]["transformers"])

    def overlay(self, version: str) -> Path:
        return overlay_dir(self.root, version)

    def transformers_for(self, model_type: str) -> tuple[str, Path | None, str]:
        """The transformers a conversion of ``model_type`` runs with: the main one, or an
        overlay (its folder), and why."""
        allowed = (self.manifest.get("ranges") or {}).get(model_type)
        return pick_transformers(self.transformers, allowed, self.manifest.get("overlays") or {},
                                 self.root)  # fmt: skip


def pins() -> dict[str, str]:
    """:data:`PINS`, with optimum-intel at ``$RTMATRIX_OPTIMUM_INTEL_VERSION`` where that is set."""
    override = os.environ.get(VERSION_ENV, "").strip()
    if not override:
        return dict(PINS)
    if not _VERSION.fullmatch(override):
        msg = f"${VERSION_ENV}={override!r} is not a version (e.g. 2.1.0)"
        raise ExporterUnavailable(msg)
    return PINS | {DISTRIBUTION: override}


def env_key() -> dict[str, Any]:
    """What the venv depends on: any change builds another one beside it."""
    return {
        "key_version": ENV_KEY_VERSION,
        "pins": pins(),
        "torch": TORCH,
        "declared": list(DECLARED),
        "overlays": list(OVERLAY_TRANSFORMERS),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }


def env_dir(root: Path | None = None) -> Path:
    key = env_key()
    version = key["pins"][DISTRIBUTION]
    return (root or tools_root()) / f"optimum-intel-{version}-{key_hash(key)[:12]}"


def overlay_dir(venv: Path, version: str) -> Path:
    return venv / "overlays" / f"transformers-{version}"


def version_tuple(text: str) -> tuple[int, ...]:
    """``5.0`` -> (5, 0, 0); ``5.2.99`` -> (5, 2, 99); a suffix (``rc1``, ``+cpu``) is cut."""
    nums = [int(m.group()) for m in (re.match(r"\d+", p) for p in text.split(".")[:3]) if m]
    return tuple(nums + [0] * (3 - len(nums)))


def bounds(allowed: Sequence[str | None] | None) -> tuple[str | None, str | None]:
    """``[min, max]`` as optimum-intel's check reads it (either may be None)."""
    low, high = [*list(allowed or []), None, None][:2]
    return low, high


def allows(version: str, allowed: Sequence[str | None] | None) -> bool:
    """Whether transformers ``version`` is within optimum-intel's ``[min, max]`` for a model
    type (its own check: an error where the version is below min or above max)."""
    low, high = bounds(allowed)
    v = version_tuple(version)
    return not ((low and v < version_tuple(low)) or (high and v > version_tuple(high)))


def pick_transformers(
    main: str, allowed: Sequence[str | None] | None, overlays: dict[str, Any], venv: Path
) -> tuple[str, Path | None, str]:
    """The main transformers where optimum-intel allows it for the model type, else the newest
    overlay it allows, else the main one (the exporter then refuses in its own words)."""
    if allows(main, allowed):
        return main, None, f"transformers {main}: the venv's own"
    low, high = bounds(allowed)
    span = f"{low or 'any'} to {high or 'any'}"
    for version in sorted(overlays, key=version_tuple, reverse=True):
        if allows(version, allowed):
            why = (f"transformers {version} (overlay): optimum-intel allows {span} for this "
                   f"model type, not {main}")  # fmt: skip
            return version, overlay_dir(venv, version), why
    return main, None, f"transformers {main}: optimum-intel allows {span}, no installed one fits"


def read_env(root: Path) -> Environment | None:
    """The venv in ``root`` if complete (its manifest, Python and optimum-cli present)."""
    try:
        manifest: dict[str, Any] = json.loads((root / ENV_MANIFEST).read_text("utf-8"))
        complete = manifest["key"] == env_key() and all(
            (root / rel).exists() for rel in ("bin/python", "bin/optimum-cli")
        ) and all(overlay_dir(root, v).is_dir() for v in manifest["overlays"])  # fmt: skip
        _ = manifest["versions"]["optimum-intel"], manifest["versions"]["transformers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Environment(root, manifest, built=False) if complete else None


def find_environment(root: Path | None = None) -> Environment:
    """The built venv, never building it; :class:`ExporterUnavailable` saying how to build it."""
    entry = env_dir(root)
    found = read_env(entry)
    if found is None:
        msg = f"optimum-intel's environment is not built in {entry}; build it with: {BUILD_COMMAND}"
        raise ExporterUnavailable(msg)
    return found


def environment(log: Log | None = None, root: Path | None = None) -> Environment:
    """The converter's venv, built on first use (minutes, once; its progress on stderr).
    :class:`ExporterUnavailable` with the failed step, its log and :data:`BUILD_COMMAND` when it
    cannot be built here (no package index, no space); a process does not try twice."""
    say = log or (lambda _msg: None)
    entry = env_dir(root)

    def make() -> Environment:
        return Environment(entry, _build_env(entry, say), built=True)

    return toolenv.ensure(entry, "optimum-intel", read_env, make, _FAILED, BUILD_COMMAND, say)


def build_steps(entry: Path) -> list[tuple[str, list[str]]]:
    """The venv's build, step by step: (what, command)."""
    pip = toolenv.pip_install(entry)
    pinned = pins()
    others = [f"{n}=={v}" for n, v in pinned.items() if n != DISTRIBUTION]
    steps = [
        ("a venv of this Python", [sys.executable, "-m", "venv", str(entry)]),
        (f"{TORCH} (the CPU build: ~200 MB download)", [*pip, TORCH, *toolenv.torch_index_args()]),
        ("optimum, transformers, nncf, openvino, openvino-tokenizers",
         [*pip, TORCH, *others, *DECLARED]),
        (f"{DISTRIBUTION}=={pinned[DISTRIBUTION]} (--no-deps: without torchvision)",
         [*pip, "--no-deps", f"{DISTRIBUTION}=={pinned[DISTRIBUTION]}"]),
    ]  # fmt: skip
    for version in OVERLAY_TRANSFORMERS:
        target = str(overlay_dir(entry, version))
        what = f"transformers {version} beside it (overlay for capped model types)"
        steps.append((what, [*pip, "--no-deps", "--target", target, f"transformers=={version}"]))
    return steps


def _build_env(entry: Path, say: Log) -> dict[str, Any]:
    """Build the venv in ``entry`` (:func:`rtmatrix.converters.toolenv.build`)."""
    return toolenv.build(entry, "optimum-intel", build_steps(entry), _check_env,
                         lambda steps, times, check, total_s: _env_manifest(
                             entry, steps, times, check, total_s), say)  # fmt: skip


def _check_env(entry: Path, log_path: Path) -> dict[str, Any]:
    """Import the exporter in the venv, offline: versions and each model type's range."""
    what = f"{TOOL} check (imports optimum.exporters.openvino)"
    return toolenv.check_imports(entry, log_path, _CHECK_SOURCE, what)


def _env_manifest(
    entry: Path, steps: list[tuple[str, list[str]]], times: dict[str, float],
    check: dict[str, Any], total_s: float,
) -> dict[str, Any]:  # fmt: skip
    overlays = {}
    main = check["versions"]["transformers"]
    for version in OVERLAY_TRANSFORMERS:
        ranges = check["ranges"].items()
        capped = sorted(m for m, r in ranges if not allows(main, r) and allows(version, r))
        overlays[version] = {"path": str(overlay_dir(entry, version)), "model_types": capped}
    return toolenv.manifest_base(entry, env_key(), key_hash(env_key()), steps, times, total_s) | {
        "versions": check["versions"],
        "ranges": check["ranges"],
        "overlays": overlays,
        "left_out": {"torchvision": "PyPI's build needs CUDA torch; no LLM export imports it"},
    }


# -- conversion ---------------------------------------------------------------------------------
def check_weight_format(weight_format: str) -> str:
    if weight_format not in WEIGHT_FORMATS:
        msg = (f"weight format {weight_format!r}: {TOOL} writes {', '.join(WEIGHT_FORMATS)} "
               "(--weight-format)")  # fmt: skip
        raise ValueError(msg)
    return weight_format


def options(weight_format: str, transformers: str) -> dict[str, str]:
    return {"task": TASK, "weight_format": weight_format, "transformers": transformers}


def command(
    env: Environment, folder: Path, weight_format: str, out: Path, overlay: Path | None = None
) -> list[str]:
    """The exporter's command line; with an overlay, ``env PYTHONPATH=<overlay>`` before it (so
    the recorded command says which transformers ran)."""
    prefix = ["env", f"PYTHONPATH={overlay}"] if overlay is not None else []
    return [*prefix, str(env.cli), "export", "openvino", "--model", str(folder), "--task", TASK,
            "--weight-format", weight_format, str(out)]  # fmt: skip


def conversion_key(
    folder: Path, weight_format: str, env: Environment, transformers: str,
    packages: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    return {
        "key_version": KEY_VERSION,
        "converter": NAME,
        "tool": TOOL,
        "distribution": DISTRIBUTION,
        "version": env.version,
        "options": options(weight_format, transformers),
        "source_sha256": content_sha256(folder),
        "other_files_sha256": base.other_files_sha256(folder),
        "environment": env.manifest["key_sha256"],
        "python_packages": packages,
    }


def refusal(
    version: str, transformers: str, folder: Path, weight_format: str, run: ChildRun,
    missing: str | None, env_root: Path,
) -> tuple[str, bool]:  # fmt: skip
    """The refusal's message, and whether a retry would refuse the same (so it is cached). A
    package missing from the venv is the venv's fault, not the checkpoint's: not kept."""
    kind = base.model_type(folder, with_architecture=True)
    what = (f"OpenVINO's exporter ({TOOL}, {DISTRIBUTION} {version}, transformers "
            f"{transformers}) refused {folder}, model_type {kind}, at {weight_format}")  # fmt: skip
    said = base.error_line(run.log)
    if base.MISSING_MODULE.match(said) and run.returncode > 0:
        return (f"{what}: {said} (its environment {env_root} is incomplete: delete it and run "
                f"{BUILD_COMMAND})"), False  # fmt: skip
    return base.refusal_message(what, run, said, missing)


def convert_artifact(
    folder: Path,
    weight_format: str,
    root: Path | None = None,
    log: Log | None = None,
    *,
    env_root: Path | None = None,
    timeout_s: float = CONVERT_TIMEOUT_S,
) -> Converted:
    """Convert the Hugging Face checkpoint ``folder`` with OpenVINO's exporter (cached; the
    exporter's venv built on first use); :class:`ConverterRefused` when the exporter fails."""
    check_weight_format(weight_format)
    folder = folder.resolve()
    if not (folder / "config.json").is_file():
        msg = f"checkpoint {folder} is not a Hugging Face folder (no config.json)"
        raise FixtureError(msg)
    say = log or (lambda _msg: None)
    env = environment(say, env_root)
    transformers, overlay, why = env.transformers_for(base.model_type(folder))
    packages = env.packages(overlay)
    key = conversion_key(folder, weight_format, env, transformers, packages)
    label = f"optimum-intel-{folder.name}-{weight_format}"

    def build(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        say(f"converting {folder} at {weight_format} with {TOOL} ({DISTRIBUTION} {env.version}, "
            f"{why})")  # fmt: skip
        return _run_exporter(env, folder, weight_format, (transformers, overlay, why), key,
                             path, refused, timeout_s)  # fmt: skip

    done = Converted.from_artifact(base.build_unless_refused(label, key, OUTPUT, build, root))
    say(f"{'converted' if done.built else 'cached'}: {done.path.parent}")
    return done


def convert(
    folder: Path, weight_format: str, root: Path | None = None, log: Log | None = None
) -> Converted:
    """:func:`convert_artifact`: ``openvino_model.xml`` (its folder holds the weights, the
    tokenizer models and the checkpoint's config), its record, and whether this call built it."""
    return convert_artifact(folder, weight_format, root, log)


def _run_exporter(
    env: Environment, folder: Path, weight_format: str, picked: tuple[str, Path | None, str],
    key: dict[str, Any], path: Path, refused: tuple[Path, Path], timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Run the exporter into ``path.parent`` (a temporary entry); the manifest's extra."""
    out = path.parent
    transformers, overlay, why = picked
    cmd = command(env, folder, weight_format, out, overlay)
    run = base.run_offline(cmd, out / LOG_FILE, timeout_s, env=toolenv.child_env(), cwd=out)
    conversion = Conversion.of_run(
        run, cmd, converter=NAME, tool=TOOL, distribution=DISTRIBUTION, version=env.version,
        options=options(weight_format, transformers), source=folder,
        source_sha256=str(key["source_sha256"]),
    )  # fmt: skip
    absent = [p.name for p in (path, out / WEIGHTS) if not p.is_file() or not p.stat().st_size]
    if run.returncode != 0 or absent:
        message, keep = refusal(env.version, transformers, folder, weight_format, run,
                                " or ".join(absent), env.root)  # fmt: skip
        raise base.refuse(refused, message, conversion, run.log, keep=keep)
    return {
        "conversion": conversion.to_dict(),
        "python_packages": key["python_packages"],
        "environment": {
            "root": str(env.root),
            "key_sha256": env.manifest["key_sha256"],
            "versions": env.manifest["versions"],
        },
        "transformers": {
            "version": transformers,
            "overlay": str(overlay) if overlay else None,
            "why": why,
        },
        "files": toolenv.files(out),
        "log": LOG_FILE,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rtmatrix.converters.optimum_intel``: build (or find) the venv; say where."""
    del argv
    try:
        env = environment(lambda _msg: None)
    except ExporterUnavailable as exc:
        print(f"rtmatrix: {exc}", file=sys.stderr)
        return 1
    m = env.manifest
    state = "built" if env.built else "already built"
    print(f"optimum-intel's environment ({state}): {env.root}\n"
          f"  {', '.join(f'{k} {v}' for k, v in m['versions'].items())}\n"
          f"  {m['size_bytes'] / 2**20:.0f} MiB, built in {m['total_s']} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
