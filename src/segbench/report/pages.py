"""HTML pages: index, one overview page per dataset, one page per dataset structure, methodology.

Pages are ``string.Template`` strings filled from the results JSON; plots come from ``figures``.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from string import Template
from typing import Any

from plotly.offline import get_plotlyjs

from segbench.stats import calibration
from segbench.stats.audited import MARGIN
from segbench.stats.heads import ci_words
from segbench.stats.verdicts import format_level

from . import figures, tables
from .assets import CSS, JS
from .common import (
    against_source,
    audit_of,
    coverage_notes,
    disclosure,
    display_order,
    estimate,
    fmt,
    format_points,
    identical_counts,
    identical_note,
    identical_text,
    kind,
    own_case_lines,
    p_rank1_text,
    pair,
    slug,
    source_co_winners,
    ties_note,
    unit_sentence,
    verdict_html,
)
from .lesions import lesion_section

Results = dict[str, Any]

PAGE = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title>
$head</head><body>
<nav>$nav</nav>
<main>
$body
</main>
$tail
</body></html>
""")


def dataset_page_name(results: Results) -> str:
    """File name of a dataset's overview page."""
    return f"{slug(results['dataset']['name'])}.html"


def structure_page_name(results: Results, structure: str) -> str:
    """File name of the page with every plot of one structure of a dataset."""
    return f"{slug(results['dataset']['name'])}--{slug(structure)}.html"


def _inline_script(code: str) -> str:
    return "<script>" + code.replace("</script", "<\\/script") + "</script>"


def render(title: str, body: str, nav: str, inline: bool = False) -> str:
    """A whole page; plotly.js is loaded only where there is a plot. ``inline`` puts styles and scripts
    into the page itself (one self-contained file) instead of linking the site's shared files."""
    plots = 'class="plotly-graph-div"' in body
    if inline:
        head = f"<style>{CSS}</style>\n" + (_inline_script(get_plotlyjs()) + "\n" if plots else "")
        tail = _inline_script(JS)
    else:
        head = '<link rel="stylesheet" href="site.css">\n' + ('<script src="plotly.min.js"></script>\n' if plots else "")
        tail = '<script src="site.js"></script>'
    return PAGE.substitute(title=html.escape(title), nav=nav, body=body, head=head, tail=tail)


def nav_bar(all_results: list[Results], current: Results | None = None) -> str:
    """Links to the index, every dataset and the methodology; the current dataset's structures below."""
    links = ['<a href="index.html">segbench</a>']
    links += [f'<a href="{dataset_page_name(r)}">{html.escape(r["dataset"]["name"])}</a>' for r in all_results]
    links.append('<a href="methodology.html">methodology</a>')
    sub = ""
    if current is not None:
        items = [
            f'<a href="{structure_page_name(current, s)}">{html.escape(s)}</a>' for s in sorted(current["analysis"]["structures"])
        ]
        sub = f'<div class="sub">{html.escape(current["dataset"]["name"])} structures: {" ".join(items)}</div>'
    return " ".join(links) + sub


def _notes(results: Results) -> str:
    """Plain statements about simulated, published and contaminated models on this dataset."""
    kinds = {kind(m) for m in results["models"].values()}
    notes = []
    if "simulated" in kinds:
        notes.append("Models marked SIMULATED are seeded error models applied to the reference label maps, not real "
                     "segmentation models; they exercise the pipeline and the statistics.")
    if "published" in kinds:
        sources = sorted({m.get("source") or "source not given" for m in results["models"].values() if kind(m) == "published"})
        notes.append("Models marked PUBLISHED are per-case scores imported from a publication (no masks were re-scored): "
                     + html.escape("; ".join(sources)) + ".")
    if results["dataset"].get("reference") == "PSEUDO-REFERENCE":
        notes.append("PSEUDO-REFERENCE: this dataset's references are a model's output ("
                     + html.escape(results["dataset"].get("reference_note") or "not a manual annotation")
                     + "). Every score here measures agreement with that model, not accuracy.")
    if identical := identical_note(results):  # a simulated model that changed nothing there, or a model that returned the reference
        notes.append(html.escape(identical))
    notes += [html.escape(note) for note in coverage_notes(results)]
    contaminated = sorted(n for n, m in results["models"].items() if m.get("contaminated"))
    if contaminated:
        notes.append("Trained on this data, so shown but left out of ranks, tests and winners: "
                     + html.escape(", ".join(contaminated)) + ".")
    return "".join(f'<p class="note">{n}</p>' for n in notes)


def _kinds(models: dict[str, Any]) -> str:
    """'3 SIMULATED, 1 PUBLISHED' style count of model kinds."""
    counts: dict[str, int] = {}
    for model in models.values():
        counts[kind(model)] = counts.get(kind(model), 0) + 1
    return ", ".join(f"{n} {k.upper()}" for k, n in sorted(counts.items()))


def index_page(all_results: list[Results], calibration: bool = False, interactive: str | None = None) -> str:
    """Entry page: one line per dataset, then the calibration audit's page (when the site has one) and the
    interactive benchmark's site (``interactive``: its index's address relative to this site)."""
    items = []
    for r in all_results:
        s = r["analysis"]["structures"]
        items.append(
            f'<li><a href="{dataset_page_name(r)}">{html.escape(r["dataset"]["title"])}</a>: '
            f"{len(r['models'])} models ({_kinds(r['models'])}), {len(s)} structures, "
            f"metrics {html.escape(', '.join(r['metrics']))}</li>"
        )
    others = []
    if calibration:
        others.append(f'<li><a href="{CALIBRATION_PAGE}">Calibration audit</a>: how often the CIs cover the truth and how '
                      "often \"separable\" is wrong, measured on simulated models of known quality and on real models' published "
                      "per-case scores.</li>")
    if interactive:
        others.append(f'<li><a href="{html.escape(interactive)}">Interactive benchmark</a>: promptable models on the box-and-click '
                      "protocol, a site of its own built by the interactive pipeline (<code>dvc repro interactive/dvc.yaml</code>; "
                      "until that has run, the link leads nowhere).</li>")
    body = (
        "<h1>segbench leaderboards</h1>"
        "<p>Every score with a confidence interval, ranking stability, and which pairs of models are "
        "separable at all. See the <a href=\"methodology.html\">methodology</a> for the exact protocol.</p>"
        f"<h2>Leaderboards</h2><ul>{''.join(items)}</ul>"
        + (f"<h2>Also</h2><ul>{''.join(others)}</ul>" if others else "")
    )
    return render("segbench", body, nav_bar(all_results))


def _dataset_body(results: Results, link: Callable[[str, str], str]) -> str:
    """The overview of a dataset, the answer first; ``link(structure, metric)`` is where a structure's leaderboard of a metric is."""
    d = results["dataset"]
    structures = sorted(results["analysis"]["structures"])
    return (
        f"<h1>{html.escape(d['title'])}</h1>"
        + _unit_headline(results)
        + tables.answers(results, link)
        + _notes(results)
        + f"<p>Licence: {html.escape(d.get('licence') or 'not given')}. Cite: {html.escape(d.get('citation') or 'not given')}. "
        f"Data version <code>{html.escape(str(d.get('version') or 'not given'))}</code>. Each structure's page has the full "
        "leaderboards and plots: " + ", ".join(f'<a href="{link(s, "")}">{html.escape(s)}</a>' for s in structures) + ".</p>"
        + _import_summary(d)
        + _interaction_curves(results)
        + disclosure("How firm is #1: P(rank 1), leave-one-out, cases needed", tables.overview(results, link))
        + _source_summary(results, link)
        + _consensus_section(results)
        + _clustered_section(results, link)
        + _alignment_summary(results, link)
        + _sensitivity_section(results, link)
        + lesion_section(results)
        + tables.models_table(results["models"], identical_counts(results))
    )


def _unit_headline(results: Results) -> str:
    """A clustered set's first line (``common.unit_sentence``), its sensitivity analysis linked; nothing for a set
    without a cluster field."""
    sentence = unit_sentence(results)
    if not sentence:
        return ""
    return (f'<p class="headline" id="unit">{html.escape(sentence)} '
            '<a href="#clustered">The clustered bootstrap, cell by cell</a>.</p>')


def _import_summary(dataset: dict[str, Any]) -> str:
    """A published set's import summary as one line (docs/published.md); nothing for other datasets."""
    summary = dataset.get("import_summary")
    return f'<p class="note">Import: {html.escape(summary["text"])}.</p>' if summary else ""


SENSITIVITY_NAMES = {"drop_failed": "failed cases dropped", "zero": "failed cases scored 0"}


def _sensitivity_section(results: Results, link: Callable[[str, str], str]) -> str:
    """Dataset page: the leaderboard under the other metric definitions and missing-value policies (docs/methodology.md, 5.17)."""
    sens = results.get("sensitivity")
    if not sens:
        return ""
    parts = []
    for choice, what, baseline in (("profiles", "metric-definition profile", sens["profiles"]["baseline"]),
                                   ("missing_policy", "missing-value policy", sens["missing_policy"]["baseline"])):
        for name, variant in sorted(sens[choice]["variants"].items()):
            title = f"{what} <code>{html.escape(name)}</code>" + (f" ({SENSITIVITY_NAMES[name]})" if name in SENSITIVITY_NAMES else "")
            if not variant["run"]:
                parts.append(f"<h3>{title}</h3><p>Not run: {html.escape(variant['reason'])}.</p>")
                continue
            s = variant["summary"]
            parts.append(f'<h3 id="sensitivity-{slug(name)}">{title} instead of <code>{html.escape(baseline)}</code></h3>'
                         f"<p>{s['n_cells_with_flips']} of {s['n_cells']} leaderboards change order ({s['n_flipped_pairs']} pairs flip); "
                         f"#1 changes in {s['n_top_changed']}, the co-winner set in {s['n_co_winners_changed']}; "
                         f"{s['n_verdicts_changed']} Wilcoxon-Holm verdicts change.</p>"
                         + tables.sensitivity(variant, link))
    if not parts:
        return ""
    return ('<h2 id="sensitivity">Implementation sensitivity</h2>'
            "<p>The same cases, statistics and seed with one choice changed: how the surface metrics are defined "
            "(another implementation's definitions, from the same masks) or how failed cases count "
            "(docs/methodology.md, 5.17). Kendall's tau compares the two rankings; a pair flips when the order of two models "
            "reverses.</p>" + "".join(parts))


def _interaction_curves(results: Results) -> str:
    """An interactive dataset's DSC and NSD per step (box, then each click) with CIs, per structure (docs/interactive.md)."""
    if not results["dataset"].get("interactive"):
        return ""
    structures, settings = results["analysis"]["structures"], results["analysis"]["settings"]
    steps = sum(1 for m in results["metrics"] if m.startswith("DSC_") and m.removeprefix("DSC_").isdigit())
    order = sorted(structures, key=lambda s: (s != "mean_over_classes", s))  # the challenge's own number first
    parts = ["<h2>Interaction curves</h2><p>DSC and NSD (2 mm) after the box prompt and after each of the "
             f"{steps - 1} simulated clicks, mean over cases with its {html.escape(ci_words(settings))}. <code>mean_over_classes</code> is "
             "the challenge's per-case number (the mean over the case's classes); each organ follows. DSC_AUC and NSD_AUC "
             "are the areas under the click steps' curve (the box step is not in them); TotalRunningTime is lower-is-better.</p>"]
    for structure in order:
        parts.append(f"<h3>{html.escape(structure)}</h3>")
        parts.append(_plots([figures.step_curves(structures[structure], results["models"], name, steps, settings) for name in ("DSC", "NSD")],
                            f"steps-{slug(structure)}"))
    return "".join(parts)


def dataset_page(results: Results, all_results: list[Results]) -> str:
    """Overview of one dataset: licence, models, the #1-versus-#2 verdict of every structure and metric."""
    def link(structure: str, metric: str) -> str:
        return structure_page_name(results, structure) + (f"#{html.escape(metric)}" if metric else "")

    return render(results["dataset"]["title"], _dataset_body(results, link), nav_bar(all_results, results))


def standalone_dataset_page(results: Results) -> str:
    """A dataset's overview page followed by every structure's leaderboards and ranking plots, as one file
    that needs nothing else (styles, scripts and plotly inside, links within the page): for MLflow's artifact
    viewer. The per-case and subgroup plots, the slowest to draw, stay on the site's structure pages."""
    structures = sorted(results["analysis"]["structures"])

    def anchor(structure: str, metric: str) -> str:
        return slug(structure) + (f"--{slug(metric)}" if metric else "")

    body = _dataset_body(results, lambda s, m: f"#{anchor(s, m)}") + "".join(
        f'<section id="{anchor(s, "")}">{_structure_body(results, s, lambda m, s=s: anchor(s, m), per_case=False)}</section>'
        for s in structures
    )
    return render(results["dataset"]["title"], body, "segbench leaderboard: " + html.escape(results["dataset"]["name"]), inline=True)


SOURCE_PROCEDURES = """<p>A source that published its own analysis of its scores calls a pair of models
"distinguishable" when the paired-bootstrap CI of their mean difference, at the level Bonferroni-adjusted over
the pairs of one structure and metric, excludes 0. segbench recomputes those CIs
under the same correction from the same per-case values, with its own resamples, and adds its Wilcoxon-Holm
map: a one-sided Wilcoxon signed-rank test for every ordered pair, all p-values Holm-adjusted together. The two procedures ask different questions. The CI
is about the mean difference, which a few cases with large differences move and widen; the signed-rank test is
about how consistently, case by case, one model does better, whatever the size of each difference. So
Wilcoxon-Holm can separate a pair whose CI includes 0 (it adds a verdict), and fail to confirm a pair whose CI
excludes 0 (it withholds one). segbench's own leaderboard verdict calls a pair separable only when both
procedures separate it.</p>"""


def _source_text(results: Results) -> str:
    """One line: the source's bootstrap settings, and where the two procedures are explained (the methodology page)."""
    protocol = results["source_analysis"]["protocol"]
    return (f"<p>The source's own analysis: paired-bootstrap CIs, Bonferroni-adjusted (B = {protocol['n_resamples']:,}, "
            f"seed {protocol['seed']}), beside segbench's Wilcoxon-Holm map; how the two differ: "
            '<a href="methodology.html#source-procedures">methodology</a>.</p>')


def _source_summary(results: Results, link: Callable[[str, str], str]) -> str:
    """Dataset page: per structure and metric, the co-winners by each procedure and every pair where they differ."""
    if "source_analysis" not in results:
        return ""
    items = []
    for structure, cells in sorted(results["source_analysis"]["structures"].items()):
        for metric, published in cells.items():
            cell = results["analysis"]["structures"][structure]["metrics"][metric]
            where = f'<a href="{link(structure, f"{metric}-source")}">{html.escape(structure)} {html.escape(metric)}</a>'
            differences = [against_source(cell, theirs, e["a"], e["b"]) for e in published["segbench"]["pairwise"]
                           if (theirs := pair(published, e["a"], e["b"])) is not None]  # pairs both rank
            shown = [html.escape(sentence) for relation, sentence in differences if relation != "agree"]
            items.append(f"<li>{where}: {_co_winners(cell, published)} "
                         + (" ".join(shown) if shown else "The two procedures agree on every pair.") + "</li>")
    return ("<h2>The source's verdicts and Wilcoxon-Holm</h2>" + _source_text(results) + f"<ul>{''.join(items)}</ul>")


def _consensus_section(results: Results) -> str:
    """Dataset page: challengeR's consensus over all structures and metrics, as a podium and a ranking heatmap."""
    con = results["analysis"].get("consensus")
    if not con or len(con["order"]) < 2:
        return ""
    key = slug(results["dataset"]["name"])
    first = con["order"][0]
    return ('<h2 id="consensus">Consensus across structures and metrics</h2>'
            f"<p>challengeR's consensus: each model's mean rank over the {len(con['tasks'])} structure x metric rankings "
            f"(by mean; ties at their average rank). #1 <strong>{html.escape(first)}</strong>, mean rank "
            f"{fmt(con['mean_rank'][first], 2)}, consensus rank 1 in {fmt(con['p_rank1'][first] * 100, 1)}% of "
            f"{con['n_resamples']:,} bootstrap resamples (docs/methodology.md, 5.15).</p>"
            + _plots([figures.podium(con, results["models"]), figures.ranking_heatmap(con, results["models"])], f"{key}-consensus"))


def _clustered_section(results: Results, link: Callable[[str, str], str]) -> str:
    """Dataset page: the two-stage cluster bootstrap's intervals beside the case bootstrap's, when a cluster field is set."""
    clusters = results["analysis"].get("clusters")
    structures = results["analysis"]["structures"]
    if not clusters or not any(c.get("clustered") for b in structures.values() for c in b["metrics"].values()):
        return ""
    field = html.escape(clusters["field"])
    return ('<h2 id="clustered">Clustered bootstrap</h2>'
            f"<p>The cases cluster by <code>{field}</code>. Besides the case bootstrap, every CI, P(rank 1) and pairwise CI was "
            f"also taken from a two-stage bootstrap: the {field} clusters drawn with replacement, then the cases within each drawn "
            "cluster (cases without a value form one cluster). A width ratio above 1 is how much wider the interval is once "
            "cases of one cluster are not taken as independent. Both use the cases every model has (docs/methodology.md, 5.16).</p>"
            + _changed_cells(clusters.get("verdict_changes"))
            + tables.clustered(structures, link)
            + _plots([figures.cluster_widths(structures, results["models"], results["analysis"]["settings"])], f"{slug(results['dataset']['name'])}-clustered"))


def _changed_cells(changes: dict[str, Any] | None) -> str:
    """The cells whose #1-versus-#2 separability or co-winner set the clustered bootstrap changes, one line each."""
    if not changes:
        return ""
    lines = [f"{what}: {html.escape(', '.join(cells)) if cells else 'none'}." for what, cells in (
        ("#1 versus #2 separated differently", changes["first_second"]), ("Co-winner set differs", changes["co_winners"]))]
    return f"<p>{' '.join(lines)}</p>"


def _alignment_summary(results: Results, link: Callable[[str, str], str]) -> str:
    """Dataset page: which case alignment produced the pairwise numbers, and the cells where the other one changes a verdict."""
    primary = results["analysis"]["settings"].get("case_alignment", "shared")
    items = []
    for structure, block in sorted(results["analysis"]["structures"].items()):
        for metric, cell in sorted(block["metrics"].items()):
            if not cell.get("alignment"):
                continue
            text = _alignment_text(cell)
            where = f'<a href="{link(structure, f"{metric}-alignment")}">{html.escape(structure)} {html.escape(metric)}</a>'
            items.append(f"<li>{where}: {text}</li>")
    if not items:
        return ""
    source = results["dataset"].get("source_case_alignment")
    stated = f" The source's own significance maps use <code>{html.escape(source)}</code>." if source else ""
    return ('<h2 id="case-alignment">Case alignment</h2>'
            f"<p>The pairwise CIs and significance maps here compare each pair on <code>{html.escape(primary)}</code> cases "
            f"({html.escape(ALIGNMENTS[primary])}); the models of this set report different cases, so the other protocol "
            f"was run as well.{stated} Where the choice changes a verdict (docs/methodology.md, 5.13):</p><ul>{''.join(items)}</ul>")


ALIGNMENTS = {"shared": "every pair on the cases every model has",
              "pairwise_complete": "each pair on the cases both of its models have, Touchstone's protocol"}


def _alignment_text(cell: dict[str, Any]) -> str:
    """'Under pairwise_complete the co-winners change to A, B; 3 Wilcoxon verdicts and 2 separability verdicts differ.'"""
    other = cell["alignment"]
    changes = other["changes"]
    co = other["significance"]["co_winners"]
    head = (f"<strong>co-winners change</strong> to {html.escape(', '.join(co))} (here: "
            f"{html.escape(', '.join(cell['significance']['co_winners']))})" if changes["co_winners"] else "same co-winners")
    pairs = ", ".join(f"{html.escape(a)} over {html.escape(b)}" for a, b in changes["significant"])
    return (f"under <code>{html.escape(other['protocol'])}</code>: {head}; {len(changes['significant'])} Wilcoxon verdict(s) "
            f"differ{f' ({pairs})' if pairs else ''}, {len(changes['separable'])} separability verdict(s) differ.")


def _co_winners(cell: dict[str, Any], published: dict[str, Any]) -> str:
    """'Co-winners by the source's CIs: A, B, C; by Wilcoxon-Holm: A, B.'"""
    by_ci = source_co_winners(published, display_order(cell))
    by_rank = (cell.get("significance") or {}).get("co_winners") or []
    return (f"Co-winners by the source's CIs: {html.escape(', '.join(by_ci))}; "
            f"by Wilcoxon-Holm: {html.escape(', '.join(by_rank))}.")


def structure_page(results: Results, structure: str, all_results: list[Results]) -> str:
    """Everything about one structure: per metric the leaderboard and the five plots, then leave-one-out."""
    title = f"{results['dataset']['title']}: {structure}"
    return render(title, _structure_body(results, structure, html.escape), nav_bar(all_results, results))


def _structure_body(results: Results, structure: str, anchor: Callable[[str], str], per_case: bool = True) -> str:
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
        _notes(results),
        f"<p>{block['n_cases']} cases shared by every model; {block['n_absent']} cases without this structure and "
        f"{block['n_unshared']} not scored for every model are excluded.</p>",
        _source_text(results) if structure in (results.get("source_analysis") or {}).get("structures", {}) else "",
    ]
    for metric, cell in block["metrics"].items():
        key = f"{base}-{slug(metric)}"
        parts.append(f'<h2 id="{anchor(metric)}">{html.escape(metric)}</h2>')
        parts.append(_headline(cell, metric))
        parts.append(tables.leaderboard(cell, models, metric, audit_of(results, structure, metric), structure, settings))
        parts += [f'<p class="note own-cases">{html.escape(line)}</p>' for line in own_case_lines(results, structure, metric)]
        plots = [figures.forest(cell, models, metric, settings)] + ([figures.blob(cell, models, settings)] if cell.get("ranking") else [])
        parts.append(disclosure("Plots: means with CIs, rank frequencies", _plots(plots, f"{key}-a")))
        if cell.get("significance") and len(cell["ranking"]["order"]) > 1:
            alignment = settings.get("case_alignment", "shared")
            note = (f'<p class="note" id="{anchor(f"{metric}-alignment")}">Pairwise CIs and the significance map: '
                    f"<code>{html.escape(alignment)}</code> cases ({html.escape(ALIGNMENTS[alignment])})"
                    + (f"; {_alignment_text(cell)}" if cell.get("alignment") else ".") + "</p>")
            parts.append(disclosure("Significance map (Wilcoxon-Holm) and case alignment",
                                     note + _plots([figures.significance_map(cell, models)], f"{key}-sig")))
        if cell.get("schemes") and cell.get("ranking") and len(cell["ranking"]["order"]) > 1:
            parts.append(disclosure("Rank under each ranking scheme", _plots([figures.scheme_lines(cell, models)], f"{key}-schemes")))
        published = (results.get("source_analysis") or {}).get("structures", {}).get(structure, {}).get(metric)
        if published:
            parts.append(f'<details id="{anchor(f"{metric}-source")}"><summary>The source\'s verdicts and Wilcoxon-Holm: '
                         f"{_co_winners(cell, published)}</summary>{tables.source_pairs(cell, published, metric)}</details>")
        if not per_case:
            continue
        parts.append(disclosure("Per-case scores", _plots([figures.per_case(cell, models, metric, block["case_ids"])], f"{key}-cases")))
        fields = list(cell.get("subgroups") or {})
        if fields:
            subs = [figures.subgroups(cell, models, metric, f, settings) for f in fields]
            parts.append(disclosure(f"Subgroups: {html.escape(', '.join(fields))}", _plots(subs, f"{key}-sub")))
    if any(cell.get("loo") for cell in block["metrics"].values()):
        parts.append(f'<h2 id="{anchor("leave-one-out")}">Leave-one-case-out</h2>')
        parts.append(disclosure("Ranks without each case", _plots([figures.leave_one_out(block)], f"{base}-loo")))
    return "\n".join(parts)


def _plots(figs: list, prefix: str) -> str:
    """Figures with fixed ids; each labelled with its title for screen readers."""
    return "".join(
        f'<figure class="plot" role="img" aria-label="{html.escape(re.sub("<[^>]+>", " ", fig.layout.title.text or ""))}">'
        f'{figures.to_div(fig, f"{prefix}-{i}")}</figure>'
        for i, fig in enumerate(figs)
    )


def _headline(cell: dict[str, Any], metric: str) -> str:
    """The cell's verdict as the statistics wrote it, the co-winners, and power and leave-one-out beside it."""
    v = cell.get("verdict")
    if not v or v["code"] == "single_model":
        return '<p class="headline">Fewer than two ranked models: nothing to compare.</p>'
    first = v["first"]
    text = (f"#1 <strong>{html.escape(first)}</strong> ({html.escape(estimate(cell['models'][first], cell, metric))}, "
            f"P(rank 1) = {html.escape(p_rank1_text(cell, first))}) versus #2 <strong>{html.escape(v['second'])}</strong>: "
            f"{verdict_html(v['pairs'][0])}.")
    power = cell.get("power") or {}
    if power.get("n_required") is not None:
        text += (f" Separating them at {fmt(power['power'] * 100, 0)}% power would need about {power['n_required']} cases "
                 f"(this set has {power['n_cases']}).")
    text += f" Co-winners (not separable from #1, ranking by mean): {html.escape(', '.join(v['co_winners']))}."
    if ties_note(cell):
        text += f" {ties_note(cell)}"
    loo = cell.get("loo")
    if loo:
        text += (f" Removing one case changes the winner for {fmt(loo['winner_change_share'] * 100, 1)}% of cases "
                 f"and some rank for {fmt(loo['any_rank_change_share'] * 100, 1)}%.")
    return f'<p class="headline">{text}</p>'


METHODOLOGY_DOC = "docs/methodology.md"

PROTOCOL = Template("""
<h3>Metric conventions (section 3)</h3>
<p>Metrics: $metrics. $grid$hd95 NSD counts the surface area within the region's tolerance of the other
surface; tolerances: $tolerances.</p>
<h3>Empty masks and missing predictions (section 4)</h3>
<p>$scoring A structure absent from the reference in a case is excluded for that case for every model and
counted.</p>
<h3>Statistics (section 5)</h3>
<ol>
<li>Shared cases (5.2): only the cases every model has for a structure enter its estimates, ranks and tests,
so every comparison is paired.</li>
<li>Estimates (5.3): mean, SD, median and n per model; $confidence CI of the mean: $ci_method; bootstrap over
cases with B = $n_resamples resamples, seed $seed; one resample matrix per structure, shared by every metric,
model and subgroup.</li>
<li>Ranking stability (5.4): every resample ranked by the mean (higher better for overlap, lower for
distances; ties share the best rank). Reported: P(rank 1), mean and median rank, the central $confidence
rank interval, the rank frequencies (blob plot) and Kendall's τ-b of each resampled ranking to the full-data
ranking.</li>
<li>Pairwise separability (5.5): for every pair of ranked models, a paired bootstrap CI of the mean difference;
$pairwise $separable</li>
<li>Significance map (5.6): for every ordered pair, a one-sided Wilcoxon signed-rank test of "better than" on
the shared cases (zero differences dropped; a pair whose differences are all zero is never significant); all
K(K−1) p-values of a structure and metric Holm-adjusted together, α = $alpha. Every p-value is printed with the
direction it tests ("A better than B, p_adj = …").</li>
<li id="verdicts">Verdicts (5.7), of a model against the next one down: "separable" when the test of the mean
difference (5.5) separates them and Wilcoxon-Holm finds the upper model better; "aggregation disagrees" when one
test separates them and the per-case evidence points the other way (the mean favours one model, most cases the
other); "borderline" (naming which) when only one test separates them, both leaning the same way; "not separable"
when neither does. Co-winners, on the leaderboard's ranking by mean: #1 and every model not separable from #1.</li>
<li>Leave-one-case-out (5.8): the ranking without each case; the share of cases whose removal changes the
winner, and any rank.</li>
<li>Subgroups (5.9) by $subgroup_fields: each model's mean and CI per group from the same resamples; over
the groups with at least $subgroup_min_cases cases, Kruskal-Wallis per model; where p &lt; $alpha, two-sided
Mann-Whitney U for every pair of those groups, Bonferroni-adjusted over the pairs.</li>
<li>Contamination (5.10): a model trained on the dataset is shown, marked, and left out of ranks, pairwise
tests, co-winners, leave-one-out and power.</li>
<li>Power (5.11): from the paired differences of #1 and #2, the number of cases at which a two-sided paired
t-test at α = $alpha reaches $power% power (noncentral t); a guide beside the verdict, which is stricter.</li>
</ol>
""")


SCORED = ("Scored per case and structure by segbench: both masks empty gives Dice 1, NSD 1 and distances 0; exactly "
          "one empty, or no prediction file for the case, gives Dice 0, NSD 0 and distances equal to the diagonal of "
          "the image volume in mm, flagged worst-case and kept in every aggregate (failures count against the model).")
IMPORTED = ("Per-case scores as published by the source (no masks were re-scored); its conventions for empty masks "
            "and failures apply.")
GRID = ("Prediction and reference must share one grid (shape and affine); distances use the reference's voxel spacing "
        "in array-axis order, checked against the affine. ")
HD95_DEFINITIONS = {
    "segauge_pooled_area_weighted": "the 95th percentile of the area-weighted surface distances of both directions "
                                    "pooled (DeepMind's surface-distance and MONAI report the larger of the two "
                                    "one-directional 95th percentiles instead; the two are not comparable)",
    "deepmind_max_directed_area_weighted": "DeepMind surface-distance's definition (metric-definition profile deepmind): per "
                                           "direction, the first grid-surfel distance whose cumulative area share reaches 95%, "
                                           "and the larger of the two directions; not comparable with segauge's pooled HD95",
}
PAIRWISE = {
    "holm": "family-wise control at α = {alpha} over the K(K−1)/2 pairs by Holm's step-down on the CI levels (pairs "
            "ordered by bootstrap p-value, level 1 − α/(P − k + 1) at step k, stopping at the first CI that contains 0).",
    "bonferroni": "family-wise control at α = {alpha} over the P = K(K−1)/2 pairs by Bonferroni: every CI at level "
                  "1 − α/P.",
}
CI_METHODS = {"percentile": "percentile bootstrap", "bca": "bias-corrected and accelerated (BCa) bootstrap",
              "skew_t": "Hall's skewness-corrected t (jackknife SE and skewness)"}
#: the CI level rule (stats.ci_level) in the protocol's estimates item, after the CI method
CI_LEVEL_WORDS = {
    "audited": ", computed for each leaderboard cell at the level at which the calibration audit found it to cover {confidence} "
               "on a population like the cell's (never below {confidence}; the CI's tooltip names it), and at {confidence} "
               "where no population was calibrated",
    "nominal": "",
}
SEPARABLE = {
    "sign_flip": "A pair is separable when the sign-flip permutation test of its mean difference ({n_resamples} random "
                 "flips of the per-case differences' signs; beyond the last flip, Pinelis's tail bound), Holm-adjusted at α = {alpha} "
                 "over the pairs, gives p < α; "
                 "the Δ interval printed beside the verdict is the one that decides it, at the family-wise level the table states once.",
    "bootstrap_ci": "A pair is separable by bootstrap when its adjusted CI excludes 0.",
}


def _protocol(results: Results) -> str:
    """The methodology (docs/methodology.md, sections 3-5) filled with the parameters this results file was computed with."""
    s = results["analysis"]["settings"]
    directions = ", ".join(
        f"{html.escape(m)} ({'higher' if v['higher_is_better'] else 'lower'} is better)" for m, v in results["metrics"].items()
    )
    regions = {r: v["nsd_tolerance_mm"] for r, v in (results["dataset"].get("regions") or {}).items()}
    stated = results["dataset"].get("nsd_tolerance_mm") or {}  # a published set whose source states its tolerance
    tolerances = ", ".join(f"{html.escape(r)} {mm:g} mm" for r, mm in (regions or stated).items()) or "as in the source"
    if stated and not regions:
        tolerances += " (as published by the source)"
    definition = str(results.get("hd95_definition"))
    explained = f": {HD95_DEFINITIONS[definition]}" if definition in HD95_DEFINITIONS else ""
    alpha = f"{s['alpha']:g}"
    imported = all(kind(m) == "published" for m in results["models"].values())
    return PROTOCOL.substitute(
        metrics=directions,
        grid="" if imported else html.escape(GRID),
        scoring=IMPORTED if imported else SCORED,
        hd95=f"HD95 definition: <code>{html.escape(definition)}</code>{html.escape(explained)}." if "hd95" in results["metrics"] else "",
        tolerances=tolerances,
        confidence=format_level(s["confidence"]),
        ci_method=html.escape(CI_METHODS[s["ci_method"]] + CI_LEVEL_WORDS[s.get("ci_level", "nominal")].format(confidence=format_level(s["confidence"]))),
        n_resamples=f"{s['n_resamples']:,}",
        seed=s["seed"],
        pairwise=html.escape(PAIRWISE[s["multiple_comparison"]].format(alpha=alpha)),
        separable=html.escape(SEPARABLE[s.get("pairwise_test", "bootstrap_ci")].format(alpha=alpha, n_resamples=f"{s['n_resamples']:,}")),
        alpha=alpha,
        subgroup_fields=html.escape(", ".join(results["analysis"].get("subgroup_fields") or []) or "none"),
        subgroup_min_cases=s["subgroup_min_cases"],
        power=f"{s['power'] * 100:g}",
    )


def _protocol_items(text: str) -> list[str]:
    """The protocol's paragraphs and list items, the units in which two datasets' protocols are compared."""
    return [m.strip() for m in re.findall(r"<(?:p|li)[^>]*>(.*?)</(?:p|li)>", text, flags=re.S)]


def methodology_page(all_results: list[Results]) -> str:
    """The protocol with the parameters actually used, per group of datasets sharing them; licences and citations."""
    groups: dict[str, list[Results]] = {}
    for r in all_results:
        groups.setdefault(_protocol(r), []).append(r)
    parts = ["<h1>Methodology</h1>",
             f"<p>How segbench scores cases and compares models, in brief. The full methodology, with every rule and "
             f"default, is <code>{METHODOLOGY_DOC}</code> in the segbench repository; the section numbers below are "
             f"its sections. Every number on this site is read from the results files written by the compare stage; "
             f"the parameters below are read from those files too.</p>"]
    texts = list(groups)
    first = ", ".join(html.escape(r["dataset"]["name"]) for r in groups[texts[0]])
    parts.append(f'<h2 id="protocol">Protocol</h2><p>As used for {first}' + ("; the other sets differ only where said below" if len(texts) > 1 else "")
                 + f".</p>{texts[0]}")
    shared = set(_protocol_items(texts[0]))
    for text in texts[1:]:
        names = ", ".join(html.escape(r["dataset"]["name"]) for r in groups[text])
        differing = "".join(f"<li>{item}</li>" for item in _protocol_items(text) if item not in shared)
        parts.append(f"<h3>Where the protocol of {names} differs</h3><ul>{differing}</ul>")
    if any("source_analysis" in r for r in all_results):
        parts.append(f'<h2 id="source-procedures">Published analyses beside segbench\'s</h2>{SOURCE_PROCEDURES}')
    parts.append("<h2>Datasets</h2>")
    rows = [
        [
            (f'<a href="{dataset_page_name(r)}">{html.escape(r["dataset"]["name"])}</a>', r["dataset"]["name"]),
            (html.escape(r["dataset"].get("licence") or "not given"), r["dataset"].get("licence") or ""),
            (html.escape(r["dataset"].get("citation") or "not given"), r["dataset"].get("citation") or ""),
            (f"<code>{html.escape(str(r['dataset'].get('version') or '–'))}</code>", str(r["dataset"].get("version") or "")),
            (html.escape(str(r.get("segbench_version") or "–")), str(r.get("segbench_version") or "")),
            (html.escape(json.dumps(r["analysis"]["settings"], sort_keys=True)), ""),
        ]
        for r in all_results
    ]
    parts.append(tables.table(["dataset", "licence", "citation", "data version", "segbench", "settings"], rows,
                              "Datasets, licences and citations", "params"))
    sources = sorted({m["source"] for r in all_results for m in r["models"].values() if kind(m) == "published" and m.get("source")})
    if sources:
        parts.append("<h2>Published sources</h2><ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in sources) + "</ul>")
    return render("segbench methodology", "\n".join(parts), nav_bar(all_results))


CALIBRATION_PAGE = "calibration.html"


def _rate(entry: dict[str, Any], digits_: int = 1) -> str:
    return f"{100 * entry['rate']:.{digits_}f}% ± {100 * entry['mc_se']:.{digits_}f}"


def _span(rates: list[float]) -> str:
    """'90.0–93.9%' (or '5.0%' when every rate is the same), rates as shares."""
    low, high = f"{100 * min(rates):.1f}", f"{100 * max(rates):.1f}"
    return f"{low}%" if low == high else f"{low}–{high}%"


def calibration_takeaways(audit: dict[str, Any]) -> list[str]:
    """One line per structure and metric, read from the audit: the range of the leaderboard CI's coverage over the
    sample sizes, the range of the leaderboard verdict's type-I error among the equal-quality models, then the other
    procedures' for comparison."""
    method = audit["stats"]["ci_method"]
    board = calibration.verdict_procedure(audit["stats"])
    lines = []
    for structure, population in audit["population"].items():
        for metric in population["metrics"]:
            coverage = [r for r in audit["coverage"] if (r["structure"], r["metric"], r["method"]) == (structure, metric, method)]
            type1 = [r for r in audit["type1"] if (r["structure"], r["metric"]) == (structure, metric)]
            sizes = sorted({r["n"] for r in coverage})
            rates = {proc: _span([r["rate"] for r in type1 if r["procedure"] == proc]) for proc in dict.fromkeys(r["procedure"] for r in type1)}
            others = "; ".join(f"{PROCEDURE_NAMES.get(proc, proc.replace('_', ' '))} {span}" for proc, span in rates.items() if proc != board)
            levels = [r for r in audit.get("levels", []) if (r["structure"], r["metric"], r["method"]) == (structure, metric, method)]
            calibrated = (f", and at the audit-calibrated levels the leaderboards use ({_span([r['level'] for r in levels])}) "
                          f"{_span([r['rate'] for r in levels])} out of sample"
                          if levels and audit["stats"].get("ci_level") == "audited" else "")
            lines.append(f"{structure} {metric}: {format_level(audit['stats']['confidence'])} {method} CIs cover "
                         f"{_span([r['rate'] for r in coverage])} at the nominal level (n = {sizes[0]}..{sizes[-1]}){calibrated}; "
                         f"the separable verdict by "
                         f"{PROCEDURE_NAMES.get(board, board).removesuffix(' separates')} is wrong for equal models "
                         f"{rates.get(board, 'n/a')} (target {format_level(audit['stats']['alpha'])}); other rules: {others}")
    return lines


PROCEDURE_NAMES = {"separable_percentile": "bootstrap CI (percentile) separates", "separable_bca": "bootstrap CI (BCa) separates",
                   "separable_skew_t": "skew-corrected t CI separates", "signflip_holm": "sign-flip test (Holm) separates",
                   "wilcoxon_holm": "Wilcoxon-Holm separates"}


def _identical_summary(counts: dict[str, Any]) -> str:
    """'every model leaves 2 of 489 cases identical to the reference' when the counts agree, else one clause per model."""
    texts = {m: identical_text(c) for m, c in counts.items()}
    if len(set(texts.values())) == 1:
        return f"every model {next(iter(texts.values()))}"
    return "; ".join(f"{m} {t}" for m, t in texts.items())


def calibration_page(audit: dict[str, Any], all_results: list[Results]) -> str:
    """The calibration audit (calibration/results/audit.json): CI coverage by metric x n x method, the type-I error of
    the verdicts for equal-quality models, and power against n beside the paired-t formula."""
    ci_method = audit["stats"]["ci_method"]
    sizes = ", ".join(f"{html.escape(s)}: {b['n_cases']} cases" for s, b in audit["population"].items())
    parts = [
        "<h1>Calibration audit</h1>",
        f'<p class="note">The models of the simulated population are SIMULATED (seeded boundary errors of known size applied to the '
        f"reference label maps); {html.escape(', '.join(audit['equal']))} have the same error distribution (equal true quality)."
        + (" The real populations further down are PUBLISHED per-case scores of real models." if (audit.get("real") or {}).get("population") else "")
        + "</p>",
        f"<p>Do segbench's statistics keep their promises on real label maps? The population is every case scored "
        f"({sizes}); its mean is the truth. "
        f"For each n, {audit['draws']} samples of n cases were drawn with replacement and each was analysed as a leaderboard is "
        f"(B = {audit['n_resamples']} bootstrap resamples; the Wilcoxon map on the first {audit['wilcoxon_draws']} samples). "
        f"Rates carry their Monte-Carlo standard error. How it is computed: <code>{METHODOLOGY_DOC}</code>, "
        f"\"Calibration audit\". The leaderboards use the <b>{html.escape(ci_method)}</b> CI"
        + (", at the calibrated levels below" if audit["stats"].get("ci_level") == "audited" else "") + ".</p>",
        f"<p>Models: {html.escape(', '.join(audit['models']))}.</p>",
        *([f"<p>Cases identical to the reference (every audited structure Dice exactly 1; such a case shows no error of the "
           f"model): {html.escape(_identical_summary(audit['identical_to_reference']))}.</p>"]
          if audit.get("identical_to_reference") else []),
    ]
    parts.insert(1, '<h2 id="takeaways">In one line per metric</h2><ul class="takeaways">'
                 + "".join(f"<li>{html.escape(line)}</li>" for line in calibration_takeaways(audit)) + "</ul>")
    parts.append(_levels_section(audit))
    nominal, alpha = format_level(audit["stats"]["confidence"]), audit["stats"]["alpha"]
    for structure in audit["population"]:
        parts.append(f"<h2>{html.escape(structure)}</h2>")
        coverage = [r for r in audit["coverage"] if r["structure"] == structure]
        keys = sorted({(r["metric"], r["n"]) for r in coverage}, key=lambda k: (list(audit["population"][structure]["metrics"]).index(k[0]), k[1]))
        rows = []
        for metric, n in keys:
            by_method = {r["method"]: r for r in coverage if (r["metric"], r["n"]) == (metric, n)}
            row = [(html.escape(metric), metric), (str(n), n)]
            for method in sorted(by_method):
                r = by_method[method]
                row += [(_rate(r), r["rate"]), (f"{100 * r['miss_below']:.1f}% / {100 * r['miss_above']:.1f}%", r["miss_below"] + r["miss_above"])]
            rows.append(row)
        methods = sorted({r["method"] for r in coverage})
        headers = ["metric", "n"] + [h for m in methods for h in (f"{m} coverage", f"{m}: CI below / above the truth")]
        caption = f"{html.escape(structure)}: coverage of the {nominal} CI of a model's mean (target {nominal})"
        parts.append(disclosure(f"Coverage by metric, n and CI method ({len(rows)} rows)", tables.table(headers, rows, caption, "calibration")))
        type1 = [r for r in audit["type1"] if r["structure"] == structure]
        rows = [[(html.escape(r["metric"]), r["metric"]), (str(r["n"]), r["n"]), (html.escape(r["procedure"].replace("_", " ")), r["procedure"]),
                 (_rate(r), r["rate"]), (str(r["draws"]), r["draws"]),
                 ("exceeds" if r["rate"] > alpha + 2 * r["mc_se"] else "within", int(r["rate"] > alpha + 2 * r["mc_se"]))] for r in type1]
        parts.append(disclosure(f"Type-I error by metric, n and procedure ({len(rows)} rows)",
                                 tables.table(["metric", "n", "procedure", "type-I error", "samples", f"{format_level(alpha)} + 2 MC SE"], rows,
                                              f"{html.escape(structure)}: family-wise type-I error among the equal-quality models "
                                              f"(alpha {format_level(alpha)})",
                                              "calibration")))
        for metric in audit["population"][structure]["metrics"]:
            fig = figures.power_curve(audit["power"], structure, metric, calibration.verdict_procedure(audit["stats"]), audit["stats"]["power"])
            parts.append(figures.to_div(fig, f"power-{slug(structure)}-{slug(metric)}"))
    parts.append(_real_populations(audit))
    return render("segbench calibration audit", "\n".join(parts), nav_bar(all_results))


def _levels_section(audit: dict[str, Any]) -> str:
    """The calibrated levels (``stats.levels``) of every audited population, metric and n: the level the leaderboards'
    CIs use, the coverage at the nominal level, the cross-fitted coverage at the calibrated one and the width it costs."""
    rows_in = [*audit.get("levels", []), *(audit.get("real") or {}).get("levels", [])]
    if not rows_in:
        return ""
    s = audit["stats"]
    low = s["confidence"] - MARGIN
    rows = [[(html.escape(r["structure"] if r["source"] == calibration.SIMULATED else f"{r['source']}/{r['structure']}"), r["structure"]),
             (html.escape(r["metric"]), r["metric"]), (str(r["n"]), r["n"]),
             (f"{format_level(r['level'])}{' (capped)' if r['capped'] else ''}", r["level"]),
             (f"{100 * r['nominal_rate']:.1f}%", r["nominal_rate"]), _flagged(r, r["rate"] < low),
             (f"{format_level(r['level_halves_min'])}–{format_level(r['level_halves_max'])}", r["level_halves_max"]),
             (f"×{r['width_ratio']:.2f}", r["width_ratio"])] for r in rows_in]
    used = "the leaderboards use these levels" if s.get("ci_level") == "audited" else "the leaderboards use the nominal level (ci_level: nominal)"
    intro = (f"<p>Where a sample cannot show a thin, heavy tail (NSD of near-perfect models), no CI computed from the sample "
             f"alone covers at its nominal level. The audit therefore also chooses, per population, metric and n, the level of the "
             f"{html.escape(s['ci_method'])} CI whose coverage reaches {format_level(s['confidence'])} (never below it), and measures that rule out "
             f"of sample: the level is chosen on one random half of the cases and its coverage measured on the other, over five "
             f"halvings (<code>{METHODOLOGY_DOC}</code>, \"Calibrated levels\"); {used}. ⚠: the out-of-sample coverage is more than "
             f"{format_points(MARGIN)} below {format_level(s['confidence'])}.</p>")
    table = tables.table(["population", "metric", "n", "calibrated level", "coverage at the nominal level", "coverage at the calibrated level (out of sample)",
                          "levels chosen on halves", "CI width vs nominal"], rows,
                         f"Calibrated levels of the {html.escape(s['ci_method'])} CI (target {format_level(s['confidence'])} coverage)", "calibration")
    return '<h2 id="levels">Calibrated levels</h2>' + intro + disclosure(f"Calibrated levels ({len(rows)} rows)", table)


def _flagged(entry: dict[str, Any], bad: bool) -> tuple[str, float]:
    """A rate as a table cell: '94.1%' ('⚠ 91.2%' when ``bad``), its Monte-Carlo SE as the tooltip."""
    return (f'<span title="± {100 * entry["mc_se"]:.1f} (Monte-Carlo SE)">{"⚠ " if bad else ""}{100 * entry["rate"]:.1f}%</span>', entry["rate"])


def _real_populations(audit: dict[str, Any]) -> str:
    """The calibration page's real populations (``calibration.real``: published per-case scores), answer first: per set,
    structure and metric, the leaderboard CI's coverage and the verdict's type-I error at each n (⚠ beyond the audit's
    ``MARGIN``, as the board flags them), then every CI method and procedure behind disclosures."""
    real = audit.get("real") or {}
    if not real.get("population"):
        return ""
    s = audit["stats"]
    method, procedure = s["ci_method"], calibration.verdict_procedure(s)
    low, high = s["confidence"] - MARGIN, s["alpha"] + MARGIN
    parts = ['<h2 id="real">Real populations: published per-case scores</h2>',
             "<p>The same audit on real models' published per-case scores, whose distributions have what simulated ones lack "
             "(ties at the top, heavy tails, failed cases at 0). Per structure of a set: the cases where every model reports every "
             "metric, and the models at the configured ranks of mean Dice; the first two are made equal (their values exchanged per "
             "sampled case), so every verdict between them is false. A population is audited at each n up to its size. "
             f"Leaderboard cells of these sets and structures read their audited rate here. ⚠: more than {format_points(MARGIN)} below "
             f"{format_level(s['confidence'])} coverage, or above {format_level(s['alpha'])} type-I error.</p>"]
    pops = real["population"]
    for source in dict.fromkeys(p["source"] for p in pops.values()):
        mine = [p for p in pops.values() if p["source"] == source]
        sizes = sorted({n for p in mine for n in p["n_audited"]})
        coverage = {(r["structure"], r["metric"], r["n"], r["method"]): r for r in real["coverage"] if r["source"] == source}
        type1 = {(r["structure"], r["metric"], r["n"], r["procedure"]): r for r in real["type1"] if r["source"] == source}
        rows = []
        for pop in mine:
            for metric in pop["metrics"]:
                row = [(html.escape(pop["structure"]), pop["structure"]), (html.escape(metric), metric), (str(pop["n_cases"]), pop["n_cases"])]
                for table, key, bad in ((coverage, method, lambda r: r["rate"] < low), (type1, procedure, lambda r: r["rate"] > high)):
                    for n in sizes:
                        r = table.get((pop["structure"], metric, n, key))
                        row.append(_flagged(r, bad(r)) if r else ("–", None))
                rows.append(row)
        headers = (["structure", "metric", "cases"] + [f"{method} coverage, n = {n}" for n in sizes]
                   + [f"type-I ({procedure.replace('_', ' ')}), n = {n}" for n in sizes])
        models = "; ".join(f"{p['structure']}: {', '.join(p['models'])}" for p in mine)
        parts.append(f"<h3>{html.escape(source)}</h3>"
                     + tables.table(headers, rows, f"{html.escape(source)}: the leaderboard's {html.escape(method)} CI and its "
                                    f"separable verdict ({html.escape(procedure.replace('_', ' '))}), by structure, metric and n", "calibration")
                     + disclosure(f"Models per structure ({len(mine)} populations)", f"<p>{html.escape(models)}.</p>"))
        full = [[(html.escape(st), st), (html.escape(m), m), (str(n), n), (html.escape(k), k), (_rate(r), r["rate"]),
                 (f"{100 * r['miss_below']:.1f}% / {100 * r['miss_above']:.1f}%", r["miss_below"] + r["miss_above"])]
                for (st, m, n, k), r in coverage.items()]
        parts.append(disclosure(f"Coverage by structure, metric, n and CI method ({len(full)} rows)",
                                tables.table(["structure", "metric", "n", "CI method", "coverage", "CI below / above the truth"], full,
                                             f"{html.escape(source)}: coverage of the {format_level(s['confidence'])} CI of a model's mean", "calibration")))
        full = [[(html.escape(st), st), (html.escape(m), m), (str(n), n), (html.escape(k.replace("_", " ")), k), (_rate(r), r["rate"]),
                 (str(r["draws"]), r["draws"])] for (st, m, n, k), r in type1.items()]
        parts.append(disclosure(f"Type-I error by structure, metric, n and procedure ({len(full)} rows)",
                                tables.table(["structure", "metric", "n", "procedure", "type-I error", "samples"], full,
                                             f"{html.escape(source)}: family-wise type-I error among the equal pair", "calibration")))
    return "".join(parts)
