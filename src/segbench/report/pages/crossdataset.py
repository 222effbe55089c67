"""The cross-dataset page (``crossdataset.html``): every pair of real boards that rank the same models, per structure and
metric the two rankings side by side, Spearman's rho with its bootstrap interval, the models whose rank moves most and
whether each set's #1 is among the other's co-winners (``segbench.stats.crossdataset``; methodology 5.22). Every number
is read from the cross-dataset stage's JSON."""

from __future__ import annotations

import html
from typing import Any

from segbench.base.formats import correlation, fmt, number, percent, signed

from ..markup import disclosure, slug
from .frame import Results, nav_bar, render

#: the page's file name in the site
CROSS_DATASET_PAGE = "crossdataset.html"


def _among(first: str, flag: bool | None, other: str) -> str:
    """'#1 X is among B's co-winners' / 'is not' / 'is not ranked on B'."""
    where = "is among" if flag else "is not among" if flag is False else "is not ranked on"
    return f"{first} {where} {other}'s co-winners" if flag is not None else f"{first} {where} {other}"


def cell_summary(pair: dict[str, Any], structure: str, metric: str, cell: dict[str, Any]) -> str:
    """One line per structure and metric: rho [CI], models, the largest move, each #1 against the other's co-winners."""
    level = percent(cell["confidence"], 0)
    moved = f"rank moves most: {', '.join(cell['moved_most'])} ({number(cell['largest_move'])} places)" if cell["moved_most"] else "no model changes rank"
    return (
        f"{structure} {metric}: Spearman rho {correlation(cell['spearman'])} [{correlation(cell['ci_low'])}, {correlation(cell['ci_high'])}] "
        f"({level} bootstrap, {cell['n_models']} models, {cell['n_cases_a']} and {cell['n_cases_b']} cases); {moved}; "
        f"{_among('#1 ' + cell['first_a'], cell['first_a_among_b_co_winners'], pair['b'])}; "
        f"{_among('#1 ' + cell['first_b'], cell['first_b_among_a_co_winners'], pair['a'])}"
    )


def _table(pair: dict[str, Any], cell: dict[str, Any]) -> str:
    head = (
        f"<tr><th>model ({html.escape(pair['a'])})</th><th>name on {html.escape(pair['b'])}</th>"
        f"<th>rank on {html.escape(pair['a'])}</th><th>rank on {html.escape(pair['b'])}</th><th>move</th>"
        f"<th>mean on {html.escape(pair['a'])}</th><th>mean on {html.escape(pair['b'])}</th>"
        f"<th>board rank {html.escape(pair['a'])}</th><th>board rank {html.escape(pair['b'])}</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{html.escape(r['model'])}</td><td>{html.escape(r['model_b'])}</td><td>{number(r['rank_a'])}</td><td>{number(r['rank_b'])}</td>"
        f"<td>{signed(r['move'])}</td><td>{fmt(r['mean_a'], 4)}</td><td>{fmt(r['mean_b'], 4)}</td><td>{r['board_rank_a']}</td><td>{r['board_rank_b']}</td></tr>"
        for r in cell["models"]
    )
    return f"<table><thead>{head}</thead><tbody>{rows}</tbody></table>"


def crossdataset_page(view: dict[str, Any], all_results: list[Results]) -> str:
    """The page: per pair, a line per structure and metric (the answer), each opening the two rankings side by side."""
    parts = [
        "<h1>One model, two datasets</h1>",
        "<p>Every pair of real boards that rank the same models (which published model is which: "
        "<code>conf/cross_dataset.yaml</code>). Ranks are among the shared models, by mean on each board's shared cases; a move is "
        "the rank on the second board minus the rank on the first; the interval resamples the cases of each board independently "
        '(<a href="methodology.html#522-one-model-two-datasets">methodology 5.22</a>). Board ranks are the full boards\'.</p>',
    ]
    if not view["pairs"]:
        parts.append("<p>No two real boards in this run rank three or more models in common.</p>")
    for pair in view["pairs"]:
        parts.append(
            f'<h2 id="{slug(pair["a"] + "-" + pair["b"])}">{html.escape(pair["a"])} and {html.escape(pair["b"])}</h2>'
            f"<p>{html.escape(pair['title_a'])}; {html.escape(pair['title_b'])}.</p>"
        )
        for structure, metrics in pair["structures"].items():
            for metric, cell in metrics.items():
                parts.append(disclosure(html.escape(cell_summary(pair, structure, metric, cell)), _table(pair, cell)))
    return render("segbench: one model, two datasets", "".join(parts), nav_bar(all_results))
