""" "How often is a published #1 real?": the summary of every board as the index page's first section and as
``segbench show --summary``; the real boards first, the simulated ones apart and labelled SIMULATED.
Every number is counted from the results' verdicts and leave-one-out blocks, each share printed with its n
(docs/methodology.md#521-how-often-is-a-published-1-real): per board (one results document), over its cells (structure x
metric with a verdict on #1 against #2), the share of cells whose #1 is separable from #2, the median size of the
co-winner set and the share of cells whose #1 changes when one case is removed. Whatever test the verdicts come from,
the summary follows them.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from segbench.base.formats import number, percent

from .document import Results
from .marks import kind

TITLE = "How often is a published #1 real?"


class Share(TypedDict):
    """``count`` of ``n`` cells, and ``share`` = count / n (None when n is 0)."""

    count: int
    n: int
    share: float | None


class BoardSummary(TypedDict):
    """One board's answer: its name, title, whether its models are simulated, and the three numbers with their n."""

    dataset: str
    title: str
    simulated: bool
    models: int
    separable: Share
    co_winners_median: float | None
    co_winners_n: int
    winner_changes_loo: Share


def _share(count: int, n: int) -> Share:
    return {"count": count, "n": n, "share": count / n if n else None}


def is_simulated(results: Mapping[str, Any]) -> bool:
    """A board of simulated models (any model SIMULATED): not a real board, listed apart and labelled SIMULATED."""
    return any(kind(model) == "simulated" for model in results["models"].values())


def board_summary(results: Mapping[str, Any]) -> BoardSummary:
    """One results document's summary: every structure x metric cell whose verdict has a code (two or more ranked
    models); a cell without a leave-one-out block is left out of that share's n only."""
    verdicts, sizes, loo_changes = [], [], []
    for structure in results["analysis"]["structures"].values():
        for cell in structure["metrics"].values():
            verdict = cell.get("verdict") or {}
            if not verdict.get("code"):
                continue
            verdicts.append(verdict["code"] == "separable")
            sizes.append(len(verdict.get("co_winners") or []))
            loo = cell.get("loo")
            if loo and loo.get("winner_change_share") is not None:
                loo_changes.append(loo["winner_change_share"] > 0)
    models = results["models"]
    return {
        "dataset": results["dataset"]["name"],
        "title": results["dataset"]["title"],
        "simulated": is_simulated(results),
        "models": len(models),
        "separable": _share(sum(verdicts), len(verdicts)),
        "co_winners_median": float(statistics.median(sizes)) if sizes else None,
        "co_winners_n": len(sizes),
        "winner_changes_loo": _share(sum(loo_changes), len(loo_changes)),
    }


def boards_summary(all_results: list[Mapping[str, Any]]) -> dict[str, list[BoardSummary]]:
    """Every board's summary, the real boards (published and real models) apart from the simulated ones, by name."""
    summaries = sorted((board_summary(r) for r in all_results), key=lambda s: s["dataset"])
    return {"real": [s for s in summaries if not s["simulated"]], "simulated": [s for s in summaries if s["simulated"]]}


#: the columns of the summary, in the words both views print
HEADERS = ("board", "#1 separable from #2", "median co-winners", "#1 changes when one case is removed")
METHOD = (
    "Per board, over its cells (structure x metric): the share whose #1 is separable from #2 (the cell's verdict, "
    "methodology 5.7), the median size of the co-winner set (#1 and every model it is not separable from), and the share "
    "whose #1 changes when some single case is left out (methodology 5.8); n = the cells counted."
)


def share_text(share: Share) -> str:
    """'3 of 18 (17%)', or 'no cells' for n = 0."""
    if not share["n"] or share["share"] is None:
        return "no cells"
    return f"{share['count']} of {share['n']} ({percent(share['share'], 0)})"


def _median_text(summary: BoardSummary) -> str:
    median = summary["co_winners_median"]
    return "no cells" if median is None else f"{number(median)} (n = {summary['co_winners_n']})"


def _row(summary: BoardSummary) -> tuple[str, str, str, str]:
    label = summary["dataset"] + (" (SIMULATED)" if summary["simulated"] else "")
    return label, share_text(summary["separable"]), _median_text(summary), share_text(summary["winner_changes_loo"])


def summary_text(all_results: Sequence[Results]) -> str:
    """``segbench show --summary``: the real boards' rows, then the simulated boards' under their own heading."""
    boards = boards_summary(list(all_results))
    lines = [TITLE, "", METHOD, ""]
    for heading, rows in (
        ("Real boards (published scores and real models)", boards["real"]),
        ("SIMULATED boards (seeded error models, not real models)", boards["simulated"]),
    ):
        lines.append(heading + ":")
        if not rows:
            lines.append("  none in this run")
        for summary in rows:
            label, separable, median, loo = _row(summary)
            lines.append(f"  {label}: {summary['models']} models; {HEADERS[1]}: {separable}; {HEADERS[2]}: {median}; {HEADERS[3]}: {loo}")
        lines.append("")
    return "\n".join(lines)


def summary_html(all_results: Sequence[Results], link: dict[str, str]) -> str:
    """The index's first section: one table of the real boards, one of the SIMULATED boards; ``link``: each board's page."""
    boards = boards_summary(list(all_results))
    parts = [f'<h2 id="real-number-one">{html.escape(TITLE)}</h2><p>{html.escape(METHOD)}</p>']
    for heading, rows in (("Real boards", boards["real"]), ("SIMULATED boards (not real models)", boards["simulated"])):
        if not rows:
            continue
        head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
        body = "".join(
            f'<tr><td><a href="{link[s["dataset"]]}">{html.escape(label)}</a></td><td>{html.escape(sep)}</td>'
            f"<td>{html.escape(median)}</td><td>{html.escape(loo)}</td></tr>"
            for s in rows
            for label, sep, median, loo in [_row(s)]
        )
        parts.append(f"<h3>{html.escape(heading)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return "".join(parts)
