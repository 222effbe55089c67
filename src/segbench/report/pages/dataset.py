"""A dataset's page, the answer first, then every section of its analysis; and the same page with every structure's
leaderboards in one self-contained file (MLflow's artifact viewer).
"""

from __future__ import annotations

import html
from collections.abc import Callable

from segbench.base.formats import count, fmt, percent
from segbench.stats.heads import ci_words
from segbench.stats.results import DatasetBlock, VerdictChanges

from .. import figures, tables
from ..lesions import lesion_section
from ..marks import identical_counts, unit_sentence
from ..markup import disclosure, slug
from ..pairs import against_source, pair
from .frame import Results, nav_bar, notes, plots, render, structure_page_name
from .structure import ALIGNMENTS, alignment_text, co_winners, source_text, structure_body


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
        f'<section id="{anchor(s, "")}">{structure_body(results, s, lambda m, s=s: anchor(s, m), per_case=False)}</section>'  # type: ignore[misc]  # s bound per structure
        for s in structures
    )
    return render(results["dataset"]["title"], body, "segbench leaderboard: " + html.escape(results["dataset"]["name"]), inline=True)


def _dataset_body(results: Results, link: Callable[[str, str], str]) -> str:
    """The overview of a dataset, the answer first; ``link(structure, metric)`` is where a structure's leaderboard of a metric is."""
    d = results["dataset"]
    structures = sorted(results["analysis"]["structures"])
    return (
        f"<h1>{html.escape(d['title'])}</h1>"
        + _unit_headline(results)
        + tables.answers(results, link)
        + notes(results)
        + f"<p>Licence: {html.escape(d.get('licence') or 'not given')}. Cite: {html.escape(d.get('citation') or 'not given')}. "
        f"Data version <code>{html.escape(str(d.get('version') or 'not given'))}</code>. Each structure's page has the full "
        "leaderboards and plots: "
        + ", ".join(f'<a href="{link(s, "")}">{html.escape(s)}</a>' for s in structures)
        + ".</p>"
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
    """A clustered set's first line (``marks.unit_sentence``), its sensitivity analysis linked; nothing for a set
    without a cluster field."""
    sentence = unit_sentence(results)
    if not sentence:
        return ""
    return f'<p class="headline" id="unit">{html.escape(sentence)} <a href="#clustered">The clustered bootstrap, cell by cell</a>.</p>'


def _import_summary(dataset: DatasetBlock) -> str:
    """A published set's import summary as one line (docs/published.md); nothing for other datasets."""
    summary = dataset.get("import_summary")
    return f'<p class="note">Import: {html.escape(summary["text"])}.</p>' if summary else ""


def _interaction_curves(results: Results) -> str:
    """An interactive dataset's DSC and NSD per step (box, then each click) with CIs, per structure (docs/interactive.md)."""
    if not results["dataset"].get("interactive"):
        return ""
    structures, settings = results["analysis"]["structures"], results["analysis"]["settings"]
    steps = sum(1 for m in results["metrics"] if m.startswith("DSC_") and m.removeprefix("DSC_").isdigit())
    order = sorted(structures, key=lambda s: (s != "mean_over_classes", s))  # the challenge's own number first
    parts = [
        "<h2>Interaction curves</h2><p>DSC and NSD (2 mm) after the box prompt and after each of the "
        f"{steps - 1} simulated clicks, mean over cases with its {html.escape(ci_words(settings))}. <code>mean_over_classes</code> is "
        "the challenge's per-case number (the mean over the case's classes); each organ follows. DSC_AUC and NSD_AUC "
        "are the areas under the click steps' curve (the box step is not in them); TotalRunningTime is lower-is-better.</p>"
    ]
    for structure in order:
        parts.append(f"<h3>{html.escape(structure)}</h3>")
        parts.append(
            plots([figures.step_curves(structures[structure], results["models"], name, steps, settings) for name in ("DSC", "NSD")], f"steps-{slug(structure)}")
        )
    return "".join(parts)


def _source_summary(results: Results, link: Callable[[str, str], str]) -> str:
    """Dataset page: per structure and metric, the co-winners by each procedure and every pair where they differ."""
    if "source_analysis" not in results:
        return ""
    items = []
    for structure, cells in sorted(results["source_analysis"]["structures"].items()):
        for metric, published in cells.items():
            cell = results["analysis"]["structures"][structure]["metrics"][metric]
            where = f'<a href="{link(structure, f"{metric}-source")}">{html.escape(structure)} {html.escape(metric)}</a>'
            differences = [
                against_source(cell, theirs, e["a"], e["b"])  # type: ignore[arg-type]  # the source's
                for e in published["segbench"]["pairwise"]
                if (theirs := pair(published, e["a"], e["b"])) is not None  # type: ignore[arg-type]  # pairs both rank; a SourceCell reads alike
            ]
            shown = [html.escape(sentence) for relation, sentence in differences if relation != "agree"]
            items.append(f"<li>{where}: {co_winners(cell, published)} " + (" ".join(shown) if shown else "The two procedures agree on every pair.") + "</li>")
    return "<h2>The source's verdicts and Wilcoxon-Holm</h2>" + source_text(results) + f"<ul>{''.join(items)}</ul>"


def _consensus_section(results: Results) -> str:
    """Dataset page: challengeR's consensus over all structures and metrics, as a podium and a ranking heatmap."""
    con = results["analysis"].get("consensus")
    if not con or len(con["order"]) < 2:
        return ""
    key = slug(results["dataset"]["name"])
    first = con["order"][0]
    return (
        '<h2 id="consensus">Consensus across structures and metrics</h2>'
        f"<p>challengeR's consensus: each model's mean rank over the {len(con['tasks'])} structure x metric rankings "
        f"(by mean; ties at their average rank). #1 <strong>{html.escape(first)}</strong>, mean rank "
        f"{fmt(con['mean_rank'][first], 2)}, consensus rank 1 in {percent(con['p_rank1'][first])} of "
        f"{count(con['n_resamples'])} bootstrap resamples (docs/methodology.md, 5.15).</p>"
        + plots([figures.podium(con, results["models"]), figures.ranking_heatmap(con, results["models"])], f"{key}-consensus")
    )


def _clustered_section(results: Results, link: Callable[[str, str], str]) -> str:
    """Dataset page: the two-stage cluster bootstrap's intervals beside the case bootstrap's, when a cluster field is set."""
    clusters = results["analysis"].get("clusters")
    structures = results["analysis"]["structures"]
    if not clusters or not any(c.get("clustered") for b in structures.values() for c in b["metrics"].values()):
        return ""
    field = html.escape(clusters["field"])
    return (
        '<h2 id="clustered">Clustered bootstrap</h2>'
        f"<p>The cases cluster by <code>{field}</code>. Besides the case bootstrap, every CI, P(rank 1) and pairwise CI was "
        f"also taken from a two-stage bootstrap: the {field} clusters drawn with replacement, then the cases within each drawn "
        "cluster (cases without a value form one cluster). A width ratio above 1 is how much wider the interval is once "
        "cases of one cluster are not taken as independent. Both use the cases every model has (docs/methodology.md, 5.16).</p>"
        + _changed_cells(clusters.get("verdict_changes"))
        + tables.clustered(structures, link)
        + plots([figures.cluster_widths(structures, results["models"], results["analysis"]["settings"])], f"{slug(results['dataset']['name'])}-clustered")
    )


def _changed_cells(changes: VerdictChanges | None) -> str:
    """The cells whose #1-versus-#2 separability or co-winner set the clustered bootstrap changes, one line each."""
    if not changes:
        return ""
    lines = [
        f"{what}: {html.escape(', '.join(cells)) if cells else 'none'}."
        for what, cells in (("#1 versus #2 separated differently", changes["first_second"]), ("Co-winner set differs", changes["co_winners"]))
    ]
    return f"<p>{' '.join(lines)}</p>"


def _alignment_summary(results: Results, link: Callable[[str, str], str]) -> str:
    """Dataset page: which case alignment produced the pairwise numbers, and the cells where the other one changes a verdict."""
    primary = results["analysis"]["settings"].get("case_alignment", "shared")
    items = []
    for structure, block in sorted(results["analysis"]["structures"].items()):
        for metric, cell in sorted(block["metrics"].items()):
            if not cell.get("alignment"):
                continue
            text = alignment_text(cell)
            where = f'<a href="{link(structure, f"{metric}-alignment")}">{html.escape(structure)} {html.escape(metric)}</a>'
            items.append(f"<li>{where}: {text}</li>")
    if not items:
        return ""
    source = results["dataset"].get("source_case_alignment")
    stated = f" The source's own significance maps use <code>{html.escape(source)}</code>." if source else ""
    return (
        '<h2 id="case-alignment">Case alignment</h2>'
        f"<p>The pairwise CIs and significance maps here compare each pair on <code>{html.escape(primary)}</code> cases "
        f"({html.escape(ALIGNMENTS[primary])}); the models of this set report different cases, so the other protocol "
        f"was run as well.{stated} Where the choice changes a verdict (docs/methodology.md, 5.13):</p><ul>{''.join(items)}</ul>"
    )


SENSITIVITY_NAMES = {"drop_failed": "failed cases dropped", "zero": "failed cases scored 0"}


def _sensitivity_section(results: Results, link: Callable[[str, str], str]) -> str:
    """Dataset page: the leaderboard under the other metric definitions and missing-value policies (docs/methodology.md, 5.17)."""
    sens = results.get("sensitivity")
    if not sens:
        return ""
    parts = []
    for choice, what, baseline in (
        ("profiles", "metric-definition profile", sens["profiles"]["baseline"]),
        ("missing_policy", "missing-value policy", sens["missing_policy"]["baseline"]),
    ):
        for name, variant in sorted(sens[choice]["variants"].items()):  # type: ignore[literal-required]  # one of the block's keys (the loop's literals)
            title = f"{what} <code>{html.escape(name)}</code>" + (f" ({SENSITIVITY_NAMES[name]})" if name in SENSITIVITY_NAMES else "")
            if not variant["run"]:
                parts.append(f"<h3>{title}</h3><p>Not run: {html.escape(variant['reason'])}.</p>")
                continue
            s = variant["summary"]
            parts.append(
                f'<h3 id="sensitivity-{slug(name)}">{title} instead of <code>{html.escape(baseline)}</code></h3>'
                f"<p>{s['n_cells_with_flips']} of {s['n_cells']} leaderboards change order ({s['n_flipped_pairs']} pairs flip); "
                f"#1 changes in {s['n_top_changed']}, the co-winner set in {s['n_co_winners_changed']}; "
                f"{s['n_verdicts_changed']} Wilcoxon-Holm verdicts change.</p>" + tables.sensitivity(variant, link)
            )
    if not parts:
        return ""
    return (
        '<h2 id="sensitivity">Implementation sensitivity</h2>'
        "<p>The same cases, statistics and seed with one choice changed: how the surface metrics are defined "
        "(another implementation's definitions, from the same masks) or how failed cases count "
        "(docs/methodology.md, 5.17). Kendall's tau compares the two rankings; a pair flips when the order of two models "
        "reverses.</p>" + "".join(parts)
    )
