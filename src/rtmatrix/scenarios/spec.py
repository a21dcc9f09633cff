"""What a lifecycle scenario is: :class:`ScenarioSpec` and :class:`ScenarioImpl`.

The registry in :mod:`rtmatrix.scenarios` holds one :class:`ScenarioSpec` per scenario, the half
that needs no import: the capability a runtime must offer (and another that serves the scenario
another way: ``serve`` in process through a ``BatchEngine``), the metric family's prefix, where
the plain generation's figures went. Each scenario module (``stream``, ``cancel``, ``serve``,
``sample``) exports the other half as ``IMPL``: the ``run`` of the worker's half, the ``metrics``
of the parent's, the typed result and the typed options with their defaults.

A scenario's result is a dataclass (:class:`ScenarioResult`); its dict form
(:meth:`ScenarioResult.to_dict`) is what crosses the worker -> parent boundary
(``WorkerResult.scenario``); the parent reads it back once (:meth:`ScenarioImpl.read`) and
hands the typed result to ``metrics``.
Nothing here imports a runtime.
"""

from __future__ import annotations

import dataclasses
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from rtmatrix.metrics.registry import MetricFamily
from rtmatrix.names import M, Scenario

if TYPE_CHECKING:
    from rtmatrix.adapters.base import Adapter
    from rtmatrix.outcome import Metric
    from rtmatrix.protocol import Job

#: the worker's cold-start marks (``mark("first_token", t)``)
Mark = Callable[[str, float], None]
#: the worker's half: adapter, job, prompt ids, banned ids, mark -> the typed result
RunFn = Callable[["Adapter", "Job", list[int], list[int], Mark], "ScenarioResult"]

_ABSENT = "absent_when_none"
#: the metadata of a result field that the dict form leaves out while it is None (a phase that
#: did not run: the key was never set): ``field(default=None, metadata=ABSENT_WHEN_NONE)``
ABSENT_WHEN_NONE: Mapping[str, bool] = {_ABSENT: True}


class ScenarioResult(ABC):
    """Base of the typed scenario results (dataclasses). The dict form holds the fields in their
    declared order (:meth:`key_order` may choose another), leaving out the
    :func:`absent_when_none` ones that are None; nested records are the dicts the run built,
    shared, not copied."""

    def key_order(self) -> Sequence[str]:
        return [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        absent = {f.name for f in dataclasses.fields(self) if f.metadata.get(_ABSENT)}  # type: ignore[arg-type]
        out: dict[str, Any] = {}
        for name in self.key_order():
            value = getattr(self, name)
            if value is None and name in absent:
                continue
            out[name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The typed result of a dict form; a key this result does not have is refused."""
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(k for k in data if k not in known)
        if unknown:
            msg = (
                f"{cls.__name__}: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(sorted(known))}"
            )
            raise ValueError(msg)
        return cls(**dict(data))

    @abstractmethod
    def lifecycle(self) -> Lifecycle:
        """What every scenario reports the same way (the ``lifecycle_checks`` metric)."""


@dataclass(frozen=True)
class Lifecycle:
    """The part of a result every scenario has: the ``lifecycle_checks`` metric's detail."""

    api: Any
    checks: list[dict[str, Any]]
    findings: list[str]
    skipped: dict[str, Any]
    traces: list[dict[str, Any]]
    #: scenario-specific summaries added to the detail (``invariance``, ``sampler``)
    extra: dict[str, Any] = field(default_factory=dict)


class ScenarioOptions(ABC):
    """Base of a scenario's typed options (dataclasses whose fields are option names with their
    defaults): :meth:`from_job` takes the job's values of those names, converted and checked."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
            else:
                out[f.name] = f.default
        return out

    @classmethod
    @abstractmethod
    def from_job(cls, job: Job) -> Self:
        """The options of ``job`` (its values of these names, else the defaults), checked."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


R = TypeVar("R", bound=ScenarioResult)
#: the parent's half: the scenario's own typed result -> its metrics
MetricsFn = Callable[[R], dict[str, "Metric"]]


@dataclass(frozen=True)
class ScenarioImpl(Generic[R]):
    """A scenario's implementation, its module's ``IMPL``: the worker's ``run`` and the
    parent's ``metrics`` over the typed result whose dict form crosses between them (read back
    once, by :meth:`read`), the typed options with their defaults (None: the scenario takes
    none of its own)."""

    name: Scenario
    run: RunFn
    metrics: MetricsFn[R]
    result: type[R]
    options: type[ScenarioOptions] | None = None

    def read(self, data: Mapping[str, Any]) -> R:
        """The typed result of the dict form the worker sent (``WorkerResult.scenario``)."""
        return self.result.from_dict(data)


@dataclass(frozen=True)
class Alternative:
    """Another capability that serves the scenario another way, and the run that does
    (``module:function``, imported when that run is chosen)."""

    capability: type[Any]
    run: str

    def load(self) -> RunFn:
        module, _, name = self.run.partition(":")
        fn: RunFn = getattr(importlib.import_module(module), name)
        return fn


@dataclass(frozen=True)
class ScenarioSpec:
    """One lifecycle scenario as the registry knows it without importing it: what the runtime
    must offer, the metric family's prefix, where the plain generation's figures went, what
    else it cannot measure. The implementation (:class:`ScenarioImpl`) is the ``IMPL`` of module
    ``rtmatrix.scenarios.<name>``, imported on first use (the worker asks for the capability
    before the load; an import there would count in ``cold_start_load_s``)."""

    name: Scenario
    #: what the runtime must offer (a capability Protocol of rtmatrix.adapters.capabilities)
    capability: type[Any]
    #: the metrics the scenario names (``stream_*``, ``serve_c<N>_*``): prefix, parameter,
    #: members (:class:`rtmatrix.metrics.registry.MetricFamily`)
    family: MetricFamily
    #: where the plain generation's figures went (the reason they are unavailable)
    see: str
    #: another capability that serves the scenario (tried when ``capability`` is missing)
    alternative: Alternative | None = None
    #: core metrics the scenario cannot measure beside the plain generation's: (metric, unit, why)
    unmeasured: tuple[tuple[M, str, str], ...] = ()
    #: one line of what the scenario measures (the report's lifecycle panel, --help)
    help: str = ""
    #: the report's card of one cell (``module:function(cell, card, notes)``)
    report: str = ""
    #: the selection matrix's headline parts of one cell (``module:function(metrics, notes)``)
    headline: str = ""
    #: the parent's check against the reference after the cell (``module:function(finished)``)
    reference: str = ""

    @property
    def metric_prefix(self) -> str:
        return self.family.prefix

    @property
    def module(self) -> str:
        return f"rtmatrix.scenarios.{self.name.value}"

    def hook(self, which: str) -> Callable[..., Any] | None:
        """One of the spec's lazy functions (``report``, ``headline``, ``reference``), imported
        now; None when the scenario has none."""
        target = str(getattr(self, which))
        if not target:
            return None
        module, _, name = target.partition(":")
        fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return fn

    def impl(self) -> ScenarioImpl[Any]:
        """The implementation (its module imported now)."""
        impl: ScenarioImpl[Any] = importlib.import_module(self.module).IMPL
        if impl.name is not self.name:
            msg = f"{self.module}.IMPL implements {impl.name.value!r}, not {self.name.value!r}"
            raise RuntimeError(msg)
        return impl

    def require(self, adapter: Adapter) -> Alternative | None:
        """None when ``adapter`` offers the capability, the alternative when it offers that
        one instead; else :class:`RuntimeUnavailable` naming the missing capability. Imports
        no scenario."""
        from rtmatrix.adapters.base import RuntimeUnavailable
        from rtmatrix.adapters.capabilities import missing

        if isinstance(adapter, self.capability):
            return None
        alt = self.alternative
        if alt is not None and isinstance(adapter, alt.capability):
            return alt
        raise RuntimeUnavailable(missing(adapter, self.capability, f"scenario {self.name.value!r}"))

    def runner(self, adapter: Adapter) -> RunFn:
        """The run that serves ``adapter`` (see :meth:`require`)."""
        alt = self.require(adapter)
        return self.impl().run if alt is None else alt.load()
