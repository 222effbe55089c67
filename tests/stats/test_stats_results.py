"""The types of ``segbench.stats.results`` describe every key the results carry: each results file of the checkout's
default run (results/, interactive/results/; where ``dvc repro`` has written them) and a fresh analysis of a published
set walk clean against ``ResultsDocument`` / ``Analysis``, so a key added to the output without its type fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repo_paths import KITS_META, PUBLISHED, ROOT
from segbench.published.segauge import read_segauge_results
from segbench.stats import StatsSettings, analyze
from segbench.stats import results as types_
from segbench.stats.results_file import type_problems

RESULTS = sorted([*(ROOT / "results").glob("*.json"), *(ROOT / "interactive" / "results").glob("*.json")])


@pytest.mark.parametrize("path", RESULTS, ids=[p.relative_to(ROOT).as_posix() for p in RESULTS])
def test_every_key_of_a_results_file_is_declared(path: Path) -> None:
    problems = type_problems(json.loads(path.read_text(encoding="utf-8")), types_.ResultsDocument)
    assert not problems, f"{path}: {len(problems)} key(s) unlike stats/results.py; first: {problems[:5]}"


def test_every_key_of_a_fresh_analysis_is_declared() -> None:
    """A published set's analysis (clustered by nothing, three models), through JSON as results files store it."""
    rows = read_segauge_results(PUBLISHED / "segauge_benchmark" / "kits23_modal.json", KITS_META)
    analysis = analyze(rows, metrics={"dice": True, "nsd": True, "hd95": False, "assd": False}, settings=StatsSettings())
    assert type_problems(json.loads(json.dumps(analysis)), types_.Analysis) == []


def test_an_undeclared_key_and_a_missing_one_are_named() -> None:
    cell = {"mean": 1.0, "ci_low": None, "ci_high": 2, "extra": 3}
    assert type_problems(cell, types_.GroupEstimate) == ["/extra: key not declared in GroupEstimate"]
    assert type_problems({"mean": 1.0, "ci_low": None}, types_.GroupEstimate) == ["/ci_high: required key of GroupEstimate missing"]
    assert type_problems({"n": True, "tested": True, "models": {}}, types_.Group) == ["/n: int expected, got True"]
