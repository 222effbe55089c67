"""One verdict per leaderboard cell (docs/methodology.md#57-verdicts), written once here and shown verbatim by every view.

A cell's two kinds of evidence can disagree: the Holm-adjusted test of the *mean* difference (``pairwise``, 5.5:
by default the sign-flip and studentized bootstrap tests together, or the bootstrap CI) and the Wilcoxon-Holm signed-rank map of the *per-case* differences
(``significance``, 5.6). A few failed cases with huge distances can make the mean favour one model
while most cases favour the other. Each pair of ranked models (``a`` ranked above ``b`` by mean) gets
one code:

- ``separable``: the test of the mean difference separates the pair and Wilcoxon-Holm finds ``a`` better;
- ``aggregation_disagrees``: one test separates the pair and the per-case evidence points the other way
  (Wilcoxon-Holm finds ``b`` better, or the mean separates ``a`` while the signed ranks lean to ``b``);
- ``borderline``: exactly one test separates the pair, both leaning to ``a``;
- ``not_separable``: neither test separates the pair.

Co-winners follow the leaderboard's own ranking (aggregate-then-rank by mean): #1 and every ranked
model whose pair with #1 is not ``separable``; each excluded model says which model excludes it and why.
Every p-value is printed with its direction, and intervals are printed with as many decimals as it
takes for one that excludes 0 not to print as touching it (``segbench.base.formats.format_estimate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from segbench.base.formats import format_estimate, format_level, format_p, number

#: the flat views' number for each code (MLflow metrics, DVC metrics): ordered from "a is better" down
CODE_NUMBER: dict[str, float] = {"separable": 1.0, "borderline": 0.5, "not_separable": 0.0, "aggregation_disagrees": -1.0}
#: the words every view puts before a verdict's sentence, readable without colour
CODE_WORDS: dict[str, str] = {
    "separable": "✔ separable",
    "borderline": "≈ borderline",
    "not_separable": "✘ not separable",
    "aggregation_disagrees": "⇄ aggregation disagrees",
    "single_model": "only one ranked model",
}
SCHEME = "mean"  # the leaderboard's ranking scheme, on which co-winners are defined


def _pair_counts(cell: Mapping[str, Any], a: str, b: str, pairwise_complete: bool) -> tuple[int, int, int, int]:
    """(cases, a better, b better, tied) over the cases the pair's tests used: the shared cases, plus under
    pairwise-complete alignment the other cases both models have (docs/methodology.md#513-case-alignment)."""
    va = np.asarray(cell["per_case"][a], dtype=np.float64)
    vb = np.asarray(cell["per_case"][b], dtype=np.float64)
    unshared = (cell.get("per_case_unshared") or {}) if pairwise_complete else {}
    ua, ub = unshared.get(a) or {}, unshared.get(b) or {}
    common = sorted(set(ua) & set(ub))
    va = np.concatenate([va, np.array([ua[c] for c in common], dtype=np.float64)])
    vb = np.concatenate([vb, np.array([ub[c] for c in common], dtype=np.float64)])
    keep = ~(np.isnan(va) | np.isnan(vb))
    diff = (va - vb)[keep] * (1.0 if cell["higher_is_better"] else -1.0)
    return int(keep.sum()), int((diff > 0).sum()), int((diff < 0).sum()), int((diff == 0).sum())


def pair_verdict(cell: Mapping[str, Any], a: str, b: str, metric: str, pairwise_complete: bool = False) -> dict[str, Any]:
    """The verdict on ranked models ``a`` (ranked above) and ``b``, with the numbers behind it and one sentence."""
    entry = next(e for e in cell["pairwise"] if (e["a"], e["b"]) == (a, b))
    significance = cell["significance"]
    p_a, p_b = significance["p_adjusted"][a][b], significance["p_adjusted"][b][a]
    raw_a, raw_b = significance["p_value"][a][b], significance["p_value"][b][a]
    favours = a if significance["significant"][a][b] else b if significance["significant"][b][a] else None
    leans = favours or (b if raw_b < raw_a else a if raw_a < raw_b else None)
    boot = bool(entry["separable"])
    leans_b = leans == b
    if boot and favours == a:
        code = "separable"
    elif (boot and leans_b) or favours == b:
        code = "aggregation_disagrees"
    elif boot or favours == a:
        code = "borderline"
    else:
        code = "not_separable"
    n_cases, n_a, n_b, n_tied = _pair_counts(cell, a, b, pairwise_complete)
    out = {
        "a": a,
        "b": b,
        "code": code,
        "mean_diff": entry["mean_diff"],
        "ci_low": entry["ci_low"],
        "ci_high": entry["ci_high"],
        "ci_level": entry["ci_level"],
        "mean_separable": boot,
        "wilcoxon_favours": favours,
        "wilcoxon_leans": leans,
        "p_a_better": p_a,
        "p_b_better": p_b,
        "n_cases": n_cases,
        "n_a_better": n_a,
        "n_b_better": n_b,
        "n_tied": n_tied,
    }
    out["text"] = _pair_text(out, metric, bool(cell["higher_is_better"]))
    return out


def wilcoxon_text(v: Mapping[str, Any]) -> str:
    """The per-case test with its direction: 'Wilcoxon-Holm: A better, p_adj = 0.012' or 'Wilcoxon-Holm leans to A,
    not significant (p_adj = 0.179)'; a pair whose ranks lean neither way (all ties) says so."""
    lean = v["wilcoxon_leans"]
    if lean is None:
        return f"Wilcoxon-Holm leans to neither ({format_p(v['p_a_better'])} both ways)"
    p = format_p(v["p_a_better"] if lean == v["a"] else v["p_b_better"])
    return f"Wilcoxon-Holm: {lean} better, {p}" if v["wilcoxon_favours"] else f"Wilcoxon-Holm leans to {lean}, not significant ({p})"


def _pair_text(v: Mapping[str, Any], metric: str, higher: bool) -> str:
    """One sentence after the code's words (``CODE_WORDS``, which the views print): what the code means for the pair,
    the mean difference with the interval that decides "separable", and the per-case test with its direction. No
    level: the cell's ``intervals`` sentence states it once."""
    a, b = v["a"], v["b"]
    delta = f"Δ = {format_estimate(v['mean_diff'], v['ci_low'], v['ci_high'], metric, higher)} ({a} − {b})"
    wilcoxon = wilcoxon_text(v)
    if v["code"] == "separable":
        return f"{a} better than {b}: {delta}; {wilcoxon}"
    if v["code"] == "aggregation_disagrees":
        mean_side = f"the mean favours {a}: {delta}" + ("" if v["mean_separable"] else ", its interval holds 0")
        cases = f"{a} better in {v['n_a_better']}, {b} in {v['n_b_better']} of {v['n_cases']} cases"
        return f"{mean_side}; per case {b} is better ({cases}; {wilcoxon})"
    if v["code"] == "borderline":
        only = "only the test of the mean difference separates them" if v["mean_separable"] else "only Wilcoxon-Holm separates them"
        return f"{only}: {delta}; {wilcoxon}"
    return f"{delta}; {wilcoxon}"


#: the Δ intervals' procedure as a table names it, per ``pairwise_test``
INTERVAL_METHODS = {"sign_flip_bootstrap_t": "the sign-flip and bootstrap-t tests inverted", "sign_flip": "the sign-flip test inverted"}


def intervals_sentence(pairwise_test: str, correction: str, alpha: float, ci_method: str) -> str:
    """The one sentence a table or cell group prints about its Δ intervals: the procedure and the level each is at.

    Under a test of the mean (``sign_flip_bootstrap_t``, ``sign_flip``) the intervals are the test inverted, each pair at
    its Holm step's level, so a pair is separable exactly when its interval excludes 0; under ``bootstrap_ci`` the
    verdict is the bootstrap CI's. Holm controls the family-wise error of the verdicts, not the joint coverage of the
    intervals (each is at its own step's level, 1 - alpha / m for the m pairs left), so the sentence says so;
    Bonferroni's intervals, every one at 1 - alpha / P, are simultaneous at 1 - alpha.
    """
    method = INTERVAL_METHODS.get(pairwise_test, f"paired bootstrap {ci_method} CIs")
    if correction == "holm":
        return f"Δ intervals: {method}, each at the Holm step level of its pair (verdicts family-wise at α {number(alpha)}; intervals not simultaneous)"
    return f"Δ intervals: {method}, Bonferroni, simultaneous {format_level(1.0 - alpha)}"


def cell_verdict(cell: Mapping[str, Any], metric: str, intervals: str, pairwise_complete: bool = False) -> dict[str, Any] | None:
    """The cell's verdict block: #1 against #2, the co-winners of the mean ranking and every adjacent pair.

    None for a cell without a ranked model. ``cell`` is an analysed cell with its ranking, pairwise
    intervals and significance map (``segbench.stats.analysis``); ``intervals``: its :func:`intervals_sentence`;
    ``pairwise_complete``: its case alignment.
    """
    order: Sequence[str] = (cell.get("ranking") or {}).get("order") or []
    if not order:
        return None
    first = order[0]
    if len(order) == 1:
        return {
            "scheme": SCHEME,
            "code": "single_model",
            "first": first,
            "second": None,
            "co_winners": [first],
            "excluded": {},
            "pairs": [],
            "text": f"{first} is the only ranked model",
            "intervals": None,
        }
    pairs = [pair_verdict(cell, upper, lower, metric, pairwise_complete) for upper, lower in zip(order, order[1:])]
    against_first = [pairs[0]] + [pair_verdict(cell, first, other, metric, pairwise_complete) for other in order[2:]]
    co_winners = [first] + [v["b"] for v in against_first if v["code"] != "separable"]
    excluded = {v["b"]: f"separated from #1 {first}: {v['text']}" for v in against_first if v["code"] == "separable"}
    head = pairs[0]
    return {
        "scheme": SCHEME,
        "code": head["code"],
        "first": first,
        "second": head["b"],
        "co_winners": co_winners,
        "excluded": excluded,
        "pairs": pairs,
        "text": f"#1 {first} versus #2 {head['b']}: {head['text']}",
        "intervals": intervals,
    }


def incoherent_pairs(analysis: Mapping[str, Any]) -> list[str]:
    """Every pair of an analysis (``segbench.stats.analysis``) called separable beside an interval that holds 0, or not
    separable beside one that excludes it, named by its place: the pairwise lists of each cell, of its other case
    alignment and of its clustered bootstrap, and the pairs its verdict prints. Empty for a coherent analysis."""
    out = []
    for structure, block in (analysis.get("structures") or {}).items():
        for metric, cell in (block.get("metrics") or {}).items():
            lists = {
                "pairwise": (cell.get("pairwise") or [], "separable"),
                "alignment/pairwise": ((cell.get("alignment") or {}).get("pairwise") or [], "separable"),
                "clustered/pairwise": ((cell.get("clustered") or {}).get("pairwise") or [], "separable"),
                "verdict/pairs": ((cell.get("verdict") or {}).get("pairs") or [], "mean_separable"),
            }
            for where, (pairs, key) in lists.items():
                for pair in pairs:
                    low, high = pair.get("ci_low"), pair.get("ci_high")
                    if low is None or high is None:
                        continue
                    if bool(pair[key]) != (low > 0 or high < 0):
                        out.append(
                            f"/structures/{structure}/metrics/{metric}/{where} {pair['a']} vs {pair['b']}: "
                            f"{key} {pair[key]} beside the interval [{low!r}, {high!r}]"
                        )
    return out
