"""The index page: how often each board's #1 is real (``report.boards``), one line per dataset, then the calibration
audit's page and the interactive benchmark's site.
"""

from __future__ import annotations

import html

from ..boards import summary_html
from ..document import Models
from ..marks import kind
from .crossdataset import CROSS_DATASET_PAGE
from .frame import CALIBRATION_PAGE, Results, dataset_page_name, nav_bar, render


def _kinds(models: Models) -> str:
    """'3 SIMULATED, 1 PUBLISHED' style count of model kinds."""
    counts: dict[str, int] = {}
    for model in models.values():
        counts[kind(model)] = counts.get(kind(model), 0) + 1
    return ", ".join(f"{n} {k.upper()}" for k, n in sorted(counts.items()))


def index_page(all_results: list[Results], calibration: bool = False, interactive: str | None = None, cross_dataset: bool = False) -> str:
    """Entry page: how often each board's #1 is real, one line per dataset, then the cross-dataset page and the
    calibration audit's page (when the site has them) and the interactive benchmark's site (``interactive``: its index's
    address relative to this site)."""
    items = []
    for r in all_results:
        s = r["analysis"]["structures"]
        items.append(
            f'<li><a href="{dataset_page_name(r)}">{html.escape(r["dataset"]["title"])}</a>: '
            f"{len(r['models'])} models ({_kinds(r['models'])}), {len(s)} structures, "
            f"metrics {html.escape(', '.join(r['metrics']))}</li>"
        )
    others = []
    if cross_dataset:
        others.append(
            f'<li><a href="{CROSS_DATASET_PAGE}">One model, two datasets</a>: the same published models ranked on two '
            "real boards side by side, with their rank correlation.</li>"
        )
    if calibration:
        others.append(
            f'<li><a href="{CALIBRATION_PAGE}">Calibration audit</a>: how often the CIs cover the truth and how '
            'often "separable" is wrong, measured on simulated models of known quality and on real models\' published '
            "per-case scores.</li>"
        )
    if interactive:
        others.append(
            f'<li><a href="{html.escape(interactive)}">Interactive benchmark</a>: promptable models on the box-and-click '
            "protocol, a site of its own built by the interactive pipeline (<code>dvc repro interactive/dvc.yaml</code>; "
            "until that has run, the link leads nowhere).</li>"
        )
    body = (
        "<h1>segbench leaderboards</h1>"
        "<p>Every score with a confidence interval, ranking stability, and which pairs of models are "
        'separable at all. See the <a href="methodology.html">methodology</a> for the exact protocol.</p>'
        + summary_html(all_results, {r["dataset"]["name"]: dataset_page_name(r) for r in all_results})
        + f"<h2>Leaderboards</h2><ul>{''.join(items)}</ul>"
        + (f"<h2>Also</h2><ul>{''.join(others)}</ul>" if others else "")
    )
    return render("segbench", body, nav_bar(all_results))
