"""``segbench show``: the leaderboards in a terminal, for people who never open a browser, and as md, tsv or json for scripts.

Reads results JSON (``segbench.stats.results`` layout) and prints the verdicts the statistics wrote
(``segbench.stats.verdicts``) word for word, as the site does; nothing is recomputed. The text layout stacks each
cell on a few lines wrapped at spaces only, so no name or number is ever split, at any width.
"""

from __future__ import annotations

import io
import json
import textwrap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import pandas as pd

from segbench.base.formats import ci_head, fmt_rank, percent, percent_span
from segbench.stats.audited import LESIONS as LESIONS_NOT_AUDITED
from segbench.stats.results import Verdict, VerdictPair
from segbench.stats.verdicts import CODE_WORDS

from .audit import audit_of, audit_words
from .document import Cell, Results
from .marks import coverage_notes, display_order, identical_note, markers, own_case_lines, unit_sentence
from .numbers import ci_level, estimate
from .pairs import next_verdict, p_rank1_text, tied_first_note
from .summary import TABLE_COLUMNS, leaderboard_table

#: the output formats: text for reading, md for pasting, tsv and json one row per dataset, structure, metric and model
FORMATS = ("text", "md", "tsv", "json")
#: the tsv/json columns: the dataset, then the MLflow leaderboard table's (``segbench.report.summary.TABLE_COLUMNS``)
ROW_COLUMNS = ["dataset", *TABLE_COLUMNS]
#: the overview's note on its last column, said once per dataset
CO_WINNERS_SHORT = "Co-winners: not separable from #1 (+N: N more; --detail names them)."
#: a one-line cell's mark after its verdict where its cases are too few for its shape (the results' audited ``limit``)
LIMIT_MARK = "⚠"
CO_WINNERS = "co-winners: #1 by mean and every model it is not separable from (docs/methodology.md#57-verdicts)"


def verdict_sentence(v: Verdict | VerdictPair) -> str:
    """A verdict as every view prints it: its code's words, then the sentence the statistics wrote."""
    return f"{CODE_WORDS[v['code']]}: {v['text']}"


def _kinds_line(results: Results, sources: bool = True) -> str:
    """Each distinct marking of the dataset's models once ('5 models, all SIMULATED'), not once per row; without
    ``sources``, a published model's mark without its source ('PUBLISHED')."""
    marks = {
        name: ", ".join(m if sources or not m.startswith("PUBLISHED: ") else "PUBLISHED" for m in markers(model))
        for name, model in sorted(results["models"].items())
    }
    distinct = sorted(set(marks.values()))
    if len(distinct) == 1:
        return f"{len(marks)} models" + (f", all {distinct[0]}" if distinct[0] else "")
    return "; ".join(f"{name} ({mark})" if mark else name for name, mark in marks.items())


def _ci_head(results: Results, cells: Iterable[Cell]) -> str:
    """'mean [95% CI]' at the level the ``cells``' CIs are computed at (``numbers.ci_head``)."""
    return ci_head(ci_level(cell, results["analysis"]["settings"]) for cell in cells)


def _cells(results: Results, structures: Sequence[str] | None = None) -> Iterator[tuple[str, str, Cell, int]]:
    """(structure, metric, cell, cases) of the results, structures by name (or those named), metrics in their order."""
    blocks = results["analysis"]["structures"]
    for structure in structures if structures is not None else sorted(blocks):
        for metric, cell in blocks[structure]["metrics"].items():
            yield structure, metric, cell, blocks[structure]["n_cases"]


def _table_notes(results: Results, cells: Sequence[Cell]) -> list[str]:
    """What a table says once: the CI head, each distinct sentence naming how its Δ intervals were computed, the
    models that left cases identical to the reference (``identical_note``) and, where a cell's P(rank 1) values add up
    to more than 1, why (``tied_first_note``)."""
    intervals = dict.fromkeys(c["verdict"]["intervals"] for c in cells if (c.get("verdict") or {}).get("intervals"))
    tied = next(filter(None, map(tied_first_note, cells)), "")
    return [_ci_head(results, cells), *intervals, *filter(None, [identical_note(results), tied])]  # type: ignore[list-item]  # the set intervals


def _identical(cell: Cell) -> list[str]:
    """'A and B are identical on every case' for each group of models the ranking found identical on every case."""
    return [
        f"{', '.join(group[:-1])} and {group[-1]} are identical on every case" for group in (cell.get("ranking") or {}).get("identical") or [] if len(group) > 1
    ]


def _shared_audit(results: Results, cells: Sequence[tuple[str, str, Cell, int]]) -> str | None:
    """The audit sentence of the overview's compared cells when it is one for all of them (e.g. 'Not audited: ...' for
    a ``segbench evaluate`` board): said once in the notes rather than under every cell; else None."""
    said = {audit_words(audit_of(results, s, m), s) for s, m, c, _ in cells if (c.get("verdict") or {}).get("pairs")}
    return said.pop() if len(said) == 1 else None


def _overview_cell(results: Results, structure: str, metric: str, cell: Cell, n: int, said_once: str | None = None) -> tuple[str, list[str]]:
    """One overview cell: its head ('kidney nsd, 20 cases: #1 MOOSE 0.912 [...], P(rank 1) 0.62; co-winners ...') and
    the lines under it (the verdict on #1 versus #2, ties, the audited rates unless they are ``said_once``)."""
    v = cell.get("verdict")
    if not v:
        return f"{structure} {metric}, {n} cases: no ranked model", []
    first = v["first"]
    head = (
        f"{structure} {metric}, {n} cases: #1 {first} {estimate(cell['models'][first], cell, metric)}, "
        f"P(rank 1) {p_rank1_text(cell, first)}; co-winners {', '.join(v['co_winners'])}"
    )
    lines = [verdict_sentence(v) if v["pairs"] else CODE_WORDS["single_model"], *_identical(cell)]
    if v["pairs"] and said_once is None:
        lines.append(audit_words(audit_of(results, structure, metric), structure))
    return head, [*lines, *own_case_lines(results, structure, metric)]


def _audit_once(results: Results, cells: Sequence[tuple[str, str, Cell, int]]) -> str | None:
    """The calibration audit said once for a dataset's overview: its sentence when every compared cell has the same
    (``_shared_audit``), else the range of the audited rates over the cells (``audit_of``), the sentences per cell
    being ``--detail``'s; None when no cell has a verdict to audit."""
    compared = [(s, m) for s, m, c, _ in cells if (c.get("verdict") or {}).get("pairs")]
    if not compared:
        return None
    shared = _shared_audit(results, cells)
    if shared is not None:
        return shared
    audits = [audit_of(results, s, m) for s, m in compared]

    def span(key: str) -> str | None:
        rates = [a[key]["rate"] for a in audits if a[key] is not None]  # type: ignore[literal-required]  # one of the block's keys (the loop's literals)
        return percent_span(rates) if rates else None

    coverage, type1 = span("coverage"), span("type1")
    if coverage is None and type1 is None:
        return audit_words(audits[0], compared[0][0])
    parts = [f"CI covers {coverage}" if coverage else "CI not audited", f'"separable" wrong for equal models {type1}' if type1 else "verdict not audited"]
    return f"Audited: {', '.join(parts)}."


def _fit_names(names: Sequence[str], room: int | None) -> str:
    """``names`` joined by commas, the last ones replaced by '+N' (N more) until the text fits ``room`` columns; '–' for none."""
    full = ", ".join(names) or "–"
    if room is None or len(full) <= room:
        return full
    for kept in range(len(names) - 1, -1, -1):
        text = ", ".join(names[:kept]) + (" " if kept else "") + f"+{len(names) - kept}"
        if len(text) <= room or not kept:
            return text
    return full  # unreachable: the loop returns at kept = 0


def _one_line_cells(results: Results, cells: Sequence[tuple[str, str, Cell, int]], width: int | None) -> list[str]:
    """One line per cell in aligned columns: the cell ('kidney_and_mass dice'), #1, its mean [CI], the verdict's words on
    #1 versus #2 and the other co-winners, these shortened to '+N' (N more) where the line would pass ``width``, so #1
    and the verdict are always on the cell's line."""
    rows: list[tuple[str, str, str, str, list[str]]] = []
    for structure, metric, cell, _ in cells:
        v = cell.get("verdict")
        if not v:
            rows.append((f"{structure} {metric}", "–", "no ranked model", "", []))
            continue
        words = CODE_WORDS[v["code"]] if v["pairs"] else CODE_WORDS["single_model"]
        if v["pairs"] and audit_of(results, structure, metric).get("limit"):
            words += f" {LIMIT_MARK}"
        rows.append(
            (f"{structure} {metric}", v["first"], estimate(cell["models"][v["first"]], cell, metric), words, [m for m in v["co_winners"] if m != v["first"]])
        )
    head = ("cell", "#1", _ci_head(results, [cell for _, _, cell, _ in cells if cell.get("verdict")]), "verdict")
    sizes = [max(len(text) for text in column) for column in zip(head, *(row[:4] for row in rows), strict=True)]
    # two spaces between columns, one where two would push the longest co-winners' '+N' past the width
    need = max((len(f"+{len(others)}") for *_, others in rows if others), default=0)
    gap = "  " if width is None or sum(sizes) + 2 * 4 + need <= width else " "
    room = None if width is None else width - sum(sizes) - len(gap) * 4
    lines = [
        gap.join(text.ljust(size) for text, size in zip(head, sizes, strict=True)) + gap + ("co-winners" if room is None or room >= len("co-winners") else "+N")
    ]
    for *fixed, others in rows:
        lines.append(gap.join(text.ljust(size) for text, size in zip(fixed, sizes, strict=True)) + gap + _fit_names(others, room))
    return [line.rstrip() for line in lines]


def _leaderboard_rows(results: Results, structure: str, metric: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """One structure and metric: its title and per model a head ('1. MOOSE 0.912 [...], P(rank 1) 0.62, ranks 1–2')
    with the verdict versus the next ranked model under it."""
    block = results["analysis"]["structures"][structure]
    cell = block["metrics"][metric]
    direction = "higher is better" if cell["higher_is_better"] else "lower is better"
    title = f"{structure} {metric} ({direction}; {block['n_cases']} cases): {_kinds_line(results)}"
    ranking: Mapping[str, Any] = cell.get("ranking") or {}
    rows = []
    for name in display_order(cell):
        est = cell["models"][name]
        if name not in (ranking.get("order") or []):
            rows.append((f"–. {name} {estimate(est, cell, metric)}", ["unranked: trained on this data" if est["contaminated"] else "unranked"]))
            continue
        lo, hi = ranking["rank_interval"][name]
        v = next_verdict(cell, name)
        rows.append(
            (
                f"{ranking['rank'][name]}. {name} {estimate(est, cell, metric)}, P(rank 1) {p_rank1_text(cell, name)}, ranks {fmt_rank(lo)}–{fmt_rank(hi)}",
                [verdict_sentence(v) if v else "last ranked"],
            )
        )
    return title, [*rows, *((f"–. {line}", []) for line in own_case_lines(results, structure, metric))]


def lesion_view(results: Results) -> Results | None:
    """The lesion-wise analysis by case as results of its own (same layout), titled with its lesion profile; None without one."""
    block = results.get("lesions")
    if not block or block["case"] is None:
        return None
    d = results["dataset"]
    title = f"{d.get('title') or d['name']}, lesion-wise by case ({block['profile']} matching)"
    view = {
        "dataset": {"name": d["name"], "title": title},
        "models": results["models"],
        "analysis": block["case"],
        "audited": (results.get("audited") or {}).get("lesions") or LESIONS_NOT_AUDITED,  # type: ignore[union-attr]  # a dict or None here
    }
    return cast(Results, view)  # the keys the views read


def _wrap(text: str, width: int | None, indent: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` columns broken at spaces only (a longer word keeps its own line), the
    continuation lines indented two more; one line when ``width`` is None (piped: the reader's program wraps)."""
    if width is None:
        return [indent + text]
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ", break_long_words=False, break_on_hyphens=False) or [indent]


def _text_block(title: str, notes: list[str], entries: list[tuple[str, list[str]]], width: int | None) -> list[str]:
    lines = [*_wrap(title, width), *(line for note in notes for line in _wrap(note, width)), ""]
    for head, under in entries:
        lines += _wrap(head, width) + [line for text in under for line in _wrap(text, width, "    ")]
    return [*lines, ""]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_block(title: str, notes: list[str], entries: list[tuple[str, list[str]]]) -> list[str]:
    lines = [f"## {_md_escape(title)}", "", *(f"{_md_escape(note)}  " for note in notes), ""]
    for head, under in entries:
        lines += [f"- **{_md_escape(head)}**", *(f"  - {_md_escape(text)}" for text in under)]
    return [*lines, ""]


def _blocks(all_results: Sequence[Results], structure: str | None, metric: str | None) -> Iterator[tuple[str, list[str], list[tuple[str, list[str]]]]]:
    """(title, notes said once, entries) of every table to print: each dataset's overview (and its lesion-wise one), or
    with ``structure`` that structure's leaderboard per metric (only ``metric`` if given)."""
    for results in all_results:
        if structure is None:
            lesions = lesion_view(results)
            for view in [results, *([lesions] if lesions else [])]:
                cells = list(_cells(view))
                d = view["dataset"]
                audit = _shared_audit(view, cells) if len(cells) > 1 else None
                notes = [
                    *filter(None, [unit_sentence(view)]),
                    *coverage_notes(view),
                    *_table_notes(view, [c for _, _, c, _ in cells]),
                    CO_WINNERS,
                    *filter(None, [audit]),
                ]
                yield f"{d.get('title') or d['name']}: {_kinds_line(view)}", notes, [_overview_cell(view, *entry, audit) for entry in cells]
            continue
        for name in _metrics(results, structure, metric):
            title, rows = _leaderboard_rows(results, structure, name)
            yield title, [*coverage_notes(results), *_table_notes(results, [results["analysis"]["structures"][structure]["metrics"][name]])], rows


def _metrics(results: Results, structure: str, metric: str | None) -> list[str]:
    """The metrics to show of ``structure`` (``metric`` alone if given); ValueError naming the valid names otherwise."""
    structures = results["analysis"]["structures"]
    if structure not in structures:
        raise ValueError(f"{results['dataset']['name']}: no structure {structure!r} (have {', '.join(sorted(structures))})")
    metrics = list(structures[structure]["metrics"])
    if metric is not None and metric not in metrics:
        raise ValueError(f"{results['dataset']['name']} {structure}: no metric {metric!r} (have {', '.join(metrics)})")
    return [metric] if metric else metrics


def rows(all_results: Sequence[Results], structure: str | None = None, metric: str | None = None) -> pd.DataFrame:
    """One row per dataset, structure, metric and model (``ROW_COLUMNS``; lesion-wise leaderboards as
    ``<structure>.lesion`` and ``<structure>.per_lesion``), only ``structure`` (and ``metric``) if given."""
    frames = []
    for results in all_results:
        table = leaderboard_table(results)
        if structure is not None:
            table = table[(table["structure"] == structure) & table["metric"].isin(_metrics(results, structure, metric))]
        frames.append(table.assign(dataset=results["dataset"]["name"], rank=table["rank"].astype("Int64"))[ROW_COLUMNS])
    return pd.concat(frames, ignore_index=True)


#: the overview's legend, said once above every dataset
LEGEND = "Per structure: #1 by mean and its cells by their verdict on #1 versus #2; +N: N more models not separable from #1."
#: the overview's note on ⚠, said once where a cell has it
LIMIT_SHORT = f"{LIMIT_MARK}: too few cases for the cell's shape; its verdict may err more often than alpha (methodology 5.20)."
#: the overview's closing line: where the rest is
MORE = "More: --cells (mean [CI], co-winners), --detail (sentences, P(rank 1), audit)."


def _unit_short(results: Results) -> str:
    """``unit_sentence`` in two lines' words: the unit, the clusters and what resampling them changes; '' without clusters."""
    clusters = results["analysis"].get("clusters")
    changes = (clusters or {}).get("verdict_changes")
    if not changes:
        return ""
    labels = list(clusters["labels"].values())
    largest = max(labels.count(label) for label in set(labels)) / len(labels)
    n = changes["n_cells"]
    return (
        f"Unit: the case, from {len(set(labels))} {clusters['field']} clusters (the largest {percent(largest, 0)}); resampling "
        f"{clusters['field']}s instead changes {len(changes['first_second'])} of {n} #1-versus-#2 verdicts and "
        f"{len(changes['co_winners'])} of {n} co-winner sets (methodology 5.16)."
    )


def _grouped_cells(results: Results, cells: Sequence[tuple[str, str, Cell, int]], width: int | None) -> list[str]:
    """The overview's lines: per structure and #1, its cells grouped under their verdict's words ('kidney_and_mass
    sim_erode_1mm  ✔ separable: assd, nsd; ✘ not separable: hd95 ⚠ +3'), each cell its metric, ⚠ where its cases are too
    few for its shape and +N for its co-winners beside #1; a line that would pass ``width`` goes on in a line that
    restates the structure, #1 and words, so every cell's #1 and verdict words are on its line."""
    groups: dict[tuple[str, str], dict[str, list[str]]] = {}
    for structure, metric, cell, _ in cells:
        v = cell.get("verdict")
        if not v:
            groups.setdefault((structure, "–"), {}).setdefault("no ranked model", []).append(metric)
            continue
        words = CODE_WORDS[v["code"]] if v["pairs"] else CODE_WORDS["single_model"]
        limited = f" {LIMIT_MARK}" if v["pairs"] and audit_of(results, structure, metric).get("limit") else ""
        others = len([m for m in v["co_winners"] if m != v["first"]])
        segment = f"{metric}{limited}" + (f" +{others}" if others else "")
        groups.setdefault((structure, v["first"]), {}).setdefault(words, []).append(segment)
    size = max((len(structure) for structure, _ in groups), default=0)
    lines = []
    for (structure, first), by_words in groups.items():
        head, line = f"{structure.ljust(size)}  {first}", ""
        for words, segments in by_words.items():
            for i, segment in enumerate(segments):
                piece, sep = (segment, ", ") if i else (f"{words}: {segment}", "; ")
                if line and (width is None or len(line) + len(sep) + len(piece) <= width):
                    line += sep + piece
                    continue
                lines += [line] if line else []
                line = f"{head}  {words}: {segment}"  # a line of its own restates the structure, #1 and words
        lines.append(line)
    return lines


def overview(all_results: Sequence[Results], width: int | None = None, cells_table: bool = False) -> str:
    """``segbench show``'s default: a legend once, then per dataset (and its lesion-wise view) a title and, indented under
    it, what is said once (the unit, each model lacking cases, the calibration audit's range: ``_audit_once``) and its
    cells grouped per structure and #1 (``_grouped_cells``), notes wrapped at ``width``. ``cells_table``: one line per cell
    in columns instead, with #1's mean [CI] (``_one_line_cells``). A published model's source, each cell's verdict
    sentence, P(rank 1) and every model are ``--detail``'s and ``--structure``'s."""
    views = [view for results in all_results for view in [results, *filter(None, [lesion_view(results)])]]
    limited = any(audit_of(view, s, m).get("limit") for view in views for s, m, c, _ in _cells(view) if (c.get("verdict") or {}).get("pairs"))
    legend = [CO_WINNERS_SHORT] if cells_table else [LEGEND]
    lines = [line for note in [*legend, *([LIMIT_SHORT] if limited else [])] for line in _wrap(note, width)]
    body = None if width is None else width - 2
    for view in views:
        cells = list(_cells(view))
        d = view["dataset"]
        notes = [*filter(None, [_unit_short(view)]), *coverage_notes(view), *filter(None, [_audit_once(view, cells)])]
        lines += [
            *_wrap(f"{d.get('title') or d['name']}: {_kinds_line(view, sources=False)}", width),
            *(line for n in notes for line in _wrap(n, width, "  ")),
            *("  " + line for line in (_one_line_cells(view, cells, body) if cells_table else _grouped_cells(view, cells, body))),
        ]
    lines += _wrap(MORE, width)
    return "\n".join(lines) + "\n"


def render(
    all_results: Sequence[Results],
    *,
    structure: str | None = None,
    metric: str | None = None,
    fmt_name: str = "text",
    width: int | None = None,
    detail: bool = False,
    cells: bool = False,
) -> str:
    """Each dataset's overview and verdicts, or with ``structure`` that structure's full leaderboards, as ``fmt_name``
    (``FORMATS``); text lines at most ``width`` columns wide, broken at spaces only (None: not wrapped). The text overview
    groups each structure's cells per #1 (``overview``); ``cells`` puts one cell per line with #1's mean [CI]; ``detail``
    stacks each cell's verdict sentence and notes under it instead.

    Raises ValueError naming the valid structures or metrics when a name is not in the results.
    """
    if fmt_name not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt_name!r}")
    if metric is not None and structure is None:
        raise ValueError("--metric needs --structure: a metric is shown within one structure's leaderboards")
    if fmt_name in ("tsv", "json"):
        table = rows(all_results, structure, metric)
        if fmt_name == "tsv":
            buffer = io.StringIO()
            table.to_csv(buffer, sep="\t", index=False, lineterminator="\n")
            return buffer.getvalue()
        records = table.astype(object).where(table.notna(), None).to_dict(orient="records")
        return json.dumps(records, ensure_ascii=False, indent=1) + "\n"
    if fmt_name == "text" and structure is None and not detail:
        return overview(all_results, width, cells_table=cells)
    lines = [
        line
        for title, notes, entries in _blocks(all_results, structure, metric)
        for line in (_text_block(title, notes, entries, width) if fmt_name == "text" else _md_block(title, notes, entries))
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def leaderboard(results: Results, structure: str, metric: str, width: int | None = None) -> str:
    """One structure and metric's leaderboard as text (every model: rank, mean [CI], P(rank 1), rank interval and the
    verdict versus the next)."""
    return render([results], structure=structure, metric=metric, width=width)
