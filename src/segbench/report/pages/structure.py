"""A structure's page: per metric its headline, leaderboard and plots, then leave-one-out; and the sentences about
one cell that the dataset page repeats (the source's verdicts, the case alignment).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from typing import Any

from segbench.base.formats import count, percent
from segbench.stats.results import SourceCell

from .. import figures, tables
from ..audit import audit_of
from ..document import Cell
from ..marks import display_order, own_case_lines
from ..markup import disclosure, slug
from ..numbers import estimate
from ..pairs import p_rank1_text, source_co_winners, ties_note, verdict_html
from .frame import Results, nav_bar, notes, plots, render


def structure_page(results: Results, structure: str, all_results: list[Results]) -> str:
    """Everything about one structure: per metric the leaderboard and the five plots, then leave-one-out."""
    title = f"{results['dataset']['title']}: {structure}"
    return render(title, structure_body(results, structure, html.escape), nav_bar(all_results, results))


def structure_body(results: Results, structure: str, anchor: Callable[[str], str], per_case: bool = True) -> str:
    """One structure's sections: the answer per metric first, then per metric its headline and leaderboard, every
    plot and table behind a disclosure; ``anchor(metric)`` is the id of a metric's heading; ``per_case``: with
    the per-case and subgroup plots."""
    d, models = results["dataset"], results["models"]
    block = results["analysis"]["structures"][structure]
    settings = results["analysis"]["settings"]
    base = f"{slug(d['name'])}-{slug(structure)}"
    parts = [
        f"<h1>{html.escape(d['title'])}: {html.escape(structure)}</h1>",
        tables.answers(results, lambda _, m: f"#{anchor(m)}", [structure]),
        notes(results),
        f"<p>{block['n_cases']} cases shared by every model; {block['n_absent']} cases without this structure and "
        f"{block['n_unshared']} not scored for every model are excluded.</p>",
        source_text(results) if structure in (results.get("source_analysis") or {}).get("structures", {}) else "",
    ]
    for metric, cell in block["metrics"].items():
        key = f"{base}-{slug(metric)}"
        parts.append(f'<h2 id="{anchor(metric)}">{html.escape(metric)}</h2>')
        parts.append(_headline(cell, metric))
        parts.append(tables.leaderboard(cell, models, metric, audit_of(results, structure, metric), structure, settings))
        parts += [f'<p class="note own-cases">{html.escape(line)}</p>' for line in own_case_lines(results, structure, metric)]
        figs = [figures.forest(cell, models, metric, settings)] + ([figures.blob(cell, models, settings)] if cell.get("ranking") else [])
        parts.append(disclosure("Plots: means with CIs, rank frequencies", plots(figs, f"{key}-a")))
        if cell.get("significance") and len(cell["ranking"]["order"]) > 1:
            alignment = settings.get("case_alignment", "shared")
            note = (
                f'<p class="note" id="{anchor(f"{metric}-alignment")}">Pairwise CIs and the significance map: '
                f"<code>{html.escape(alignment)}</code> cases ({html.escape(ALIGNMENTS[alignment])})"
                + (f"; {alignment_text(cell)}" if cell.get("alignment") else ".")
                + "</p>"
            )
            parts.append(
                disclosure("Significance map (Wilcoxon-Holm) and case alignment", note + plots([figures.significance_map(cell, models)], f"{key}-sig"))
            )
        if cell.get("schemes") and cell.get("ranking") and len(cell["ranking"]["order"]) > 1:
            parts.append(disclosure("Rank under each ranking scheme", plots([figures.scheme_lines(cell, models)], f"{key}-schemes")))
        published = (results.get("source_analysis") or {}).get("structures", {}).get(structure, {}).get(metric)
        if published:
            parts.append(
                f'<details id="{anchor(f"{metric}-source")}"><summary>The source\'s verdicts and Wilcoxon-Holm: '
                f"{co_winners(cell, published)}</summary>{tables.source_pairs(cell, published, metric)}</details>"
            )
        if not per_case:
            continue
        parts.append(disclosure("Per-case scores", plots([figures.per_case(cell, models, metric, block["case_ids"])], f"{key}-cases")))
        fields = list(cell.get("subgroups") or {})
        if fields:
            subs = [figures.subgroups(cell, models, metric, f, settings) for f in fields]
            parts.append(disclosure(f"Subgroups: {html.escape(', '.join(fields))}", plots(subs, f"{key}-sub")))
    if any(cell.get("loo") for cell in block["metrics"].values()):
        parts.append(f'<h2 id="{anchor("leave-one-out")}">Leave-one-case-out</h2>')
        parts.append(disclosure("Ranks without each case", plots([figures.leave_one_out(block)], f"{base}-loo")))
    return "\n".join(parts)


def _headline(cell: Cell, metric: str) -> str:
    """The cell's verdict as the statistics wrote it, the co-winners, and power and leave-one-out beside it."""
    v = cell.get("verdict")
    if not v or v["code"] == "single_model":
        return '<p class="headline">Fewer than two ranked models: nothing to compare.</p>'
    first = v["first"]
    text = (
        f"#1 <strong>{html.escape(first)}</strong> ({html.escape(estimate(cell['models'][first], cell, metric))}, "
        f"P(rank 1) = {html.escape(p_rank1_text(cell, first))}) versus #2 <strong>{html.escape(v['second'])}</strong>: "  # type: ignore[arg-type]  # two ranked models
        f"{verdict_html(v['pairs'][0])}."
    )
    power: Mapping[str, Any] = cell.get("power") or {}
    if power.get("n_required") is not None:
        text += f" Separating them at {percent(power['power'], 0)} power would need about {power['n_required']} cases (this set has {power['n_cases']})."
    text += f" Co-winners (not separable from #1, ranking by mean): {html.escape(', '.join(v['co_winners']))}."
    if ties_note(cell):
        text += f" {ties_note(cell)}"
    loo = cell.get("loo")
    if loo:
        text += (
            f" Removing one case changes the winner for {percent(loo['winner_change_share'])} of cases "
            f"and some rank for {percent(loo['any_rank_change_share'])}."
        )
    return f'<p class="headline">{text}</p>'


def source_text(results: Results) -> str:
    """One line: the source's bootstrap settings, and where the two procedures are explained (the methodology page)."""
    protocol = results["source_analysis"]["protocol"]
    return (
        f"<p>The source's own analysis: paired-bootstrap CIs, Bonferroni-adjusted (B = {count(protocol['n_resamples'])}, "
        f"seed {protocol['seed']}), beside segbench's Wilcoxon-Holm map; how the two differ: "
        '<a href="methodology.html#source-procedures">methodology</a>.</p>'
    )


ALIGNMENTS = {"shared": "every pair on the cases every model has", "pairwise_complete": "each pair on the cases both of its models have, Touchstone's protocol"}


def alignment_text(cell: Cell) -> str:
    """'Under pairwise_complete the co-winners change to A, B; 3 Wilcoxon verdicts and 2 separability verdicts differ.'"""
    other = cell["alignment"]
    changes = other["changes"]
    co = other["significance"]["co_winners"]
    head = (
        f"<strong>co-winners change</strong> to {html.escape(', '.join(co))} (here: {html.escape(', '.join(cell['significance']['co_winners']))})"
        if changes["co_winners"]
        else "same co-winners"
    )
    pairs = ", ".join(f"{html.escape(a)} over {html.escape(b)}" for a, b in changes["significant"])
    return (
        f"under <code>{html.escape(other['protocol'])}</code>: {head}; {len(changes['significant'])} Wilcoxon verdict(s) "
        f"differ{f' ({pairs})' if pairs else ''}, {len(changes['separable'])} separability verdict(s) differ."
    )


def co_winners(cell: Cell, published: SourceCell) -> str:
    """'Co-winners by the source's CIs: A, B, C; by Wilcoxon-Holm: A, B.'"""
    by_ci = source_co_winners(published, display_order(cell))
    by_rank = (cell.get("significance") or {}).get("co_winners") or []
    return f"Co-winners by the source's CIs: {html.escape(', '.join(by_ci))}; by Wilcoxon-Holm: {html.escape(', '.join(by_rank))}."
