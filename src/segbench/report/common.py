"""What every part of the site says the same way: number formats, model markers, order, verdicts.

Everything here reads the results JSON (typed level by level in ``segbench.stats.results``);
nothing is recomputed.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from segbench.stats.audited import MARGIN
from segbench.stats.missing_cases import coverage_text
from segbench.stats.results import (
    AuditedCell,
    AuditEntry,
    Identical,
    MetricCell,
    ModelEntry,
    ModelEstimate,
    Pair,
    ResultsDocument,
    Settings,
    SourceCell,
    SourcePair,
    Verdict,
    VerdictPair,
)
from segbench.stats.verdicts import CODE_WORDS, base_digits, format_estimate, format_level, format_p

Cell = MetricCell  # analysis.structures.<s>.metrics.<m>
Models = dict[str, ModelEntry]  # results["models"]
Results = ResultsDocument


class CellAudit(AuditedCell):
    """A leaderboard cell's audited entries (:func:`audit_of`) and the margin of their flags."""

    margin: float


def fmt(value: float | None, digits: int) -> str:
    """Fixed-point number, or an en dash for a missing value."""
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_p(p: float | None) -> str:
    """p-value with three decimals, '< 0.001' below that."""
    if p is None:
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def format_points(share: float) -> str:
    """A difference of rates in percentage points, '1.5 points' for 0.015 (the audit's ``MARGIN``), '1 point' for 0.01."""
    points = round(100.0 * share, 6)
    return f"{points:g} point{'' if points == 1 else 's'}"


def fmt_rank(rank: float) -> str:
    """Whole ranks as integers; a bootstrap quantile between two ranks with up to three digits."""
    return f"{rank:.3g}"


def digits(cell: Cell) -> int:
    """Decimals for a metric: 3 for overlap scores in [0, 1], 2 for distances in mm."""
    return base_digits(bool(cell["higher_is_better"]))


def kind(model: Mapping[str, Any]) -> str:
    """simulated | inference | published (older results without ``kind``: from ``simulated``)."""
    return model.get("kind") or ("simulated" if model.get("simulated") else "inference")


def markers(model: Mapping[str, Any]) -> list[str]:
    """Plain-text marks a reader must see next to a model's name."""
    marks = []
    if kind(model) == "simulated":
        marks.append("SIMULATED")
    if kind(model) == "published":
        marks.append(f"PUBLISHED: {model['source']}" if model.get("source") else "PUBLISHED")
    if model.get("contaminated"):
        marks.append("TRAINED ON THIS DATA: unranked")
    return marks


def identical_text(entry: Identical | None) -> str:
    """'leaves 0 of 78 cases identical to the reference' from an ``identical_to_reference`` count ('' without one).

    The count (``segbench.stats.identical_to_reference``): cases in which every scored structure has Dice exactly 1.
    """
    if not entry:
        return ""
    return f"leaves {entry['cases']} of {entry['of']} case{'' if entry['of'] == 1 else 's'} identical to the reference"


def identical_counts(results: Results) -> dict[str, Identical | None]:
    """Per model of ``results``: its ``analysis.models.<model>.identical_to_reference`` (None for older results)."""
    analysed = results.get("analysis", {}).get("models", {})
    return {name: (analysed.get(name) or {}).get("identical_to_reference") for name in results["models"]}


def identical_note(results: Results) -> str:
    """The note every view prints when a model left any case identical to the reference ('' when none did): a simulated
    model that changed nothing there, or a model that returned the reference; on most of its cases it is called out,
    since its scores then measure its input, not a segmentation."""
    copies = {n: c for n, c in identical_counts(results).items() if c and c["cases"]}
    if not copies:
        return ""
    clauses = [f"{name} IDENTICAL TO THE REFERENCE on {c['cases']} of {c['of']} cases ({'all' if c['cases'] == c['of'] else 'most'}: "
               "was it given the reference labels?)" if 2 * c["cases"] > c["of"] else f"{name} {identical_text(c)}" for name, c in sorted(copies.items())]
    return f"Identical to the reference (every structure Dice exactly 1): {'; '.join(clauses)}."


def short_mark(model: Mapping[str, Any]) -> str:
    """Compact suffix for plot labels, e.g. ' [sim]' or ' [trained on this data]'."""
    mark = {"simulated": "sim", "published": "pub"}.get(kind(model), "")
    marks = [mark] if mark else []
    if model.get("contaminated"):
        marks.append("trained on this data")
    return f" [{', '.join(marks)}]" if marks else ""


def display_order(cell: Cell) -> list[str]:
    """Ranked models in rank order, then the unranked (contaminated) ones by name."""
    ranked = list((cell.get("ranking") or {}).get("order") or [])
    return ranked + sorted(m for m in cell["models"] if m not in ranked)


def is_ranked(cell: Cell, name: str) -> bool:
    """True when the model takes part in the ranking of this cell."""
    return name in ((cell.get("ranking") or {}).get("order") or [])


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
        return "adds", (f"Wilcoxon-Holm adds a verdict: {winner} is significantly better than {loser} "
                        f"({directed_p(cell, winner, loser)}), while the source's bootstrap CI "  # type: ignore[arg-type]  # a winner: they disagree
                        "of the difference includes 0.")
    other = lower if favoured == upper else upper
    if winner is None:
        return "withholds", (f"Wilcoxon-Holm does not confirm the source's verdict: the CI favours {favoured}, but "
                             f"{favoured} is not significantly better than {other} "
                             f"({directed_p(cell, favoured, other)}).")
    return "opposite", (f"Opposite verdicts: the source's CI favours {favoured}, Wilcoxon-Holm finds {winner} significantly "
                        f"better ({directed_p(cell, winner, favoured)}).")


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


def ci_level(cell: Cell, settings: Settings) -> float:
    """The level a cell's model CIs are computed at: its ``ci_confidence`` (an audit-calibrated level where the audit
    gave one), else the board's confidence."""
    return float(cell.get("ci_confidence") or settings["confidence"])


def ci_head(levels: Iterable[float]) -> str:
    """A CI column's head at the level its CIs are computed at: 'mean [95% CI]', 'mean [97.05% CI]' for a cell at an
    audit-calibrated level (computed there so that it covers the board's confidence on the audited population, which
    a failure shape it never saw may not), 'mean [95–97.05% CI]' for a table of cells at several levels."""
    distinct = sorted(set(levels))
    if not distinct:
        return "mean [CI]"
    low, high = format_level(distinct[0]), format_level(distinct[-1])
    return f"mean [{high} CI]" if low == high else f"mean [{low[:-1]}–{high} CI]"


def estimate(est: ModelEstimate, cell: Cell, metric: str) -> str:
    """'mean [ci_low, ci_high] unit' of one estimate, written as every view writes it."""
    return format_estimate(est["mean"], est["ci_low"], est["ci_high"], metric, bool(cell["higher_is_better"]))


#: which bound of a model's CI the range rule moved (the estimate's ``ci_bounded``), for the CI cell's tooltip
BOUNDED = {"low": "its lower bound", "high": "its upper bound", "both": "both its bounds"}


def estimate_html(est: ModelEstimate, cell: Cell, metric: str) -> str:
    """A table's 'mean [ci_low, ci_high] unit', marked '⇤' where the range rule moved a bound of the CI (``ci_bounded``),
    the tooltip saying which: the interval keeps within the metric's range and the per-case values it averages."""
    shown = html.escape(estimate(est, cell, metric))
    moved = est.get("ci_bounded")
    if not moved:
        return shown
    title = (f"The range rule set {BOUNDED[moved]}: the interval stays within the metric's range and the per-case values it "
             "averages (docs/methodology.md, 5.3)")
    return f'{shown}<span class="bounded" title="{html.escape(title)}">⇤</span>'


def disclosure(summary: str, body: str, open_: bool = False) -> str:
    """Details a reader opens on demand: ``summary`` is the line shown (HTML), ``body`` HTML."""
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>{body}</details>"


def slug(text: str) -> str:
    """File- and id-safe form of a name, one per name: a name that needs changing to be safe gets a short digest of
    itself appended, so that two names slugging alike (``liver!``, ``liver?``) get distinct pages instead of one
    replacing the other."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"
    return safe if safe == text else f"{safe}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"


# The calibration audit's rate on the board (docs/methodology.md#518-calibration-audit, "On the board"): the results'
# ``audited`` block, written by compare (``segbench.stats.audited``); None there (no audit tables) reads "not audited".
NO_AUDIT = "no calibration audit tables when these results were computed"


def audit_margin(results: Results) -> float:
    """How far an audited rate may miss its target before the board flags it: the results' audited block's ``margin``
    (the one its flags were set with), else the audit's own (``segbench.stats.audited.MARGIN``)."""
    block = results.get("audited")
    return float(block["margin"]) if isinstance(block, dict) else MARGIN


def audit_of(results: Results, structure: str, metric: str) -> CellAudit:
    """The audited entry of one leaderboard cell: ``{"coverage", "type1", "reason"}`` (entries None where not audited)
    and the ``margin`` of its flags (:func:`audit_margin`). ``results["audited"]`` may be None (no tables), a sentence
    (the lesion-wise views: why none is audited) or the block."""
    block, margin = results.get("audited"), audit_margin(results)
    if not block:
        return {"coverage": None, "type1": None, "reason": NO_AUDIT, "margin": margin}
    if isinstance(block, str):
        return {"coverage": None, "type1": None, "reason": block, "margin": margin}
    entry = (block.get("structures") or {}).get(structure, {}).get(metric)
    return {**(entry or {"coverage": None, "type1": None, "reason": "no cases to audit"}), "margin": margin}


def _where(entry: AuditEntry, structure: str) -> str:
    """'' for the cell's own population; ' on tumor' for another structure of its set; ' on source/structure' else."""
    if entry["match"] == "exact":
        return ""
    return f" on {entry['structure']}" if entry["match"] == "other_structure" else f" on {entry['population']}"


#: the visible mark of an audited rate measured on another population than the cell's own (the tooltip says which)
ELSEWHERE = "†"


def _mark(entry: AuditEntry) -> str:
    """'†' when the rate was measured on another population than the cell's own, else ''."""
    return "" if entry["match"] == "exact" else ELSEWHERE


def _audit_title(entry: AuditEntry, what: str, structure: str) -> str:
    """The full sentence of a tooltip: what was audited, where, at which n, the rate with its MC SE, the target."""
    kind = {"exact": "this set and structure", "other_structure": "another structure of this set, not audited itself",
            "same_data": "another source on the same data, this set not audited"}[entry["match"]]
    several = f"; the least favourable of {entry['candidates']} populations" if entry["candidates"] > 1 else ""
    return (f"{what} audited at n = {entry['n']} (this board: {entry['n_board']} cases) on {entry['population']} ({kind}{several}): "
            f"{100 * entry['rate']:.1f}% ± {100 * entry['mc_se']:.1f} (Monte-Carlo SE); target {format_level(entry['target'])}")


def coverage_note(audit: CellAudit, structure: str) -> str:
    """A CI cell's audited coverage, short and visible ('cov. 94.1% @n=40'), '⚠' first when it under-covers by more
    than the audit's margin, '†' last when measured on another population; the whole sentence as its tooltip. 'not
    audited' (the reason as tooltip) without an entry. ``audit``: the cell's :func:`audit_of`."""
    return _audit_note(audit, "coverage", structure, lambda e: f"{format_level(e['target'])} {e['method']} CI{_level_words(e)}",
                       "under_covers", f"under-covers by more than {format_points(audit['margin'])}", "cov.", with_n=True)


def type1_note(audit: CellAudit, structure: str) -> str:
    """A verdict line's audited type-I error of 'separable' ('type-I 3.7%'; its n, as the coverage's, in the tooltip),
    '⚠' first above alpha plus the audit's margin, '†' when measured on another population."""
    return _audit_note(audit, "type1", structure, lambda e: f"\"separable\" ({e['procedure']}) for equal models",
                       "exceeds_alpha", f"above alpha by more than {format_points(audit['margin'])}", "type-I", with_n=False)


def limit_note(audit: CellAudit) -> str:
    """Where the cell's n or shape is past what the audit verified the verdict on (``limit``, stats/limits.py): its
    sentence, visible beside the verdict ('⚠ Cases too few for this shape: ...'); '' within it or without the audit."""
    limit = audit.get("limit")
    if not limit:
        return ""
    return f' <span class="audit warn limit">⚠ {html.escape(limit["text"])}</span>'


def _audit_note(audit: CellAudit, key: Literal["coverage", "type1"], structure: str, what: Callable[[AuditEntry], str],
                flag: Literal["under_covers", "exceeds_alpha"], flag_words: str,
                label: str, with_n: bool) -> str:
    """The short visible span of one audited rate (``key``: coverage or type1; ``what``: the audited thing, from its
    entry), its tooltip the whole sentence."""
    entry = audit[key]
    if entry is None:
        none = "not audited" if key == "coverage" else f"{label} not audited"
        return f' <span class="audit" title="{html.escape(audit.get("reason") or NO_AUDIT)}">{none}</span>'
    warn = entry[flag]
    title = _audit_title(entry, what(entry), structure) + (f"; {flag_words}" if warn else "")
    at = f" @n={entry['n']}" if with_n else ""
    return (f' <span class="audit{" warn" if warn else ""}" title="{html.escape(title)}">{"⚠ " if warn else ""}'
            f"{label} {100 * entry['rate']:.1f}%{at}{_mark(entry)}</span>")


def _level_words(entry: AuditEntry) -> str:
    """', computed at the audit-calibrated level 98.70% (its coverage measured out of sample)' for a CI at a calibrated level
    ('at its nominal level, ...' where the calibration kept it), '' for a CI the audit did not calibrate."""
    if "level" not in entry:
        return ""
    if entry["level"] <= entry["target"]:
        return ", at its nominal level, which the audit's calibration kept (its coverage measured out of sample)"
    return f", computed at the audit-calibrated level {format_level(entry['level'])} (its coverage measured out of sample)"


def audit_legend(margin: float) -> str:
    """What a table's audit marks mean, ``margin`` the results' (:func:`audit_margin`)."""
    return ("cov.: how often the calibration audit found this CI covering the truth, at the audited n nearest this board's "
            "(hover for the population, its Monte-Carlo SE and the level the audit calibrated the CI at); "
            'type-I: how often its "separable" was wrong for equal models; '
            f"⚠ more than {format_points(margin)} worse than the target; † measured on another population than this cell's.")


def audit_words(audit: CellAudit, structure: str) -> str:
    """Plain text of a leaderboard's audited rates, for the terminal: 'Audited: CI covers 94.1% at n = 40; "separable"
    wrong for equal models 3.7% at n = 40.' ('(under-covers)' / '(above alpha)' beyond the margin), or why not."""
    c, t = audit["coverage"], audit["type1"]
    if c is None and t is None:
        return f"Not audited: {(audit.get('reason') or NO_AUDIT).removeprefix('not audited: ')}."
    cov = (f"CI covers {100 * c['rate']:.1f}% at n = {c['n']}{_where(c, structure)}{_level_words(c)}"
           f"{' (under-covers)' if c['under_covers'] else ''}"
           if c else "CI not audited")
    err = (f"\"separable\" wrong for equal models {100 * t['rate']:.1f}% at n = {t['n']}{_where(t, structure)}"
           f"{' (above alpha)' if t['exceeds_alpha'] else ''}" if t else "verdict not audited")
    limit = audit.get("limit")
    return f"Audited: {cov}; {err}." + (f" ⚠ {limit['text']}" if limit else "")


def unit_sentence(results: Results) -> str:
    """A clustered set's first line (docs/methodology.md#516-clustered-data): the unit its verdicts assume, the population
    they speak for, and how many #1-versus-#2 verdicts and co-winner sets change when the clusters are resampled instead
    (``analysis.clusters.verdict_changes``); '' for a set without a cluster field. Site and terminal print it alike."""
    clusters = results["analysis"].get("clusters")
    changes = (clusters or {}).get("verdict_changes")
    if not changes:
        return ""
    field = clusters["field"]
    sizes: dict[str, int] = {}
    for label in clusters["labels"].values():
        sizes[label] = sizes.get(label, 0) + 1
    largest = max(sizes.values()) / sum(sizes.values())
    n = changes["n_cells"]
    return (f"Unit: the case. The verdicts treat the {sum(sizes.values()):,} cases as independent: they speak for cases like "
            f"these, from these {len(sizes)} {field} clusters (the largest holds {100 * largest:.0f}%), not for a new {field}. "
            f"Resampling {field}s instead (clustered bootstrap, a sensitivity analysis) changes {len(changes['first_second'])} "
            f"of {n} #1-versus-#2 verdicts and {len(changes['co_winners'])} of {n} co-winner sets (why the case: methodology, 5.16).")


def coverage_notes(results: Results) -> list[str]:
    """Said once per dataset on every view: each model lacking cases, its n of N and what the leaderboard does with it
    (``results.coverage``, segbench.stats.missing_cases); [] when every model covers every case."""
    block = results.get("coverage")
    if not block:
        return []
    notes = [f"{model}: {coverage_text(entry, block['applied'])}." for model, entry in sorted(block["models"].items())]
    if block["applied"] == "shared_cases":
        notes.append(f"The leaderboard is on the {block['shared_cases']['n_cases']} of {block['n_cases']} cases every model has: "
                     f"{', '.join(sorted(block['models']))} lack the others.")
    if block["policy"] != block["applied"]:
        notes.append(f"missing_predictions {block['policy']} is applied as {block['applied']}: {block['reason']}.")
    return notes


def own_case_lines(results: Results, structure: str, metric: str) -> list[str]:
    """Per model estimated on its own cases (coverage ``own_cases``), one line for a leaderboard cell: its estimate and rank
    on those cases, and the verdict against its neighbour in the ranking of those cases; [] for none."""
    block: Mapping[str, Any] = results.get("coverage") or {}
    lines = []
    for model, analysis in sorted((block.get("analyses") or {}).items()):
        cell = analysis["structures"].get(structure, {}).get("metrics", {}).get(metric)
        if not cell or model not in cell["models"]:
            continue
        entry, n = block["models"][model], analysis["structures"][structure]["n_cases"]
        order = (cell.get("ranking") or {}).get("order") or []
        text = (f"{model}, {entry['n_cases']} of {entry['of']} cases (beside the leaderboard): "
                f"{estimate(cell['models'][model], cell, metric)} on its {n} {structure} case{'' if n == 1 else 's'}")
        if model in order:
            position = order.index(model)
            text += f", #{cell['ranking']['rank'][model]} of {len(order)} on them"
            v = next_verdict(cell, order[position - 1]) if position else next_verdict(cell, model)
            if v:
                text += f"; {v['a']} versus {v['b']} there: {CODE_WORDS[v['code']]}, {v['text']}"
        lines.append(text)
    return lines
