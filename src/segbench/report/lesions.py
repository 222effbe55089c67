"""The dataset page's lesion-wise section (docs/methodology.md#519-lesion-wise-analysis): the answers by case and by
lesion, the lesion counts, and how the ranking moves between matching rules. Drawn from a results file's ``lesions``
block, whose analyses have the layout of every other analysis, so the same tables draw them."""

from __future__ import annotations

import html
from typing import cast

from segbench.base.formats import fmt
from segbench.stats.audited import LESIONS as NOT_AUDITED
from segbench.stats.results import Analysis, Lesions

from . import tables
from .audit import audit_of
from .document import Models, Results
from .markup import disclosure, slug

#: what each lesion-wise metric is, in words a reader of the table needs
METRIC_WORDS = {
    "rq": "RQ: detection F1 over lesions (TP / (TP + FP/2 + FN/2))",
    "pq_dice": "PQ: RQ x mean Dice of the matched lesions",
    "recall": "share of reference lesions found",
    "lesion_dice": "BraTS-style lesion-wise Dice: mean over reference lesions (0 if missed) and false positives (0)",
    "lesion_hd95": "BraTS-style lesion-wise HD95 (mm): a missed lesion or false positive scores the penalty",
    "dice": "Dice of each reference lesion against its matched predictions (0 if missed)",
    "nsd": "NSD of each reference lesion",
    "hd95": "HD95 (mm) of each reference lesion (the penalty if missed)",
    "detected": "share of reference lesions matched (pooled over lesions)",
    "sq_dice": "SQ: mean Dice of the lesions the model matched",
    "sq_nsd": "SQ: mean NSD of the lesions the model matched",
    "sq_hd95": "SQ: mean HD95 (mm) of the lesions the model matched",
}


UNIT_WORDS = {"case": "by-case", "matched": "SQ", "lesion": "by-lesion"}


def _anchor(unit: str, structure: str, metric: str) -> str:
    return f"lesions-{unit}-{slug(structure)}-{slug(metric)}"


def _unit(results: Results, unit: str, analysis: Analysis | None) -> str:
    """One unit's answers (#1, CI, verdict, co-winners per structure and metric) and its leaderboards one click away."""
    if analysis is None:
        return "<p>Nothing to analyse: no case has a value for every model.</p>"
    # the lesion-wise leaderboards are not audited (the results' audited block says why); the tables say so on every CI
    view = cast(
        Results,
        {
            "models": results["models"],
            "analysis": analysis,  # a results document of this unit's analysis
            "audited": (results.get("audited") or {}).get("lesions") or NOT_AUDITED,  # type: ignore[union-attr]  # a dict or None here
        },
    )
    answers = tables.answers(view, lambda structure, metric: f"#{_anchor(unit, structure, metric)}")
    boards = "".join(
        f'<h4 id="{_anchor(unit, structure, metric)}">{html.escape(structure)} {html.escape(metric)}</h4>'
        f"<p>{html.escape(METRIC_WORDS.get(metric, metric))}.</p>"
        + tables.leaderboard(cell, results["models"], metric, audit_of(view, structure, metric), structure, analysis["settings"])
        for structure, block in sorted(analysis["structures"].items())
        for metric, cell in block["metrics"].items()
    )
    return answers + disclosure(f"Every {UNIT_WORDS[unit]} leaderboard, model by model", boards)


def _volume_words(stratum: str) -> str:
    """'lt_1ml' -> '< 1 mL', '1_10ml' -> '1-10 mL', 'ge_10ml' -> '≥ 10 mL'."""
    body = stratum.removesuffix("ml")
    if body.startswith("lt_"):
        return f"< {body[3:]} mL"
    if body.startswith("ge_"):
        return f"≥ {body[3:]} mL"
    return body.replace("_", "-") + " mL"


def _counts(block: Lesions, models: Models) -> str:
    said = tables.shared_marks(sorted({m for by_model in block["counts"].values() for m in by_model}), models)
    rows = []
    for structure, by_model in sorted(block["counts"].items()):
        for model, c in sorted(by_model.items()):
            rows.append(
                [
                    (html.escape(structure), structure),
                    tables.model_cell(model, models.get(model, {}), said),
                    *((str(int(c[k])), c[k]) for k in ("n_reference", "tp", "fn", "fp")),
                    (fmt(c["fp_volume_ml"], 1), c["fp_volume_ml"]),
                    (fmt(c["fn_volume_ml"], 1), c["fn_volume_ml"]),
                    (f"{c['n_cases_with_lesions']} of {c['n_cases']}", c["n_cases_with_lesions"]),
                    (html.escape(", ".join(f"{_volume_words(v['stratum'])} {v['tp']}/{v['n_reference']}" for v in c["by_volume"])) or "–", None),
                ]
            )
    headers = [
        "structure",
        "model",
        "reference lesions",
        "TP",
        "FN (missed)",
        "FP (added)",
        "FP volume (mL)",
        "FN volume (mL)",
        "cases with lesions",
        "found, by lesion volume",
    ]
    return tables.table(headers, rows, "Lesions over every case, under the lesion profile" + tables.marks_caption(said), "counts")


def _sensitivity(block: Lesions) -> str:
    parts = []
    for name, variant in sorted(block["sensitivity"]["variants"].items()):
        s = variant["summary"]
        undefined = f" Not defined under it: {html.escape(', '.join(variant['undefined']))}." if variant["undefined"] else ""
        parts.append(
            f'<h4 id="lesions-rule-{slug(name)}">matching rule <code>{html.escape(name)}</code> instead of '
            f"<code>{html.escape(block['profile'])}</code></h4>"
            f"<p>{s['n_cells_with_flips']} of {s['n_cells']} lesion-wise leaderboards change order ({s['n_flipped_pairs']} pairs flip); "
            f"#1 changes in {s['n_top_changed']}, the co-winner set in {s['n_co_winners_changed']}.{undefined}</p>"
            + tables.sensitivity(variant, lambda structure, metric: f"#{_anchor('case', structure, metric)}")
        )
    return "".join(parts)


def lesion_section(results: Results) -> str:
    """The dataset page's lesion-wise section; nothing for a dataset without lesion-wise scores."""
    block = results.get("lesions")
    if not block:
        return ""
    undefined = block["undefined"]
    missing = "".join(
        f" Not defined by this profile, so not analysed ({unit} unit): {html.escape(', '.join(names))}." for unit, names in sorted(undefined.items()) if names
    )
    lesion = block.get("lesion")
    variants = sorted(block["sensitivity"]["variants"])
    return (
        '<h2 id="lesions">Lesion-wise</h2>'
        f"<p>Each structure's connected components are its lesions, matched between reference and prediction under the "
        f"<code>{html.escape(block['profile'])}</code> lesion profile (docs/scoring.md, lesion-wise scoring). "
        "<strong>By case</strong>: each case's lesion-wise scores, over the cases whose reference has a lesion the profile "
        f"counts, with CIs over cases and verdicts as every leaderboard.{missing}</p>"
        + _unit(results, "case", block["case"])
        + disclosure(
            "Matched lesions (SQ): the quality of the lesions each model found, over the cases where every model found one",
            "<p>The mean quality of the lesions a model matched is defined only where it matched one: over the cases where "
            "every model did, so the models are compared on the same cases (each leaderboard's n says how many).</p>"
            + _unit(results, "matched", block["matched"]),
        )
        + (
            disclosure(
                "By lesion: every reference lesion one value, with case-clustered CIs",
                "<p>Every reference lesion is one value (missed lesions included), so a case with many lesions weighs more. "
                "Lesions of one case are not independent: the CIs here resample lesions, and the clustered bootstrap below "
                "resamples cases and then their lesions; its wider intervals are the ones to trust (docs/methodology.md, 5.19).</p>"
                + _unit(results, "lesion", lesion)
                + tables.clustered(lesion["structures"], lambda structure, metric: f"#{_anchor('lesion', structure, metric)}"),
            )
            if lesion
            else ""
        )
        + disclosure("Lesion counts: reference lesions, TP, FN, FP and their volumes per model", _counts(block, results["models"]))
        + (
            disclosure(
                f"Matching rule: how the by-case leaderboards move under {html.escape(', '.join(variants))}",
                "<p>The same cases, statistics and seed, the lesions matched under another rule.</p>" + _sensitivity(block),
            )
            if variants
            else ""
        )
    )
