"""The layers of src/segbench (docs/architecture.md#layers): no import circle, no module importing a layer above its
own, and the configuration light, so that every stage (each imports it) depends on no engine, reader or view
through it. The import graph is tests/import_graph.py's: every import statement, those inside functions too."""

from __future__ import annotations

import ast
import subprocess
import sys

from import_graph import closure, cycles, graph, module_files
from segbench import scoring

#: bottom to top: a module imports only from its own layer and those below; a module belongs to the layer of the
#: longest prefix of its name listed here (docs/architecture.md's table says what each layer does)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("segbench", "segbench.io", "segbench.rows", "segbench.bands", "segbench.units", "segbench.schema")),
    ("engines", ("segbench.scoring", "segbench.stats", "segbench.tracking")),
    ("schemas", ("segbench.datasets.schema", "segbench.models.schema", "segbench.models.structures", "segbench.models.vocabulary",
                 "segbench.interactive.schema", "segbench.published_schema", "segbench.calibration_schema")),
    ("interactive rules", ("segbench.interactive.protocol", "segbench.interactive.scores")),
    ("readers and views", ("segbench.published", "segbench.report")),
    ("inputs", ("segbench.datasets", "segbench.models", "segbench.interactive")),
    ("configuration", ("segbench.config", "segbench.stats_settings", "segbench.validation")),
    ("assembly", ("segbench.leaderboard", "segbench.calibration", "segbench.export", "segbench.crossdataset", "segbench.pruning")),
    ("wiring", ("segbench.stages", "segbench.evaluation")),
    ("face", ("segbench.cli",)),
)
#: packages whose ``__init__.py`` imports nothing: importing one of their modules runs it, so they sit in the base layer
#: whatever the layers of their modules
BARE_PACKAGES = ("segbench.datasets", "segbench.models", "segbench.interactive")
#: what the configuration must not load, even lazily: every stage imports it, so each of these would become a
#: dependency of every stage (a statistics edit would rerun the score stages)
NOT_IN_CONFIG = ("segbench.stats", "segbench.report", "segbench.published", "segbench.models.container", "segbench.models.runner",
                 "segbench.datasets.cases", "segbench.interactive.cases", "segbench.interactive.harness", "segbench.scoring.engine",
                 "segbench.stats_settings", "segbench.validation")
HEAVY = ("numpy", "pandas", "scipy", "numba", "nibabel", "SimpleITK", "mlflow")


def layer(module: str) -> int:
    """The index in ``LAYERS`` of the longest listed prefix of ``module`` (0 for a bare package)."""
    if module in BARE_PACKAGES:
        return 0
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes if module == p or module.startswith(p + ".")),
               default=None)
    assert best is not None, f"{module} is in no layer of LAYERS: add it"
    return best[1]


def test_every_module_has_a_layer_and_imports_none_above_it() -> None:
    upward = [f"{module} ({LAYERS[layer(module)][0]}) imports {target} ({LAYERS[layer(target)][0]})"
              for module, targets in sorted(graph(parents=False).items()) for target in sorted(targets) if layer(target) > layer(module)]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_bare_packages_import_nothing() -> None:
    assert {package: sorted(graph(parents=False)[package]) for package in BARE_PACKAGES} == {package: [] for package in BARE_PACKAGES}


def test_no_import_circle() -> None:
    assert cycles() == []


def test_the_configuration_loads_no_engine_reader_or_view() -> None:
    loaded = closure(["segbench.config"])
    assert loaded <= set(module_files())
    assert not [m for m in sorted(loaded) if any(m == n or m.startswith(n + ".") for n in NOT_IN_CONFIG)]


def test_importing_the_configuration_loads_no_heavy_library() -> None:
    code = f"import segbench.config, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"import segbench.config loads {out.strip()}"


def test_a_module_using_the_scoring_engine_imports_it() -> None:
    """``segbench.scoring`` loads its engine's names on first use (so the configuration can import its settings
    without numba); a module reading one through the package imports the submodule that defines it as well, so the
    import graph (and a stage's DVC dependencies) see the engine."""
    hidden = []
    for module, path in module_files().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "segbench.scoring" for a in n.names}
        if any(isinstance(n, ast.ImportFrom) and n.module == "segbench" and "scoring" in [a.name for a in n.names] for n in ast.walk(tree)):
            used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "scoring"}
        for name in sorted(used & set(scoring._LAZY)):
            if f"segbench.scoring.{scoring._LAZY[name]}" not in graph(parents=False)[module]:
                hidden.append(f"{module} uses scoring.{name} without importing segbench.scoring.{scoring._LAZY[name]}")
    assert not hidden, "\n".join(hidden)
