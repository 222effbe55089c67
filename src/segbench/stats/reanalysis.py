"""Every statistic of a results document re-derived from the per-case values it stores: ``reanalyze`` (the differences) and ``recompute``.

``segbench reanalyze`` runs :func:`reanalyze` on every results file; an empty list says the stored numbers are exactly
what the stored rows and settings give.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from segbench.base.io import json_ready

from .analysis import CiLevels, analyze_structures
from .inputs import StructureMatrices
from .ranges import range_violations
from .results import Analysis
from .settings import StatsSettings
from .verdicts import incoherent_pairs


def reanalyze(results: Mapping) -> list[str]:
    """Recompute every statistic from the per-case values stored in ``results``; list the differences.

    Empty list = the stored statistics are exactly what the stored rows and settings give, every stored pair is
    separable exactly when its interval excludes 0 (:func:`~segbench.stats.verdicts.incoherent_pairs`), and every
    model's CI lies inside its metric's range and the range of its per-case values (``ranges.range_violations``). The
    counts of absent references and of cases identical to the reference come from rows the results do not store: they
    are carried over.
    """
    return differences(json_ready(dict(results)), recompute(results), "") + incoherent_pairs(results) + range_violations(results)


def recompute(results: Mapping, ci_levels: CiLevels | None = None, **changes: object) -> Analysis:
    """The analysis re-derived from the per-case values ``results`` stores, with ``changes`` to its settings.

    E.g. ``recompute(results, multiple_comparison="bonferroni")``: the same resamples (same seed and
    case sets) under another family-wise correction, to set beside a source that used it. The models' CIs keep
    their stored levels (``ci_confidence``) unless ``changes`` alter the CI rule (confidence, ci_method, ci_level);
    ``ci_levels`` (as for :func:`analyze`) replaces them, e.g. the levels of a rerun audit.
    """
    try:
        settings = StatsSettings(**results["settings"])
        models = sorted(results["models"])
        contaminated = {m: bool(results["models"][m]["contaminated"]) for m in models}
        identical = {m: results["models"][m]["identical_to_reference"] for m in models if "identical_to_reference" in results["models"][m]}
        subgroup_fields = list(results["subgroup_fields"])
        clusters = results.get("clusters")
        stored_levels = {
            (name, metric): float(cell.get("ci_confidence", results["settings"]["confidence"]))
            for name, s in results["structures"].items()
            for metric, cell in s["metrics"].items()
        }
        structures: dict[str, StructureMatrices] = {}
        metrics: dict[str, bool] = {}
        for name, s in results["structures"].items():
            values, unshared = {}, {}
            present = sorted(next(iter(s["metrics"].values()))["per_case"]) if s["metrics"] else []
            for metric, cell in sorted(s["metrics"].items()):
                metrics[metric] = bool(cell["higher_is_better"])
                unshared[metric] = {m: {c: float(v) for c, v in cases.items()} for m, cases in cell["per_case_unshared"].items()}
                values[metric] = np.array([cell["per_case"][m] for m in present], dtype=np.float64).reshape(len(present), len(s["case_ids"]))
            structures[name] = StructureMatrices(
                case_ids=list(s["case_ids"]),
                n_absent=int(s["n_absent"]),
                n_unshared=int(s["n_unshared"]),
                models=present,
                values=values,
                flags=s["flags"],
                case_meta=s["case_meta"],
                unshared=unshared,
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a segbench results dict: {exc!r}") from exc
    settings = replace(settings, **changes)  # type: ignore[arg-type]  # StatsSettings validates the changed values
    # the stored levels hold while the CI rule does; another confidence, method or level rule is recomputed at its nominal
    # level (the audit's calibrated levels are for the stored rule)
    keep = not {"confidence", "ci_method", "ci_level"} & set(changes)
    levels = ci_levels or ((lambda structure, metric, n: stored_levels[structure, metric]) if keep else None)
    return analyze_structures(structures, models, metrics, settings, subgroup_fields, contaminated, clusters, identical, levels)


def differences(stored: object, new: object, path: str) -> list[str]:
    """Human-readable differences between two JSON trees, in document order (sorted keys)."""
    if isinstance(stored, dict) and isinstance(new, dict):
        out = [f"{path}/{k}: missing in recomputed results" for k in sorted(set(stored) - set(new))]
        out += [f"{path}/{k}: not in stored results" for k in sorted(set(new) - set(stored))]
        for key in sorted(set(stored) & set(new)):
            out += differences(stored[key], new[key], f"{path}/{key}")
        return out
    if isinstance(stored, list) and isinstance(new, list) and len(stored) == len(new):
        return [d for i, (x, y) in enumerate(zip(stored, new)) for d in differences(x, y, f"{path}[{i}]")]
    if type(stored) is not type(new) or stored != new:
        return [f"{path or '/'}: stored {stored!r}, recomputed {new!r}"]
    return []
