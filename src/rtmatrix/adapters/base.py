"""The adapter contract every runtime row implements, and the registry that finds adapters.

The registry maps names to ``"module:Class"`` strings and imports nothing until a worker asks for
an adapter; the built-in ones live in ``rtmatrix/runtimes/<name>/adapter.py``, one folder per
runtime; third-party adapters come in through the entry-point group ``rtmatrix.adapters`` or a
``"module:Class"`` string in the matrix file. Adapter modules import their runtime inside
``import_runtime`` only, so importing an adapter class never imports a runtime. What a runtime can
do beyond this contract (stream, abort, serve, report placement) it declares through the
capability protocols of :mod:`rtmatrix.adapters.capabilities`.
"""

from __future__ import annotations

import difflib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

ENTRY_POINT_GROUP = "rtmatrix.adapters"

BUILTIN_ADAPTERS: dict[str, str] = {
    "llama_cpp": "rtmatrix.runtimes.llama_cpp.adapter:LlamaCppAdapter",
    "llama_server": "rtmatrix.runtimes.llama_server.adapter:LlamaServerAdapter",
    "onnxruntime": "rtmatrix.runtimes.onnxruntime.adapter:OrtAdapter",
    "onnxruntime_genai": "rtmatrix.runtimes.onnxruntime_genai.adapter:OrtGenaiAdapter",
    "onnxruntime_openvino": "rtmatrix.runtimes.onnxruntime_openvino.adapter:OrtOpenVinoAdapter",
    "tvm": "rtmatrix.runtimes.tvm.adapter:TvmAdapter",
    "openvino": "rtmatrix.runtimes.openvino.adapter:OpenVinoAdapter",
    "openvino_genai": "rtmatrix.runtimes.openvino_genai.adapter:OvGenaiAdapter",
    "mnn": "rtmatrix.runtimes.mnn.adapter:MnnAdapter",
    "litert": "rtmatrix.runtimes.litert.adapter:LiteRtAdapter",
    "mnn_llm": "rtmatrix.runtimes.mnn.llm:MnnLlmAdapter",
    "litert_lm": "rtmatrix.runtimes.litert.lm:LiteRtLmAdapter",
}


class AdapterError(LookupError):
    """An adapter name or ``module:Class`` string that cannot be resolved."""


class RuntimeUnavailable(ImportError):
    """The runtime behind an adapter is not installed; the message names the fix."""


#: where an adapter sends the runtime's own log lines as they arrive: ``sink(level, text)``
LogSink = Callable[[str, str], None]


@dataclass(frozen=True)
class CrashControl:
    """A row's control setting for crashes: when a cell of the row dies by a signal, the runner
    reruns it once with ``options`` merged over the cell's, to tell a crash in one code path of
    the runtime (e.g. llama.cpp's extra buffer types) from a crash of the model or the harness.

    ``explains`` names, in the runtime's words, what the options turn off; ``log_pattern``
    picks the runtime log lines of the crashed cell that name that code path (a regex)."""

    options: dict[str, Any]
    explains: str
    log_pattern: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"options": dict(self.options), "explains": self.explains,
                "log_pattern": self.log_pattern}  # fmt: skip


@dataclass(frozen=True)
class LoadParams:
    n_ctx: int
    threads: int
    n_batch: int = 512
    #: the matrix's ``[[runtimes]] options`` table, passed through untouched (e.g. providers)
    options: dict[str, Any] = field(default_factory=dict)


class Adapter(ABC):
    """One runtime behind one interface. Lifecycle: import_runtime -> load -> (prefill, decode)*
    -> close. ``prefill``/``decode`` return the logits of the last position; the worker times them
    and does the greedy sampling, so every runtime is measured by the same loop."""

    #: registry name of the runtime row
    name: ClassVar[str]
    #: the PyPI distribution whose version, size and license describe the runtime
    distribution: ClassVar[str]
    #: the rtmatrix extra that installs it (``pip install 'rtmatrix[<extra>]'``)
    extra: ClassVar[str]
    #: the model container it reads (``gguf``, ``onnx``, ...)
    container: ClassVar[str]
    #: its vendor's own converter for a Hugging Face checkpoint rtmatrix's exporters do not
    #: write (a home of :mod:`rtmatrix.converters`); None: the row takes no such checkpoint
    converter: ClassVar[str | None] = None
    #: ``(error kind, regex)`` pairs for the messages this runtime prints, tried before the
    #: generic ones of :mod:`rtmatrix.errorkinds` (kinds: :class:`rtmatrix.outcome.ErrorKind`)
    error_patterns: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: the setting the runner reruns a crashed cell with (None: the row declares none; a
    #: matrix can set its own per row with ``crash_control = { option = value }``)
    crash_control: ClassVar[CrashControl | None] = None
    #: set by the worker before :meth:`import_runtime`; see :meth:`log_line`
    log_sink: LogSink | None = None

    def log_line(self, level: str, text: str) -> None:
        """Hand one line the runtime logged to the worker, which appends it to the cell's
        phase log at once (so it survives a crash). Adapters whose runtime logs through a
        callback call this from it; a runtime that writes to stderr needs nothing (the
        worker's stderr is a file the runner keeps)."""
        if self.log_sink is not None:
            self.log_sink(level, text)

    @classmethod
    def prepare(cls, log: Callable[[str], None]) -> dict[str, Any]:
        """One-time work before the first cell of this row runs, in a child process of its own
        (e.g. building the runtime's own benchmark tool); what it returns goes into the run's
        ``runtimes`` entry. Default: nothing to prepare."""
        return {}

    def configure(self, options: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """The row's ``options``, given before :meth:`import_runtime` (some adapters choose what
        to import from them, e.g. TVM's runtime-only library). Default: nothing to do."""

    @abstractmethod
    def import_runtime(self) -> str:
        """Import the runtime; return its version. Raise RuntimeUnavailable if it is missing."""

    @abstractmethod
    def load(self, model_path: Path, params: LoadParams) -> None:
        """Load the model and create the inference context."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Vocabulary size of the loaded model."""

    @property
    @abstractmethod
    def special_ids(self) -> dict[str, int]:
        """``bos`` and ``eos`` token ids of the loaded model (-1 when absent)."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the sequence (KV cache) and zero the runtime's own counters."""

    @abstractmethod
    def prefill(self, tokens: Sequence[int]) -> None:
        """Process the prompt; returns when the work is complete (synchronized)."""

    @abstractmethod
    def decode(self, token: int) -> None:
        """Process one generated token; returns when the work is complete."""

    @abstractmethod
    def last_logits(self) -> NDArray[np.float32]:
        """A copy of the logits for the last processed position."""

    @abstractmethod
    def counters(self) -> dict[str, float]:
        """The runtime's own timing counters since ``reset``: any of ``pp_ms``, ``pp_tokens``,
        ``tg_ms``, ``tg_tokens``, ``load_ms`` (an empty dict when the runtime has none)."""

    @abstractmethod
    def evidence(self) -> dict[str, Any]:
        """Debug facilities and other evidence: system info, devices, log excerpts.

        ``"debug_facilities"`` lists what this runtime version offers for debugging (probed, not
        hard-coded). Where the work ran comes from the ``Placement`` capability
        (:class:`rtmatrix.adapters.capabilities.Placement`); a ``"placement"`` entry here is
        still honoured for adapters without it."""

    @abstractmethod
    def close(self) -> None:
        """Release the model and context."""


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def known_adapters() -> dict[str, str]:
    """Built-in adapters plus installed plugins (plugins cannot shadow built-ins)."""
    return _entry_points() | BUILTIN_ADAPTERS


def resolve_adapter(name: str) -> str:
    """A registry name or a ``module:Class`` string -> ``module:Class``."""
    if ":" in name:
        return name
    known = known_adapters()
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    msg = f"unknown runtime {name!r}; {hint}valid: {', '.join(sorted(known))} (or 'module:Class')"
    raise AdapterError(msg)


def load_adapter_class(target: str) -> type[Adapter]:
    """Import ``module:Class`` and check it is an Adapter (imports the adapter, not its runtime)."""
    module_name, _, class_name = resolve_adapter(target).partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"adapter module {module_name!r} cannot be imported: {exc}"
        raise AdapterError(msg) from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        msg = f"{target!r}: {module_name}.{class_name} is not an rtmatrix Adapter subclass"
        raise AdapterError(msg)
    return cls
