"""Lifecycle scenarios beside the plain timed generation: stream, cancel, serve.

The worker calls :func:`run_scenario` after the model is loaded; the runner turns its result
into labelled metrics with :func:`scenario_metrics`. A scenario result may carry ``checks``
(``{"name", "ok", "detail"}``); a failed check makes the cell ``wrong-output``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rtmatrix.adapters.base import Adapter, RuntimeUnavailable
from rtmatrix.outcome import Metric


def run_scenario(
    name: str,
    adapter: Adapter,
    job: dict[str, Any],
    prompt: list[int],
    banned: list[int],
    mark: Callable[[str, float], None],
) -> dict[str, Any]:
    msg = f"scenario {name!r} is not available in this build of rtmatrix"
    raise RuntimeUnavailable(msg)


def scenario_metrics(name: str, result: dict[str, Any]) -> dict[str, Metric]:
    return {}
