"""A source's own published analysis beside segbench's: its verdicts and segbench's under its correction.

Some published score files also publish their source's statistics (e.g. a segauge-benchmark results
file: P(best), rank intervals and a "distinguishable" verdict per pair from Bonferroni-adjusted paired
bootstrap CIs). ``beside_source`` adds to that published analysis, per structure and metric, segbench's
pairwise CIs recomputed under the source's correction and confidence from the same per-case values, so
that the reader can check the source's verdicts and see where the Wilcoxon-Holm map (stored in the
analysis) separates pairs the source's CIs do not, or the other way round.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, cast

from .reanalysis import differences, recompute
from .results import SourceAnalysis

# A source's correction -> segbench's; 'none' is published only for a single pair, where Bonferroni is the same.
CORRECTIONS = {"bonferroni": "bonferroni", "none": "bonferroni"}
#: the source's own rule (segauge-benchmark: percentile paired-bootstrap CIs, separable when the adjusted CI excludes
#: 0), whatever segbench's defaults are, so that its verdicts are checked by the rule that made them
SOURCE_RULE: dict[str, Any] = {"ci_method": "percentile", "pairwise_test": "bootstrap_ci"}


def beside_source(analysis: Mapping[str, Any], published: Mapping[str, Any]) -> SourceAnalysis:
    """``published`` (``segbench.published.segauge.read_segauge_analysis`` layout) with a "segbench" block per cell.

    The block: {"correction", "alpha", "n_resamples", "ci_method", "pairwise_test", "pairwise": [segbench's pairwise
    entries]}, the entries as in the analysis (a ranked above b, CI level per pair) but under the source's correction,
    alpha = 1 - its confidence and its rule (``SOURCE_RULE``), on segbench's resamples (its B and seed). A structure or metric the
    source analysed and segbench's analysis lacks is an error naming both.
    """
    alpha = round(1.0 - float(published["protocol"]["confidence"]), 12)  # 0.05, not 0.050000000000000044
    corrections = {CORRECTIONS[c["correction"]] for cells in published["structures"].values() for c in cells.values()}
    again: dict[str, Mapping[str, Any]] = {c: recompute(analysis, multiple_comparison=c, alpha=alpha, **SOURCE_RULE) for c in sorted(corrections)}
    out = copy.deepcopy(dict(published))
    for structure, cells in out["structures"].items():
        for metric, cell in cells.items():
            ours = again[CORRECTIONS[cell["correction"]]]["structures"].get(structure, {}).get("metrics", {}).get(metric)
            if ours is None:
                raise ValueError(f"the source analyses {structure}/{metric}; segbench's analysis has no such structure and metric")
            settings = again[CORRECTIONS[cell["correction"]]]["settings"]
            cell["segbench"] = {
                "correction": settings["multiple_comparison"],
                "alpha": settings["alpha"],
                "n_resamples": settings["n_resamples"],
                "ci_method": settings["ci_method"],
                "pairwise_test": settings["pairwise_test"],
                "pairwise": ours["pairwise"],
            }
    return cast(SourceAnalysis, out)


def reanalyze_source(analysis: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    """Differences between a stored ``beside_source`` block and its recomputation from the analysis."""
    published = copy.deepcopy(dict(stored))
    for cells in published["structures"].values():
        for cell in cells.values():
            cell.pop("segbench", None)
    recomputed = beside_source(analysis, published)
    return differences(dict(stored), recomputed, "/source_analysis")
