"""Each DVC stage depends on exactly the source its command imports (docs/architecture.md#stage-dependencies).

A stage's command is a ``segbench`` subcommand; its source is what the subcommand's handler in ``cli.py`` imports, and
``segbench.config.params`` when it reads params.yaml, closed over the import graph (tests/support/import_graph.py): the modules that
loading them loads, defaults of every config section included. A dependency fewer and a change that alters the
stage's outputs leaves `dvc repro` with nothing to do; one more and an unrelated edit reruns it (a compare-only edit
rerunning the score matrix). ``cli.py`` itself is no dependency: a handler passes the parsed arguments to one stage
function, and the arguments are the stage's ``cmd``, which DVC tracks.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

import import_graph
from projects import SMALL
from repo_paths import ROOT
from segbench.cli import build_parser

PIPELINES = ("dvc.yaml", "calibration/dvc.yaml", "interactive/dvc.yaml", "realmodel/dvc.yaml")
CLI = import_graph.SRC / "segbench" / "cli.py"
#: what a module runs as a program rather than imports: the model adapters' scripts (``models.runner.ADAPTERS_DIR``)
#: and the simulated models (``python -m segbench.models.simulated``, conf/model/sim_*.yaml), with what that loads
RUNS = {"segbench.models.runner": ("src/segbench/models/entrypoints", "segbench.models.simulated")}
#: folders DVC does not hash (.dvcignore)
UNHASHED = ("__pycache__",)


def _stages() -> list[tuple[str, str, list[str]]]:
    """(pipeline:stage, command, the deps under src/) of every stage, its deps relative to the project root."""
    found = []
    for pipeline in PIPELINES:
        for name, stage in yaml.safe_load((ROOT / pipeline).read_text(encoding="utf-8"))["stages"].items():
            body = stage.get("do", stage)
            wdir = (ROOT / pipeline).parent / body.get("wdir", ".")
            deps = [Path(os.path.normpath(wdir / dep)).relative_to(ROOT).as_posix() for dep in body.get("deps", []) if "${" not in dep]
            found.append((f"{pipeline}:{name}", body["cmd"], sorted(d for d in deps if d.startswith("src/"))))
    return found


def _handler(command: str) -> ast.FunctionDef:
    """The ``cli.py`` function that runs ``command`` (its ``${...}`` values stood in for)."""
    argv = shlex.split(re.sub(r"\$\{[^}]*\}", "x", command))
    assert argv[0] == "segbench", f"{command}: a stage's command is a segbench subcommand"
    name = build_parser().parse_args(argv[1:]).func.__name__
    tree = ast.parse(CLI.read_text(encoding="utf-8"))
    return next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)


def command_modules(command: str) -> set[str]:
    """The modules ``command`` loads: its handler's imports and, when it reads params.yaml (``_params``), config's."""
    handler = _handler(command)
    starts = import_graph.imported_modules(import_graph.import_nodes(handler), "segbench.cli")
    if any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_params" for node in ast.walk(handler)):
        starts.add("segbench.config.params")
    loaded = import_graph.closure(starts)
    programs = {run for module, runs in RUNS.items() if module in loaded for run in runs if run.startswith("segbench.")}
    return loaded | import_graph.closure(programs)


def source_dependencies(modules: set[str]) -> list[str]:
    """The files of ``modules`` and what they run, as DVC deps: a folder where every file DVC hashes under it is one,
    else the files."""
    files = {import_graph.module_files()[m].relative_to(ROOT).as_posix() for m in modules}
    files |= {run for module, runs in RUNS.items() if module in modules for run in runs if not run.startswith("segbench.")}
    covered = set(files)
    package = import_graph.SRC / "segbench"
    for folder in sorted((p for p in package.rglob("*") if p.is_dir() and p.name not in UNHASHED), key=lambda p: -len(p.parts)):
        members = [p for p in folder.iterdir() if p.name not in UNHASHED]
        if all(p.relative_to(ROOT).as_posix() in covered for p in members):
            covered.add(folder.relative_to(ROOT).as_posix())
    listed = {f for f in covered if Path(f).parent.as_posix() not in covered}
    return sorted(listed)


@pytest.mark.parametrize(("stage", "command", "deps"), _stages(), ids=[s[0] for s in _stages()])
def test_stage_depends_on_exactly_its_commands_source(stage: str, command: str, deps: list[str]) -> None:
    """dvc.yaml lists as a stage's source dependencies exactly the files its command loads (the failure prints them)."""
    expected = source_dependencies(command_modules(command))
    assert deps == expected, (
        f"{stage} ({command}): source deps differ from what the command imports\n  missing: "
        f"{sorted(set(expected) - set(deps))}\n  extra: {sorted(set(deps) - set(expected))}\n"
        "  exact list:\n" + "\n".join(f"      - {d}" for d in expected)
    )


def test_scoring_does_not_load_the_statistics() -> None:
    """The split the exact dependencies buy: the score stage loads no statistics (a stats edit reruns compare, never the
    score matrix) and the compare stage no model runner (a model edit reruns predict and what follows, not compare's
    code)."""
    score = command_modules("segbench score --dataset x --model x")
    compare = command_modules("segbench compare --dataset x")
    assert not {m for m in score if m.startswith(("segbench.stats", "segbench.report"))}
    assert "segbench.models.runner" not in compare and "segbench.scoring.engine" in score


def _stale(proj: Path) -> set[str]:
    status = subprocess.run(["dvc", "status", "--json"], cwd=proj, capture_output=True, text=True, check=True)
    return set(json.loads(status.stdout or "{}"))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: expected one {old!r}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _nsd_default(src: Path) -> tuple[Path, str]:
    """The file and line holding the NSD tolerance a region gets when params.yaml names none (2 mm)."""
    found = [
        (path, line)
        for path in sorted(src.rglob("*.py"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(r"nsd_tolerance_mm\b.*\b2\.0\b", line)
    ]
    assert len(found) == 1, f"the NSD default: expected one line setting 2.0, found {found}"
    return found[0]


def test_a_config_default_marks_its_stages_stale(projects) -> None:
    """A default of a config section that changes scores (the NSD tolerance where params.yaml names none) makes every
    score stage stale, and a statistics-only edit the compare stages but no score stage (`dvc status`)."""
    proj = projects.copy(SMALL)
    assert _stale(proj) == set()
    path, line = _nsd_default(proj / "src" / "segbench")
    _edit(path, line, line.replace("2.0", "3.0"))
    stale = _stale(proj)
    scores = {f"score@kits23-{m}" for m in ("sim_dilate_1mm", "sim_missed_lesion")}
    assert scores <= stale, f"{path}: the NSD default changed, yet dvc status lists {sorted(stale)}"
    _edit(path, line.replace("2.0", "3.0"), line)
    assert _stale(proj) == set()
    ranking = proj / "src" / "segbench" / "stats" / "ranking.py"
    ranking.write_text(ranking.read_text(encoding="utf-8") + "# an edit\n", encoding="utf-8")
    stale = _stale(proj)
    assert "compare@kits23" in stale and not stale & scores, sorted(stale)
