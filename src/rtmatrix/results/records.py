"""Typed views of a run record (``schema.json``): what ``load_run`` returns and the diff, the
comparison and the report read.

The records are TypedDicts, not dataclasses, on purpose. A run record is JSON that the schema
validates on every load and save and that is written back unchanged (``rtmatrix merge``, a
resumed run, ``rtmatrix compare``'s sides): a TypedDict *is* the dict ``json.loads`` gave, so it
adds mypy's key and value checking at no runtime cost and with no conversion code — nothing a
user sees or a result file holds can change by typing it, where a dataclass tree would need a
``from_dict``/``to_dict`` pair that must round-trip every key, known or not.

The TypedDicts mirror the schema: a key the schema ``required`` is a required key here (a unit
test checks the two against each other), every other key is ``NotRequired``. Where the schema
leaves an object open (a cell's ``evidence``, ``control``, ``generated_text``; a metric's detail;
the matrix's ``run`` table), the part is ``dict[str, Any]`` or the record lists only the keys
rtmatrix itself writes and reads: such a record may hold more (``record.get(key)`` reads any
key; a record is a ``Mapping[str, Any]``). Values the schema gives as an ``enum`` are ``str``
here, compared with the ``rtmatrix.outcome`` StrEnums.

This module has no ``from __future__ import annotations``: on Python 3.11 ``typing.TypedDict``
reads ``NotRequired`` only from evaluated annotations (with postponed ones every key would
count as required in ``__required_keys__``).
"""

from typing import Any, NotRequired, TypedDict

# --------------------------------------------------------------------------- a cell


class MetricRecord(TypedDict):
    """One figure of a cell (``$defs/metric``): ``rtmatrix.outcome.Metric.to_dict()``. Its
    ``detail`` is merged in flat, so a metric may hold more keys than these."""

    value: float | int | str | None  # None exactly when source is "unavailable"
    unit: str
    source: str  # $defs/source: runtime-counter, harness-clock, ..., unavailable
    reason: NotRequired[str]  # required when unavailable
    samples: NotRequired[list[float]]  # the counted repetitions; value is their median
    # detail keys rtmatrix writes and its readers use
    stats: NotRequired[dict[str, Any]]  # outcome.summarize: n, mean, sd, median, min, max
    process_values: NotRequired[list[float]]  # run --processes: each process's median
    method: NotRequired[str]
    field: NotRequired[str]  # the package metadata field a license came from
    tool: NotRequired[str]  # a reference-tool figure: the tool, its version and command
    tool_version: NotRequired[str]
    command: NotRequired[Any]
    threshold_cores: NotRequired[float]  # host_busy_cores: the contention threshold
    scenario: NotRequired[str]  # lifecycle_checks: the scenario that ran


class FixtureRecord(TypedDict):
    """The model file a cell ran (``$defs/cell/fixture``)."""

    name: str
    dtype: str | None
    container: str | None
    path: str | None
    sha256: str | None
    model: NotRequired[str | None]
    source: NotRequired[str]  # a real checkpoint's cell: the checkpoint it was imported from
    spec_sha256: NotRequired[str | None]
    size_bytes: NotRequired[int | None]
    variant: NotRequired[str | None]
    scenario: NotRequired[str | None]
    #: how the runtime's own converter wrote the file (``converters.base.Conversion``)
    conversion: NotRequired[dict[str, Any]]
    #: a converted checkpoint's architecture (transformers' model_type)
    architecture: NotRequired[str]


class OutcomeRecord(TypedDict):
    """How a cell ended (``$defs/cell/outcome``): ``runner.classify.CellOutcome.to_dict()``."""

    status: str  # rtmatrix.outcome.Status
    message: str
    phase: NotRequired[str | None]
    exit_code: NotRequired[int | None]
    signal: NotRequired[str | None]
    fix: NotRequired[str]
    error_kind: NotRequired[str]
    #: who the failure is charged to where it is not the runtime: "converter" or "input"
    charged_to: NotRequired[str]
    error_type: NotRequired[str | None]
    runtime_version: NotRequired[str | None]


class ParityRecord(TypedDict):
    """Greedy tokens and logits against the numpy reference (``$defs/cell/parity``): the schema
    requires ``reason`` when unavailable, the four figures when measured."""

    status: str  # "measured" or "unavailable"
    reason: NotRequired[str]
    tokens_agree: NotRequired[int]
    tokens_compared: NotRequired[int]
    max_abs_logit_err: NotRequired[float | None]
    within_tolerance: NotRequired[bool | None]
    first_divergence: NotRequired[int | None]
    logit_tolerance: NotRequired[float]


class HostRecord(TypedDict):
    """The host that ran a cell when it is not the run's machine (``$defs/cell/host``)."""

    worker: NotRequired[str | None]
    name: NotRequired[str | None]
    machine: NotRequired[dict[str, Any]]
    runtime: NotRequired[dict[str, Any]]
    rtmatrix_version: NotRequired[str]
    protocol: NotRequired[int]
    part: NotRequired[int]
    lost: NotRequired[list[str]]


class SelfCheckRecord(TypedDict):
    """One of an ok cell's self-checks (``rtmatrix.metrics.selfcheck``)."""

    status: str  # passed | failed | not-applicable
    summary: str
    figures: NotRequired[dict[str, Any]]


class CellRecord(TypedDict):
    """One cell of a run (``$defs/cell``): ``runner.record.cell_record``."""

    key: str  # runtime[@target] | fixture/dtype | parameter tag
    runtime: str
    fixture: FixtureRecord
    params: dict[str, int]
    expect: str  # rtmatrix.outcome.Expect
    outcome: OutcomeRecord
    verdict: str  # rtmatrix.outcome.Verdict
    metrics: dict[str, MetricRecord]
    parity: ParityRecord
    evidence: dict[str, Any]  # free-form: what the runtime and the runner reported
    wall_s: NotRequired[float]
    contended: NotRequired[bool]
    control: NotRequired[dict[str, Any]]
    generated_text: NotRequired[dict[str, Any]]
    diagnosed: NotRequired[bool]
    #: the cell computed below its requested precision: judged as what ran, said in words
    numerics_mark: NotRequired[str]
    #: an ok cell's self-checks (rtmatrix.metrics.selfcheck): name -> status, summary, figures
    self_checks: NotRequired[dict[str, SelfCheckRecord]]
    #: a self-check failed: which, with the figures, in words
    self_check_mark: NotRequired[str]
    #: the numerics control run (the options that force the requested precision) and its record
    numerics_control: NotRequired[dict[str, Any]]
    verdict_reason: NotRequired[str]
    expect_kind: NotRequired[list[str]]
    attempts: NotRequired[dict[str, Any]]
    target: NotRequired[str]
    host: NotRequired[HostRecord]
    # written by rtmatrix beyond the schema's list (the schema leaves a cell open)
    adapter: NotRequired[str]  # the adapter that ran it (module:Class)
    processes: NotRequired[int]  # run --processes: worker processes its samples pool
    process_outcomes: NotRequired[list[str]]  # ... and how each of them ended
    scenario: NotRequired[str | None]  # the lifecycle scenario (older records: the fixture's)


# --------------------------------------------------------------------------- a run


class MatrixRecord(TypedDict):
    """The matrix file a run came from (``matrix``)."""

    path: str
    sha256: str
    n_cells: int
    description: NotRequired[str]
    run: NotRequired[dict[str, Any]]  # the matrix's [run] table
    power: NotRequired[Any]
    gate: NotRequired[Any]


class MachineRecord(TypedDict):
    """The host probe (``machine``): ``metrics.host.machine_info()``."""

    os: str
    kernel: str
    arch: str
    cpu_model: str | None
    cores_logical: int | None
    ram_bytes: int
    hostname: NotRequired[str]
    os_release: NotRequired[str | None]
    cpu_vendor: NotRequired[str | None]
    cpu_features: NotRequired[list[str]]
    cores_physical: NotRequired[int | None]
    cpu_affinity: NotRequired[int | None]
    gpus: NotRequired[Any]
    gpu_detection: NotRequired[str | None]
    python: NotRequired[str]
    #: thread count -> this host's measured limits (metrics.hostlimits), or why none
    host_limits: NotRequired[dict[str, Any]]


class ProjectRecord(TypedDict):
    """The rtmatrix checkout the run started from (``project``)."""

    rtmatrix_version: str
    commit: str | None
    dirty: bool | None
    branch: NotRequired[str | None]


class RuntimeRecord(TypedDict):
    """A runtime row of the run (``runtimes.<name>``)."""

    adapter: str
    distribution: str | None
    version: str | None
    extra: NotRequired[str | None]
    container: NotRequired[str | None]
    error: NotRequired[str]
    options: NotRequired[dict[str, Any]]
    crash_control: NotRequired[Any]  # the options a crashed cell is rerun with (False: none)
    sweep: NotRequired[dict[str, Any]]  # a row a [[runtimes]] sweep made
    python: NotRequired[str]  # rtmatrix compare: the side's interpreter


class SkippedRecord(TypedDict):
    """A planned cell that did not run (``skipped``)."""

    key: str
    reason: str


class FleetRecord(TypedDict):
    """How a run was spread over hosts (``fleet``, rtmatrix run --cluster)."""

    cluster: NotRequired[str | None]
    tls: NotRequired[bool]
    targets: NotRequired[dict[str, Any]]
    workers: NotRequired[list[dict[str, Any]]]


class PartRecord(TypedDict):
    """A run merged into this one (``parts``, rtmatrix merge)."""

    path: str
    run_id: str
    machine: dict[str, Any]
    project: dict[str, Any]
    sha256: NotRequired[str]
    target: NotRequired[str | None]
    runtimes: NotRequired[dict[str, Any]]


class RunRecord(TypedDict):
    """One run of a matrix (the schema's top level): what ``store.load_run`` returns."""

    schema_version: int
    run_id: str
    created_utc: str
    status: str  # running, complete, interrupted
    matrix: MatrixRecord
    machine: MachineRecord
    project: ProjectRecord
    runtimes: dict[str, RuntimeRecord]
    cells: list[CellRecord]
    finished_utc: NotRequired[str | None]
    skipped: NotRequired[list[SkippedRecord]]
    fleet: NotRequired[FleetRecord]
    parts: NotRequired[list[PartRecord]]
    comparison_side: NotRequired[str]  # rtmatrix compare: "a" or "b"


def evidence_of(record: CellRecord | None) -> dict[str, Any]:
    """A cell's evidence; {} for no cell."""
    return (record.get("evidence") or {}) if record else {}


def value_of(metric: MetricRecord | None) -> float | int | str | None:
    """A metric's value; None for no metric."""
    return metric.get("value") if metric else None
