"""The range invariant of the models' intervals (docs/methodology.md#53-estimates-and-cis, "range rule").

A model's CI is of a mean of per-case values, so it must lie inside the metric's range and inside the range of the
values it averages. ``resampling.skew_t_bounds`` holds it there by the range rule, percentile and BCa intervals by
construction; this module checks the stored results, so that ``segbench reanalyze`` fails on an interval that does
not (a results file from before the rule, or a method that breaks it).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

#: every higher-is-better metric segbench scores or imports is a share in [0, 1] (Dice, NSD, IoU, recall, RQ, SQ,
#: PQ, detection rates) but for the interactive protocol's areas under a score-per-step curve (DSC_AUC, NSD_AUC:
#: 0 to one unit per step, so their upper end depends on the steps); every lower-is-better one a distance in mm
SHARE = (0.0, 1.0)
AREA = (0.0, math.inf)
DISTANCE = (0.0, math.inf)


def metric_range(metric: str, higher_is_better: bool) -> tuple[float, float]:
    """The values a metric can take: [0, 1] for a higher-is-better score, [0, inf) for an area under a curve
    ('..._AUC') and for a distance."""
    if not higher_is_better:
        return DISTANCE
    return AREA if metric.upper().endswith("_AUC") else SHARE


def range_violations(results: Mapping) -> list[str]:
    """Every model CI in an analysis results dict that leaves its metric's range or the range of the per-case values
    it averages, one line each naming the structure, metric, model and bounds. Empty when every interval holds."""
    out = []
    for where, metric, values, low, high, higher in _intervals(results):
        lowest, highest = metric_range(metric, higher)
        if low is None or high is None or not values:
            continue
        smallest, largest = min(values), max(values)
        if not (lowest <= low and high <= highest):
            out.append(f"{where}: CI [{low!r}, {high!r}] leaves the metric's range [{lowest}, {highest}]")
        if not (smallest <= low and high <= largest):
            out.append(f"{where}: CI [{low!r}, {high!r}] leaves its per-case values' range [{smallest!r}, {largest!r}]")
    return out


def _intervals(results: Mapping) -> Iterator[tuple[str, str, Sequence[float], float | None, float | None, bool]]:
    """(where, metric, per-case values, ci_low, ci_high, higher_is_better) of every model's CI over the shared cases and over
    all its reported cases."""
    for structure, s in results["structures"].items():
        for metric, cell in s["metrics"].items():
            higher = bool(cell["higher_is_better"])
            for model, entry in cell["models"].items():
                shared = [v for v in cell["per_case"][model] if v is not None]
                where = f"{structure}/{metric}/{model}"
                yield where, metric, shared, entry["ci_low"], entry["ci_high"], higher
                reported = entry.get("all_reported")
                if reported is not None:
                    extra = [v for v in cell["per_case_unshared"].get(model, {}).values() if v is not None]
                    yield f"{where} (all reported cases)", metric, shared + extra, reported["ci_low"], reported["ci_high"], higher
