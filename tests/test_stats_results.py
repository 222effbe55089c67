"""The types of ``segbench.stats.results`` describe every key the results carry: each results file of the checkout's
default run (results/, interactive/results/; where ``dvc repro`` has written them) and a fresh analysis of a published
set walk clean against ``ResultsDocument`` / ``Analysis``, so a key added to the output without its type fails here."""

from __future__ import annotations

import functools
import json
import types
import typing
from pathlib import Path

import pytest

from conftest import KITS_META, PUBLISHED, ROOT
from segbench.published import read_segauge_results
from segbench.stats import StatsSettings, analyze
from segbench.stats import results as types_

RESULTS = sorted([*(ROOT / "results").glob("*.json"), *(ROOT / "interactive" / "results").glob("*.json")])


@functools.cache
def _hints(td: type) -> dict[str, object]:
    return typing.get_type_hints(td)


def mismatches(value: object, tp: object, path: str = "") -> list[str]:
    """Where ``value`` (parsed JSON) departs from the type ``tp``: undeclared or missing keys, wrong leaf types."""
    if tp is typing.Any:
        return []
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path or '/'}: {tp.__name__} expected, got {type(value).__name__}"]
        hints = _hints(tp)
        out = [f"{path}/{k}: key not declared in {tp.__name__}" for k in sorted(set(value) - set(hints))]
        out += [f"{path}/{k}: required key of {tp.__name__} missing" for k in sorted(tp.__required_keys__ - set(value))]
        for key in sorted(set(value) & set(hints)):
            out += mismatches(value[key], hints[key], f"{path}/{key}")
        return out
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        arms = [a for a in args if a is not type(None)]
        tried = [mismatches(value, a, path) for a in arms]
        return [] if any(not t for t in tried) else min(tried, key=len)
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path or '/'}: dict expected, got {type(value).__name__}"]
        return [m for k, v in value.items() for m in mismatches(v, args[1], f"{path}/{k}")]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path or '/'}: list expected, got {type(value).__name__}"]
        return [m for i, v in enumerate(value) for m in mismatches(v, args[0], f"{path}[{i}]")]
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)  # a whole number may be an int
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)  # str, bool
    return [] if ok else [f"{path or '/'}: {getattr(tp, '__name__', tp)} expected, got {value!r}"]


@pytest.mark.parametrize("path", RESULTS, ids=[p.relative_to(ROOT).as_posix() for p in RESULTS])
def test_every_key_of_a_results_file_is_declared(path: Path) -> None:
    problems = mismatches(json.loads(path.read_text(encoding="utf-8")), types_.ResultsDocument)
    assert not problems, f"{path}: {len(problems)} key(s) unlike stats/results.py; first: {problems[:5]}"


def test_every_key_of_a_fresh_analysis_is_declared() -> None:
    """A published set's analysis (clustered by nothing, three models), through JSON as results files store it."""
    rows = read_segauge_results(PUBLISHED / "segauge_benchmark" / "kits23_modal.json", KITS_META)
    analysis = analyze(rows, metrics={"dice": True, "nsd": True, "hd95": False, "assd": False}, settings=StatsSettings())
    assert mismatches(json.loads(json.dumps(analysis)), types_.Analysis) == []


def test_an_undeclared_key_and_a_missing_one_are_named() -> None:
    cell = {"mean": 1.0, "ci_low": None, "ci_high": 2, "extra": 3}
    assert mismatches(cell, types_.GroupEstimate) == ["/extra: key not declared in GroupEstimate"]
    assert mismatches({"mean": 1.0, "ci_low": None}, types_.GroupEstimate) == ["/ci_high: required key of GroupEstimate missing"]
    assert mismatches({"n": True, "tested": True, "models": {}}, types_.Group) == ["/n: int expected, got True"]
