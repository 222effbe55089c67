"""What a reader must see beside a model's name on every view: its kind (simulated, published), contamination, cases
identical to the reference, the order models are listed in, and the notes on models lacking cases (the missing-case
policy) and on clustered cases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from segbench.base.formats import count, percent
from segbench.stats.missing_cases import coverage_text
from segbench.stats.results import (
    Identical,
)
from segbench.stats.verdicts import CODE_WORDS

from .document import Cell, Results
from .numbers import estimate
from .pairs import next_verdict


def kind(model: Mapping[str, Any]) -> str:
    """simulated | inference | published (older results without ``kind``: from ``simulated``)."""
    return model.get("kind") or ("simulated" if model.get("simulated") else "inference")


def markers(model: Mapping[str, Any]) -> list[str]:
    """Plain-text marks a reader must see next to a model's name."""
    marks = []
    if kind(model) == "simulated":
        marks.append("SIMULATED")
    if kind(model) == "published":
        marks.append(f"PUBLISHED: {model['source']}" if model.get("source") else "PUBLISHED")
    if model.get("contaminated"):
        marks.append("TRAINED ON THIS DATA: unranked")
    return marks


def identical_text(entry: Identical | None) -> str:
    """'leaves 0 of 78 cases identical to the reference' from an ``identical_to_reference`` count ('' without one).

    The count (``segbench.stats.identical_to_reference``): cases in which every scored structure has Dice exactly 1.
    """
    if not entry:
        return ""
    return f"leaves {entry['cases']} of {entry['of']} case{'' if entry['of'] == 1 else 's'} identical to the reference"


def identical_counts(results: Results) -> dict[str, Identical | None]:
    """Per model of ``results``: its ``analysis.models.<model>.identical_to_reference`` (None for older results)."""
    analysed = results.get("analysis", {}).get("models", {})
    return {name: (analysed.get(name) or {}).get("identical_to_reference") for name in results["models"]}


def identical_note(results: Results) -> str:
    """The note every view prints when a model left any case identical to the reference ('' when none did): a simulated
    model that changed nothing there, or a model that returned the reference; on most of its cases it is called out,
    since its scores then measure its input, not a segmentation."""
    copies = {n: c for n, c in identical_counts(results).items() if c and c["cases"]}
    if not copies:
        return ""
    clauses = [
        f"{name} IDENTICAL TO THE REFERENCE on {c['cases']} of {c['of']} cases ({'all' if c['cases'] == c['of'] else 'most'}: "
        "was it given the reference labels?)"
        if 2 * c["cases"] > c["of"]
        else f"{name} {identical_text(c)}"
        for name, c in sorted(copies.items())
    ]
    return f"Identical to the reference (every structure Dice exactly 1): {'; '.join(clauses)}."


def short_mark(model: Mapping[str, Any]) -> str:
    """Compact suffix for plot labels, e.g. ' [sim]' or ' [trained on this data]'."""
    mark = {"simulated": "sim", "published": "pub"}.get(kind(model), "")
    marks = [mark] if mark else []
    if model.get("contaminated"):
        marks.append("trained on this data")
    return f" [{', '.join(marks)}]" if marks else ""


def display_order(cell: Cell) -> list[str]:
    """Ranked models in rank order, then the unranked (contaminated) ones by name."""
    ranked = list((cell.get("ranking") or {}).get("order") or [])
    return ranked + sorted(m for m in cell["models"] if m not in ranked)


def is_ranked(cell: Cell, name: str) -> bool:
    """True when the model takes part in the ranking of this cell."""
    return name in ((cell.get("ranking") or {}).get("order") or [])


def unit_sentence(results: Results) -> str:
    """A clustered set's first line (docs/methodology.md#516-clustered-data): the unit its verdicts assume, the population
    they speak for, and how many #1-versus-#2 verdicts and co-winner sets change when the clusters are resampled instead
    (``analysis.clusters.verdict_changes``); '' for a set without a cluster field. Site and terminal print it alike."""
    clusters = results["analysis"].get("clusters")
    changes = (clusters or {}).get("verdict_changes")
    if not changes:
        return ""
    field = clusters["field"]
    sizes: dict[str, int] = {}
    for label in clusters["labels"].values():
        sizes[label] = sizes.get(label, 0) + 1
    largest = max(sizes.values()) / sum(sizes.values())
    n = changes["n_cells"]
    return (
        f"Unit: the case. The verdicts treat the {count(sum(sizes.values()))} cases as independent: they speak for cases like "
        f"these, from these {len(sizes)} {field} clusters (the largest holds {percent(largest, 0)}), not for a new {field}. "
        f"Resampling {field}s instead (clustered bootstrap, a sensitivity analysis) changes {len(changes['first_second'])} "
        f"of {n} #1-versus-#2 verdicts and {len(changes['co_winners'])} of {n} co-winner sets (why the case: methodology, 5.16)."
    )


def coverage_notes(results: Results) -> list[str]:
    """Said once per dataset on every view: each model lacking cases, its n of N and what the leaderboard does with it
    (``results.coverage``, segbench.stats.missing_cases); [] when every model covers every case."""
    block = results.get("coverage")
    if not block:
        return []
    notes = [f"{model}: {coverage_text(entry, block['applied'])}." for model, entry in sorted(block["models"].items())]
    if block["applied"] == "shared_cases":
        notes.append(
            f"The leaderboard is on the {block['shared_cases']['n_cases']} of {block['n_cases']} cases every model has: "
            f"{', '.join(sorted(block['models']))} lack the others."
        )
    if block["policy"] != block["applied"]:
        notes.append(f"missing_predictions {block['policy']} is applied as {block['applied']}: {block['reason']}.")
    return notes


def own_case_lines(results: Results, structure: str, metric: str) -> list[str]:
    """Per model estimated on its own cases (coverage ``own_cases``), one line for a leaderboard cell: its estimate and rank
    on those cases, and the verdict against its neighbour in the ranking of those cases; [] for none."""
    block: Mapping[str, Any] = results.get("coverage") or {}
    lines = []
    for model, analysis in sorted((block.get("analyses") or {}).items()):
        cell = analysis["structures"].get(structure, {}).get("metrics", {}).get(metric)
        if not cell or model not in cell["models"]:
            continue
        entry, n = block["models"][model], analysis["structures"][structure]["n_cases"]
        order = (cell.get("ranking") or {}).get("order") or []
        text = (
            f"{model}, {entry['n_cases']} of {entry['of']} cases (beside the leaderboard): "
            f"{estimate(cell['models'][model], cell, metric)} on its {n} {structure} case{'' if n == 1 else 's'}"
        )
        if model in order:
            position = order.index(model)
            text += f", #{cell['ranking']['rank'][model]} of {len(order)} on them"
            v = next_verdict(cell, order[position - 1]) if position else next_verdict(cell, model)
            if v:
                text += f"; {v['a']} versus {v['b']} there: {CODE_WORDS[v['code']]}, {v['text']}"
        lines.append(text)
    return lines
