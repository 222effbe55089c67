"""The calibration audit's rates on the board (docs/methodology.md#518-calibration-audit, "On the board"): the results'
``audited`` block, written by compare (``segbench.stats.audited``), as the notes, legend and words every view prints."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Literal

from segbench.base.formats import format_level, format_points, percent, rate_with_se
from segbench.stats.audited import MARGIN
from segbench.stats.results import (
    AuditedCell,
    AuditEntry,
)

from .document import Results


class CellAudit(AuditedCell):
    """A leaderboard cell's audited entries (:func:`audit_of`) and the margin of their flags."""

    margin: float


# The calibration audit's rate on the board (docs/methodology.md#518-calibration-audit, "On the board"): the results'
# ``audited`` block, written by compare (``segbench.stats.audited``); None there (no audit tables) reads "not audited".
NO_AUDIT = "no calibration audit tables when these results were computed"


def audit_margin(results: Results) -> float:
    """How far an audited rate may miss its target before the board flags it: the results' audited block's ``margin``
    (the one its flags were set with), else the audit's own (``segbench.stats.audited.MARGIN``)."""
    block = results.get("audited")
    return float(block["margin"]) if isinstance(block, dict) else MARGIN


def audit_of(results: Results, structure: str, metric: str) -> CellAudit:
    """The audited entry of one leaderboard cell: ``{"coverage", "type1", "reason"}`` (entries None where not audited)
    and the ``margin`` of its flags (:func:`audit_margin`). ``results["audited"]`` may be None (no tables), a sentence
    (the lesion-wise views: why none is audited) or the block."""
    block, margin = results.get("audited"), audit_margin(results)
    if not block:
        return {"coverage": None, "type1": None, "reason": NO_AUDIT, "margin": margin}
    if isinstance(block, str):
        return {"coverage": None, "type1": None, "reason": block, "margin": margin}
    entry = (block.get("structures") or {}).get(structure, {}).get(metric)
    return {**(entry or {"coverage": None, "type1": None, "reason": "no cases to audit"}), "margin": margin}


def _where(entry: AuditEntry, structure: str) -> str:
    """'' for the cell's own population; ' on tumor' for another structure of its set; ' on source/structure' else."""
    if entry["match"] == "exact":
        return ""
    return f" on {entry['structure']}" if entry["match"] == "other_structure" else f" on {entry['population']}"


#: the visible mark of an audited rate measured on another population than the cell's own (the tooltip says which)
ELSEWHERE = "†"


def _mark(entry: AuditEntry) -> str:
    """'†' when the rate was measured on another population than the cell's own, else ''."""
    return "" if entry["match"] == "exact" else ELSEWHERE


def _audit_title(entry: AuditEntry, what: str, structure: str) -> str:
    """The full sentence of a tooltip: what was audited, where, at which n, the rate with its MC SE, the target."""
    kind = {
        "exact": "this set and structure",
        "other_structure": "another structure of this set, not audited itself",
        "same_data": "another source on the same data, this set not audited",
    }[entry["match"]]
    several = f"; the least favourable of {entry['candidates']} populations" if entry["candidates"] > 1 else ""
    return (
        f"{what} audited at n = {entry['n']} (this board: {entry['n_board']} cases) on {entry['population']} ({kind}{several}): "
        f"{rate_with_se(entry['rate'], entry['mc_se'])} (Monte-Carlo SE); target {format_level(entry['target'])}"
    )


def coverage_note(audit: CellAudit, structure: str) -> str:
    """A CI cell's audited coverage, short and visible ('cov. 94.1% @n=40'), '⚠' first when it under-covers by more
    than the audit's margin, '†' last when measured on another population; the whole sentence as its tooltip. 'not
    audited' (the reason as tooltip) without an entry. ``audit``: the cell's :func:`audit_of`."""
    return _audit_note(
        audit,
        "coverage",
        structure,
        lambda e: f"{format_level(e['target'])} {e['method']} CI{_level_words(e)}",
        "under_covers",
        f"under-covers by more than {format_points(audit['margin'])}",
        "cov.",
        with_n=True,
    )


def type1_note(audit: CellAudit, structure: str) -> str:
    """A verdict line's audited type-I error of 'separable' ('type-I 3.7%'; its n, as the coverage's, in the tooltip),
    '⚠' first above alpha plus the audit's margin, '†' when measured on another population."""
    return _audit_note(
        audit,
        "type1",
        structure,
        lambda e: f'"separable" ({e["procedure"]}) for equal models',
        "exceeds_alpha",
        f"above alpha by more than {format_points(audit['margin'])}",
        "type-I",
        with_n=False,
    )


def limit_note(audit: CellAudit) -> str:
    """Where the cell's n or shape is past what the audit verified the verdict on (``limit``, stats/limits.py): its
    sentence, visible beside the verdict ('⚠ Cases too few for this shape: ...'); '' within it or without the audit."""
    limit = audit.get("limit")
    if not limit:
        return ""
    return f' <span class="audit warn limit">⚠ {html.escape(limit["text"])}</span>'


def _audit_note(
    audit: CellAudit,
    key: Literal["coverage", "type1"],
    structure: str,
    what: Callable[[AuditEntry], str],
    flag: Literal["under_covers", "exceeds_alpha"],
    flag_words: str,
    label: str,
    with_n: bool,
) -> str:
    """The short visible span of one audited rate (``key``: coverage or type1; ``what``: the audited thing, from its
    entry), its tooltip the whole sentence."""
    entry = audit[key]
    if entry is None:
        none = "not audited" if key == "coverage" else f"{label} not audited"
        return f' <span class="audit" title="{html.escape(audit.get("reason") or NO_AUDIT)}">{none}</span>'
    warn = entry[flag]
    title = _audit_title(entry, what(entry), structure) + (f"; {flag_words}" if warn else "")
    at = f" @n={entry['n']}" if with_n else ""
    return (
        f' <span class="audit{" warn" if warn else ""}" title="{html.escape(title)}">{"⚠ " if warn else ""}'
        f"{label} {percent(entry['rate'])}{at}{_mark(entry)}</span>"
    )


def _level_words(entry: AuditEntry) -> str:
    """', computed at the audit-calibrated level 98.70% (its coverage measured out of sample)' for a CI at a calibrated level
    ('at its nominal level, ...' where the calibration kept it), '' for a CI the audit did not calibrate."""
    if "level" not in entry:
        return ""
    if entry["level"] <= entry["target"]:
        return ", at its nominal level, which the audit's calibration kept (its coverage measured out of sample)"
    return f", computed at the audit-calibrated level {format_level(entry['level'])} (its coverage measured out of sample)"


def audit_legend(margin: float) -> str:
    """What a table's audit marks mean, ``margin`` the results' (:func:`audit_margin`)."""
    return (
        "cov.: how often the calibration audit found this CI covering the truth, at the audited n nearest this board's "
        "(hover for the population, its Monte-Carlo SE and the level the audit calibrated the CI at); "
        'type-I: how often its "separable" was wrong for equal models; '
        f"⚠ more than {format_points(margin)} worse than the target; † measured on another population than this cell's."
    )


def audit_words(audit: CellAudit, structure: str) -> str:
    """Plain text of a leaderboard's audited rates, for the terminal: 'Audited: CI covers 94.1% at n = 40; "separable"
    wrong for equal models 3.7% at n = 40.' ('(under-covers)' / '(above alpha)' beyond the margin), or why not."""
    c, t = audit["coverage"], audit["type1"]
    if c is None and t is None:
        return f"Not audited: {(audit.get('reason') or NO_AUDIT).removeprefix('not audited: ')}."
    cov = (
        f"CI covers {percent(c['rate'])} at n = {c['n']}{_where(c, structure)}{_level_words(c)}{' (under-covers)' if c['under_covers'] else ''}"
        if c
        else "CI not audited"
    )
    err = (
        f'"separable" wrong for equal models {percent(t["rate"])} at n = {t["n"]}{_where(t, structure)}{" (above alpha)" if t["exceeds_alpha"] else ""}'
        if t
        else "verdict not audited"
    )
    limit = audit.get("limit")
    return f"Audited: {cov}; {err}." + (f" ⚠ {limit['text']}" if limit else "")
