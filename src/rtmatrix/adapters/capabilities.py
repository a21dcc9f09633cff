"""What a runtime can do beyond the :class:`~rtmatrix.adapters.base.Adapter` contract.

Each capability is a small ``typing.Protocol``: an adapter offers it by having the method (no
registration, no base class), so a third-party adapter offers it the same way a built-in one does.
Generic code asks with ``isinstance(adapter, Streaming)`` and, where the capability is absent,
records the cell or the figure as ``unavailable`` with :func:`missing`'s reason, which names the
capability and its method.

=============  ============================  ==============================================
capability     method                        unlocks
=============  ============================  ==============================================
Streaming      ``stream_backend()``          scenarios ``stream`` and ``cancel``
Abortable      ``abort_prefill(...)``        the mid-prefill cancel of scenario ``cancel``
Serving        ``server_driver()``           scenario ``serve``
Placement      ``placement()``               ``evidence.placement`` (fallback outcome)
Tokenizing     ``tokenize_text(text)``       the tokenizer check of a real model's quality
                                             text (the runtime's ids against the harness's)
StackReporting ``stack_report(dtype, ev)``   ``evidence.stack``'s backend, kernels and
                                             effective numerics (verdicts judge what ran)
PromptCaching  ``prompt_cache()``            the prompt-cache self-check reads a repeated
                                             prompt's faster TTFT as the row's own cache, and
                                             its TTFT and PP figures say they are with it
=============  ============================  ==============================================

Finer capabilities of a backend or a server driver, asked for the same way:

=================  ==========================================  =====================================
capability         method                                      unlocks
=================  ==========================================  =====================================
ProcessMemory      backend ``process_rss()``                   ``cancel`` reads the RSS of the
                                                               process the work runs in (a server)
UnstreamedRun      backend ``complete(prompt, n, banned)``     ``stream``'s token check where the
                                                               harness has no greedy loop
ServerCounters     driver ``counters(port)``, ``slots(port)``  ``serve``: counter deltas per level,
                                                               busy slots, slot seen free again
TokenServer        driver ``complete_tokens(...)``             ``serve``'s batch-invariance phase
=================  ==========================================  =====================================

Nothing here imports a runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rtmatrix.adapters.base import Adapter
from rtmatrix.numerics import StackReport
from rtmatrix.protocol import JobParams

#: called by the runtime right after each sampled token; True stops the request there
OnToken = Callable[[], bool]
#: called when the runtime starts on the prompt
OnPrefill = Callable[[], None]


class StreamBackend(Protocol):
    """The runtime's *own* streaming path (not the harness's prefill/decode loop), as the
    ``stream`` and ``cancel`` scenarios drive it."""

    #: registry name of the runtime
    runtime: str
    #: the runtime API the stream goes through, in words
    api: str
    #: cancel mode (``stop`` | ``close``) -> how this runtime cancels in that mode
    cancel_modes: Mapping[str, str]
    #: cancel mode -> why this runtime does not have it
    missing_modes: Mapping[str, str]
    #: what :meth:`state` reads, and where it comes from
    state_doc: str

    def open_stream(
        self,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        on_token: OnToken,
        on_prefill: OnPrefill,
    ) -> Iterator[Any]:
        """A fresh request (no prefix reuse), greedy, ``banned`` ids masked: ``on_prefill``
        when the runtime starts on the prompt, ``on_token`` after each sampled token (True stops
        the request there); the iterator yields the runtime's stream chunks, and ``close()`` on
        it cancels."""
        ...

    def chunk_text(self, chunk: Any) -> str:
        """The text a chunk carries ("" when none)."""
        ...

    def byte_tokens(self) -> list[int]:
        """Token ids that the stream may hold back (byte-fallback tokens); [] when none."""
        ...

    def generated(self, n_prompt: int) -> list[int] | None:
        """Token ids of the last stream after the prompt, where the runtime keeps them."""
        ...

    def release(self) -> None:
        """Give back the sequence state of the last stream."""
        ...

    def state(self) -> dict[str, int | None]:
        """The runtime's own view of its context state (``None`` where it has none); the
        ``cancel`` checks know ``state_bytes``, ``kv_pos_max`` and ``kv_tokens``."""
        ...


@runtime_checkable
class Streaming(Protocol):
    """The runtime streams tokens through its own API (scenarios ``stream``, ``cancel``)."""

    def stream_backend(self) -> StreamBackend:
        """The backend over the loaded model (the same object on every call). Raise
        :class:`RuntimeUnavailable` when this build or model cannot stream."""
        ...


@runtime_checkable
class StackReporting(Protocol):
    """The runtime's home reports what ran for this cell, typed: the backend, the kernels and
    the effective numerics (devices, matmul/attention/KV-cache precision, weight layout,
    activation quantization — each in the runtime's words, with where it was read) and the
    options that force the requested precision (the numerics control run). Called in the
    worker after the counted work, from the adapter's own state; a cell's verdict reads it."""

    def stack_report(self, dtype: str | None, evidence: Mapping[str, Any]) -> StackReport:
        """What ran, for a cell that asked for ``dtype`` (None: a user's file), read from the
        cell's ``evidence`` as the worker collected it (the adapter's own, with placement)."""
        ...


@runtime_checkable
class EngineGeneration(Protocol):
    """The runtime runs its own generation loop (an engine: OpenVINO GenAI's ``LLMPipeline``)
    and gives ids, not logits: the ``generate`` scenario times it through its token callback
    (TTFT to the first id, then the gaps) instead of the harness's prefill/decode loop, and
    parity is judged on the ids."""

    def engine_generate(
        self,
        prompt: Sequence[int],
        n_gen: int,
        banned: Sequence[int],
        on_token: Callable[[int], None],
    ) -> list[int]:
        """``n_gen`` greedy ids after ``prompt``; ``on_token(id)`` as each id is produced."""
        ...


@dataclass(frozen=True)
class PromptCache:
    """Whether a row reuses a repeated prompt's work across generations (a prompt or prefix
    cache) with the settings it loaded with, as the runtime's home says it."""

    caches: bool
    #: the setting and where it comes from, in the runtime's words
    setting: str


@runtime_checkable
class PromptCaching(Protocol):
    """The runtime's home says whether a repeated prompt reuses earlier work. Every ok cell's
    prompt-cache self-check times fresh prompts of the timed prompt's length against the timed
    prompt again (:mod:`rtmatrix.metrics.selfcheck`): a repeat faster beyond the noise fails
    the check where the row says it does not cache (or says nothing); where it says it does,
    the cell's TTFT and PP figures are marked as measured with the cache."""

    def prompt_cache(self) -> PromptCache:
        """The loaded row's prompt caching (called after ``load``)."""
        ...


@dataclass(frozen=True)
class ReferenceBudget:
    """How long the reference process may run, in cell timeouts (``run.timeout_s``): one per run
    of the benchmark tool, and one per run of the quality tool when that runs too. An adapter
    offering :class:`ReferenceBenchmark` may set a class attribute ``reference_budget`` to one;
    without it, :data:`DEFAULT_REFERENCE_BUDGET` applies. The parent reads it from the adapter's
    description (:func:`reference_budget`), never from the adapter itself."""

    #: runs of the benchmark tool per cell (e.g. one per phase: prefill, decode)
    benchmark_runs: int = 2
    #: runs of the quality tool per cell, when it runs (:class:`ReferenceQuality`)
    quality_runs: int = 2

    def seconds(self, timeout_s: float, *, quality: bool) -> float:
        """The budget for a cell with timeout ``timeout_s``, with or without the quality tool."""
        runs = self.benchmark_runs + (self.quality_runs if quality else 0)
        return runs * timeout_s

    def to_dict(self) -> dict[str, int]:
        return {"benchmark_runs": self.benchmark_runs, "quality_runs": self.quality_runs}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ReferenceBudget:
        """The budget an adapter described; the default where it said nothing."""
        data = data or {}
        default = DEFAULT_REFERENCE_BUDGET
        return cls(
            int(data.get("benchmark_runs", default.benchmark_runs)),
            int(data.get("quality_runs", default.quality_runs)),
        )


#: the budget of an adapter that does not declare ``reference_budget``
DEFAULT_REFERENCE_BUDGET = ReferenceBudget()


def reference_budget(adapter_cls: type[Any]) -> ReferenceBudget:
    """The reference budget an adapter class declares (``reference_budget``), else the default."""
    budget = getattr(adapter_cls, "reference_budget", None)
    return budget if isinstance(budget, ReferenceBudget) else DEFAULT_REFERENCE_BUDGET


@runtime_checkable
class ReferenceBenchmark(Protocol):
    """The runtime's own benchmark tool, run on the cell's file with the cell's settings in a
    process of its own after the cell (so its memory and CPU are not the cell's). Checked on the
    adapter *class*: it runs without loading the model in the worker. How long that process may
    take is the adapter's :class:`ReferenceBudget` (an optional class attribute
    ``reference_budget``, read by :func:`reference_budget`)."""

    @classmethod
    def reference_benchmark(
        cls, model_path: Path, params: JobParams, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``{"pp_tps": [...], "tg_tps": [...], "evidence": {tool, tool_version, command, ...}}``;
        raise :class:`rtmatrix.adapters.base.RuntimeUnavailable` with the reason when the tool
        cannot run."""
        ...


@runtime_checkable
class ReferenceQuality(Protocol):
    """The runtime's own quality tool (llama.cpp: ``llama-perplexity --kl-divergence``): the
    cell's file judged against a base file (the f32 export of the same checkpoint) over one
    chunk of ``n_ctx`` ids of a text, in the reference process. Checked on the adapter *class*."""

    @classmethod
    def reference_quality(
        cls,
        model_path: Path,
        base_path: Path,
        text: str,
        n_ctx: int,
        params: JobParams,
        options: Mapping[str, Any],
    ) -> dict[str, Any]:
        """``{"kld_mean": ..., "same_top_pct": ..., "evidence": {...}}`` (the tool's figures over
        positions ``n_ctx // 2 .. n_ctx - 2``); raise :class:`RuntimeUnavailable` with the
        reason when the tool cannot run."""
        ...


@runtime_checkable
class Abortable(Protocol):
    """A running prefill can be stopped from another thread (the ``cancel`` scenario's
    mid-prefill probe)."""

    def abort_prefill(self, prompt: Sequence[int], delay_s: float | None) -> dict[str, Any]:
        """Start a prefill of ``prompt`` on a released sequence, ask for a stop ``delay_s`` after
        it began from another thread (``None``: never, a timed uncancelled prefill), leave the
        sequence released. Report ``aborted`` (bool), ``prefill_s``, ``due_s``, ``flag_s``,
        ``flag_late_s``, ``latency_s`` (stop requested -> the prefill returned, when aborted),
        ``how`` (the runtime API, in words) and ``why`` when it did not abort."""
        ...


@runtime_checkable
class ProcessMemory(Protocol):
    """A backend whose work runs in another process (a server): memory checks read that one."""

    def process_rss(self) -> int | None:
        """RSS of the process the runtime works in, in bytes (None when it is not running)."""
        ...


@runtime_checkable
class UnstreamedRun(Protocol):
    """A backend that also answers in one piece: the ``stream`` scenario compares the streamed
    ids with it where the harness has no greedy loop over the runtime (a server row)."""

    #: the non-streamed path, in words
    reference_api: str

    def complete(self, prompt: Sequence[int], max_tokens: int, banned: Sequence[int]) -> list[int]:
        """The greedy ids of ``prompt`` (``banned`` masked), without streaming."""
        ...


@dataclass(frozen=True)
class ServerLaunch:
    """How to start one server process: its command line and the settings it was given."""

    argv: list[str]
    #: what the server was configured with (recorded in the result)
    settings: dict[str, Any]
    #: the environment to start it in (None: the worker's own)
    env: dict[str, str] | None = None


class ServerDriver(Protocol):
    """The runtime's own OpenAI-compatible HTTP server (``/v1/completions`` with server-sent
    events, ``/v1/models``), as the ``serve`` scenario starts and drives it."""

    #: the server program, in words (error messages name it)
    program: str
    #: the API the requests go through, in words
    api: str

    def prompt_text(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens`` as the server's tokenizer would read it back."""
        ...

    def byte_tokens(self) -> list[int]:
        """Token ids the server may hold back from an event (byte-fallback tokens)."""
        ...

    def launch(self, workdir: Path, name: str, port: int, interrupt: bool | None) -> ServerLaunch:
        """Write what the server needs under ``workdir`` and return its command line, serving the
        loaded model with the adapter's own load settings on 127.0.0.1:``port``. ``interrupt``:
        whether a new request ends the stream in progress (``None``: the server's default)."""
        ...

    def logged_disconnect(self, log: str) -> bool:
        """Whether the server's log records a client that went away mid-stream."""
        ...


#: the neutral names of a server's cumulative counters (since it started), as
#: :attr:`CounterReading.figures` holds them: generated tokens and the seconds spent on them
#: (summed over requests), prompt tokens processed and their seconds, decode calls (batches)
SERVER_COUNTERS = (
    "tokens_predicted",
    "tokens_predicted_seconds",
    "prompt_tokens",
    "prompt_seconds",
    "decode_calls",
)
#: ... and of its gauges: the running average of busy slots per decode call
SERVER_GAUGES = ("busy_slots_per_decode",)


@dataclass(frozen=True)
class CounterReading:
    """A server's counters at one moment. ``figures``: the neutral names
    (:data:`SERVER_COUNTERS`, :data:`SERVER_GAUGES`) the server has, each translated by the
    driver from the server's own; ``raw``: every cumulative counter the server keeps, by its own
    name (recorded as the level's deltas, never read by name)."""

    figures: dict[str, float]
    raw: dict[str, float]


@runtime_checkable
class ServerCounters(Protocol):
    """A driver that reads the server's own counters and slot states."""

    #: where the counters come from, in words
    counters_doc: str

    @property
    def counter_labels(self) -> Mapping[str, str]:
        """Neutral counter name -> the server's own word for it, where a figure's detail should
        say that word (``{"decode_calls": "llama_decode calls"}``); {} when none."""
        ...

    def counters(self, port: int) -> CounterReading:
        """The server's counters and gauges now (e.g. Prometheus ``/metrics``), neutral names
        in ``figures``, the server's own in ``raw``."""
        ...

    def slots(self, port: int) -> list[dict[str, Any]]:
        """Each request slot: ``{"id", "phase": idle|prefill|decode, ...}``."""
        ...


@runtime_checkable
class TokenServer(Protocol):
    """A driver whose server takes token ids and returns the top log-probabilities of every
    generated position (the ``serve`` scenario's batch-invariance phase)."""

    #: the endpoint, in words
    token_api: str

    def complete_tokens(
        self,
        port: int,
        prompt: Sequence[int],
        max_tokens: int,
        banned: Sequence[int],
        n_probs: int,
    ) -> dict[str, Any]:
        """A greedy, non-streamed completion: ``{"tokens": [...], "top": [[[id, logprob],
        ...] per position], ...}`` (top log-probabilities computed before sampling)."""
        ...


@runtime_checkable
class Sampling(Protocol):
    """The runtime samples with its own sampler (the ``sample`` scenario): ids drawn from its
    logits after its own penalties, truncations and temperature, seeded."""

    #: the sampling API, in words
    sampler_api: str
    #: the documented order of its stages: a key of ``rtmatrix.metrics.sampler.ORDERS``
    sampler_order: str
    #: where that order is documented (file and function of the runtime's source)
    sampler_order_source: str

    def sample_generate(
        self, prompt: Sequence[int], n_gen: int, params: dict[str, Any], seed: int
    ) -> list[int]:
        """``n_gen`` ids sampled after ``prompt`` on a fresh sequence with ``params``
        (temperature, top_k, top_p, min_p, repeat_penalty) and ``seed``."""
        ...


@runtime_checkable
class ConstrainedSampling(Protocol):
    """The runtime constrains its sampler to a JSON schema (a grammar made from it)."""

    #: how the constraint is handed over, in words
    constraint_api: str

    def sample_constrained(
        self,
        prompt: Sequence[int],
        n_gen: int,
        params: dict[str, Any],
        seed: int,
        schema: dict[str, Any],
    ) -> dict[str, Any]:
        """At most ``n_gen`` ids sampled under ``schema``: ``{"tokens": [...], "text": str,
        "stop": why it ended}``."""
        ...


@runtime_checkable
class BatchEngine(Protocol):
    """The engine schedules several requests in this process (continuous batching: OpenVINO
    GenAI's ``ContinuousBatchingPipeline``): the ``serve`` scenario's concurrency levels and
    batch invariance without a server."""

    #: the engine's batching API, in words
    batch_api: str

    def batch_generate(
        self,
        requests: Sequence[tuple[Sequence[int], int]],
        on_token: Callable[[int, int], None],
    ) -> list[list[int]]:
        """Every ``(prompt, n_gen)`` request submitted at once, greedy; ``on_token(request index,
        id)`` as each id is produced. Returns each request's ids."""
        ...

    def batch_state(self) -> dict[str, Any]:
        """What the engine says about its scheduler and cache now (sizes, usage, settings)."""
        ...


@runtime_checkable
class Serving(Protocol):
    """The runtime ships an OpenAI-compatible server (scenario ``serve``)."""

    def server_driver(self) -> ServerDriver:
        """A driver for the loaded model. Raise :class:`RuntimeUnavailable` (naming the install
        command) when the server's own dependencies are missing."""
        ...


@runtime_checkable
class Placement(Protocol):
    """The runtime says where the work ran (``evidence.placement``)."""

    def placement(self) -> dict[str, Any] | None:
        """``{"requested": [...], "used": [...], "fallback": bool, ...}`` (``fallback: true``
        makes the cell's outcome ``fallback``: it ran, but not where asked), or ``None`` when
        nothing was set up to run (the runtime never imported)."""
        ...


@runtime_checkable
class Tokenizing(Protocol):
    """The runtime tokenizes text with the loaded model's own tokenizer."""

    def tokenize_text(self, text: str) -> list[int]:
        """The ids of ``text`` (no BOS added, special tokens not parsed)."""
        ...


CAPABILITIES: dict[type[Any], str] = {
    Streaming: "stream_backend()",
    Abortable: "abort_prefill(prompt, delay_s)",
    Serving: "server_driver()",
    BatchEngine: "batch_generate(requests, on_token), batch_state()",
    Sampling: "sample_generate(prompt, n_gen, params, seed)",
    ConstrainedSampling: "sample_constrained(prompt, n_gen, params, seed, schema)",
    Placement: "placement()",
    Tokenizing: "tokenize_text(text)",
    ProcessMemory: "process_rss()",
    UnstreamedRun: "complete(prompt, max_tokens, banned)",
    ServerCounters: "counters(port), slots(port)",
    TokenServer: "complete_tokens(port, prompt, max_tokens, banned, n_probs)",
    EngineGeneration: "engine_generate(prompt, n_gen, banned, on_token)",
    StackReporting: "stack_report(dtype, evidence)",
    PromptCaching: "prompt_cache()",
    ReferenceBenchmark: "reference_benchmark(model_path, params, options) (classmethod)",
    ReferenceQuality: "reference_quality(model_path, base_path, text, n_ctx, params, options) "
    "(classmethod)",
}


def missing(adapter: Adapter, capability: type[Any], what: str) -> str:
    """The reason ``what`` is unavailable: the runtime lacks ``capability``."""
    method = CAPABILITIES.get(capability, "?")
    return (
        f"{what}: runtime {adapter.name!r} does not offer the {capability.__name__} capability "
        f"(rtmatrix.adapters.capabilities.{capability.__name__}: {method})"
    )


def collect_evidence(adapter: Adapter) -> dict[str, Any]:
    """``adapter.evidence()`` with the placement record where the runtime offers
    :class:`Placement`, else ``placement_unavailable`` naming the missing capability."""
    ev = dict(adapter.evidence())
    if isinstance(adapter, Placement):
        placed = adapter.placement()
        if placed is not None:
            ev["placement"] = placed
    elif "placement" not in ev:
        ev["placement_unavailable"] = missing(adapter, Placement, "placement evidence")
    return ev
