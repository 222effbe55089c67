"""The methodology page: the protocol (docs/methodology.md, sections 3-5) filled with the parameters the results were
computed with, per group of datasets sharing them; licences and citations.
"""

from __future__ import annotations

import html
import json
import re
from string import Template

from segbench.base.formats import count, format_level, number

from .. import tables
from ..marks import kind
from .frame import METHODOLOGY_DOC, Results, dataset_page_name, nav_bar, render

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


SCORED = (
    "Scored per case and structure by segbench: both masks empty gives Dice 1, NSD 1 and distances 0; exactly "
    "one empty, or no prediction file for the case, gives Dice 0, NSD 0 and distances equal to the diagonal of "
    "the image volume in mm, flagged worst-case and kept in every aggregate (failures count against the model)."
)


IMPORTED = "Per-case scores as published by the source (no masks were re-scored); its conventions for empty masks and failures apply."


GRID = (
    "Prediction and reference must share one grid (shape and affine); distances use the reference's voxel spacing "
    "in array-axis order, checked against the affine. "
)


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
    "bonferroni": "family-wise control at α = {alpha} over the P = K(K−1)/2 pairs by Bonferroni: every CI at level 1 − α/P.",
}


CI_METHODS = {
    "percentile": "percentile bootstrap",
    "bca": "bias-corrected and accelerated (BCa) bootstrap",
    "skew_t": "Hall's skewness-corrected t (jackknife SE and skewness)",
}


#: the CI level rule (stats.ci_level) in the protocol's estimates item, after the CI method
CI_LEVEL_WORDS = {
    "audited": ", computed for each leaderboard cell at the level at which the calibration audit found it to cover {confidence} "
    "on a population like the cell's (never below {confidence}; the CI's tooltip names it), and at {confidence} "
    "where no population was calibrated",
    "nominal": "",
}


SEPARABLE = {
    "sign_flip_bootstrap_t": "A pair is separable when two tests of its mean difference both reject, Holm-adjusted at α = "
    "{alpha} over the pairs: the sign-flip permutation test ({n_resamples} random flips of the per-case "
    "differences' signs; exact when the models are exchangeable) and the studentized bootstrap test "
    "({n_resamples} resamples of the differences centred at their mean; valid when they are not, e.g. "
    "one model fails now and then). The Δ interval printed beside the verdict, the union of the two "
    "tests' inversions, is the one that decides it, each at the Holm step level of its pair (not "
    "simultaneous intervals).",
    "sign_flip": "A pair is separable when the sign-flip permutation test of its mean difference ({n_resamples} random "
    "flips of the per-case differences' signs; beyond the last flip, Pinelis's tail bound), Holm-adjusted at α = {alpha} "
    "over the pairs, gives p < α; "
    "the Δ interval printed beside the verdict is the one that decides it, each at the Holm step level of its pair.",
    "bootstrap_ci": "A pair is separable by bootstrap when its adjusted CI excludes 0.",
}


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


def _protocol(results: Results) -> str:
    """The methodology (docs/methodology.md, sections 3-5) filled with the parameters this results file was computed with."""
    s = results["analysis"]["settings"]
    directions = ", ".join(f"{html.escape(m)} ({'higher' if v['higher_is_better'] else 'lower'} is better)" for m, v in results["metrics"].items())
    regions = {r: v["nsd_tolerance_mm"] for r, v in (results["dataset"].get("regions") or {}).items()}
    stated = results["dataset"].get("nsd_tolerance_mm") or {}  # a published set whose source states its tolerance
    tolerances = ", ".join(f"{html.escape(r)} {number(mm)} mm" for r, mm in (regions or stated).items()) or "as in the source"
    if stated and not regions:
        tolerances += " (as published by the source)"
    definition = str(results.get("hd95_definition"))
    explained = f": {HD95_DEFINITIONS[definition]}" if definition in HD95_DEFINITIONS else ""
    alpha = number(s["alpha"])
    imported = all(kind(m) == "published" for m in results["models"].values())
    return PROTOCOL.substitute(
        metrics=directions,
        grid="" if imported else html.escape(GRID),
        scoring=IMPORTED if imported else SCORED,
        hd95=f"HD95 definition: <code>{html.escape(definition)}</code>{html.escape(explained)}." if "hd95" in results["metrics"] else "",
        tolerances=tolerances,
        confidence=format_level(s["confidence"]),
        ci_method=html.escape(CI_METHODS[s["ci_method"]] + CI_LEVEL_WORDS[s.get("ci_level", "nominal")].format(confidence=format_level(s["confidence"]))),
        n_resamples=count(s["n_resamples"]),
        seed=s["seed"],
        pairwise=html.escape(PAIRWISE[s["multiple_comparison"]].format(alpha=alpha)),
        separable=html.escape(SEPARABLE[s.get("pairwise_test", "bootstrap_ci")].format(alpha=alpha, n_resamples=count(s["n_resamples"]))),
        alpha=alpha,
        subgroup_fields=html.escape(", ".join(results["analysis"].get("subgroup_fields") or []) or "none"),
        subgroup_min_cases=s["subgroup_min_cases"],
        power=number(100 * s["power"]),
    )


def _protocol_items(text: str) -> list[str]:
    """The protocol's paragraphs and list items, the units in which two datasets' protocols are compared."""
    return [m.strip() for m in re.findall(r"<(?:p|li)[^>]*>(.*?)</(?:p|li)>", text, flags=re.S)]


def methodology_page(all_results: list[Results]) -> str:
    """The protocol with the parameters actually used, per group of datasets sharing them; licences and citations."""
    groups: dict[str, list[Results]] = {}
    for r in all_results:
        groups.setdefault(_protocol(r), []).append(r)
    parts = [
        "<h1>Methodology</h1>",
        f"<p>How segbench scores cases and compares models, in brief. The full methodology, with every rule and "
        f"default, is <code>{METHODOLOGY_DOC}</code> in the segbench repository; the section numbers below are "
        f"its sections. Every number on this site is read from the results files written by the compare stage; "
        f"the parameters below are read from those files too.</p>",
    ]
    texts = list(groups)
    first = ", ".join(html.escape(r["dataset"]["name"]) for r in groups[texts[0]])
    parts.append(
        f'<h2 id="protocol">Protocol</h2><p>As used for {first}'
        + ("; the other sets differ only where said below" if len(texts) > 1 else "")
        + f".</p>{texts[0]}"
    )
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
    parts.append(tables.table(["dataset", "licence", "citation", "data version", "segbench", "settings"], rows, "Datasets, licences and citations", "params"))
    sources = sorted({m["source"] for r in all_results for m in r["models"].values() if kind(m) == "published" and m.get("source")})
    if sources:
        parts.append("<h2>Published sources</h2><ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in sources) + "</ul>")
    return render("segbench methodology", "\n".join(parts), nav_bar(all_results))
