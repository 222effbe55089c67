"""segauge-benchmark's results JSON, read and checked: its per-case scores (``read_segauge_results``: the long rows
table of ``segbench.stats.analyze``) and the analysis it publishes beside them (``read_segauge_analysis``), which the
compare stage sets beside segbench's own.

Malformed input raises ValueError naming the file and the field (e.g. ``models[0].per_organ.kidney.per_case[3]``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from segbench.base.bands import AGE_BAND, age_band
from segbench.base.io import UNREADABLE
from segbench.base.json_fields import field, integer, number, probability

SEGAUGE_METRICS = ("dice", "hd95", "nsd", "assd")

log = logging.getLogger(__name__)


def read_segauge_results(path: Path, metadata: Path | None = None) -> pd.DataFrame:
    """segauge-benchmark results JSON (models[].per_organ.<organ>.per_case[]) -> rows.

    Metrics dice, hd95, nsd, assd; ``reference_present`` is True (the file scores present organs only).
    Every row also carries the source's ``nsd_tolerance_mm`` (config.nsd_tolerance) and its
    ``hd95_definition`` ("as published by the source", with the source's segauge version): these scores
    were not computed by segbench's engine. An organ the source flags ``suspect`` (its spot check failed)
    is left out, as the source leaves it out of its ranking, and logged.
    ``rows.attrs``: ``dataset`` (the file's dataset name) and ``models`` {model: {"version", "licence",
    "contaminated_on": [dataset, ...]}}, so callers can build model entries and the ``contaminated`` mapping.
    ``metadata``: optional KiTS-style clinical JSON (list of {case_id, ...}); its scalar fields become
    meta.* columns, plus meta.age_band from ``age_at_nephrectomy`` (or ``age``).
    """
    path = Path(path)
    doc = _read_segauge_doc(path)
    models = field(doc, "models", list, f"{path}:")
    config = field(doc, "config", dict, f"{path}:")
    tolerance = number(config, "nsd_tolerance", f"{path}: config")
    dataset = field(doc, "dataset", dict, f"{path}:").get("name")
    hd95 = f"as published by the source (segauge {doc.get('segauge_version') or 'version not given'})"
    records, claims = [], {}
    for i, model in enumerate(models):
        where = f"{path}: models[{i}]"
        if not isinstance(model, dict) or not isinstance(model.get("name"), str) or not isinstance(model.get("per_organ"), dict):
            raise ValueError(f"{where}: needs 'name' (str) and 'per_organ' (object)")
        name = model["name"]
        trained = model.get("contaminated_on") or []
        if not isinstance(trained, list) or not all(isinstance(d, str) for d in trained):
            raise ValueError(f"{where}.contaminated_on: expected a list of dataset names, got {trained!r}")
        for key in ("version", "license"):
            if not isinstance(model.get(key, ""), str):
                raise ValueError(f"{where}.{key}: expected a string, got {model[key]!r}")
        claims[name] = {"version": model.get("version", ""), "licence": model.get("license", ""), "contaminated_on": list(trained)}
        for organ, block in model["per_organ"].items():
            if not isinstance(block, dict) or not isinstance(block.get("per_case", []), list):
                raise ValueError(f"{where}.per_organ.{organ}: needs 'per_case' (list)")
            if block.get("suspect", False):
                log.warning("%s: %s %s is flagged suspect by the source (failed its spot check): left out", path, name, organ)
                continue
            for j, case in enumerate(block.get("per_case", [])):
                cell = f"{where} ({name}).per_organ.{organ}.per_case[{j}]"
                if not isinstance(case, dict) or not isinstance(case.get("case_id"), str):
                    raise ValueError(f"{cell}: needs a 'case_id' string")
                record = {"model": name, "case_id": case["case_id"], "structure": organ, "reference_present": True}
                for metric in SEGAUGE_METRICS:
                    value = case.get(metric)
                    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                        raise ValueError(f"{cell} (case {case['case_id']!r}), column {metric!r}: {value!r} is not a finite number")
                    record[metric] = float(value)
                records.append(record | {"nsd_tolerance_mm": tolerance, "hd95_definition": hd95})
    rows = pd.DataFrame.from_records(
        records, columns=["model", "case_id", "structure", "reference_present", *SEGAUGE_METRICS, "nsd_tolerance_mm", "hd95_definition"]
    )
    dup = rows.duplicated(["model", "case_id", "structure"])
    if dup.any():
        r = rows[dup].iloc[0]
        raise ValueError(f"{path}: duplicate row model {r['model']!r}, case {r['case_id']!r}, structure {r['structure']!r}")
    if metadata is not None:
        rows = rows.merge(_read_clinical_json(Path(metadata)), how="left", left_on="case_id", right_index=True, validate="many_to_one")
    rows.attrs = {"models": claims, "dataset": dataset}
    return rows


CORRECTIONS = ("bonferroni", "none")


def read_segauge_analysis(path: Path) -> dict[str, Any] | None:
    """The analysis a segauge-benchmark results file publishes beside its scores, validated; None if it has none.

    The source ranks by a paired case bootstrap (P(best), mean rank, rank interval) and calls a pair
    "distinguishable" when the paired-bootstrap CI of the mean difference, at the family-wise level
    ``adjusted_confidence`` (Bonferroni over the pairs of one organ and metric, 'none' for a single
    pair), excludes 0. Returned layout::

        {"protocol": {"confidence", "n_resamples", "seed", "nsd_tolerance_mm", "segauge_version"},
         "structures": {organ: {metric: {"n_cases", "n_comparisons", "correction", "ci_level", "n_resamples",
             "models": {model: {"mean", "p_best", "mean_rank", "rank_interval": [lo, hi]}},
             "pairwise": [{"a", "b", "delta", "ci_low", "ci_high", "favored", "distinguishable"}]}}}}

    Malformed input raises ValueError naming the file and the field (e.g. ``analysis.kidney.dice.pairwise[1].favored``).
    """
    path = Path(path)
    doc = _read_segauge_doc(path)
    if "analysis" not in doc:
        return None
    config = field(doc, "config", dict, f"{path}:")
    confidence = number(config, "confidence", f"{path}: config")
    protocol = {
        "confidence": confidence,
        "n_resamples": integer(config, "n_resamples", f"{path}: config"),
        "seed": integer(config, "seed", f"{path}: config"),
        "nsd_tolerance_mm": number(config, "nsd_tolerance", f"{path}: config"),
        "segauge_version": str(doc.get("segauge_version") or ""),
    }
    structures: dict[str, dict[str, Any]] = {}
    for organ, metrics in field(doc, "analysis", dict, f"{path}:").items():
        if not isinstance(metrics, dict):
            raise ValueError(f"{path}: analysis.{organ}: expected an object of metrics, got {metrics!r}")
        structures[organ] = {metric: _segauge_cell(block, f"{path}: analysis.{organ}.{metric}", confidence) for metric, block in metrics.items()}
    return {"protocol": protocol, "structures": structures}


def _segauge_cell(block: object, where: str, confidence: float) -> dict[str, Any]:
    """One organ x metric of a segauge analysis: ranking stats and pairwise verdicts, checked for consistency."""
    if not isinstance(block, dict):
        raise ValueError(f"{where}: expected an object, got {block!r}")
    n_comparisons = integer(block, "n_comparisons", where)
    correction = field(block, "correction", str, where)
    if correction not in CORRECTIONS or (correction == "none" and n_comparisons > 1):
        raise ValueError(f"{where}.correction: {correction!r} is not one of {CORRECTIONS} ('none' only for a single pair)")
    level = number(block, "adjusted_confidence", where)
    expected = 1.0 - (1.0 - confidence) / max(n_comparisons, 1) if correction == "bonferroni" else confidence
    if abs(level - expected) > 1e-12:
        raise ValueError(f"{where}.adjusted_confidence: {level!r} is not the {correction} level {expected!r} for {n_comparisons} pairs")
    ranking = field(block, "ranking", dict, where)
    models = {}
    for k, entry in enumerate(field(ranking, "stats", list, f"{where}.ranking")):
        at = f"{where}.ranking.stats[{k}]"
        name = field(entry, "name", str, at)
        if name in models:
            raise ValueError(f"{at}.name: duplicate model {name!r}")
        models[name] = {
            "mean": number(entry, "score", at),
            "p_best": probability(entry, "p_best", at),
            "mean_rank": number(entry, "mean_rank", at),
            "rank_interval": [number(entry, "rank_ci_low", at), number(entry, "rank_ci_high", at)],
        }
    pairwise = [_segauge_pair(entry, f"{where}.pairwise[{k}]", models) for k, entry in enumerate(field(block, "pairwise", list, where))]
    n_pairs = len(models) * (len(models) - 1) // 2
    if n_comparisons != n_pairs or len(pairwise) != n_pairs:
        raise ValueError(f"{where}.pairwise: {len(pairwise)} pairs and n_comparisons {n_comparisons} for {len(models)} ranked models ({n_pairs} pairs)")
    return {
        "n_cases": integer(block, "n_cases", where),
        "n_comparisons": n_comparisons,
        "correction": correction,
        "ci_level": level,
        "n_resamples": integer(ranking, "n_resamples", f"{where}.ranking"),
        "models": models,
        "pairwise": pairwise,
    }


def _segauge_pair(entry: object, where: str, models: dict[str, Any]) -> dict[str, Any]:
    """One published pairwise verdict: both models ranked, 'favored' set exactly when distinguishable."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected an object, got {entry!r}")
    a, b = field(entry, "a", str, where), field(entry, "b", str, where)
    for key, name in (("a", a), ("b", b)):
        if name not in models:
            raise ValueError(f"{where}.{key}: model {name!r} is not in the ranking {sorted(models)}")
    distinguishable = field(entry, "distinguishable", bool, where)
    favored = entry.get("favored")
    if (favored not in (a, b)) if distinguishable else (favored is not None):
        raise ValueError(f"{where}.favored: {favored!r} does not fit distinguishable={distinguishable} for {a!r} vs {b!r}")
    low, high = number(entry, "ci_low", where), number(entry, "ci_high", where)
    if distinguishable != (low > 0 or high < 0):
        raise ValueError(f"{where}.distinguishable: {distinguishable} but the CI [{low!r}, {high!r}] {'includes' if distinguishable else 'excludes'} 0")
    return {"a": a, "b": b, "delta": number(entry, "delta", where), "ci_low": low, "ci_high": high, "favored": favored, "distinguishable": distinguishable}


def _read_segauge_doc(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except UNREADABLE as exc:
        raise ValueError(f"{path}: not a segauge results file ({exc!r})") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a segauge results file (top level is {type(doc).__name__}, not an object)")
    return doc


def _read_clinical_json(path: Path) -> pd.DataFrame:
    """KiTS-style clinical metadata (list of per-case objects) -> meta.* columns indexed by case id."""
    try:
        cases = json.loads(path.read_text(encoding="utf-8"))
    except UNREADABLE as exc:
        raise ValueError(f"{path}: cannot read ({exc!r})") from exc
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "case_id" in c for c in cases):
        raise ValueError(f"{path}: expected a list of objects with 'case_id'")
    table = pd.DataFrame([{k: v for k, v in c.items() if not isinstance(v, (dict, list))} for c in cases])
    dup = table["case_id"].duplicated()
    if dup.any():
        raise ValueError(f"{path}: entry {int(np.flatnonzero(dup)[0])}, column 'case_id': duplicate {table['case_id'][dup].iloc[0]!r}")
    age_field = next((f for f in ("age_at_nephrectomy", "age") if f in table.columns), None)
    if age_field is not None:
        table[AGE_BAND] = age_band(table[age_field])
    table = table.set_index("case_id")
    table.columns = [f"meta.{c}" for c in table.columns]
    return table
