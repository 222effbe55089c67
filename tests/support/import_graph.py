"""The import graph of ``src/segbench``, read from the source with ``ast``: what each module imports of segbench.

Every import statement counts, those inside functions too (a lazy import runs when the function does), except those
under ``if TYPE_CHECKING:`` (never run) and those of the root package's ``__getattr__``: ``segbench.evaluate``, the
Python API, loaded on first use of that name, which no module of the package uses (``segbench evaluate`` imports
``segbench.evaluation`` itself). A package's own lazy ``__getattr__`` elsewhere counts as the package's import.
Importing ``segbench.a.b`` runs ``segbench/__init__.py`` and ``segbench/a/__init__.py`` first, so loading a module
that imports ``segbench.a.b`` loads those as well. The layer test (tests/contracts/test_layers.py) and the stage-dependency test
(tests/contracts/test_stage_dependencies.py) read it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from repo_paths import SRC

PACKAGE = "segbench"


@cache
def module_files(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its name, its file ``__init__.py``)."""
    files = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_nodes(tree: ast.AST, root_package: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements under ``tree`` that can run: all but those of an ``if TYPE_CHECKING:`` block (and, in the
    ``root_package``'s ``__init__``, those of its ``__getattr__``)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if root_package and isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _with_parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[: i + 1]) for i in range(len(parts))}


def imported_modules(nodes: Iterable[ast.Import | ast.ImportFrom], importer: str, src: Path = SRC, parents: bool = True) -> set[str]:
    """The segbench modules that ``nodes`` (statements of module ``importer``) name, with ``parents`` the packages
    Python runs first (what loading them loads) too."""
    files = module_files(src)
    package = importer if files[importer].name == "__init__.py" else importer.rpartition(".")[0]
    targets: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                if name not in files:
                    raise AssertionError(f"{files[importer]}: imports {name}, which is no module of src/{PACKAGE}")
                targets |= _with_parents(name) if parents else {name}
    return targets - {importer}


@cache
def graph(src: Path = SRC, parents: bool = True) -> dict[str, frozenset[str]]:
    """Module -> the segbench modules its own statements import; with ``parents`` also the packages Python runs first
    (what loading them loads: the stage-dependency test), without them only the modules the statements name (the
    modules a module uses: the layer and cycle test)."""
    return {
        name: frozenset(imported_modules(import_nodes(ast.parse(path.read_text(encoding="utf-8")), root_package=name == PACKAGE), name, src, parents))
        for name, path in module_files(src).items()
    }


def closure(starts: Iterable[str], src: Path = SRC) -> set[str]:
    """The modules that loading ``starts`` can load, ``starts`` and their parent packages included."""
    edges = graph(src)
    seen: set[str] = set()
    todo = [parent for start in starts for parent in _with_parents(start)]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges[name])
    return seen


def cycles(src: Path = SRC) -> list[list[str]]:
    """The import circles among the modules the import statements name (a submodule's package running first is no
    circle of its own): each strongly connected set of two or more modules (Tarjan's algorithm), sorted."""
    edges = graph(src, parents=False)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(found)
