"""plotly figures of the site, each drawn from one cell of the results JSON (nothing recomputed).

Figures never rely on colour alone: marks are in the axis labels, significance in cell text, ranks as
positions. ``to_div`` renders a figure with a fixed div id and no embedded plotly.js, so the same
results give byte-identical HTML.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from segbench.base.bands import level_order
from segbench.base.formats import ci_head, correlation, count, fixed_estimate, fixed_interval, fmt, fmt_p, format_level, percent, ratio
from segbench.stats.heads import ci_words
from segbench.stats.results import Consensus, Settings, Structure

from .document import Cell, Models
from .marks import display_order, is_ranked, short_mark
from .numbers import ci_level, digits

ROW_HEIGHT = 26
# Per-case points are drawn individually up to this many cases; above it only the box and outliers.
ALL_POINTS_MAX_CASES = 300
# A distance plot whose positive values span more than this factor gets a log axis: on a linear axis to 260 mm, models
# 0.2 mm apart draw as one dot.
LOG_SPAN = 20.0
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "triangle-down", "star", "hexagon", "pentagon")
TEMPLATE = go.layout.Template(
    layout={
        "font": {"family": "DejaVu Sans, Arial, sans-serif", "size": 12, "color": "#222"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "xaxis": {"gridcolor": "#e5e5e5", "zeroline": False, "linecolor": "#888", "showline": True, "automargin": True},
        "yaxis": {"gridcolor": "#e5e5e5", "zeroline": False, "linecolor": "#888", "showline": True, "automargin": True},
        "colorway": ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"],
        "hoverlabel": {"font": {"size": 12}},
        "margin": {"l": 10, "r": 20, "t": 60, "b": 50},
        "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom"},
    }
)


def to_div(fig: go.Figure, div_id: str) -> str:
    """Static-site HTML for one figure: fixed id, plotly.js loaded once by the page."""
    return fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config={"displayModeBar": False, "responsive": True},
    )


def _plain(name: str) -> str:
    """A name as plotly shows it as typed: plotly renders a subset of HTML in trace names, categories and texts (a model
    named ``<a href="...">`` was a live link in the charts) and decodes entities back to the characters."""
    return html.escape(name, quote=False)


def _labels(names: list[str], models: Models) -> list[str]:
    return [_plain(f"{name}{short_mark(models.get(name, {}))}") for name in names]


def _model_axis(fig: go.Figure, labels: list[str]) -> None:
    """Models on the y axis, top to bottom in the given order."""
    fig.update_yaxes(categoryorder="array", categoryarray=labels, autorange="reversed", type="category")
    fig.update_layout(height=120 + max(ROW_HEIGHT * len(labels), 40 * min(len(labels), 4)))


def _log_axis(fig: go.Figure, axis: str, cell: Cell, values: list[float | None]) -> bool:
    """Put ``axis`` ("x" or "y") of a distance plot on a log scale (ticks at 1, 2, 5 per decade) when its values need it:
    all positive and spanning more than ``LOG_SPAN``; True if so. Overlap scores in [0, 1] and distances with a 0 among
    them stay linear (a log axis cannot show 0)."""
    shown = [v for v in values if v is not None]
    if cell["higher_is_better"] or not shown or min(shown) <= 0 or max(shown) / min(shown) <= LOG_SPAN:
        return False
    fig.update_layout({f"{axis}axis": {"type": "log", "dtick": "D2"}})
    return True


def _finish(fig: go.Figure, title: str, x_title: str) -> go.Figure:
    fig.update_layout(template=TEMPLATE, title={"text": title, "x": 0, "xanchor": "left"}, xaxis_title=x_title)
    return fig


def forest(cell: Cell, models: Models, metric: str, settings: Settings) -> go.Figure:
    """Mean with its CI per model in rank order, the title naming the CI (``settings``: the analysis'); #1's CI shaded,
    unranked models hollow."""
    names = display_order(cell)
    labels = _labels(names, models)
    est = [cell["models"][m] for m in names]
    n = digits(cell)
    fig = go.Figure()
    for ranked in (True, False):
        idx = [i for i, m in enumerate(names) if is_ranked(cell, m) == ranked]
        if not idx:
            continue
        fig.add_trace(
            go.Scatter(
                x=[est[i]["mean"] for i in idx],
                y=[labels[i] for i in idx],
                mode="markers",
                name="ranked" if ranked else "unranked",
                marker={"symbol": "circle" if ranked else "diamond-open", "size": 9, "color": "#1f4e79" if ranked else "#b03a2e"},
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [_gap(est[i]["ci_high"], est[i]["mean"]) for i in idx],
                    "arrayminus": [_gap(est[i]["mean"], est[i]["ci_low"]) for i in idx],
                    "thickness": 1.5,
                    "width": 4,
                },
                text=[fixed_estimate(est[i]["mean"], est[i]["ci_low"], est[i]["ci_high"], n) for i in idx],
                hovertemplate=f"%{{y}}<br>{ci_head([ci_level(cell, settings)])} %{{text}}<extra></extra>",
            )
        )
    order = (cell.get("ranking") or {}).get("order") or []
    if order and cell["models"][order[0]]["ci_low"] is not None:
        first = cell["models"][order[0]]
        fig.add_vrect(x0=first["ci_low"], x1=first["ci_high"], fillcolor="#1f4e79", opacity=0.1, line_width=0)
    _model_axis(fig, labels)
    fig.update_layout(showlegend=len(fig.data) > 1)
    log = _log_axis(fig, "x", cell, [e["mean"] for e in est])
    return _finish(
        fig,
        f"Mean with {ci_words(settings, cell.get('ci_confidence'))}; shaded: the CI of #1{'; log axis' if log else ''}",
        f"{metric} (log axis)" if log else metric,
    )


def step_curves(block: Structure, models: Models, name: str, steps: int, settings: Settings) -> go.Figure:
    """An interactive dataset's ``name`` (DSC or NSD) after each step, per model: mean with its CI (``settings``: the
    analysis', which name the CI).

    Step 1 is the box prompt, steps 2 to ``steps`` one click each; each point is the cell ``<name>_<step>``.
    """
    fig = go.Figure()
    x = ["box", *(f"click {i}" for i in range(1, steps))]
    levels = {ci_level(block["metrics"][f"{name}_{step}"], settings) for step in range(1, steps + 1)}
    for i, model in enumerate(sorted(models)):
        cells = [block["metrics"][f"{name}_{step}"]["models"].get(model) for step in range(1, steps + 1)]
        if any(c is None or c["mean"] is None for c in cells):
            continue
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[c["mean"] for c in cells],
                mode="lines+markers",
                name=_plain(f"{model}{short_mark(models[model])}"),
                marker={"symbol": SYMBOLS[i % len(SYMBOLS)], "size": 8},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [_gap(c["ci_high"], c["mean"]) for c in cells],
                    "arrayminus": [_gap(c["mean"], c["ci_low"]) for c in cells],
                    "thickness": 1.2,
                    "width": 4,
                },
                text=[fixed_estimate(c["mean"], c["ci_low"], c["ci_high"], 3) for c in cells],
                hovertemplate=f"%{{x}}: {ci_head(levels)} %{{text}}<extra>" + html.escape(model) + "</extra>",
            )
        )
    fig.update_yaxes(title=f"{name} (mean over cases)", range=[0, 1.02])
    fig.update_layout(height=380)
    return _finish(fig, f"{name} after the box and each click, mean with {ci_words(settings, max(levels))}, n = {block['n_cases']} cases", "interaction")


def _gap(a: float | None, b: float | None) -> float:
    return 0.0 if a is None or b is None else a - b


def blob(cell: Cell, models: Models, settings: Settings) -> go.Figure:
    """challengeR blob plot: bootstrap rank frequencies (area), median rank and the central rank interval at the analysis'
    confidence (``settings``: the analysis')."""
    ranking = cell["ranking"]
    names = ranking["order"]
    labels = _labels(names, models)
    total = sum(ranking["rank_frequency"][names[0]]) or 1
    xs, ys, sizes, texts = [], [], [], []
    for name, label in zip(names, labels):
        for rank, times in enumerate(ranking["rank_frequency"][name], start=1):
            if times:
                xs.append(rank)
                ys.append(label)
                sizes.append(times / total)
                texts.append(percent(times / total))
    segments_x: list[float | None] = []
    segments_y: list[str | None] = []
    for name, label in zip(names, labels):
        lo, hi = ranking["rank_interval"][name]
        segments_x += [lo, hi, None]
        segments_y += [label, label, None]
    fig = go.Figure(
        [
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                name="share of bootstrap rankings",
                marker={"size": [4 + 30 * s**0.5 for s in sizes], "color": "rgba(31,78,121,0.55)", "line": {"width": 0}},
                text=texts,
                hovertemplate="%{y}: rank %{x} in %{text} of resamples<extra></extra>",
            ),
            go.Scatter(
                x=segments_x,
                y=segments_y,
                mode="lines",
                name=f"central {format_level(settings['confidence'])} rank interval",
                line={"color": "#222", "width": 1.5},
                hoverinfo="skip",
            ),
            go.Scatter(
                x=[ranking["median_rank"][m] for m in names],
                y=labels,
                mode="markers",
                name="median rank",
                marker={"symbol": "line-ns-open", "size": 14, "color": "#222", "line": {"width": 2}},
                hovertemplate="%{y}: median rank %{x}<extra></extra>",
            ),
        ]
    )
    _model_axis(fig, labels)
    fig.update_xaxes(dtick=1, range=[0.5, len(names) + 0.5])
    return _finish(fig, f"Rank over bootstrap resamples (Kendall's τ to the full ranking: median {correlation(ranking['kendall_tau']['median'])})", "rank")


def significance_map(cell: Cell, models: Models) -> go.Figure:
    """Wilcoxon-Holm map: cell (row, column) says whether row is significantly better than column."""
    names = cell["ranking"]["order"]
    labels = _labels(names, models)
    sig = cell["significance"]
    compact = len(names) > 8  # with many models the cells only hold the mark; p-values on hover
    z, shown, p_text = [], [], []
    for a in names:
        marks = [False if a == b else bool(sig["significant"][a][b]) for b in names]
        z.append([None if a == b else int(m) for b, m in zip(names, marks)])
        p_text.append(["" if a == b else fmt_p(sig["p_adjusted"][a][b]) for b in names])
        shown.append([("✔" if m else "") if compact else ("✔ " if m else "") + p for m, p in zip(marks, p_text[-1])])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=labels,
            text=shown,
            customdata=p_text,
            texttemplate="%{text}",
            textfont={"size": 12},
            colorscale=[[0, "#f2f2f2"], [1, "#7fb77e"]],
            zmin=0,
            zmax=1,
            showscale=False,
            xgap=1,
            ygap=1,
            hovertemplate="%{y} better than %{x}?<br>p_adj %{customdata}<extra></extra>",
        )
    )
    _model_axis(fig, labels)
    fig.update_xaxes(type="category", tickangle=-40 if len(names) > 4 else 0, side="bottom", showgrid=False)
    fig.update_yaxes(showgrid=False)
    fig.update_layout(height=180 + ROW_HEIGHT * len(names) + 6 * max(len(s) for s in labels))
    what = "✔ = significant" if compact else "✔ = significant; numbers: Holm-adjusted p"
    return _finish(fig, f"Is the row model significantly better than the column model? (one-sided Wilcoxon-Holm; {what})", "")


def per_case(cell: Cell, models: Models, metric: str, case_ids: list[str]) -> go.Figure:
    """Per-case values, one horizontal box per model; every case as a point when there are few cases."""
    names = display_order(cell)
    labels = _labels(names, models)
    few = len(case_ids) <= ALL_POINTS_MAX_CASES
    n = digits(cell) + 1
    fig = go.Figure(
        [
            go.Box(
                x=[None if v is None else round(v, n) for v in cell["per_case"][name]],
                y=[label] * len(case_ids),
                name=label,
                orientation="h",
                boxpoints="all" if few else "outliers",
                jitter=0.4 if few else 0,
                pointpos=0,
                marker={"size": 4 if few else 3, "opacity": 0.6, "symbol": SYMBOLS[k % len(SYMBOLS)]},
                line={"width": 1.2},
                fillcolor="rgba(0,0,0,0)",
                text=case_ids if few else None,
                hovertemplate="%{text}: %{x}<extra></extra>" if few else None,
                showlegend=False,
            )
            for k, (name, label) in enumerate(zip(names, labels))
        ]
    )
    _model_axis(fig, labels)
    log = _log_axis(fig, "x", cell, [v for name in names for v in cell["per_case"][name]])
    what = ("every case is a point" if few else f"{len(case_ids)} cases: box with outliers") + ("; log axis" if log else "")
    return _finish(fig, f"Per-case {metric} ({what})", f"{metric} (log axis)" if log else metric)


def subgroups(cell: Cell, models: Models, metric: str, field: str, settings: Settings) -> go.Figure:
    """Estimates with CIs (at the analysis' nominal confidence) per group of one metadata field, with each model's
    Kruskal-Wallis result; ``settings``: the analysis' (the CI, the minimum group size)."""
    block = cell["subgroups"][field]
    groups = level_order(field, block["groups"])
    names = display_order(cell)
    width = 0.8 / max(len(names), 1)
    kruskal = block.get("kruskal") or {}
    fig = go.Figure()
    for k, name in enumerate(names):
        offset = (k - (len(names) - 1) / 2) * width
        ests = [block["groups"][g]["models"][name] for g in groups]
        test = kruskal.get(name)
        result = f"Kruskal-Wallis p = {fmt_p(test['p_value'])}" if test else "not tested"
        pairs = (block.get("mann_whitney") or {}).get(name)
        if pairs:
            result += f", {sum(p['significant'] for p in pairs)} of {len(pairs)} group pairs differ (Mann-Whitney, Bonferroni)"
        fig.add_trace(
            go.Scatter(
                x=[i + offset for i in range(len(groups))],
                y=[e["mean"] for e in ests],
                mode="markers",
                name=f"{_plain(name + short_mark(models.get(name, {})))}: {result}",
                marker={"symbol": SYMBOLS[k % len(SYMBOLS)], "size": 7},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "thickness": 1,
                    "width": 2,
                    "array": [_gap(e["ci_high"], e["mean"]) for e in ests],
                    "arrayminus": [_gap(e["mean"], e["ci_low"]) for e in ests],
                },
                text=[f"{g}: {fixed_estimate(e['mean'], e['ci_low'], e['ci_high'], digits(cell))}" for g, e in zip(groups, ests)],
                hovertemplate=f"{_plain(name)}<br>%{{text}}<extra></extra>",
            )
        )
    ticks = [f"{html.escape(g)}<br>n = {block['groups'][g]['n']}{'' if block['groups'][g]['tested'] else ' (untested)'}" for g in groups]
    fig.update_xaxes(tickvals=list(range(len(groups))), ticktext=ticks, range=[-0.6, len(groups) - 0.4], showgrid=False)
    log = _log_axis(fig, "y", cell, [block["groups"][g]["models"][name]["mean"] for g in groups for name in names])
    fig.update_layout(
        height=300 + 18 * len(names),
        yaxis_title=f"{metric} (log axis)" if log else metric,
        # beside the plot, not under it: a legend below the axis covers the group labels (two lines each)
        legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top", "font": {"size": 11}},
    )
    missing = f"; {block['n_missing_value']} cases without a value are left out" if block.get("n_missing_value") else ""
    title = (
        f"Subgroups by {html.escape(field)}: mean with {ci_words(settings)}{'; log axis' if log else ''}<br><sup>groups under "
        f"{settings['subgroup_min_cases']} cases are not tested{missing}</sup>"
    )
    return _finish(fig, title, "")


def leave_one_out(block: Structure) -> go.Figure:
    """Share of cases whose removal changes the winner, or any rank, for every metric of one structure."""
    metrics = [m for m, cell in block["metrics"].items() if cell.get("loo")]
    fig = go.Figure(
        [
            go.Bar(
                y=metrics,
                x=[block["metrics"][m]["loo"][key] for m in metrics],  # type: ignore[literal-required]  # one of the block's keys (the loop's literals)
                name=_plain(name),
                orientation="h",
                text=[percent(block["metrics"][m]["loo"][key]) for m in metrics],  # type: ignore[literal-required]  # one of the block's keys (the loop's literals)
                textposition="outside",
                marker={"color": color, "pattern": {"shape": pattern}},
            )
            for key, name, color, pattern in (
                ("winner_change_share", "winner changes", "#1f4e79", ""),
                ("any_rank_change_share", "any rank changes", "#9ecae1", "/"),
            )
        ]
    )
    fig.update_xaxes(range=[0, 1.15], tickformat=".0%")
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="group", height=160 + 50 * len(metrics))
    return _finish(fig, "Leave-one-case-out: share of cases whose removal changes the ranking", "share of cases")


SCHEME_LABELS = {"mean": "mean then rank", "median": "median then rank", "rank_then_aggregate": "rank then mean", "test_then_rank": "test then rank"}


def scheme_lines(cell: Cell, models: Models) -> go.Figure:
    """Each ranked model's rank under every ranking scheme (challengeR's line plot), Kendall's tau to the mean's ranking in the axis labels."""
    block = cell["schemes"]
    schemes = list(SCHEME_LABELS)
    ticks = [f"{SCHEME_LABELS[s]}<br>tau {correlation(block['kendall_tau']['mean'][s])}" for s in schemes]
    fig = go.Figure()
    for i, name in enumerate(cell["ranking"]["order"]):
        label = _labels([name], models)[0]
        fig.add_trace(
            go.Scatter(
                x=ticks,
                y=[block["ranks"][s][name] for s in schemes],
                mode="lines+markers",
                name=label,
                marker={"symbol": SYMBOLS[i % len(SYMBOLS)], "size": 8},
                hovertemplate=f"{label}<br>%{{x}}: rank %{{y}}<extra></extra>",
            )
        )
    n = len(cell["ranking"]["order"])
    fig.update_yaxes(autorange="reversed", dtick=1, title="rank")
    fig.update_layout(height=220 + 18 * n, legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"})
    return _finish(fig, "Rank under each ranking scheme (challengeR; tau: Kendall's tau-b with the ranking by mean)", "")


def podium(consensus: Consensus, models: Models) -> go.Figure:
    """challengeR's podium: models in consensus order, each task's rank of the model as a point, its mean rank as a bar."""
    names = consensus["order"]
    labels = [f"{consensus['rank'][m]}. {label}" for m, label in zip(names, _labels(names, models))]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=[consensus["mean_rank"][m] for m in names],
            name="mean rank (consensus)",
            marker={"color": "#c6d9ec"},
            hovertemplate="%{x}<br>mean rank %{y:.2f}<extra></extra>",
        )
    )
    for i, task in enumerate(consensus["tasks"]):
        ranks = consensus["task_ranks"][task]
        shown = [m for m in names if m in ranks]
        fig.add_trace(
            go.Scatter(
                x=[labels[names.index(m)] for m in shown],
                y=[ranks[m] for m in shown],
                mode="markers",
                name=_plain(task),
                marker={"symbol": SYMBOLS[i % len(SYMBOLS)], "size": 8},
                hovertemplate=f"{html.escape(task)}: rank %{{y}}<extra></extra>",
            )
        )
    fig.update_xaxes(type="category", tickangle=-40 if len(names) > 4 else 0)
    fig.update_yaxes(autorange="reversed", title="rank in a task (1 = best)")
    fig.update_layout(height=420, legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"})
    return _finish(fig, "Podium: rank per structure and metric (points), consensus mean rank (bars)", "")


def ranking_heatmap(consensus: Consensus, models: Models) -> go.Figure:
    """challengeR's ranking heatmap: for each model (consensus order) how often each consensus rank came up in the bootstrap."""
    names = consensus["order"]
    labels = _labels(names, models)
    n = len(names)
    freq = [[consensus["rank_frequency"][m][r] / consensus["n_resamples"] for m in names] for r in range(n)]
    fig = go.Figure(
        go.Heatmap(
            z=freq,
            x=labels,
            y=[str(r + 1) for r in range(n)],
            text=[[fmt(v, 2) if v else "" for v in row] for row in freq],
            texttemplate="%{text}",
            colorscale="Blues",
            zmin=0,
            zmax=1,
            showscale=False,
            xgap=1,
            ygap=1,
            hovertemplate="%{x}: consensus rank %{y} in a share %{z:.3f} of resamples<extra></extra>",
        )
    )
    fig.update_xaxes(type="category", tickangle=-40 if n > 4 else 0, showgrid=False)
    fig.update_yaxes(type="category", autorange="reversed", title="consensus rank", showgrid=False)
    fig.update_layout(height=160 + ROW_HEIGHT * n)
    return _finish(fig, f"Ranking heatmap: share of {count(consensus['n_resamples'])} bootstrap resamples giving each consensus rank", "")


def cluster_widths(structures: dict[str, Structure], models: Models, settings: Settings) -> go.Figure:
    """Per model (rows) and structure x metric (columns): cluster-bootstrap CI width over case-bootstrap CI width, both CIs
    (at the analysis' nominal confidence, ``settings``) on hover."""
    cells = [
        (f"{s} {m}", cell["clustered"]) for s, block in sorted(structures.items()) for m, cell in sorted(block["metrics"].items()) if cell.get("clustered")
    ]
    names = sorted({name for _, c in cells for name in c["models"]})
    labels = _labels(names, models)

    def ci(entry: Mapping[str, Any] | None, prefix: str) -> str:
        return "n/a" if entry is None else fixed_interval(entry[prefix + "ci_low"], entry[prefix + "ci_high"], 3)

    widths = [[(c["models"].get(n) or {}).get("width_ratio") for _, c in cells] for n in names]
    hover = [[f"{ci(c['models'].get(n), '')} by {c['field']} (cluster), {ci(c['models'].get(n), 'case_')} (case)" for _, c in cells] for n in names]
    fig = go.Figure(
        go.Heatmap(
            z=widths,
            x=[t for t, _ in cells],
            y=labels,
            text=[[ratio(v) for v in row] for row in widths],
            texttemplate="%{text}",
            customdata=hover,
            colorscale="Oranges",
            zmin=1,
            showscale=False,
            xgap=1,
            ygap=1,
            hovertemplate=f"%{{y}}, %{{x}}: width ratio %{{z:.2f}}<br>{ci_words(settings)} %{{customdata}}<extra></extra>",
        )
    )
    fig.update_xaxes(type="category", tickangle=-40, showgrid=False)
    _model_axis(fig, labels)
    return _finish(fig, f"Clustered bootstrap: {ci_words(settings)} width by cluster over width by case (1 = as wide)", "")


def power_curve(power_rows: list[dict[str, Any]], structure: str, metric: str, procedure: str, target: float) -> go.Figure:
    """Calibration audit: share of samples separating each pair of models of different quality, against n, with the
    power the paired-t formula predicts for the population's effect size (dashed, same colour) and the audit's target
    power (``target``: its ``stats.power``, dotted)."""
    fig = go.Figure()
    rows = [r for r in power_rows if r["structure"] == structure and r["metric"] == metric and r["procedure"] == procedure]
    pairs = sorted({(r["better"], r["worse"]) for r in rows}, key=lambda p: min(r["effect_size"] for r in rows if (r["better"], r["worse"]) == p))
    colours = TEMPLATE.layout.colorway
    for k, (better, worse) in enumerate(pairs):
        own = sorted((r for r in rows if (r["better"], r["worse"]) == (better, worse)), key=lambda r: r["n"])
        label = f"{better} > {worse} (d_z {fmt(own[0]['effect_size'], 2)})"
        colour = colours[k % len(colours)]
        fig.add_trace(
            go.Scatter(
                x=[r["n"] for r in own],
                y=[r["rate"] for r in own],
                mode="lines+markers",
                name=label,
                line={"color": colour},
                marker={"symbol": SYMBOLS[k % len(SYMBOLS)], "size": 8},
                error_y={"type": "data", "array": [2 * r["mc_se"] for r in own], "thickness": 1, "width": 3},
                hovertemplate=f"{html.escape(label)}<br>n %{{x}}: measured power %{{y:.3f}}<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[r["n"] for r in own],
                y=[r["predicted_power"] for r in own],
                mode="lines",
                name=f"{label}, predicted",
                line={"color": colour, "dash": "dash"},
                showlegend=False,
                hovertemplate=f"{html.escape(label)}<br>n %{{x}}: paired-t formula %{{y:.3f}}<extra></extra>",
            )
        )
    fig.add_hline(y=target, line_dash="dot", line_color="#888")
    fig.update_layout(height=380, legend={"orientation": "h", "y": -0.25, "yanchor": "top", "x": 0, "xanchor": "left"})
    fig.update_xaxes(type="log", tickvals=sorted({r["n"] for r in rows}))
    fig.update_yaxes(range=[0, 1.02], title="power")
    return _finish(fig, f"{structure} {metric}: power of {procedure.replace('_', ' ')} (solid, ±2 MC SE) and the paired-t formula (dashed)", "cases n")
