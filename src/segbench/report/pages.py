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

from . import figures, tables
from .assets import CSS, JS
from .common import digits, fmt, fmt_ci, kind, slug, verdict, verdict_word

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


def index_page(all_results: list[Results]) -> str:
    """Entry page: one line per dataset."""
    items = []
    for r in all_results:
        s = r["analysis"]["structures"]
        items.append(
            f'<li><a href="{dataset_page_name(r)}">{html.escape(r["dataset"]["title"])}</a>: '
            f"{len(r['models'])} models ({_kinds(r['models'])}), {len(s)} structures, "
            f"metrics {html.escape(', '.join(r['metrics']))}</li>"
        )
    body = (
        "<h1>segbench leaderboards</h1>"
        "<p>Every score with a bootstrap confidence interval, ranking stability, and which pairs of models are "
        "separable at all. See the <a href=\"methodology.html\">methodology</a> for the exact protocol.</p>"
        f"<ul>{''.join(items)}</ul>"
    )
    return render("segbench", body, nav_bar(all_results))


def _dataset_body(results: Results, link: Callable[[str, str], str]) -> str:
    """The overview of a dataset; ``link(structure, metric)`` is where a structure's leaderboard of a metric is."""
    d = results["dataset"]
    structures = sorted(results["analysis"]["structures"])
    return (
        f"<h1>{html.escape(d['title'])}</h1>{_notes(results)}"
        f"<p>Licence: {html.escape(d.get('licence') or 'not given')}. Cite: {html.escape(d.get('citation') or 'not given')}. "
        f"Data version <code>{html.escape(str(d.get('version') or 'not given'))}</code>.</p>"
        + tables.overview(results, link)
        + "<p>Each structure's page has the full leaderboards and plots: "
        + ", ".join(f'<a href="{link(s, "")}">{html.escape(s)}</a>' for s in structures)
        + ".</p>"
        + tables.models_table(results["models"])
    )


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


def structure_page(results: Results, structure: str, all_results: list[Results]) -> str:
    """Everything about one structure: per metric the leaderboard and the five plots, then leave-one-out."""
    title = f"{results['dataset']['title']}: {structure}"
    return render(title, _structure_body(results, structure, html.escape), nav_bar(all_results, results))


def _structure_body(results: Results, structure: str, anchor: Callable[[str], str], per_case: bool = True) -> str:
    """One structure's sections; ``anchor(metric)`` is the id of a metric's heading; ``per_case``: with
    the per-case and subgroup plots."""
    d, models = results["dataset"], results["models"]
    block = results["analysis"]["structures"][structure]
    settings = results["analysis"]["settings"]
    base = f"{slug(d['name'])}-{slug(structure)}"
    parts = [
        f"<h1>{html.escape(d['title'])}: {html.escape(structure)}</h1>{_notes(results)}",
        f"<p>{block['n_cases']} cases shared by every model; {block['n_absent']} cases without this structure and "
        f"{block['n_unshared']} not scored for every model are excluded.</p>",
    ]
    for metric, cell in block["metrics"].items():
        key = f"{base}-{slug(metric)}"
        parts.append(f'<h2 id="{anchor(metric)}">{html.escape(metric)}</h2>')
        parts.append(_headline(cell))
        parts.append(tables.leaderboard(cell, models, metric))
        plots = [figures.forest(cell, models, metric)]
        if cell.get("ranking"):
            plots += [figures.blob(cell, models)]
        parts.append(_plots(plots, f"{key}-a"))
        if cell.get("significance") and len(cell["ranking"]["order"]) > 1:
            parts.append(_plots([figures.significance_map(cell, models)], f"{key}-sig"))
        if not per_case:
            continue
        parts.append(_plots([figures.per_case(cell, models, metric, block["case_ids"])], f"{key}-cases"))
        fields = list(cell.get("subgroups") or {})
        if fields:
            parts.append("<h3>Subgroups</h3>")
            subs = [figures.subgroups(cell, models, metric, f, settings["subgroup_min_cases"]) for f in fields]
            parts.append(_plots(subs, f"{key}-sub"))
    if any(cell.get("loo") for cell in block["metrics"].values()):
        parts.append(f'<h2 id="{anchor("leave-one-out")}">Leave-one-case-out</h2>')
        parts.append(_plots([figures.leave_one_out(block)], f"{base}-loo"))
    return "\n".join(parts)


def _plots(figs: list, prefix: str) -> str:
    """Figures with fixed ids; each labelled with its title for screen readers."""
    return "".join(
        f'<figure class="plot" role="img" aria-label="{html.escape(re.sub("<[^>]+>", " ", fig.layout.title.text or ""))}">'
        f'{figures.to_div(fig, f"{prefix}-{i}")}</figure>'
        for i, fig in enumerate(figs)
    )


def _headline(cell: dict[str, Any]) -> str:
    """One sentence answering 'is #1 separable from #2?', with power and leave-one-out beside it."""
    order = (cell.get("ranking") or {}).get("order") or []
    if len(order) < 2:
        return '<p class="headline">Fewer than two ranked models: nothing to compare.</p>'
    first, second = order[0], order[1]
    sep, sentence = verdict(cell, first, second)
    text = (
        f"#1 <strong>{html.escape(first)}</strong> ({fmt_ci(cell['models'][first], digits(cell))}, "
        f"P(rank 1) = {fmt(cell['ranking']['p_rank1'][first], 2)}) versus #2 <strong>{html.escape(second)}</strong>: "
        f"<strong>{verdict_word(sep)}</strong> ({html.escape(sentence)})."
    )
    power = cell.get("power") or {}
    if power.get("n_required") is not None:
        text += (f" Separating them at {fmt(power['power'] * 100, 0)}% power would need about {power['n_required']} cases "
                 f"(this set has {power['n_cases']}).")
    co = (cell.get("significance") or {}).get("co_winners") or []
    text += f" Co-winners (no model significantly better): {html.escape(', '.join(co)) or 'none'}."
    loo = cell.get("loo")
    if loo:
        text += (f" Removing one case changes the winner for {fmt(loo['winner_change_share'] * 100, 1)}% of cases "
                 f"and some rank for {fmt(loo['any_rank_change_share'] * 100, 1)}%.")
    return f'<p class="headline">{text}</p>'


PROTOCOL = Template("""
<h3>Metrics (SPEC §3)</h3>
<p>Metrics: $metrics. $scoring A structure absent from the reference is excluded for every model and
counted. $hd95 NSD tolerances: $tolerances.</p>
<h3>Statistics (SPEC §4)</h3>
<ol>
<li>Estimate per model: mean, SD, median and n over the cases every model has; $confidence% CI by $ci_method
bootstrap over cases with B = $n_resamples resamples, seed $seed.</li>
<li>Ranking stability: B paired resamples of case indices (the same indices for every model), rank by the
mean (higher better for overlap, lower for distances), ties 'min'. Reported: P(rank 1), mean and median rank,
the central $confidence% rank interval, the rank-frequency matrix (blob plot), Kendall's τ-b to the full-data
ranking.</li>
<li>Pairwise separability: paired bootstrap CI of the mean difference for every pair, family-wise control
over the K(K−1)/2 pairs by $multiple_comparison adjustment of the CI level; separable when the adjusted CI excludes 0.</li>
<li>Significance map: one-sided Wilcoxon signed-rank test for every ordered pair on the shared cases, all
K(K−1) p-values Holm-adjusted together, α = $alpha; a pair with all differences zero is never significant.
Co-winners: models that no other model significantly beats.</li>
<li>Leave-one-case-out: the ranking without each case; share of cases whose removal changes the winner, and
any rank.</li>
<li>Subgroups by $subgroup_fields: estimate and CI per group; Kruskal-Wallis across groups; where p &lt; $alpha,
two-sided Mann-Whitney U for group pairs with Bonferroni; groups with fewer than $subgroup_min_cases cases are
shown and left out of tests.</li>
<li>Contamination: a model trained on a dataset is shown there, marked, and left out of ranks, pairwise tests
and winners.</li>
<li>Power: from the paired differences of #1 and #2, the number of cases needed to separate them at
$power% power (paired t approximation).</li>
</ol>
<p>The verdict "separable" on the leaderboards requires both the adjusted bootstrap CI (3) and the
Wilcoxon-Holm test (4); when only one of them separates a pair the verdict says "borderline" and names which.</p>
""")


SCORED = ("Scored per case and structure by segbench: both masks empty gives Dice 1, NSD 1 and distances 0; exactly "
          "one empty, or no prediction file for the case, gives Dice 0, NSD 0 and distances equal to the diagonal of "
          "the image volume in mm, flagged worst-case and kept in every aggregate (failures count against the model).")
IMPORTED = ("Per-case scores as published by the source (no masks were re-scored); its conventions for empty masks "
            "and failures apply.")


def _protocol(results: Results) -> str:
    """SPEC §3-§4 filled with the parameters this results file was computed with."""
    s = results["analysis"]["settings"]
    directions = ", ".join(
        f"{html.escape(m)} ({'higher' if v['higher_is_better'] else 'lower'} is better)" for m, v in results["metrics"].items()
    )
    regions = results["dataset"].get("regions") or {}
    tolerances = ", ".join(f"{html.escape(r)} {v['nsd_tolerance_mm']:g} mm" for r, v in regions.items()) or "as in the source"
    return PROTOCOL.substitute(
        metrics=directions,
        scoring=IMPORTED if all(kind(m) == "published" for m in results["models"].values()) else SCORED,
        hd95=f"HD95 definition: <code>{html.escape(str(results.get('hd95_definition')))}</code>." if "hd95" in results["metrics"] else "",
        tolerances=tolerances,
        confidence=f"{s['confidence'] * 100:g}",
        ci_method=html.escape(s["ci_method"]),
        n_resamples=f"{s['n_resamples']:,}",
        seed=s["seed"],
        multiple_comparison=html.escape(s["multiple_comparison"].capitalize()),
        alpha=f"{s['alpha']:g}",
        subgroup_fields=html.escape(", ".join(results["analysis"].get("subgroup_fields") or []) or "none"),
        subgroup_min_cases=s["subgroup_min_cases"],
        power=f"{s['power'] * 100:g}",
    )


def methodology_page(all_results: list[Results]) -> str:
    """The protocol with the parameters actually used, per group of datasets sharing them; licences and citations."""
    groups: dict[str, list[Results]] = {}
    for r in all_results:
        groups.setdefault(_protocol(r), []).append(r)
    parts = ["<h1>Methodology</h1>",
             "<p>Every number on this site is read from the results files written by the compare stage; the parameters "
             "below are read from those files too.</p>"]
    for text, members in groups.items():
        names = ", ".join(html.escape(r["dataset"]["name"]) for r in members)
        parts.append(f"<h2>Protocol used for {names}</h2>{text}")
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
