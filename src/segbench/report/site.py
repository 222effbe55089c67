"""Static leaderboard pages from ``results/<dataset>.json``.

Every number on a page is read from the results JSON; nothing is recomputed here. plotly's JavaScript
is written once into the site folder, so pages work offline (no CDN).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from segbench.io import write_text_atomic

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<script src="plotly.min.js"></script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ border: 1px solid #bbb; padding: .3rem .6rem; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.tag {{ font-size: .8em; padding: .05rem .35rem; border-radius: .3rem; background: #fde68a; }}
.tag.contaminated {{ background: #fecaca; }}
</style></head><body>
{body}
</body></html>
"""


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _model_label(name: str, model: dict[str, Any]) -> str:
    """Model name plus the markers a reader must see: simulated, contaminated."""
    tags = []
    if model.get("simulated"):
        tags.append('<span class="tag">SIMULATED</span>')
    if model.get("contaminated"):
        tags.append('<span class="tag contaminated">trained on this data: unranked</span>')
    return f"{html.escape(name)} {' '.join(tags)}".strip()


def _leaderboard(structure: str, metric: str, cell: dict[str, Any], models: dict[str, Any]) -> str:
    ranking = cell.get("ranking", {})
    order = ranking.get("order") or sorted(cell["models"])
    order = order + [m for m in sorted(cell["models"]) if m not in order]
    rows = []
    for rank, name in enumerate(order, start=1):
        est = cell["models"][name]
        ranked = name in (ranking.get("order") or [])
        p1 = ranking.get("p_rank1", {}).get(name)
        interval = ranking.get("rank_interval", {}).get(name)
        rows.append(
            "<tr><td>{}</td><td>{}</td><td>{} [{}, {}]</td><td>{}</td><td>{}</td><td>{}</td></tr>".format(
                rank if ranked else "–",
                _model_label(name, models.get(name, {})),
                _fmt(est["mean"]),
                _fmt(est["ci_low"]),
                _fmt(est["ci_high"]),
                _fmt(p1, 2) if p1 is not None else "–",
                f"{interval[0]}–{interval[1]}" if interval else "–",
                est["n"],
            )
        )
    direction = "higher is better" if cell["higher_is_better"] else "lower is better"
    return (
        f"<h3>{html.escape(structure)} · {html.escape(metric)} <small>({direction})</small></h3>"
        "<table><thead><tr><th>rank</th><th>model</th><th>mean [95% CI]</th><th>P(rank 1)</th>"
        "<th>rank interval</th><th>n</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _ci_plot(structure: str, metric: str, cell: dict[str, Any], models: dict[str, Any], div_id: str) -> str:
    names = sorted(cell["models"], key=lambda m: cell["models"][m]["mean"] or 0.0)
    means = [cell["models"][m]["mean"] for m in names]
    low = [cell["models"][m]["mean"] - cell["models"][m]["ci_low"] for m in names]
    high = [cell["models"][m]["ci_high"] - cell["models"][m]["mean"] for m in names]
    labels = [f"{m} (SIMULATED)" if models.get(m, {}).get("simulated") else m for m in names]
    fig = go.Figure(
        go.Scatter(x=means, y=labels, mode="markers", error_x={"type": "data", "symmetric": False, "array": high, "arrayminus": low})
    )
    fig.update_layout(
        title=f"{structure} · {metric}: mean with 95% bootstrap CI",
        height=120 + 40 * len(names),
        margin={"l": 260, "r": 20, "t": 50, "b": 40},
        xaxis_title=metric,
    )
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id)


def dataset_section(results: dict[str, Any]) -> str:
    """One dataset's leaderboards: per structure and metric a table and a CI plot."""
    dataset = results["dataset"]
    models = results["models"]
    parts = [f"<h1>{html.escape(dataset['title'])}</h1>"]
    if any(m.get("simulated") for m in models.values()):
        parts.append(
            "<p><strong>Models marked SIMULATED are error models applied to the reference label maps, "
            "not real segmentation models.</strong> They exercise the pipeline and the statistics.</p>"
        )
    parts.append(f"<p>Licence: {html.escape(dataset['licence'])}. Cite: {html.escape(dataset['citation'])}.</p>")
    for structure, block in sorted(results["analysis"]["structures"].items()):
        parts.append(f"<h2>{html.escape(structure)} <small>(n = {block['n_cases']} cases, {block['n_absent']} without this structure)</small></h2>")
        for metric, cell in block["metrics"].items():
            parts.append(_leaderboard(structure, metric, cell, models))
            parts.append(_ci_plot(structure, metric, cell, models, f"ci-{dataset['name']}-{structure}-{metric}"))
    return "\n".join(parts)


def build_site(results_files: list[Path], out_dir: Path) -> list[Path]:
    """Write one page per dataset and ``index.html`` with all leaderboards; returns the pages written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "plotly.min.js", get_plotlyjs())
    pages, sections = [], []
    for path in sorted(results_files):
        results = json.loads(Path(path).read_text(encoding="utf-8"))
        section = dataset_section(results)
        page = out_dir / f"{results['dataset']['name']}.html"
        write_text_atomic(page, PAGE.format(title=html.escape(results["dataset"]["title"]), body=section))
        pages.append(page)
        sections.append(section)
    links = "".join(f'<li><a href="{p.name}">{html.escape(p.stem)}</a></li>' for p in pages)
    body = f"<h1>segbench leaderboards</h1><ul>{links}</ul>" + "\n".join(sections)
    write_text_atomic(out_dir / "index.html", PAGE.format(title="segbench", body=body))
    return [out_dir / "index.html", *pages]
