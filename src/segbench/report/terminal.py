"""``segbench show``: the leaderboards in a terminal, for people who never open a browser.

Reads results JSON (``segbench.stats.analysis`` layout) and prints the verdicts the statistics wrote
(``segbench.stats.verdicts``) word for word, as the site does; nothing is recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from segbench.stats.audited import LESIONS as LESIONS_NOT_AUDITED
from segbench.stats.verdicts import CODE_WORDS

from .common import audit_of, audit_words, ci_head, display_order, estimate, fmt, fmt_rank, markers, next_verdict

Results = dict[str, Any]
_STYLE = {"separable": "green", "borderline": "yellow", "not_separable": "default", "aggregation_disagrees": "magenta"}


def _verdict_words(code: str) -> str:
    return f"[{_STYLE.get(code, 'default')}]{CODE_WORDS[code]}[/]"


def _kinds_line(results: Results) -> str:
    """Each distinct marking of the dataset's models once ('5 models, all SIMULATED'), not once per row."""
    marks = {name: ", ".join(markers(model)) for name, model in sorted(results["models"].items())}
    distinct = sorted(set(marks.values()))
    if len(distinct) == 1:
        return f"{len(marks)} models" + (f", all {distinct[0]}" if distinct[0] else "")
    return "; ".join(f"{name} ({mark})" if mark else name for name, mark in marks.items())


def overview(results: Results) -> Table:
    """Per structure and metric: #1, its mean [CI], P(rank 1), the verdict on #1 versus #2 and the co-winners."""
    d = results["dataset"]
    table = Table(title=f"{d.get('title') or d['name']}: {_kinds_line(results)}", box=box.SIMPLE_HEAD, title_justify="left",
                  caption="co-winners: #1 by mean and every model it is not separable from (docs/methodology.md#57-verdicts)",
                  caption_justify="left")
    for header in ("structure", "metric", "n", "#1", ci_head(results["analysis"]["settings"]), "P(rank 1)", "#1 versus #2", "co-winners"):
        table.add_column(header, overflow="fold")
    for structure, block in sorted(results["analysis"]["structures"].items()):
        for metric, cell in block["metrics"].items():
            v = cell.get("verdict")
            if not v:
                table.add_row(structure, metric, str(block["n_cases"]), "–", "–", "–", "no ranked model", "–")
                continue
            first = v["first"]
            table.add_row(structure, metric, str(block["n_cases"]), first, estimate(cell["models"][first], cell, metric),
                          fmt(cell["ranking"]["p_rank1"][first], 2), _verdict_words(v["code"]) + (f" from {v['second']}" if v["second"] else ""),
                          ", ".join(v["co_winners"]))
    return table


def verdict_lines(results: Results) -> list[str]:
    """The verdict sentence of every ranked cell, 'structure metric: sentence', and its audited rates (one line a leaderboard)."""
    return [f"[bold]{structure} {metric}[/]: {cell['verdict']['text']}. [dim]{audit_words(audit_of(results, structure, metric), structure)}[/]"
            for structure, block in sorted(results["analysis"]["structures"].items())
            for metric, cell in block["metrics"].items() if cell.get("verdict") and cell["verdict"]["pairs"]]


def leaderboard(results: Results, structure: str, metric: str) -> Table:
    """One structure and metric, every model: rank, mean [CI], P(rank 1), rank interval and the verdict versus the next."""
    block = results["analysis"]["structures"][structure]
    cell = block["metrics"][metric]
    direction = "higher is better" if cell["higher_is_better"] else "lower is better"
    table = Table(title=f"{structure} {metric} ({direction}; {block['n_cases']} cases): {_kinds_line(results)}",
                  box=box.SIMPLE_HEAD, title_justify="left")
    for header in ("rank", "model", ci_head(results["analysis"]["settings"]), "P(rank 1)", "rank interval", "versus next model"):
        table.add_column(header, overflow="fold")
    ranking = cell.get("ranking") or {}
    for name in display_order(cell):
        est = cell["models"][name]
        if name not in (ranking.get("order") or []):
            table.add_row("–", name, estimate(est, cell, metric), "–", "–", "unranked: trained on this data" if est["contaminated"] else "unranked")
            continue
        lo, hi = ranking["rank_interval"][name]
        v = next_verdict(cell, name)
        table.add_row(str(ranking["rank"][name]), name, estimate(est, cell, metric), fmt(ranking["p_rank1"][name], 2),
                      f"{fmt_rank(lo)}–{fmt_rank(hi)}", f"{_verdict_words(v['code'])}: {v['text']}" if v else "last ranked")
    return table


def lesion_view(results: Results) -> Results | None:
    """The lesion-wise analysis by case as results of its own (same layout), titled with its lesion profile; None without one."""
    block = results.get("lesions")
    if not block or block["case"] is None:
        return None
    d = results["dataset"]
    title = f"{d.get('title') or d['name']}, lesion-wise by case ({block['profile']} matching)"
    return {"dataset": {"name": d["name"], "title": title}, "models": results["models"], "analysis": block["case"],
            "audited": (results.get("audited") or {}).get("lesions") or LESIONS_NOT_AUDITED}


def show(all_results: Sequence[Results], *, structure: str | None = None, metric: str | None = None, console: Console | None = None) -> None:
    """Print each dataset's overview and verdicts, or with ``structure`` that structure's full leaderboards.

    Raises ValueError naming the valid structures or metrics when a name is not in the results.
    """
    console = console or Console()
    for results in all_results:
        structures = results["analysis"]["structures"]
        if structure is None:
            lesions = lesion_view(results)
            for view in [results, *([lesions] if lesions else [])]:
                console.print(overview(view))
                for line in verdict_lines(view):
                    console.print(line, highlight=False)
                console.print()
            continue
        if structure not in structures:
            raise ValueError(f"{results['dataset']['name']}: no structure {structure!r} (have {', '.join(sorted(structures))})")
        metrics = list(structures[structure]["metrics"])
        if metric is not None and metric not in metrics:
            raise ValueError(f"{results['dataset']['name']} {structure}: no metric {metric!r} (have {', '.join(metrics)})")
        for name in [metric] if metric else metrics:
            console.print(leaderboard(results, structure, name))
