"""The calibration audit's page (calibration/results/audit.json): the takeaways, the calibrated levels, coverage and
type-I error by metric and n, power curves, and the real populations.
"""

from __future__ import annotations

import html
import math
from typing import Any

from segbench.base.formats import format_level, format_points, percent, percent_span, percent_value, rate_with_se, ratio, skewness
from segbench.stats import calibration
from segbench.stats.audited import MARGIN

from .. import figures, tables
from ..marks import identical_text
from ..markup import disclosure, slug
from .frame import METHODOLOGY_DOC, Results, nav_bar, render


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
        f'"Calibration audit". The leaderboards use the <b>{html.escape(ci_method)}</b> CI'
        + (", at the calibrated levels below" if audit["stats"].get("ci_level") == "audited" else "")
        + ".</p>",
        f"<p>Models: {html.escape(', '.join(audit['models']))}.</p>",
        *(
            [
                f"<p>Cases identical to the reference (every audited structure Dice exactly 1; such a case shows no error of the "
                f"model): {html.escape(_identical_summary(audit['identical_to_reference']))}.</p>"
            ]
            if audit.get("identical_to_reference")
            else []
        ),
    ]
    parts.insert(
        1,
        '<h2 id="takeaways">In one line per metric</h2><ul class="takeaways">'
        + "".join(f"<li>{html.escape(line)}</li>" for line in calibration_takeaways(audit))
        + "</ul>",
    )
    parts.append(_levels_section(audit))
    for structure in audit["population"]:
        parts.append(f"<h2>{html.escape(structure)}</h2>")
        parts.append(_coverage_by_method(audit, structure))
        parts.append(_type1_by_procedure(audit, structure))
        for metric in audit["population"][structure]["metrics"]:
            fig = figures.power_curve(audit["power"], structure, metric, calibration.verdict_procedure(audit["stats"]), audit["stats"]["power"])
            parts.append(figures.to_div(fig, f"power-{slug(structure)}-{slug(metric)}"))
    parts.append(_real_populations(audit))
    parts.append(_shapes_section(audit))
    return render("segbench calibration audit", "\n".join(parts), nav_bar(all_results))


def _coverage_by_method(audit: dict[str, Any], structure: str) -> str:
    """The simulated ``structure``'s coverage table (behind a disclosure): per metric and n, each CI method's coverage of
    the population mean and how often its CI fell below or above it, so that a miss shows its side."""
    nominal = format_level(audit["stats"]["confidence"])
    coverage = [r for r in audit["coverage"] if r["structure"] == structure]
    keys = sorted({(r["metric"], r["n"]) for r in coverage}, key=lambda k: (list(audit["population"][structure]["metrics"]).index(k[0]), k[1]))
    rows = []
    for metric, n in keys:
        by_method = {r["method"]: r for r in coverage if (r["metric"], r["n"]) == (metric, n)}
        row = [(html.escape(metric), metric), (str(n), n)]
        for method in sorted(by_method):
            r = by_method[method]
            row += [(_rate(r), r["rate"]), _misses(r)]
        rows.append(row)
    methods = sorted({r["method"] for r in coverage})
    headers = ["metric", "n"] + [h for m in methods for h in (f"{m} coverage", f"{m}: CI below / above the truth")]
    caption = f"{html.escape(structure)}: coverage of the {nominal} CI of a model's mean (target {nominal})"
    return disclosure(f"Coverage by metric, n and CI method ({len(rows)} rows)", tables.table(headers, rows, caption, "calibration"))


def _type1_by_procedure(audit: dict[str, Any], structure: str) -> str:
    """The simulated ``structure``'s type-I table (behind a disclosure): per metric, n and procedure the family-wise
    rate of a false verdict among the equal-quality models, and whether it exceeds alpha by more than two MC SEs."""
    alpha = audit["stats"]["alpha"]
    type1 = [r for r in audit["type1"] if r["structure"] == structure]
    rows = [
        [
            (html.escape(r["metric"]), r["metric"]),
            (str(r["n"]), r["n"]),
            (html.escape(r["procedure"].replace("_", " ")), r["procedure"]),
            (_rate(r), r["rate"]),
            (str(r["draws"]), r["draws"]),
            ("exceeds" if r["rate"] > alpha + 2 * r["mc_se"] else "within", int(r["rate"] > alpha + 2 * r["mc_se"])),
        ]
        for r in type1
    ]
    return disclosure(
        f"Type-I error by metric, n and procedure ({len(rows)} rows)",
        tables.table(
            ["metric", "n", "procedure", "type-I error", "samples", f"{format_level(alpha)} + 2 MC SE"],
            rows,
            f"{html.escape(structure)}: family-wise type-I error among the equal-quality models (alpha {format_level(alpha)})",
            "calibration",
        ),
    )


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
            rates = {proc: percent_span([r["rate"] for r in type1 if r["procedure"] == proc]) for proc in dict.fromkeys(r["procedure"] for r in type1)}
            others = "; ".join(f"{PROCEDURE_NAMES.get(proc, proc.replace('_', ' '))} {span}" for proc, span in rates.items() if proc != board)
            levels = [r for r in audit.get("levels", []) if (r["structure"], r["metric"], r["method"]) == (structure, metric, method)]
            calibrated = (
                f", and at the audit-calibrated levels the leaderboards use ({percent_span([r['level'] for r in levels])}) "
                f"{percent_span([r['rate'] for r in levels])} out of sample"
                if levels and audit["stats"].get("ci_level") == "audited"
                else ""
            )
            lines.append(
                f"{structure} {metric}: {format_level(audit['stats']['confidence'])} {method} CIs cover "
                f"{percent_span([r['rate'] for r in coverage])} at the nominal level (n = {sizes[0]}..{sizes[-1]}){calibrated}; "
                f"the separable verdict by "
                f"{PROCEDURE_NAMES.get(board, board).removesuffix(' separates')} is wrong for equal models "
                f"{rates.get(board, 'n/a')} (target {format_level(audit['stats']['alpha'])}); other rules: {others}"
            )
    return lines


PROCEDURE_NAMES = {
    "separable_percentile": "bootstrap CI (percentile) separates",
    "separable_bca": "bootstrap CI (BCa) separates",
    "separable_skew_t": "skew-corrected t CI separates",
    "signflip_holm": "sign-flip test (Holm) separates",
    "meantest_holm": "sign-flip + bootstrap-t test (Holm) separates",
    "wilcoxon_holm": "Wilcoxon-Holm separates",
}
#: the failure-shape audit's two tests (stats.shapes.PROCEDURES), as its tables head them
SHAPE_TESTS = {"sign_flip": "sign flips alone (before)", "sign_flip_bootstrap_t": "sign flips + bootstrap-t (now)"}


def _identical_summary(counts: dict[str, Any]) -> str:
    """'every model leaves 2 of 489 cases identical to the reference' when the counts agree, else one clause per model."""
    texts = {m: identical_text(c) for m, c in counts.items()}
    if len(set(texts.values())) == 1:
        return f"every model {next(iter(texts.values()))}"
    return "; ".join(f"{m} {t}" for m, t in texts.items())


def _levels_section(audit: dict[str, Any]) -> str:
    """The calibrated levels (``stats.levels``) of every audited population, metric and n: the level the leaderboards'
    CIs use, the coverage at the nominal level, the cross-fitted coverage at the calibrated one and the width it costs."""
    rows_in = [*audit.get("levels", []), *(audit.get("real") or {}).get("levels", [])]
    if not rows_in:
        return ""
    s = audit["stats"]
    low = s["confidence"] - MARGIN
    rows = [
        [
            (html.escape(r["structure"] if r["source"] == calibration.SIMULATED else f"{r['source']}/{r['structure']}"), r["structure"]),
            (html.escape(r["metric"]), r["metric"]),
            (str(r["n"]), r["n"]),
            (f"{format_level(r['level'])}{' (capped)' if r['capped'] else ''}", r["level"]),
            (percent(r["nominal_rate"]), r["nominal_rate"]),
            _flagged(r, r["rate"] < low),
            (f"{format_level(r['level_halves_min'])}–{format_level(r['level_halves_max'])}", r["level_halves_max"]),
            (f"×{ratio(r['width_ratio'])}", r["width_ratio"]),
        ]
        for r in rows_in
    ]
    used = "the leaderboards use these levels" if s.get("ci_level") == "audited" else "the leaderboards use the nominal level (ci_level: nominal)"
    intro = (
        f"<p>Where a sample cannot show a thin, heavy tail (NSD of near-perfect models), no CI computed from the sample "
        f"alone covers at its nominal level. The audit therefore also chooses, per population, metric and n, the level of the "
        f"{html.escape(s['ci_method'])} CI whose coverage reaches {format_level(s['confidence'])} (never below it), and measures that rule out "
        f"of sample: the level is chosen on one random half of the cases and its coverage measured on the other, over five "
        f'halvings (<code>{METHODOLOGY_DOC}</code>, "Calibrated levels"); {used}. ⚠: the out-of-sample coverage is more than '
        f"{format_points(MARGIN)} below {format_level(s['confidence'])}.</p>"
    )
    table = tables.table(
        [
            "population",
            "metric",
            "n",
            "calibrated level",
            "coverage at the nominal level",
            "coverage at the calibrated level (out of sample)",
            "levels chosen on halves",
            "CI width vs nominal",
        ],
        rows,
        f"Calibrated levels of the {html.escape(s['ci_method'])} CI (target {format_level(s['confidence'])} coverage)",
        "calibration",
    )
    return '<h2 id="levels">Calibrated levels</h2>' + intro + disclosure(f"Calibrated levels ({len(rows)} rows)", table)


def _flagged(entry: dict[str, Any], bad: bool) -> tuple[str, float]:
    """A rate as a table cell: '94.1%' ('⚠ 91.2%' when ``bad``), its Monte-Carlo SE as the tooltip."""
    return (f'<span title="± {percent_value(entry["mc_se"])} (Monte-Carlo SE)">{"⚠ " if bad else ""}{percent(entry["rate"])}</span>', entry["rate"])


def _real_populations(audit: dict[str, Any]) -> str:
    """The calibration page's real populations (``calibration.real``: published per-case scores), answer first: per set,
    structure and metric, the leaderboard CI's coverage and the verdict's type-I error at each n (⚠ beyond the audit's
    ``MARGIN``, as the board flags them), then every CI method and procedure behind disclosures."""
    real = audit.get("real") or {}
    if not real.get("population"):
        return ""
    s = audit["stats"]
    parts = [
        '<h2 id="real">Real populations: published per-case scores</h2>',
        "<p>The same audit on real models' published per-case scores, whose distributions have what simulated ones lack "
        "(ties at the top, heavy tails, failed cases at 0). Per structure of a set: the cases where every model reports every "
        "metric, and the models at the configured ranks of mean Dice; the first two are made equal (their values exchanged per "
        "sampled case), so every verdict between them is false. A population is audited at each n up to its size. "
        f"Leaderboard cells of these sets and structures read their audited rate here. ⚠: more than {format_points(MARGIN)} below "
        f"{format_level(s['confidence'])} coverage, or above {format_level(s['alpha'])} type-I error.</p>",
    ]
    for source in dict.fromkeys(p["source"] for p in real["population"].values()):
        parts.append(_real_source(audit, source))
    return "".join(parts)


def _real_source(audit: dict[str, Any], source: str) -> str:
    """One published set of the real populations: its headline table (the leaderboard's CI and verdict by structure,
    metric and n), the models of each population, then every CI method and procedure behind disclosures."""
    real = audit["real"]
    s = audit["stats"]
    method, procedure = s["ci_method"], calibration.verdict_procedure(s)
    low, high = s["confidence"] - MARGIN, s["alpha"] + MARGIN
    mine = [p for p in real["population"].values() if p["source"] == source]
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
    headers = (
        ["structure", "metric", "cases"] + [f"{method} coverage, n = {n}" for n in sizes] + [f"type-I ({procedure.replace('_', ' ')}), n = {n}" for n in sizes]
    )
    models = "; ".join(f"{p['structure']}: {', '.join(p['models'])}" for p in mine)
    return (
        f"<h3>{html.escape(source)}</h3>"
        + tables.table(
            headers,
            rows,
            f"{html.escape(source)}: the leaderboard's {html.escape(method)} CI and its "
            f"separable verdict ({html.escape(procedure.replace('_', ' '))}), by structure, metric and n",
            "calibration",
        )
        + disclosure(f"Models per structure ({len(mine)} populations)", f"<p>{html.escape(models)}.</p>")
        + _real_coverage_by_method(source, coverage, s["confidence"])
        + _real_type1_by_procedure(source, type1)
    )


def _real_coverage_by_method(source: str, coverage: dict[tuple, dict[str, Any]], confidence: float) -> str:
    """A published set's coverage rows by structure, metric, n and every CI method (behind a disclosure), with the
    side of the truth its misses fell on."""
    full = [
        [
            (html.escape(st), st),
            (html.escape(m), m),
            (str(n), n),
            (html.escape(k), k),
            (_rate(r), r["rate"]),
            _misses(r),
        ]
        for (st, m, n, k), r in coverage.items()
    ]
    return disclosure(
        f"Coverage by structure, metric, n and CI method ({len(full)} rows)",
        tables.table(
            ["structure", "metric", "n", "CI method", "coverage", "CI below / above the truth"],
            full,
            f"{html.escape(source)}: coverage of the {format_level(confidence)} CI of a model's mean",
            "calibration",
        ),
    )


def _real_type1_by_procedure(source: str, type1: dict[tuple, dict[str, Any]]) -> str:
    """A published set's type-I rows by structure, metric, n and every procedure (behind a disclosure): the
    family-wise rate of a false verdict between its equal pair."""
    full = [
        [
            (html.escape(st), st),
            (html.escape(m), m),
            (str(n), n),
            (html.escape(k.replace("_", " ")), k),
            (_rate(r), r["rate"]),
            (str(r["draws"]), r["draws"]),
        ]
        for (st, m, n, k), r in type1.items()
    ]
    return disclosure(
        f"Type-I error by structure, metric, n and procedure ({len(full)} rows)",
        tables.table(
            ["structure", "metric", "n", "procedure", "type-I error", "samples"],
            full,
            f"{html.escape(source)}: family-wise type-I error among the equal pair",
            "calibration",
        ),
    )


def _shapes_section(audit: dict[str, Any]) -> str:
    """The failure-shape audit (``audit["shapes"]``, docs/methodology.md#520-failure-shapes), answer first: per
    synthetic population and n the family-wise rate of a separable pair under the old and the new test side by side
    (⚠ above alpha + 2 Monte-Carlo SEs), then the real pairs centred to no difference, the intervals' coverage and
    the power on graded populations behind disclosures."""
    shapes = audit.get("shapes")
    if not shapes:
        return ""
    alpha = audit["stats"]["alpha"]
    tests = list(SHAPE_TESTS)
    headers = [
        "population",
        "skewness of the differences",
        "n",
        *(f"separable, {SHAPE_TESTS[t]}" for t in tests),
        f"{SHAPE_TESTS[tests[-1]]}, where every failing model failed (samples where one never did)",
    ]
    synthetic = "".join(
        f"<li><b>{html.escape(p['shape'])}</b>: {html.escape(p['description'])}</li>"
        for p in shapes["populations"]
        if p["kind"] == "synthetic" and "+" not in p["shape"]
    )
    parts = [
        '<h2 id="shapes">Models that fail differently</h2>',
        "<p>Equal-mean populations whose models are <b>not</b> exchangeable: a steady model against one better on most cases "
        "that fails now and then, as real models differ (SYNTHETIC populations of 20,000 cases whose four models have exactly "
        "equal means, and every real pair above centred to no difference). Every separable pair is a false one: the rate "
        "below is family-wise over the population's pairs, Holm at "
        f"{format_level(alpha)}, for the test before (the sign flips alone) and the board's test now (the sign flips and the "
        "studentized bootstrap together; docs/methodology.md, 5.20). ⚠: above "
        f"{format_level(alpha)} by more than two Monte-Carlo SEs. Where failures are so rare that a sample of n cases often "
        "holds none, no test can see them: a failing model that never fails in the sample is better on every case there, "
        "and any test with power calls it separable. The last column gives the rate over the samples in which every "
        "failing model failed at least once (the test's own error) and the share of samples in which one never did; "
        "cells at such n say so on the board.</p>",
        f"<ul>{synthetic}</ul>",
        tables.table(
            headers,
            _shape_type1_rows(shapes, "synthetic", alpha),
            f"Family-wise rate of a false 'separable' (target {format_level(alpha)}), synthetic populations",
            "calibration",
        ),
    ]
    real = _shape_type1_rows(shapes, "real", alpha)
    if real:
        parts.append(
            disclosure(
                f"Real pairs centred to no difference ({len(real)} rows)",
                tables.table(headers, real, "Rate of a false 'separable' on real pairs centred to no difference", "calibration"),
            )
        )
    parts.append(_shapes_coverage(shapes, audit["stats"]["confidence"], alpha))
    parts.append(_shapes_power(shapes))
    return "".join(parts)


def _shape_type1_rows(shapes: dict[str, Any], kind: str, alpha: float) -> list[list[tuple[str, Any]]]:
    """The type-I rows of the shape audit's ``kind`` ("synthetic" or "real") populations: per population and n its
    skewness, each test's family-wise rate (⚠ above alpha + 2 MC SEs) side by side, and the board's test's rate over
    the samples in which every failing model failed (:func:`_seen`)."""
    described = {p["shape"]: p for p in shapes["populations"]}
    tests = list(SHAPE_TESTS)
    rows = shapes["type1"]
    keyed = {(r["shape"], r["n"], r["procedure"]): r for r in rows if r["kind"] == kind}
    out = []
    for shape, n in dict.fromkeys((r["shape"], r["n"]) for r in rows if r["kind"] == kind):
        row = [(html.escape(shape), shape), (skewness(described[shape]["skewness"]), described[shape]["skewness"]), (str(n), n)]
        row += [
            _flagged(keyed[shape, n, t], keyed[shape, n, t]["rate"] > alpha + 2 * keyed[shape, n, t]["mc_se"]) if (shape, n, t) in keyed else ("–", None)
            for t in tests
        ]
        row.append(_seen(keyed.get((shape, n, tests[-1])), alpha))
        out.append(row)
    return out


def _shapes_coverage(shapes: dict[str, Any], confidence: float, alpha: float) -> str:
    """The shape audit's coverage rows (behind a disclosure): per population and n, the intervals of the mean
    difference (the tests inverted at alpha) and each model's CI at the confidence."""
    coverage = [
        [(html.escape(r["shape"]), r["shape"]), (str(r["n"]), r["n"]), (html.escape(r["interval"]), r["interval"]), (_rate(r), r["rate"])]
        for r in shapes["coverage"]
    ]
    return disclosure(
        f"Coverage of the 95% interval of the mean difference and of each model's CI ({len(coverage)} rows)",
        tables.table(
            ["population", "n", "interval", "coverage"],
            coverage,
            f"Coverage at {format_level(confidence)} (intervals of the difference at alpha {format_level(alpha)}, one pair at a time)",
            "calibration",
        ),
    )


def _shapes_power(shapes: dict[str, Any]) -> str:
    """The shape audit's power rows (behind a disclosure): per graded population and n, each test's share of samples
    that separate the better model in the right direction, so that the new test's price in power shows."""
    tests = list(SHAPE_TESTS)
    power = {(r["shape"], r["n"], r["procedure"]): r for r in shapes["power"]}
    rows = [
        [(html.escape(shape), shape), (str(n), n), *((_rate(power[shape, n, t]), power[shape, n, t]["rate"]) for t in tests)]
        for shape, n in dict.fromkeys((r["shape"], r["n"]) for r in shapes["power"])
    ]
    return disclosure(
        f"Power on graded populations ({len(rows)} rows)",
        tables.table(
            ["population", "n", *(f"power, {SHAPE_TESTS[t]}" for t in tests)],
            rows,
            "Share of samples separating the better model in the right direction",
            "calibration",
        ),
    )


def _seen(entry: dict[str, Any] | None, alpha: float) -> tuple[str, Any]:
    """The rate over the samples in which every failing model failed at least once, and the share of samples in which
    one never did ('–' for a population without failures): the test's own error, and what no test can see."""
    share = (entry or {}).get("unseen_share")
    if entry is None or share is None or not share > 0 or not math.isfinite(entry["rate_seen"]):
        return ("–", None)
    seen = {"rate": entry["rate_seen"], "mc_se": entry["mc_se_seen"]}
    text, key = _flagged(seen, seen["rate"] > alpha + 2 * seen["mc_se"])
    return (f"{text} ({percent(share)} of samples)", key)


def _rate(entry: dict[str, Any]) -> str:
    return rate_with_se(entry["rate"], entry["mc_se"])


def _misses(entry: dict[str, Any]) -> tuple[str, float]:
    """How often a CI fell below / above the truth, as a table cell: '2.1% / 3.0%'."""
    return (f"{percent(entry['miss_below'])} / {percent(entry['miss_above'])}", entry["miss_below"] + entry["miss_above"])
