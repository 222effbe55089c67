"""HTML tables of the site: leaderboards, the dataset overview, models, settings. Sortable by header."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from segbench.base.formats import ci_head, count, fmt, fmt_rank, format_level, ratio
from segbench.stats.results import Identical, Settings, SourceCell, Structure, Variant, Verdict, VerdictPair
from segbench.stats.verdicts import pair_verdict, wilcoxon_text

from .audit import CellAudit, audit_legend, audit_margin, audit_of, coverage_note, limit_note, type1_note
from .document import Cell, Models, Results
from .marks import display_order, identical_text, is_ranked, kind, markers
from .numbers import ci_level, digits, estimate_html
from .pairs import (
    VERDICT_ORDER,
    against_source,
    ci_favoured,
    diff_text,
    intervals_note,
    next_verdict,
    p_rank1_text,
    pair,
    tied_first_note,
    verdict_words,
    wilcoxon_winner,
)

# A table cell: (HTML shown, sort key); None sorts last. A number key right-aligns the cell (a numeric
# column); a text key aligns left and still sorts numerically when it reads as a number.
TableCell = tuple[str, str | float | int | None]


def table(headers: Sequence[str], rows: Sequence[Sequence[TableCell]], caption: str = "", css: str = "") -> str:
    """A table whose columns sort on click (site.js), keyboard-reachable through header buttons."""
    head = "".join(f'<th scope="col"><button type="button">{html.escape(h)}</button></th>' for h in headers)
    body = "".join("<tr>" + "".join(f'<td data-sort="{html.escape(_key(key))}"{_align(key)}>{shown}</td>' for shown, key in row) + "</tr>" for row in rows)
    cap = f"<caption>{caption}</caption>" if caption else ""
    return f'<div class="table-scroll"><table class="sortable {css}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _align(key: str | float | int | None) -> str:
    return ' class="num"' if isinstance(key, (int, float)) else ""


def _key(key: str | float | int | None) -> str:
    if key is None:
        return ""
    return repr(float(key)) if isinstance(key, (int, float)) else key


def model_cell(name: str, model: Mapping[str, Any], said: Sequence[str] = ()) -> TableCell:
    """Model name with its marks as text badges, but for the marks ``said`` once for the whole table
    (``shared_marks``); the full title as a tooltip."""
    tags = "".join(f' <span class="tag tag-{kind(model)}">{html.escape(m)}</span>' for m in markers(model) if m not in said)
    title = html.escape(model.get("title") or name)
    return f'<span class="model" title="{title}">{html.escape(name)}</span>{tags}', name


def shared_marks(names: Sequence[str], models: Models) -> list[str]:
    """The marks every listed model carries (e.g. 'PUBLISHED: <source>'), said once in the table's caption, not per row."""
    marks = [markers(models.get(n, {})) for n in names]
    return [m for m in marks[0] if all(m in other for other in marks[1:])] if marks else []


def marks_caption(marks: Sequence[str]) -> str:
    return "".join(f' <span class="tag">all models {html.escape(m)}</span>' for m in marks)


def verdict_cell(v: Verdict | VerdictPair, more: str = "") -> str:
    """A verdict's words, its one-line text (and ``more``, plain text) behind a disclosure and as the tooltip, so a row stays one line."""
    return f'<details class="verdict"><summary title="{html.escape(v["text"])}">{verdict_words(v)}</summary>{html.escape(v["text"] + more)}</details>'


def answers(results: Results, link_of: Callable[[str, str], str], structures: Sequence[str] | None = None) -> str:
    """The first thing a dataset's (or a structure's) page shows: per structure and metric, #1 with its mean and CI,
    the #1-versus-#2 verdict's words (its sentence one click away) and the co-winners."""
    models = results["models"]
    said = shared_marks(sorted(models), models)
    rows: list[list[TableCell]] = []
    chosen = structures or sorted(results["analysis"]["structures"])
    for structure in chosen:
        for metric, cell in results["analysis"]["structures"][structure]["metrics"].items():
            v = cell.get("verdict")
            where = (f'<a href="{link_of(structure, metric)}">{html.escape(structure)}</a>', structure)
            if not v:
                rows.append([where, (html.escape(metric), metric), ("no ranked model", None), ("–", None), ("–", None), ("–", None)])
                continue
            co = ", ".join(v["co_winners"])
            audit = audit_of(results, structure, metric)
            rows.append(
                [
                    where,
                    (html.escape(metric), metric),
                    model_cell(v["first"], models.get(v["first"], {}), said),
                    (estimate_html(cell["models"][v["first"]], cell, metric) + coverage_note(audit, structure), cell["models"][v["first"]]["mean"]),
                    (
                        (verdict_cell(v, f". Co-winners: {co}.") + type1_note(audit, structure) + limit_note(audit)) if v["pairs"] else verdict_words(v),
                        VERDICT_ORDER.get(v["code"], "4"),
                    ),
                    (f'<span title="{html.escape(co)}">{len(v["co_winners"])}: {html.escape(co)}</span>', f"{len(v['co_winners']):03d}"),
                ]
            )
    said_once = " ".join(dict.fromkeys(n for s in chosen for n in map(intervals_note, results["analysis"]["structures"][s]["metrics"].values()) if n))
    caption = (
        "#1 versus #2 per structure and metric; click a verdict for its numbers. Co-winners: #1 and every model not "
        "separable from it (test of the mean difference and Wilcoxon-Holm) on the ranking by mean "
        f'(<a href="methodology.html#verdicts">verdicts</a>). {said_once + " " if said_once else ""}'
        + audit_legend(audit_margin(results))
        + marks_caption(said)
    )
    shown = [cell for s in chosen for cell in results["analysis"]["structures"][s]["metrics"].values() if cell.get("verdict")]
    head = ci_head(ci_level(cell, results["analysis"]["settings"]) for cell in shown)
    return table(["structure", "metric", "#1", head, "#1 versus #2", "co-winners"], rows, caption, "answers")


def leaderboard(cell: Cell, models: Models, metric: str, audit: CellAudit, structure: str, settings: Settings) -> str:
    """Models in rank order: mean [95% CI] with its audited coverage, median, P(rank 1), rank interval, verdict versus the
    next one (the audited type-I error of "separable" once, in the caption). ``audit``: the cell's ``audit.audit_of``;
    ``settings``: the analysis' (the CI's confidence)."""
    n = digits(cell)
    coverage = coverage_note(audit, structure)
    ranking: Mapping[str, Any] = cell.get("ranking") or {}
    order = display_order(cell)
    said = shared_marks(order, models)
    rows = []
    for name in order:
        est = cell["models"][name]
        if is_ranked(cell, name):
            lo, hi = ranking["rank_interval"][name]
            v = next_verdict(cell, name)
            text, order_key = (verdict_cell(v), VERDICT_ORDER[v["code"]]) if v else ("last ranked", "4")
            rank_cells: list[TableCell] = [
                (str(ranking["rank"][name]), ranking["rank"][name]),
                (fmt(ranking["p_rank1"][name], 2), ranking["p_rank1"][name]),
                (f"{fmt_rank(lo)}–{fmt_rank(hi)}", ranking["mean_rank"][name]),
                (text, order_key),
            ]
        else:
            reason = "unranked: trained on this data" if est["contaminated"] else "unranked: no ranking for this metric"
            rank_cells = [("–", None), ("–", None), ("–", None), (reason, None)]
        missing = f" ({est['n_missing_prediction']} without a prediction)" if est["n_missing_prediction"] else ""
        rows.append(
            [
                rank_cells[0],
                model_cell(name, models.get(name, {}), said),
                (estimate_html(est, cell, metric) + coverage, est["mean"]),
                (fmt(est["median"], n), est["median"]),
                *rank_cells[1:],
                (str(est["n"]), est["n"]),
                (f"{est['n_worst_case']}{missing}", est["n_worst_case"]),
            ]
        )
    direction = "higher is better" if cell["higher_is_better"] else "lower is better"
    headers = ["rank", "model", ci_head([ci_level(cell, settings)]), "median", "P(rank 1)", "rank interval", "versus next model", "n", "worst-case"]
    verdicts = f"; verdicts:{type1_note(audit, structure)}{limit_note(audit)}" if cell.get("ranking") and len(cell["ranking"]["order"]) > 1 else ""
    notes = [note for note in (intervals_note(cell), html.escape(tied_first_note(cell))) if note]
    said_once = f". {' '.join(notes)}" if notes else ""
    return table(headers, rows, f"{html.escape(metric)} ({direction}){verdicts}{said_once}" + marks_caption(said), "leaderboard")


def models_table(models: Models, identical: dict[str, Identical | None] | None = None) -> str:
    """Every model of a dataset: kind, source or licence, training data, versions, and (``identical``: per model its
    ``identical_to_reference`` count, ``identical_counts``) how many cases it left identical to the reference."""
    identical = identical or {}
    rows = []
    for name in sorted(models):
        model = models[name]
        versions = model.get("versions") or {}
        version = versions.get("model_version") or versions.get("weights_version") or ""
        same = identical.get(name)
        rows.append(
            [
                model_cell(name, model),
                (html.escape(model.get("title") or ""), model.get("title") or ""),
                (kind(model), kind(model)),
                (html.escape(model.get("source") or "–"), model.get("source") or ""),
                (html.escape(model.get("licence") or "–"), model.get("licence") or ""),
                (html.escape(", ".join(model.get("trained_on") or []) or "–"), ", ".join(model.get("trained_on") or [])),
                (html.escape(str(version) or "–"), str(version)),
                (html.escape(identical_text(same) or "–"), same["cases"] if same else None),
            ]
        )
    return table(["model", "title", "kind", "source", "licence", "trained on", "version", "cases identical to the reference"], rows, "Models")


def overview(results: Results, link_of: Callable[[str, str], str]) -> str:
    """How firm each #1 is: per structure and metric, P(rank 1), the leave-one-out share and the cases that would
    separate #1 from #2, beside the cases this set has. ``link_of(structure, metric)``: that leaderboard's address."""
    rows: list[list[TableCell]] = []
    for structure, block in sorted(results["analysis"]["structures"].items()):
        for metric, cell in block["metrics"].items():
            link = f'<a href="{link_of(structure, metric)}">{html.escape(structure)}</a>'
            order = (cell.get("ranking") or {}).get("order") or []
            if not order:
                rows.append([(link, structure), (html.escape(metric), metric)] + [("–", None)] * 4)
                continue
            first = order[0]
            needed = (cell.get("power") or {}).get("n_required")
            loo: Mapping[str, Any] = cell.get("loo") or {}
            rows.append(
                [
                    (link, structure),
                    (html.escape(metric), metric),
                    (f'<span class="model">{html.escape(first)}</span>', first),
                    (html.escape(p_rank1_text(cell, first)), cell["ranking"]["p_rank1"][first]),
                    (fmt(loo.get("winner_change_share"), 2), loo.get("winner_change_share")),
                    ("–" if needed is None else str(needed), needed),
                    (str(block["n_cases"]), block["n_cases"]),
                ]
            )
    headers = [
        "structure",
        "metric",
        "#1",
        "P(rank 1)",
        "LOO: share of cases changing #1",
        "cases needed to separate #1 and #2 (paired t, power as set)",
        "cases every model has (used here)",
    ]
    return table(headers, rows, "How firm is #1? Bootstrap P(rank 1), leave-one-case-out and the power to separate #1 from #2", "overview")


AGAINST_SOURCE_ORDER = {"opposite": "0", "adds": "1", "withholds": "2", "agree": "3"}  # disagreements first


def source_pairs(cell: Cell, published: SourceCell, metric: str) -> str:
    """Every pair: the source's CI verdict, segbench's under the same correction, Wilcoxon-Holm, and how they differ.

    ``published``: this structure and metric of the results' ``source_analysis`` (the source's entries
    plus segbench's recomputation in "segbench"); ``cell``: segbench's analysis, for Wilcoxon-Holm.
    """
    ours = published["segbench"]
    rows = []
    for entry in ours["pairwise"]:
        upper, lower = entry["a"], entry["b"]
        theirs: Mapping[str, Any] | None = pair(published, upper, lower)  # type: ignore[arg-type]  # a source's cell reads alike (SourceCell)
        if theirs is None:  # a model the source left unranked
            continue
        source_word = f"✔ distinguishable, favours {theirs['favored']}" if theirs["distinguishable"] else "✘ not distinguishable"
        same = "same verdict as the source" if ci_favoured(entry) == ci_favoured(theirs) else "differs from the source"
        winner = wilcoxon_winner(cell, upper, lower)
        wilcoxon = wilcoxon_text(pair_verdict(cell, upper, lower, metric))  # the statistics' words, as in every verdict
        relation, sentence = against_source(cell, theirs, upper, lower)  # type: ignore[arg-type]  # the source's pair (SourcePair)
        rows.append(
            [
                (f"{html.escape(upper)} vs {html.escape(lower)}", f"{upper} vs {lower}"),
                (f"{source_word}: {html.escape(diff_text(theirs, upper, cell, metric))}", str(int(theirs["distinguishable"]))),
                (
                    f"{'✔ separable' if entry['separable'] else '✘ not separable'}: {html.escape(diff_text(entry, upper, cell, metric))}; {same}",
                    str(int(entry["separable"])),
                ),
                (html.escape(wilcoxon), "1" if winner else "0"),
                (f'<span class="relation-{relation}">{html.escape(sentence)}</span>', AGAINST_SOURCE_ORDER[relation]),
            ]
        )
    level = format_level(published["ci_level"])
    correction = "Bonferroni" if published["correction"] == "bonferroni" else "no correction (one pair)"
    headers = [
        "pair",
        f"source: bootstrap CI ({correction}, {level}, B = {count(published['n_resamples'])})",
        f"segbench: same correction ({level}, B = {count(ours['n_resamples'])})",
        "Wilcoxon-Holm (one-sided, all ordered pairs)",
        "Wilcoxon-Holm versus the source",
    ]
    return table(headers, rows, "The source's verdicts, reproduced, and what Wilcoxon-Holm changes", "source-pairs")


def sensitivity(variant: Variant, link_of: Callable[[str, str], str]) -> str:
    """One sensitivity variant beside the baseline: per structure and metric, Kendall's tau, the pairs that flip,
    a changed #1 or co-winner set, and how many Wilcoxon-Holm verdicts change."""
    rows: list[list[TableCell]] = []
    for structure, by_metric in sorted(variant["cells"].items()):
        for metric, c in sorted(by_metric.items()):
            if not c["ranked"]:
                continue
            where = f'<a href="{link_of(structure, metric)}">{html.escape(structure)} {html.escape(metric)}</a>'
            flips = ", ".join(f"{html.escape(a)} / {html.escape(b)}" for a, b in c["flipped_pairs"])
            top = (
                f"{html.escape(', '.join(c['top']['baseline']))} → <strong>{html.escape(', '.join(c['top']['variant']))}</strong>"
                if c["top_changed"]
                else "same"
            )
            co = (
                f"{html.escape(', '.join(c['co_winners']['baseline']) or 'none')} → "
                f"<strong>{html.escape(', '.join(c['co_winners']['variant']) or 'none')}</strong>"
                if c["co_winners_changed"]
                else "same"
            )
            rows.append(
                [
                    (where, f"{structure} {metric}"),
                    (fmt(c["kendall_tau"], 3), c["kendall_tau"]),
                    (flips or "none", len(c["flipped_pairs"])),
                    (top, int(c["top_changed"])),
                    (co, int(c["co_winners_changed"])),
                    (str(len(c["verdicts_changed"])), len(c["verdicts_changed"])),
                ]
            )
    return table(
        ["structure / metric", "Kendall tau", "pairs that flip", "#1", "co-winners (not separable from #1)", "Wilcoxon-Holm verdicts changed"],
        rows,
        css="sensitivity",
    )


def clustered(structures: dict[str, Structure], link_of: Callable[[str, str], str]) -> str:
    """Per structure and metric: the two-stage cluster bootstrap beside the case bootstrap (docs/methodology.md, 5.16)."""
    rows: list[list[TableCell]] = []
    for structure, block in sorted(structures.items()):
        for metric, cell in sorted(block["metrics"].items()):
            c = cell.get("clustered")
            if not c:
                continue
            ratios = sorted(e["width_ratio"] for e in c["models"].values() if e["width_ratio"] is not None)
            median = ratios[len(ratios) // 2] if ratios else None
            order = (cell.get("ranking") or {}).get("order") or []
            first = order[0] if order else None
            p1 = c["p_rank1"][first] if first else None
            separable = [sum(p[k] for p in c["pairwise"]) for k in ("case_separable", "separable")]
            head = next((p for p in c["pairwise"] if {p["a"], p["b"]} == set(order[:2])), None) if len(order) > 1 else None
            words = {True: "separable", False: "not separable"}  # the #1-versus-#2 difference's CI, by case and by cluster
            first_second = f"{words[head['case_separable']]} / {words[head['separable']]}" if head else "n/a"
            rows.append(
                [
                    (f'<a href="{link_of(structure, metric)}">{html.escape(structure)}</a>', structure),
                    (html.escape(metric), metric),
                    (str(c["n_clusters"]), c["n_clusters"]),
                    (ratio(median), median),
                    (f"{ratio(ratios[0])} - {ratio(ratios[-1])}" if ratios else "n/a", ratios[0] if ratios else None),
                    (html.escape(first or "n/a"), first),
                    (f"{fmt(p1['case'], 3)} / {fmt(p1['cluster'], 3)}" if p1 else "n/a", p1["cluster"] if p1 else None),
                    (f"{separable[0]} / {separable[1]} of {len(c['pairwise'])}", separable[1]),
                    (first_second, first_second),
                ]
            )
    headers = [
        "structure",
        "metric",
        "clusters",
        "median width ratio",
        "range",
        "#1 (case bootstrap)",
        "#1 P(rank 1) case / cluster",
        "separable pairs case / cluster",
        "#1 versus #2 case / cluster",
    ]
    return table(headers, rows, caption="Cluster versus case bootstrap")
