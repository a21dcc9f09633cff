"""No import cycles among rtmatrix's modules, counting the imports a function makes (the usual way
to hide one) and the package ``__init__`` an import runs first. Imports under ``if
TYPE_CHECKING:`` never run and are left out; so are third-party packages."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import rtmatrix

SRC = Path(rtmatrix.__file__).parent
#: Cycles still inside the fixture-preparation layer: ``fixtures.spec.get_spec`` dispatches to
#: ``archs``/``sources``/``checkpoints``, which import ``spec``'s types; ``fixtures/__init__``
#: re-exports ``prepare``, which converts through ``converters/``, whose base reads
#: ``fixtures.cache``. A cycle may not reach outside these packages.
TOLERATED = ("rtmatrix.fixtures", "rtmatrix.converters")

Graph = dict[str, set[str]]


def _modules(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _named(module: str, path: Path, node: ast.Import | ast.ImportFrom, mods: set[str]) -> list[str]:
    """The modules an import statement names (``from pkg import sub``: the submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]


def _runs(module: str, target: str, mods: set[str]) -> Iterator[str]:
    """What importing ``target`` from ``module`` executes: the target and each package above it
    that ``module`` is not itself inside (those ran before ``module`` did)."""
    while target and target not in mods:
        target = target.rpartition(".")[0]
    parts = target.split(".")
    for i in range(1, len(parts) + 1):
        found = ".".join(parts[:i])
        if found in mods and found != module and not module.startswith(found + "."):
            yield found


def _type_only(tree: ast.Module) -> set[int]:
    return {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for sub in ast.walk(node)
    }


def import_graph(root: Path, package: str) -> Graph:
    """module -> the package's modules it imports, anywhere in it (functions included)."""
    mods = _modules(root, package)
    graph: Graph = {m: set() for m in mods}
    for module, path in mods.items():
        tree = ast.parse(path.read_text("utf-8"))
        skip = _type_only(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                for name in _named(module, path, node, set(mods)):
                    graph[module] |= set(_runs(module, name, set(mods)))
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package(tmp: Path, files: dict[str, str]) -> Path:
    root = tmp / "pkg"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_cycle_hidden_in_a_function_is_found(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "low.py": "def f():\n    from pkg.high import g\n    return g\n",
        "high.py": "import numpy\nfrom pkg import low\n",
        "typed.py": "import typing\nif typing.TYPE_CHECKING:\n    from pkg import high\n",
    })  # fmt: skip
    graph = import_graph(root, "pkg")
    assert graph["pkg.high"] == {"pkg.low"}  # numpy is not ours
    assert graph["pkg.typed"] == set()  # type-only
    assert cycles(graph) == [["pkg.high", "pkg.low"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "report/__init__.py": "from pkg.report.render import page\n",
        "report/render.py": "from pkg.select import pick\n\ndef page(): ...\n",
        "report/views.py": "",
        "select.py": "from pkg.report.views import *\n\ndef pick(): ...\n",
    })  # fmt: skip
    found = cycles(import_graph(root, "pkg"))
    assert found == [["pkg.report", "pkg.report.render", "pkg.select"]]


def test_no_import_cycle_outside_the_fixture_preparation_layer() -> None:
    found = cycles(import_graph(SRC, "rtmatrix"))
    outside = [c for c in found if not all(m.startswith(TOLERATED) for m in c)]
    assert outside == [], "\n".join(" <-> ".join(c) for c in outside)


def _reach(graph: Graph, start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_the_selection_and_results_never_import_the_report() -> None:
    graph = import_graph(SRC, "rtmatrix")
    for low in ("rtmatrix.selection", "rtmatrix.results.ranking", "rtmatrix.results.series"):
        assert not {m for m in _reach(graph, low) if m.startswith("rtmatrix.report")}, low
