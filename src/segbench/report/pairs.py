"""The pairwise verdicts as every view words them: the pair of two models in a cell, its p-values and interval, the
verdict against the next model, the notes on intervals, ties and rank-1 probabilities, a source's verdicts beside
segbench's."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from segbench.base.formats import fmt, format_estimate, format_p
from segbench.stats.results import (
    Pair,
    SourceCell,
    SourcePair,
    Verdict,
    VerdictPair,
)
from segbench.stats.verdicts import CODE_WORDS

from .document import Cell


def pair(cell: Cell, a: str, b: str) -> Pair | None:
    """The pairwise entry of models a and b (either orientation), or None."""
    for entry in cell.get("pairwise") or []:
        if {entry["a"], entry["b"]} == {a, b}:
            return entry
    return None


def p_adjusted(cell: Cell, a: str, b: str) -> float | None:
    """Holm-adjusted one-sided Wilcoxon p-value of 'a better than b'."""
    significance: Mapping[str, Any] = cell.get("significance") or {}
    return (significance.get("p_adjusted") or {}).get(a, {}).get(b)


def directed_p(cell: Cell, better: str, worse: str) -> str:
    """'A better than B, p_adj = 0.036': a Holm-adjusted p-value is never printed without the direction it tests."""
    return f"{better} better than {worse}, {format_p(p_adjusted(cell, better, worse))}"


def wilcoxon_significant(cell: Cell, a: str, b: str) -> bool:
    """Whether the significance map says a is significantly better than b."""
    significance: Mapping[str, Any] = cell.get("significance") or {}
    return bool((significance.get("significant") or {}).get(a, {}).get(b))


def diff_text(entry: Mapping[str, Any], upper: str, cell: Cell, metric: str) -> str:
    """'Δ = 0.015 [-0.004, 0.044]': a pairwise entry's difference and CI as ``upper`` minus the other model.

    Reads segbench's entries ("mean_diff") and a source's ("delta") alike.
    """
    sign = 1.0 if entry["a"] == upper else -1.0
    delta = entry["mean_diff"] if "mean_diff" in entry else entry["delta"]
    low, high = sorted(sign * v for v in (entry["ci_low"], entry["ci_high"])) if entry["ci_low"] is not None else (None, None)
    return f"Δ = {format_estimate(sign * delta, low, high, metric, bool(cell['higher_is_better']))}"


def wilcoxon_winner(cell: Cell, a: str, b: str) -> str | None:
    """The model of the pair the Wilcoxon-Holm map finds significantly better than the other, or None."""
    return a if wilcoxon_significant(cell, a, b) else b if wilcoxon_significant(cell, b, a) else None


def ci_favoured(entry: Mapping[str, Any]) -> str | None:
    """The model a bootstrap-CI verdict favours: a source's entry ("distinguishable", "favored") or segbench's
    ("separable"; a is ranked above b, so a separable pair favours a)."""
    if "distinguishable" in entry:
        return entry["favored"] if entry["distinguishable"] else None
    return entry["a"] if entry["separable"] else None


def against_source(cell: Cell, published: SourcePair, upper: str, lower: str) -> tuple[str, str]:
    """How the Wilcoxon-Holm verdict on a pair relates to the source's bootstrap-CI verdict: (kind, sentence).

    kind: "adds" (Wilcoxon-Holm separates a pair whose CI includes 0), "withholds" (the CI excludes 0,
    Wilcoxon-Holm finds neither model significantly better), "opposite" (they favour different models)
    or "agree". ``published`` is the source's entry of the pair (``source_analysis`` of the results).
    """
    favoured, winner = ci_favoured(published), wilcoxon_winner(cell, upper, lower)
    if favoured == winner:
        return "agree", f"Both separate the pair: {winner} is better." if winner else "Neither separates the pair."
    if favoured is None:
        loser = lower if winner == upper else upper
        return "adds", (
            f"Wilcoxon-Holm adds a verdict: {winner} is significantly better than {loser} "
            f"({directed_p(cell, winner, loser)}), while the source's bootstrap CI "  # type: ignore[arg-type]  # a winner: they disagree
            "of the difference includes 0."
        )
    other = lower if favoured == upper else upper
    if winner is None:
        return "withholds", (
            f"Wilcoxon-Holm does not confirm the source's verdict: the CI favours {favoured}, but "
            f"{favoured} is not significantly better than {other} "
            f"({directed_p(cell, favoured, other)})."
        )
    return "opposite", (
        f"Opposite verdicts: the source's CI favours {favoured}, Wilcoxon-Holm finds {winner} significantly better ({directed_p(cell, winner, favoured)})."
    )


def source_co_winners(published_cell: SourceCell, order: list[str]) -> list[str]:
    """Models, in ``order``, that no pair the source calls distinguishable puts below another model."""
    beaten = {e["b"] if e["favored"] == e["a"] else e["a"] for e in published_cell["pairwise"] if e["distinguishable"]}
    return [m for m in order if m not in beaten]


VERDICT_ORDER = {code: str(k) for k, code in enumerate(("separable", "borderline", "aggregation_disagrees", "not_separable"))}  # table sort key


def next_verdict(cell: Cell, upper: str) -> VerdictPair | None:
    """The verdict (``segbench.stats.verdicts``) on ``upper`` against the next ranked model, or None for the last one."""
    return next((v for v in (cell.get("verdict") or {}).get("pairs") or [] if v["a"] == upper), None)


def verdict_words(v: Verdict | VerdictPair) -> str:
    """A verdict's code as words in bold, readable without colour."""
    return f'<strong class="verdict verdict-{v["code"]}">{html.escape(CODE_WORDS[v["code"]])}</strong>'


def verdict_html(v: Verdict | VerdictPair) -> str:
    """A pair's verdict as the site shows it: the code's words in bold, then the sentence written by the statistics
    (which never repeats those words)."""
    return f"{verdict_words(v)}: {html.escape(v['text'])}"


def intervals_note(cell: Cell) -> str:
    """The one sentence naming the method and family-wise level of a cell's Δ intervals (``verdict.intervals``), said
    once per table instead of per pair; '' where the statistics wrote none."""
    said = (cell.get("verdict") or {}).get("intervals")
    return f"{html.escape(said.rstrip('.'))}." if said else ""


def ties_note(cell: Cell) -> str:
    """'A and B are identical on every case.' for each group of models the ranking found identical
    (``ranking.identical``), '' where there is none."""
    groups = (cell.get("ranking") or {}).get("identical") or []
    return " ".join(f"{html.escape(_and(group))} are identical on every case." for group in groups if len(group) > 1)


def p_rank1_text(cell: Cell, model: str) -> str:
    """'0.62', or '1.00, shared with B (identical on every case)' for a model the ranking found identical to others
    (``ranking.identical``): ties share P(rank 1), so a twin's figure beside 'Δ = 0.000' must not read as the twin's 0."""
    shown = fmt(cell["ranking"]["p_rank1"][model], 2)
    group = next((g for g in (cell.get("ranking") or {}).get("identical") or [] if model in g and len(g) > 1), None)
    return f"{shown}, shared with {_and([m for m in group if m != model])} (identical on every case)" if group else shown


def tied_first_note(cell: Cell) -> str:
    """Why a cell's P(rank 1) values add up to more than 1, where they do ('' elsewhere): models tied for first in some
    resamples (e.g. equal on the cases drawn) each count them, so 'A 1.00' beside 'B 0.34' is no contradiction."""
    total = sum(((cell.get("ranking") or {}).get("p_rank1") or {}).values())
    if total <= 1.0 + 1e-9:
        return ""
    return "P(rank 1): a tie for first in a resample counts for each tied model, so a cell's P(rank 1) values can add up to more than 1."


def _and(names: list[str]) -> str:
    """'A and B', 'A, B and C'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
