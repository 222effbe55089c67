"""The layers of src/segbench (docs/architecture.md#layers): no import circle, no module importing a layer above its
own, and the configuration light, so that every stage (each imports it) depends on no engine, reader or view
through it. The import graph is tests/support/import_graph.py's: every import statement, those inside functions too."""

from __future__ import annotations

import ast
import subprocess
import sys

from import_graph import closure, cycles, graph, module_files

#: bottom to top: a module imports only from its own layer and those below; a module belongs to the layer of the
#: longest prefix of its name listed here (docs/architecture.md's table says what each layer does)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("segbench", "segbench.base")),
    ("engines", ("segbench.scoring", "segbench.stats", "segbench.tracking")),
    (
        "schemas",
        (
            "segbench.datasets.schema",
            "segbench.models.schema",
            "segbench.models.structures",
            "segbench.models.vocabulary",
            "segbench.interactive.schema",
            "segbench.published.schema",
            "segbench.assembly.calibration_schema",
        ),
    ),
    ("interactive rules", ("segbench.interactive.protocol", "segbench.interactive.scores")),
    ("readers and views", ("segbench.published", "segbench.report")),
    ("inputs", ("segbench.datasets", "segbench.models", "segbench.interactive")),
    ("configuration", ("segbench.config",)),
    ("assembly", ("segbench.assembly",)),
    ("wiring", ("segbench.stages", "segbench.evaluation")),
    ("face", ("segbench.cli", "segbench.console")),
)
#: packages whose ``__init__.py`` imports nothing: importing one of their modules runs it, so they sit in the base layer
#: whatever the layers of their modules
BARE_PACKAGES = (
    "segbench.base",
    "segbench.scoring",
    "segbench.tracking",
    "segbench.published",
    "segbench.datasets",
    "segbench.models",
    "segbench.interactive",
    "segbench.config",
    "segbench.assembly",
)
#: what the configuration must not load, even lazily: every stage imports it, so each of these would become a
#: dependency of every stage (a statistics edit would rerun the score stages)
NOT_IN_CONFIG = (
    "segbench.stats",
    "segbench.report",
    "segbench.published.readers",
    "segbench.published.segauge",
    "segbench.models.container",
    "segbench.models.runner",
    "segbench.datasets.cases",
    "segbench.interactive.cases",
    "segbench.interactive.harness",
    "segbench.scoring.engine",
    "segbench.config.stats_settings",
    "segbench.config.validation",
)
HEAVY = ("numpy", "pandas", "scipy", "numba", "nibabel", "SimpleITK", "mlflow")


def layer(module: str) -> int:
    """The index in ``LAYERS`` of the longest listed prefix of ``module`` (0 for a bare package)."""
    if module in BARE_PACKAGES:
        return 0
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes if module == p or module.startswith(p + ".")), default=None)
    assert best is not None, f"{module} is in no layer of LAYERS: add it"
    return best[1]


def test_every_module_has_a_layer_and_imports_none_above_it() -> None:
    upward = [
        f"{module} ({LAYERS[layer(module)][0]}) imports {target} ({LAYERS[layer(target)][0]})"
        for module, targets in sorted(graph(parents=False).items())
        for target in sorted(targets)
        if layer(target) > layer(module)
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_bare_packages_import_nothing() -> None:
    assert {package: sorted(graph(parents=False)[package]) for package in BARE_PACKAGES} == {package: [] for package in BARE_PACKAGES}


def test_no_import_circle() -> None:
    assert cycles() == []


def test_the_configuration_loads_no_engine_reader_or_view() -> None:
    loaded = closure(["segbench.config.params"])
    assert loaded <= set(module_files())
    assert not [m for m in sorted(loaded) if any(m == n or m.startswith(n + ".") for n in NOT_IN_CONFIG)]


def test_importing_the_configuration_loads_no_heavy_library() -> None:
    code = f"import segbench.config.params, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"import segbench.config.params loads {out.strip()}"


#: a module a reader takes in at once: over this many lines it holds more than one job
MAX_MODULE_LINES = 800
#: a function a reader follows in one go; the CLI's parser is a table of options, read row by row
MAX_FUNCTION_LINES = 80
LONG_BY_DESIGN = {("segbench.cli", "build_parser")}


def test_no_module_or_function_outgrows_a_reading() -> None:
    """No file over 800 lines, no function over 80 (docstring included; the parser's table excepted): the size at which
    the code review of #68 found modules holding several jobs (analysis.py: inputs, analysis and reanalysis)."""
    long_modules, long_functions = [], []
    for module, path in sorted(module_files().items()):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_MODULE_LINES:
            long_modules.append(f"{path.relative_to(path.parents[2])}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (module, node.name) not in LONG_BY_DESIGN:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{module}.{node.name}: {length} lines")
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


#: what every stage shares (its output paths; its run record's tags and headline means): helpers, not stages
STAGE_HELPERS = ("segbench.stages.paths", "segbench.stages.bundles")


def test_no_stage_module_imports_another() -> None:
    """A stage reads what another stage wrote through the files (and the engine that reads them), never through that
    stage's module: compare read published sets through the import stage's module, which made the import stage's code
    a dependency of compare's."""
    stages = {m for m in module_files() if m.startswith("segbench.stages.") and m not in STAGE_HELPERS}
    crossing = [f"{m} imports {t}" for m in sorted(stages) for t in sorted(graph(parents=False)[m] & stages)]
    assert not crossing, "\n".join(crossing)
