"""The static gates CI runs before the tests (.ci/gates: ruff check, ruff format --check, mypy) each fail on a file with
one error of their kind and name that file, and pass on the same file unbroken: each test copies pyproject.toml (the
gates' whole configuration) beside a two-module package under src/segbench/ and runs the very script .ci/run runs, with
the real tools (a few seconds: mypy checks the two modules only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import ROOT

GATES = ROOT / ".ci" / "gates"

INIT = '"""A package small enough for the gates to check in seconds."""\n'
TOY = '''"""One typed, formatted, lint-clean module."""

from __future__ import annotations


def mean(values: list[float]) -> float:
    """The arithmetic mean of a non-empty list."""
    return sum(values) / len(values)


def label(values: list[float]) -> str:
    return f"mean {mean(values):.2f} over {len(values)}"
'''

# one error of each kind, each a single edit of TOY that the other two gates accept
BROKEN = {
    "ruff check": ("from __future__ import annotations\n", "from __future__ import annotations\n\nimport os\n"),  # F401
    "ruff format": ("return sum(values) / len(values)", "return sum( values )/len(values)"),
    "mypy": ('return f"mean {mean(values):.2f} over {len(values)}"', "return mean(values)"),  # a float where str is due
}


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the module's runs: typeshed's builtins analysed once, not per copy."""
    return tmp_path_factory.mktemp("mypy_cache")


def run_gates(project: Path, mypy_cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "MYPY_CACHE_DIR": str(mypy_cache)}
    return subprocess.run([str(GATES), str(project)], capture_output=True, text=True, env=env, timeout=300)


def toy_project(tmp_path: Path, toy: str) -> Path:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    package = tmp_path / "src" / "segbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(INIT, encoding="utf-8")
    (package / "toy.py").write_text(toy, encoding="utf-8")
    return tmp_path


def test_the_unbroken_package_passes_every_gate(tmp_path: Path, mypy_cache: Path) -> None:
    result = run_gates(toy_project(tmp_path, TOY), mypy_cache)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gates passed: ruff check, ruff format, mypy" in result.stderr


@pytest.mark.parametrize("gate", list(BROKEN))
def test_each_gate_fails_on_its_error_and_names_the_file(tmp_path: Path, mypy_cache: Path, gate: str) -> None:
    old, new = BROKEN[gate]
    assert TOY.count(old) == 1
    result = run_gates(toy_project(tmp_path, TOY.replace(old, new)), mypy_cache)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert output.rstrip().splitlines()[-1] == f"gates failed: {gate}", output  # this gate alone: the other two passed
    assert "src/segbench/toy.py" in output, output


def test_ci_runs_the_gates_before_the_tests() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ".ci/gates" in ci
    assert ci.index(".ci/gates") < ci.index("python -m pytest -q --durations=25")
