"""Google's own exporter to LiteRT (``litert-torch export_hf``, PyPI ``litert-torch``), the
vendor's converter from a Hugging Face checkpoint to the ``.tflite`` file the ``litert`` row
reads.

**Its own environment.** litert-torch imports only with transformers 5.5.x (rtmatrix's is
newer; it declares no bound) and imports TensorFlow, which it does not declare, so it cannot
live in rtmatrix's venv. :func:`environment` builds a dedicated venv on first use in the tools
cache (``<tools>/litert-torch-<version>-<hash of the pins>/``, beside optimum-intel's, whose
helpers build, log and measure it), under a lock, with its progress on stderr, in three steps
(:func:`build_steps`): a venv of rtmatrix's own Python; ``pip install torch==2.13.0`` (its CPU
build: ``$RTMATRIX_TORCH_INDEX_URL`` as for optimum-intel); litert-torch with its own
requirements (ai-edge-litert 2.3, litert-converter 0.5, ai-edge-quantizer 0.10, jax, torchao,
...) and the pins it lacks (:data:`PINS`: transformers 5.5.4, TensorFlow's CPU build), at
``$RTMATRIX_LITERT_TORCH_VERSION`` where set (:data:`VERSION_ENV`: another venv beside this
one). A check in the venv then imports the exporter offline and reads the versions. The venv's
manifest (``tool-env.json``, written last: a folder without it is rebuilt) records the commands,
versions, step times and its size (here: ~2 min, ~3.3 GB, once). A venv that cannot be built is
:class:`~rtmatrix.fixtures.spec.ExporterUnavailable` naming the step, its log and the command that
builds it (:data:`BUILD_COMMAND`); a process tries once.

**A conversion** runs ``<venv>/bin/litert-torch export_hf FOLDER OUT --prefill_lengths=32
--cache_length=512 --quantization_recipe=RECIPE --bundle_litert_lm=False
--keep_temporary_files=True`` (its files straight into ``OUT``, not into a temporary folder
inside it) in a child without a network (:func:`rtmatrix.converters.base.run_offline`). The
shapes are those of rtmatrix's own ``.tflite`` export (:data:`PREFILL_LENGTH`,
:data:`CACHE_LENGTH`): the file holds a ``prefill_32`` signature (tokens, positions, an additive
mask and the KV cache in; the cache out, no logits) and a ``decode`` one (one token; the cache
and its logits out), each KV layer an explicit f32 tensor pair ``kv_cache_k_<i>``/
``kv_cache_v_<i>`` of ``CACHE_LENGTH`` positions. The recipe is the quantizer's
(:data:`DTYPES`): ``none`` writes the float ``model.tflite`` only; the exporter's default,
``dynamic_wi8_afp32`` (rtmatrix's ``litert-int8``, :data:`VENDOR_DTYPES`), and its int4 sibling
``dynamic_wi4_afp32`` (``litert-int4``) write ``model_quantized.tflite`` beside it. The
LiteRT-LM bundle the exporter writes by default is not made (no row reads it). Beside the file:
the tokenizer the exporter saves, the checkpoint's ``config.json``/``generation_config.json``
(the row reads bos/eos there) and the exporter's full log (``convert.log``). About 20-35 s per
toy here, ~80 s for SmolLM2-135M.

Cached (:func:`rtmatrix.converters.base.build_unless_refused`) by the checkpoint's content
hash, litert-torch's version, every package version in the venv (read from its metadata: nothing
is imported here), the options and :data:`KEY_VERSION`; the
:class:`~rtmatrix.converters.base.Conversion` record is in the entry's manifest. An exporter that
exits non-zero or writes no file raises :class:`~rtmatrix.converters.base.ConverterRefused` in
its own words, cached like the other homes' refusals.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
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
from rtmatrix.fixtures.tflite_export import MAX_CTX, PREFILL_CHUNK
from rtmatrix.runtimes.llama_cpp.reftool import tools_root

NAME = "litert_torch"
TOOL = "litert-torch export_hf"
DISTRIBUTION = "litert-torch"
CONTAINER = "tflite"
#: no rtmatrix extra installs it: it lives in its own venv (below), built on first use
EXTRA: str | None = None
#: the recipe that leaves the float file alone (the exporter's own word for no quantization)
FLOAT = "none"
#: the exporter's own quantizations (its ``--quantization_recipe``; int8 is the default it picks
#: when none is given): ai-edge-quantizer's dynamic-range recipes, min/max round-to-nearest
#: weights, symmetric, per output channel, on every op they support (the matmuls, the LM head
#: and the embedding lookup); activations stay float in the file and LiteRT's hybrid kernels
#: quantize them to int8 per call
VENDOR_DTYPES = (
    VendorDtype("litert-int8", "--quantization_recipe", "dynamic_wi8_afp32", 8,
                "ai-edge-quantizer dynamic range: int8 weights, symmetric, per output channel, "
                "every supported op (LM head and embedding too); int8 activations per call"),
    VendorDtype("litert-int4", "--quantization_recipe", "dynamic_wi4_afp32", 4,
                "ai-edge-quantizer dynamic range: int4 weights, symmetric, per output channel, "
                "every supported op (LM head and embedding too); int8 activations per call"),
)  # fmt: skip
#: rtmatrix dtype -> ``--quantization_recipe``: none (the float file) or the exporter's own
DTYPES = dtype_map({"f32": FLOAT}, VENDOR_DTYPES)
RECIPES = tuple(DTYPES.values())
#: the file each recipe's conversion is read from (a recipe writes the float file first)
OUTPUTS = {FLOAT: "model.tflite"} | {d.value: "model_quantized.tflite" for d in VENDOR_DTYPES}
#: the static shapes, those of rtmatrix's own .tflite export (the row treats both alike)
PREFILL_LENGTH = PREFILL_CHUNK
CACHE_LENGTH = MAX_CTX
#: bump when the key or what a conversion records changes
KEY_VERSION = "1"
LOG_FILE = "convert.log"
#: the checkpoint's files copied beside the export (what the row reads bos/eos from)
COPIED = ("config.json", "generation_config.json")
CONVERT_TIMEOUT_S = 3600.0

# -- the environment ----------------------------------------------------------------------------
#: the pinned packages of the venv: litert-torch 0.10.0 (the newest; its own requirements come
#: with it: ai-edge-litert 2.3, litert-converter 0.5, ai-edge-quantizer 0.10, jax, torchao, ...);
#: transformers 5.5.4 (it declares no bound, and fails to import with 5.25); TensorFlow's CPU
#: build, which it imports without declaring it (``export_hf``'s model extensions import
#: ``tensorflow.lite``'s schema at import time)
PINS = {
    "litert-torch": "0.10.0",
    "transformers": "5.5.4",
    "tensorflow-cpu": "2.21.0",
}
#: litert-torch at another version than :data:`PINS` says (``nox -s upgrade_diff -- litert-torch
#: OLD NEW``): only its pin changes, so a version the others do not fit fails the venv's check
VERSION_ENV = "RTMATRIX_LITERT_TORCH_VERSION"
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+!-]*")
ENV_KEY_VERSION = "1"
#: the distributions whose versions the venv's check reads
CHECKED = (DISTRIBUTION, "transformers", "torch", "tensorflow-cpu", "ai-edge-litert",
           "litert-converter", "ai-edge-quantizer")  # fmt: skip
_CHECK_SOURCE = f"""
import json
from importlib import metadata
import litert_torch.generative.export_hf.export  # the exporter and everything it imports

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"

print({CHECK_PREFIX!r} + json.dumps({{"versions": {{n: version(n) for n in {CHECKED!r}}}}}))
"""
#: the one command that builds the venv (what an unavailable cell says to run)
BUILD_COMMAND = f"{shlex.quote(sys.executable)} -m rtmatrix.converters.litert_torch"
#: the environments a process failed to build (entry -> why): tried once per process
_FAILED: dict[Path, str] = {}


@dataclass(frozen=True)
class Environment(toolenv.ToolEnvironment):
    """litert-torch's venv (:class:`rtmatrix.converters.toolenv.ToolEnvironment`)."""

    CLI: ClassVar[str] = "litert-torch"
    DISTRIBUTION: ClassVar[str] = "litert-torch"


def pins() -> dict[str, str]:
    """:data:`PINS`, with litert-torch at ``$RTMATRIX_LITERT_TORCH_VERSION`` where that is set."""
    override = os.environ.get(VERSION_ENV, "").strip()
    if not override:
        return dict(PINS)
    if not _VERSION.fullmatch(override):
        msg = f"${VERSION_ENV}={override!r} is not a version (e.g. 0.10.0)"
        raise ExporterUnavailable(msg)
    return PINS | {DISTRIBUTION: override}


def env_key() -> dict[str, Any]:
    """What the venv depends on: any change builds another one beside it."""
    return {
        "key_version": ENV_KEY_VERSION,
        "pins": pins(),
        "torch": TORCH,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }


def env_dir(root: Path | None = None) -> Path:
    key = env_key()
    return (root or tools_root()) / f"litert-torch-{key['pins'][DISTRIBUTION]}-{key_hash(key)[:12]}"


def read_env(root: Path) -> Environment | None:
    """The venv in ``root`` if complete (its manifest of these pins, Python and the CLI)."""
    try:
        manifest: dict[str, Any] = json.loads((root / ENV_MANIFEST).read_text("utf-8"))
        complete = manifest["key"] == env_key() and all(
            (root / rel).exists() for rel in ("bin/python", "bin/litert-torch")
        )
        _ = manifest["versions"][DISTRIBUTION]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Environment(root, manifest, built=False) if complete else None


def environment(log: Log | None = None, root: Path | None = None) -> Environment:
    """The converter's venv, built on first use (minutes, once; its progress on stderr).
    :class:`ExporterUnavailable` with the failed step, its log and :data:`BUILD_COMMAND` when it
    cannot be built here (no package index, no space); a process does not try twice."""
    say = log or (lambda _msg: None)
    entry = env_dir(root)

    def make() -> Environment:
        return Environment(entry, _build_env(entry, say), built=True)

    return toolenv.ensure(entry, "litert-torch", read_env, make, _FAILED, BUILD_COMMAND, say)


def build_steps(entry: Path) -> list[tuple[str, list[str]]]:
    """The venv's build, step by step: (what, command)."""
    pip = toolenv.pip_install(entry)
    pinned = [f"{n}=={v}" for n, v in pins().items()]
    return [
        ("a venv of this Python", [sys.executable, "-m", "venv", str(entry)]),
        (f"{TORCH} (the CPU build: ~200 MB download)",
         [*pip, TORCH, *toolenv.torch_index_args()]),
        (f"{', '.join(pinned)} and litert-torch's own requirements (~1 GB download)",
         [*pip, TORCH, *pinned]),
    ]  # fmt: skip


def _build_env(entry: Path, say: Log) -> dict[str, Any]:
    """Build the venv in ``entry`` (:func:`rtmatrix.converters.toolenv.build`)."""
    return toolenv.build(entry, "litert-torch", build_steps(entry), _check_env,
                         lambda steps, times, versions, total_s: _env_manifest(
                             entry, steps, times, versions, total_s), say)  # fmt: skip


def _check_env(entry: Path, log_path: Path) -> dict[str, str]:
    """Import the exporter in the venv, offline: the versions of :data:`CHECKED`."""
    what = f"{TOOL} check (imports litert_torch.generative.export_hf)"
    found = toolenv.check_imports(entry, log_path, _CHECK_SOURCE, what)
    return {str(k): str(v) for k, v in found["versions"].items()}


def _env_manifest(
    entry: Path, steps: list[tuple[str, list[str]]], times: dict[str, float],
    versions: dict[str, str], total_s: float,
) -> dict[str, Any]:  # fmt: skip
    base_doc = toolenv.manifest_base(entry, env_key(), key_hash(env_key()), steps, times, total_s)
    return base_doc | {"versions": versions}


# -- conversion ---------------------------------------------------------------------------------
def check_recipe(recipe: str) -> str:
    if recipe not in RECIPES:
        msg = (f"quantization recipe {recipe!r}: rtmatrix runs {TOOL} with "
               f"{', '.join(RECIPES)} (--quantization_recipe)")  # fmt: skip
        raise ValueError(msg)
    return recipe


def options(recipe: str) -> dict[str, str]:
    return {"quantization_recipe": recipe, "prefill_lengths": str(PREFILL_LENGTH),
            "cache_length": str(CACHE_LENGTH)}  # fmt: skip


def command(env: Environment, folder: Path, recipe: str, out: Path) -> list[str]:
    """The exporter's command line: its files straight into ``out`` (``--keep_temporary_files``:
    else it writes them into a temporary folder inside ``out``), no LiteRT-LM bundle."""
    return [str(env.cli), "export_hf", str(folder), str(out),
            f"--prefill_lengths={PREFILL_LENGTH}", f"--cache_length={CACHE_LENGTH}",
            f"--quantization_recipe={recipe}", "--bundle_litert_lm=False",
            "--keep_temporary_files=True"]  # fmt: skip


def conversion_key(
    folder: Path, recipe: str, env: Environment, packages: dict[str, str]
) -> dict[str, Any]:
    return {
        "key_version": KEY_VERSION,
        "converter": NAME,
        "tool": TOOL,
        "distribution": DISTRIBUTION,
        "version": env.version,
        "options": options(recipe),
        "source_sha256": content_sha256(folder),
        "other_files_sha256": base.other_files_sha256(folder),
        "environment": env.manifest["key_sha256"],
        "python_packages": packages,
    }


def refusal(
    env: Environment, folder: Path, recipe: str, run: ChildRun, missing: str | None
) -> tuple[str, bool]:
    """The refusal's message, and whether a retry would refuse the same (so it is cached). A
    package missing from the venv is the venv's fault, not the checkpoint's: not kept."""
    kind = base.model_type(folder, with_architecture=True)
    transformers = env.manifest["versions"].get("transformers", "?")
    what = (f"LiteRT's exporter ({TOOL}, {DISTRIBUTION} {env.version}, transformers "
            f"{transformers}) refused {folder}, model_type {kind}, recipe {recipe}")  # fmt: skip
    said = base.error_line(run.log)
    if base.MISSING_MODULE.match(said) and run.returncode > 0:
        return (f"{what}: {said} (its environment {env.root} is incomplete: delete it and run "
                f"{BUILD_COMMAND})"), False  # fmt: skip
    return base.refusal_message(what, run, said, missing)


def convert_artifact(
    folder: Path,
    recipe: str,
    root: Path | None = None,
    log: Log | None = None,
    *,
    env_root: Path | None = None,
    timeout_s: float = CONVERT_TIMEOUT_S,
) -> Converted:
    """Convert the Hugging Face checkpoint ``folder`` with litert-torch (cached; the exporter's
    venv built on first use); :class:`ConverterRefused` when the exporter fails."""
    check_recipe(recipe)
    folder = folder.resolve()
    if not (folder / "config.json").is_file():
        msg = f"checkpoint {folder} is not a Hugging Face folder (no config.json)"
        raise FixtureError(msg)
    say = log or (lambda _msg: None)
    env = environment(say, env_root)
    key = conversion_key(folder, recipe, env, env.packages())
    label = f"litert-torch-{folder.name}-{recipe}"

    def build(path: Path, refused: tuple[Path, Path]) -> dict[str, Any]:
        say(f"converting {folder} with {TOOL} ({DISTRIBUTION} {env.version}, recipe {recipe})")
        return _run_exporter(env, folder, recipe, key, path, refused, timeout_s)

    art = base.build_unless_refused(label, key, OUTPUTS[recipe], build, root)
    done = Converted.from_artifact(art)
    say(f"{'converted' if done.built else 'cached'}: {done.path.parent}")
    return done


def convert(
    folder: Path, recipe: str, root: Path | None = None, log: Log | None = None
) -> Converted:
    """:func:`convert_artifact`: the ``.tflite`` file (its folder holds the tokenizer and the
    checkpoint's config), its record, and whether this call built it."""
    return convert_artifact(folder, recipe, root, log)


def _run_exporter(
    env: Environment, folder: Path, recipe: str, key: dict[str, Any], path: Path,
    refused: tuple[Path, Path], timeout_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Run the exporter into ``path.parent`` (a temporary entry); the manifest's extra."""
    out = path.parent
    cmd = command(env, folder, recipe, out)
    run = base.run_offline(cmd, out / LOG_FILE, timeout_s, env=toolenv.child_env(), cwd=out)
    conversion = Conversion.of_run(
        run, cmd, converter=NAME, tool=TOOL, distribution=DISTRIBUTION, version=env.version,
        options=options(recipe), source=folder, source_sha256=str(key["source_sha256"]),
    )  # fmt: skip
    if run.returncode != 0 or not path.is_file() or not path.stat().st_size:
        message, keep = refusal(env, folder, recipe, run, path.name)
        raise base.refuse(refused, message, conversion, run.log, keep=keep)
    copied = [n for n in COPIED if (folder / n).is_file() and not (out / n).exists()]
    for name in copied:
        shutil.copyfile(folder / name, out / name)
    return {
        "conversion": conversion.to_dict(),
        "python_packages": key["python_packages"],
        "environment": {
            "root": str(env.root),
            "key_sha256": env.manifest["key_sha256"],
            "versions": env.manifest["versions"],
        },
        "copied_from_checkpoint": copied,
        "files": toolenv.files(out),
        "log": LOG_FILE,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rtmatrix.converters.litert_torch``: build (or find) the venv; say where."""
    del argv
    try:
        env = environment(lambda _msg: None)
    except ExporterUnavailable as exc:
        print(f"rtmatrix: {exc}", file=sys.stderr)
        return 1
    m = env.manifest
    print(f"litert-torch's environment ({'built' if env.built else 'already built'}): "
          f"{env.root}\n  {', '.join(f'{k} {v}' for k, v in m['versions'].items())}\n"
          f"  {m['size_bytes'] / 2**20:.0f} MiB, built in {m['total_s']} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
