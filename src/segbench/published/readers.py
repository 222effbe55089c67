"""Readers for published per-case score files -> the long rows table of ``segbench.stats.analyze`` (``read_set``: a set by its format).

Rows: one per (model, case_id, structure) with ``reference_present`` (bool), one float column per metric
and case metadata as ``meta.<field>`` columns, including ``meta.age_band`` (``segbench.base.bands``).
Malformed input (missing columns, non-numeric cells, duplicate rows) raises ValueError naming the file,
the row and the column.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from segbench.base.bands import AGE_BAND, age_band
from segbench.base.io import UNREADABLE
from segbench.base.json_fields import field, integer
from segbench.base.rows import check_rows
from segbench.published.schema import NNUNET_METRICS, TOUCHSTONE_FILES
from segbench.published.segauge import read_segauge_results

if TYPE_CHECKING:
    from segbench.interactive.protocol import Scoring
    from segbench.published.schema import PublishedConfig

TOUCHSTONE_META = "metaTotalSeg.csv"

log = logging.getLogger(__name__)


def read_touchstone(
    folder: Path, files: dict[str, str] | None = None, duplicates: str = "error", one_sided_missing: str = "error", metadata: dict[str, Any] | None = None
) -> pd.DataFrame:
    """Touchstone-shaped published scores: ``folder/<model>/<file>`` per metric (``files``, default
    ``TOUCHSTONE_FILES``: dsc.csv and nsd.csv) plus a metadata CSV (default ``folder/metaTotalSeg.csv`` when the
    folder has one: Touchstone's own DAP Atlas results ship ``clinical_metadata.csv`` instead, and import without).

    Model = subfolder name, structure = organ column, cases matched by the ``name`` column, never by row position.
    An empty cell means the organ is absent in that scan: ``reference_present`` False, metrics NaN. ``duplicates``
    and ``one_sided_missing`` are the policies of ``DUPLICATE_POLICIES`` and ``ONE_SIDED_POLICIES`` (docs/published.md);
    ``metadata``: ``join_metadata``'s arguments (None: the folder's default; empty: no metadata, the set's
    ``metadata: none``). ``rows.attrs["import"]`` counts what the policies did and says when there is no metadata.
    """
    folder = Path(folder)
    model_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not model_dirs:
        raise ValueError(f"{folder}: no model folders")
    notes = import_notes()
    frames = [_read_touchstone_model(d, files or TOUCHSTONE_FILES, duplicates, one_sided_missing, notes) for d in model_dirs]
    organs = [set(frame["structure"]) for frame in frames]
    for model_dir, own in zip(model_dirs[1:], organs[1:]):
        if own != organs[0]:  # a model without an organ column would silently leave that leaderboard
            missing, extra = sorted(organs[0] - own), sorted(own - organs[0])
            raise ValueError(f"{model_dir}: organ columns differ from {model_dirs[0].name}'s: missing {missing}, extra {extra}")
    rows = pd.concat(frames, ignore_index=True)
    if metadata is None and not (folder / TOUCHSTONE_META).is_file():
        notes["metadata"] = f"no metadata ({folder} has no {TOUCHSTONE_META})"
        log.warning("%s: no %s: imported without metadata (no subgroups, no clusters)", folder, TOUCHSTONE_META)
    elif metadata == {}:
        notes["metadata"] = "no metadata (metadata: none)"
    else:
        rows = join_metadata(rows, **(metadata or touchstone_metadata(folder)), notes=notes)
    rows.attrs = {"import": notes}
    return rows


def touchstone_metadata(folder: Path) -> dict[str, Any]:
    """The metadata a Touchstone folder carries: ``metaTotalSeg.csv``, ';'-separated, keyed by ``image_id`` = case id."""
    return {"path": Path(folder) / TOUCHSTONE_META, "sep": ";", "key": "image_id", "case_key": None}


def files_version(paths: list[Path]) -> str:
    """md5 of a published set's own files (each file, or every file under a folder, by its name and content): the
    "Data version" of its pages, which the data bundle's md5 is not for files kept outside data/ (docs/published.md).
    A metadata file that is not there (a Touchstone folder without metaTotalSeg.csv) adds nothing."""
    digest = hashlib.md5()
    for path in map(Path, paths):
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path] if path.is_file() else []
        for file in files:
            digest.update(f"{file.relative_to(path.parent).as_posix()}\0{hashlib.md5(file.read_bytes()).hexdigest()}\0".encode())
    return digest.hexdigest()


def import_notes() -> dict[str, Any]:
    """What an import's policies did, filled by the readers and ``join_metadata``: the counts of ``import_summary``."""
    return {"duplicates_dropped": 0, "duplicates_resolved": 0, "one_sided_missing": {}, "na_filled": 0, "cases_without_metadata": None, "metadata": None}


def import_summary(rows: pd.DataFrame, notes: dict[str, Any], policies: dict[str, str]) -> dict[str, Any]:
    """The import summary printed by the import stage and kept in the results file (docs/published.md): models, cases,
    structures, cells missing from the model x (case, structure) grid, what the policies dropped or resolved, and
    ``text``, all of it as the one line the log and the site's dataset page print. A cell ``na_value`` filled is
    missing (no value in the file) and filled: counted in ``cells_missing`` and in ``cells_filled``."""
    grid = rows["model"].nunique() * len(rows[["case_id", "structure"]].drop_duplicates())
    summary = {
        "models": int(rows["model"].nunique()),
        "cases": int(rows["case_id"].nunique()),
        "structures": int(rows["structure"].nunique()),
        "cells": len(rows),
        "cells_absent": int((~rows["reference_present"]).sum()),
        "cells_missing": int(grid - len(rows)) + notes["na_filled"],
        "cells_filled": notes["na_filled"],
        "duplicates_dropped": notes["duplicates_dropped"],
        "duplicates_resolved": notes["duplicates_resolved"],
        "one_sided_missing": {m: cells for m, cells in sorted(notes["one_sided_missing"].items())},
        "cases_without_metadata": notes["cases_without_metadata"],
        "metadata": notes["metadata"],
        "policies": dict(sorted(policies.items())),
    }
    if notes.get("repeated"):  # score files whose cases repeat, by model folder and file (absent when none does)
        summary["repeated"] = dict(sorted(notes["repeated"].items()))
    return {**summary, "text": summary_line(summary)}


def summary_line(summary: dict[str, Any]) -> str:
    """The import summary as one line of text, for the log and the site's dataset page."""
    one_sided = sum(len(cells) for cells in summary["one_sided_missing"].values())
    filled = f" ({summary['cells_filled']} of them filled by na_value)" if summary["cells_filled"] else ""
    parts = [
        f"{summary['models']} models, {summary['cases']} cases, {summary['structures']} structures",
        f"{summary['cells_missing']} cells missing{filled}",
        f"{summary['duplicates_dropped']} exact duplicate rows dropped",
    ]
    if summary["duplicates_resolved"]:
        parts.append(f"{summary['duplicates_resolved']} conflicting duplicate rows resolved")
    if one_sided:
        parts.append(f"{one_sided} one-sided cells treated as not reported")
    for file, repeat in summary.get("repeated", {}).items():
        copies = [f"{repeat[k]} {k.replace('_', ' ')}" for k in ("exact_copies_dropped", "conflicting_copies_resolved") if repeat[k]]
        parts.append(f"repeated cases in {file} ({repeat['rows']} rows): {', '.join(copies)}; kept {repeat['kept']}")
    if summary["cases_without_metadata"] is not None:
        parts.append(f"{summary['cases_without_metadata']} cases without metadata")
    if summary["metadata"]:
        parts.append(summary["metadata"])
    if summary["policies"]:
        parts.append("policies " + ", ".join(f"{k}: {v}" for k, v in summary["policies"].items()))
    return "; ".join(parts)


def read_cvpr25_metrics(folder: Path, scoring: Scoring | None = None) -> pd.DataFrame:
    """The CVPR 2025 interactive challenge's published tables: ``folder/<team>_metrics.csv``, one per team, computed
    under ``scoring`` (its protocol version bounds the AUCs; default: the final version, DeepMind's NSD).

    Columns: CaseName, DSC_AUC, NSD_AUC, DSC_Final, NSD_Final, TotalRunningTime, DSC_1..6, NSD_1..6
    (RunningTime_1..6 and others kept when present). Model = the team (the file name before
    ``_metrics.csv``); one ``mean_over_classes`` row per case, as segbench's own interactive runs have
    (docs/interactive.md). Every team's file must list the same cases.
    """
    from segbench.interactive.protocol import Scoring
    from segbench.interactive.scores import case_rows

    folder = Path(folder)
    files = sorted(folder.glob("*_metrics.csv"))
    if not files:
        raise ValueError(f"{folder}: no <team>_metrics.csv files")
    frames = []
    for path in files:
        try:
            table = pd.read_csv(path, keep_default_na=False)  # a cell such as "n/a" is reported as written
        except UNREADABLE as exc:
            raise ValueError(f"{path}: not a readable CSV ({exc})") from exc
        frames.append(case_rows(table, path.name.removesuffix("_metrics.csv"), "published", str(path), scoring or Scoring()))
    _same_cases(files, frames)
    return pd.concat(frames, ignore_index=True).drop(columns="kind")


def _same_cases(files: list[Path], frames: list[pd.DataFrame]) -> None:
    """Every file lists the first file's cases: a shorter list hides failed cases, and a failure is never dropped
    (docs/methodology.md#4-empty-masks-and-missing-predictions)."""
    first = set(frames[0]["case_id"])
    for path, frame in zip(files[1:], frames[1:]):
        if set(frame["case_id"]) != first:
            missing, extra = sorted(first - set(frame["case_id"])), sorted(set(frame["case_id"]) - first)
            raise ValueError(f"{path}: cases differ from {files[0].name}'s: missing {missing[:5]}, extra {extra[:5]}")


#: cells a long CSV may use for "no value" (R writes NA); the set's na_value decides what they mean
NA_CELLS = ("", "NA", "NaN", "nan", "N/A", "n/a")
#: the faults of one file one error lists; it counts the rest
MAX_FAULTS = 10


def raise_faults(path: Path, faults: list[str]) -> None:
    """One ValueError for every fault found in ``path`` (the first ``MAX_FAULTS`` of them, and how many more), so that
    one run shows everything to fix; nothing when there is none."""
    if len(faults) == 1:
        raise ValueError(f"{path}: {faults[0]}")
    if faults:
        more = [f"and {len(faults) - MAX_FAULTS} more"] if len(faults) > MAX_FAULTS else []
        raise ValueError(f"{path}: {len(faults)} faults:\n" + "\n".join(f"  {fault}" for fault in [*faults[:MAX_FAULTS], *more]))


def read_long_csv(
    path: Path, columns: dict[str, str | None], structure: str | None, metric_columns: dict[str, str], na_value: dict[str, float], duplicates: str = "error"
) -> pd.DataFrame:
    """A long per-case CSV (challengeR's case/algorithm/task/value table, or any table mapped by config) -> rows.

    ``columns`` names the case, model and structure columns (structure None: every row is the fixed ``structure``),
    ``metric_columns`` the column of each metric. Every row's reference is taken as present. A model without a value
    for a case that another model scored in that structure (an NA cell or no row; challengeR's sanity check treats
    both as NA) is a failed case: it gets the metric's ``na_value`` (challengeR's ``na.treat``; e.g. 0 for Dice, a
    worst-case distance for HD95), and without one the file is refused: a failure is never dropped
    (docs/methodology.md#4-empty-masks-and-missing-predictions and docs/methodology.md#512-published-sets).
    Rows are matched by their case, model and structure, never by position; a row given twice follows ``duplicates``
    (``dedupe``). ``rows.attrs["import"]`` counts what the policy did.
    """
    path = Path(path)
    notes = import_notes()
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except UNREADABLE as exc:
        raise ValueError(f"{path}: not a readable CSV ({exc})") from exc
    keys = {role: column for role, column in columns.items() if column is not None}
    raise_faults(
        path,
        [
            f"row 1 (header): no column {column!r} (the {role} column); columns are {list(raw.columns)}"
            for role, column in [*keys.items(), *metric_columns.items()]
            if column not in raw.columns
        ],
    )
    table = pd.DataFrame({role: raw[column].str.strip() for role, column in keys.items()})
    table["row"] = np.arange(len(table)) + 2  # the file's line: the header is row 1
    empty = np.zeros(len(table), dtype=bool)
    faults = []
    for role, column in keys.items():
        empty |= (blank := (table[role] == "").to_numpy())
        faults += [f"row {r + 2}, column {column!r}: empty {role}" for r in np.flatnonzero(blank)]
    if structure is not None:
        table["structure"] = structure
    for metric, column in metric_columns.items():
        table[metric] = raw[column].str.strip()
    table = dedupe(table[~empty], ["model", "case", "structure"], metric_columns, duplicates, path, notes, faults)
    unreadable = np.zeros(len(table), dtype=bool)  # a fault already: not a failed case too
    for metric, column in metric_columns.items():
        cells = table[metric]
        values = pd.to_numeric(cells.where(~cells.isin(NA_CELLS)), errors="coerce").to_numpy(dtype=np.float64)
        unreadable |= (bad := ~cells.isin(NA_CELLS).to_numpy() & ~np.isfinite(values))
        faults += [f"row {table['row'].iloc[r]}, column {column!r}: {cells.iloc[r]!r} is not a finite number" for r in np.flatnonzero(bad)]
        table[metric] = values
    table["_unreadable"] = unreadable
    grid = table[["structure", "case"]].drop_duplicates().merge(pd.DataFrame({"model": table["model"].unique()}), how="cross")
    table = grid.merge(table, how="left", on=["structure", "case", "model"], indicator=True)
    unreadable = table["_unreadable"].eq(True).to_numpy()  # a cell of no row is not unreadable
    filled = np.zeros(len(table), dtype=bool)
    for metric, column in metric_columns.items():
        failed = table[metric].isna().to_numpy() & ~unreadable
        if metric not in na_value:
            for _, r in table[failed].iterrows():
                where = f"row {int(r['row'])}, column {column!r}: {raw[column].iloc[int(r['row']) - 2]!r}" if r["_merge"] == "both" else "no row"
                faults.append(
                    f"{where} (model {r['model']!r}, case {r['case']!r}, structure {r['structure']!r}) is a failed case; "
                    f"it counts against its model, so give the set's options.na_value.{metric} "
                    f"(the value a failure scores, e.g. 0 for Dice) or fix the file"
                )
        filled |= failed
        table[metric] = np.where(failed, na_value.get(metric, np.nan), table[metric])
    raise_faults(path, faults)
    notes["na_filled"] += int(filled.sum())
    rows = table.rename(columns={"case": "case_id"})[["model", "case_id", "structure"]].assign(reference_present=True)
    rows = pd.concat([rows, table[list(metric_columns)]], axis=1).sort_values(["model", "structure", "case_id"], ignore_index=True)
    rows.attrs = {"import": notes}
    return rows


def read_nnunet_summaries(folder: Path, models: dict[str, str], labels: dict[str, str], file_ending: str) -> pd.DataFrame:
    """nnU-Net v2 evaluation files (``summary.json`` of ``nnUNetv2_evaluate_folder``), one per model -> rows.

    ``models``: model name -> its summary.json under ``folder`` (trainers, configurations or folds scored on
    the same cases); ``labels``: nnU-Net's label or region key ("1", "(1, 2)") -> structure; every label of the
    file must be mapped. Case id = the reference file's name without ``file_ending``. Metrics ``dice`` and
    ``iou`` (nnU-Net's Dice and IoU). ``reference_present`` is ``n_ref > 0``: nnU-Net gives NaN when both masks
    are empty, and segbench leaves a case without the structure out of its statistics
    (docs/methodology.md#4-empty-masks-and-missing-predictions). nnU-Net's ``--chill`` evaluation skips missing
    predictions, so every model must list the same cases: a missing case would be a hidden failure.
    """
    folder = Path(folder)
    files = [folder / name for name in models.values()]
    frames = [_read_nnunet_summary(path, model, labels, file_ending) for model, path in zip(models, files)]
    _same_cases(files, frames)
    return pd.concat(frames, ignore_index=True)


def _read_nnunet_summary(path: Path, model: str, labels: dict[str, str], file_ending: str) -> pd.DataFrame:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))  # nnU-Net writes NaN for a label empty in both masks
    except UNREADABLE as exc:
        raise ValueError(f"{path}: not an nnU-Net summary.json ({exc!r})") from exc
    records: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(field(doc, "metric_per_case", list, f"{path}:")):
        row = f"{path}: metric_per_case[{i}]"
        reference = field(entry, "reference_file", str, row)
        name = reference.replace("\\", "/").rsplit("/", 1)[-1]
        if not name.endswith(file_ending) or name == file_ending:
            raise ValueError(f"{row}.reference_file: {reference!r} does not end with the set's file_ending {file_ending!r}")
        case = name.removesuffix(file_ending)
        if case in seen:
            raise ValueError(f"{row}.reference_file: case {case!r} again (first at metric_per_case[{seen[case]}])")
        seen[case] = i
        per_label = field(entry, "metrics", dict, row)
        at = f"{path}: case {case!r}, metric_per_case[{i}].metrics"
        if unknown := sorted(set(per_label) - set(labels)):
            raise ValueError(f"{at}.{unknown[0]}: label {unknown[0]!r} is not in the set's options.labels {sorted(labels)}")
        for label, structure in labels.items():
            values = field(per_label, label, dict, at)
            cell = f"{at}.{label}"
            present = integer(values, "n_ref", cell) > 0
            record = {"model": model, "case_id": case, "structure": structure, "reference_present": present}
            for metric, key in NNUNET_METRICS.items():
                value = field(values, key, (int, float), cell)
                if present and not 0.0 <= value <= 1.0:  # NaN fails too: the reference holds the label
                    raise ValueError(f"{cell}.{key}: {value!r} is not a number in [0, 1]")
                record[metric] = float(value)
            records.append(record)
    if not records:
        raise ValueError(f"{path}: metric_per_case is empty")
    return pd.DataFrame.from_records(records)


def _read_touchstone_model(model_dir: Path, files: dict[str, str], duplicates: str, one_sided_missing: str, notes: dict[str, Any]) -> pd.DataFrame:
    """One model's metric files -> long rows, the second file's cases and organs matched to the first's by name."""
    paths = {metric: model_dir / name for metric, name in files.items()}
    tables = {metric: _read_score_csv(path, duplicates, notes) for metric, path in paths.items()}
    (first, (a, lines_a)), *others = tables.items()
    for metric, (b, lines_b) in others:
        path_a, path_b = paths[first], paths[metric]
        if set(a.columns) != set(b.columns):
            missing, extra = sorted(set(a.columns) - set(b.columns)), sorted(set(b.columns) - set(a.columns))
            raise ValueError(f"{path_b}: row 1 (header): organ columns differ from {path_a.name}'s: missing {missing}, extra {extra}")
        a, b = _cases_in_one_file(a, b, (path_a, lines_a), (path_b, lines_b), one_sided_missing, notes)
        tables[first] = (a, lines_a)
        b = b.loc[a.index, a.columns]  # matched by case id and organ name, never by position
        tables[metric] = (b, lines_b)
        mismatch = a.isna() != b.isna()
        if not mismatch.to_numpy().any():
            continue
        cells = [(str(case), str(organ)) for case, organ in mismatch.stack().loc[lambda s: s].index]
        if one_sided_missing == "error":
            case, organ = cells[0]
            has, lacks = (path_a, path_b) if pd.notna(a.at[case, organ]) else (path_b, path_a)
            raise ValueError(
                f"{lacks}: row {(lines_b if lacks == path_b else lines_a)[case]} (name={case!r}), column {organ!r}: empty, "
                f"but {has.name} has a value ({len(cells)} such cell(s) in {model_dir.name}); set the set's "
                f"options.one_sided_missing to 'missing' or fix the file"
            )
        for case, organ in cells:
            log.warning(
                "%s: case %r, organ %r: a value in only one of %s; treated as not reported (one_sided_missing: missing)",
                model_dir,
                case,
                organ,
                "/".join(p.name for p in paths.values()),
            )
        notes["one_sided_missing"].setdefault(model_dir.name, []).extend([case, organ] for case, organ in cells)
    long = {metric: t.stack(future_stack=True) for metric, (t, _) in tables.items()}
    rows = pd.DataFrame(long).rename_axis(["case_id", "structure"]).reset_index()
    rows.insert(0, "model", model_dir.name)
    rows.insert(3, "reference_present", rows[first].notna())
    one_sided = rows[list(files)].isna().any(axis=1) & rows[list(files)].notna().any(axis=1)
    return rows[~one_sided].reset_index(drop=True) if one_sided.any() else rows


def _cases_in_one_file(
    a: pd.DataFrame, b: pd.DataFrame, file_a: tuple[Path, dict[str, int]], file_b: tuple[Path, dict[str, int]], one_sided_missing: str, notes: dict[str, Any]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two metric files of one model restricted to the cases both list. A case with a row in one file only is a
    one-sided fault like an empty cell (docs/published.md): an error naming the file lacking it, or under
    ``one_sided_missing: missing`` the model's case is not reported in either metric, each of its cells with a value
    listed in ``notes`` (Touchstone's DAP Atlas STU-Net nsd.csv lacks 18 of its dsc.csv's cases)."""
    (path_a, lines_a), (path_b, lines_b) = file_a, file_b
    only_a, only_b = sorted(set(a.index) - set(b.index)), sorted(set(b.index) - set(a.index))
    if one_sided_missing == "error":
        if only_a:
            raise ValueError(
                f"{path_b}: no row for case {only_a[0]!r} (name column), which {path_a.name} has at row {lines_a[only_a[0]]} "
                f"({len(only_a)} such case(s)); set the set's options.one_sided_missing to 'missing' or fix the file"
            )
        if only_b:
            raise ValueError(
                f"{path_b}: row {lines_b[only_b[0]]} (name={only_b[0]!r}): case not in {path_a.name} "
                f"({len(only_b)} such case(s)); set the set's options.one_sided_missing to 'missing' or fix the file"
            )
        return a, b
    for table, only, has, lacks in ((a, only_a, path_a, path_b), (b, only_b, path_b, path_a)):
        if not only:
            continue
        log.warning(
            "%s: %d case(s) of %s have no row in it, e.g. %s; treated as not reported (one_sided_missing: missing)", lacks, len(only), has.name, only[:3]
        )
        cells = table.loc[only].stack().index  # the cells with a value (stack drops the empty ones)
        notes["one_sided_missing"].setdefault(has.parent.name, []).extend([str(case), str(organ)] for case, organ in cells)
    shared = [case for case in a.index if case in set(b.index)]
    return a.loc[shared], b.loc[shared]


def _read_score_csv(path: Path, duplicates: str, notes: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, int]]:
    """A per-case score CSV (first column ``name`` = case id, one column per organ), validated: the values indexed
    by case id, and each case's line in the file (for messages)."""
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except UNREADABLE as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from exc
    if raw.columns.empty or raw.columns[0] != "name":
        raise ValueError(f"{path}: first column must be 'name' (case id), got {list(raw.columns[:1])}")
    if len(raw.columns) < 2:
        raise ValueError(f"{path}: no organ columns")
    raw = raw.apply(lambda c: c.str.strip())
    raw.insert(0, "row", np.arange(len(raw)) + 2)  # the file's line: the header is row 1
    faults = [f"row {r + 2}, column 'name' is empty" for r in np.flatnonzero(raw["name"] == "")]
    before = (notes["duplicates_dropped"], notes["duplicates_resolved"], len(raw))
    raw = dedupe(raw[raw["name"] != ""], ["name"], {c: c for c in raw.columns[2:]}, duplicates, path, notes, faults)
    _note_repeats(path, before, notes, duplicates)
    names, cells = raw["name"], raw.drop(columns=["row", "name"])
    numbers = cells.apply(pd.to_numeric, errors="coerce")
    bad = (cells != "") & ~np.isfinite(numbers.to_numpy(dtype=np.float64, na_value=np.nan))
    faults += [
        f"row {raw['row'].iloc[r]} (name={names.iloc[r]!r}), column {cells.columns[c]!r}: {cells.iat[r, c]!r} is not a finite number"
        for r, c in np.argwhere(bad.to_numpy())
    ]
    raise_faults(path, faults)
    numbers.index = pd.Index(names, name="case_id")
    return numbers.astype(np.float64), dict(zip(names, raw["row"].tolist()))


#: what each duplicates policy keeps of a conflicting repeat, in the import summary's words
KEPT = {"error": "none (the import stops)", "first": "the first row in the file", "mean": "the mean of the copies"}


def _note_repeats(path: Path, before: tuple[int, int, int], notes: dict[str, Any], policy: str) -> None:
    """Record in ``notes["repeated"]`` a score file whose cases repeat: its model folder and file, its rows, the exact
    copies dropped and conflicting copies resolved by ``dedupe`` since ``before`` (the counters and row count then),
    and what was kept, so that the set's page names them (docs/published.md, "Duplicate rows")."""
    dropped, resolved = notes["duplicates_dropped"] - before[0], notes["duplicates_resolved"] - before[1]
    if dropped or resolved:
        notes.setdefault("repeated", {})[f"{path.parent.name}/{path.name}"] = {
            "rows": before[2],
            "exact_copies_dropped": dropped,
            "conflicting_copies_resolved": resolved,
            "kept": "; ".join([*(["one row of each exact copy"] if dropped else []), *([f"of conflicting copies, {KEPT[policy]}"] if resolved else [])]),
        }


def dedupe(table: pd.DataFrame, key: list[str], values: dict[str, str], policy: str, path: Path, notes: dict[str, Any], faults: list[str]) -> pd.DataFrame:
    """Rows of ``table`` (text cells, its file line in ``row``) whose ``key`` repeats: exact copies are dropped and counted;
    each conflicting group is a fault added to ``faults`` naming both rows, the key and the column (``values``: table
    column -> the file's column), its first row kept for the file's other checks, unless ``policy`` is ``first`` (keep
    the first row) or ``mean`` (average the values; a cell empty in one copy and filled in another stays a fault)."""
    if not table.duplicated(key).any():
        return table
    exact = table.duplicated([*key, *values])
    notes["duplicates_dropped"] += int(exact.sum())
    table = table[~exact]
    resolved = []
    for ident, group in table[table.duplicated(key, keep=False)].groupby(key, sort=False):
        ident = dict(zip(key, ident if isinstance(ident, tuple) else (ident,)))
        differ = [c for c in values if group[c].nunique() > 1]
        other = int(np.flatnonzero(group[differ[0]] != group[differ[0]].iloc[0])[0])
        v1, v2 = group[differ[0]].iloc[0], group[differ[0]].iloc[other]
        where = (
            f"rows {group['row'].iloc[0]} and {group['row'].iloc[other]} ({', '.join(f'{k} {v!r}' for k, v in ident.items())}), column {values[differ[0]]!r}"
        )
        empty = [c for c in differ if (group[c].isin(NA_CELLS)).any()]
        numeric = group[differ].apply(pd.to_numeric, errors="coerce")
        resolved.append(group.iloc[[0]])
        if policy == "error" or (policy == "mean" and empty):
            hint = "a cell empty in one copy has no mean; " if policy == "mean" else ""
            faults.append(
                f"{where}: conflicting duplicates {v1!r} and {v2!r}; {hint}set the set's options.duplicates "
                f"to 'first' or 'mean' ({len(group)} rows), or fix the file"
            )
            continue
        if policy == "mean" and numeric.isna().to_numpy().any():
            faults.append(f"{where}: conflicting duplicates {v1!r} and {v2!r} are not all numbers; no mean")
            continue
        log.warning("%s: %s: duplicates %s (options.duplicates: %s)", path, where, dict(zip(group["row"], group[differ[0]])), policy)
        if policy == "mean":
            resolved[-1] = group.iloc[[0]].copy()
            resolved[-1].loc[group.index[0], differ] = [repr(float(numeric[c].mean())) for c in differ]
        notes["duplicates_resolved"] += len(group) - 1
    others = table[~table.duplicated(key, keep=False)]
    return pd.concat([others, *resolved]).sort_values("row", ignore_index=True)


def join_metadata(
    rows: pd.DataFrame,
    path: Path,
    sep: str,
    key: str,
    case_key: str | None,
    notes: dict[str, Any],
    key_pattern: str | None = None,
    rows_where: dict[str, str] | None = None,
    fields: tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """``rows`` with the metadata CSV's fields as ``meta.<field>`` columns (plus ``meta.age_band`` from an ``age``
    column), joined on ``key`` = the case id, or the part of it the regular expression ``case_key`` picks (its first
    group, else its whole match). ``key_pattern`` likewise makes the key of each metadata row from its ``key`` column
    (its groups joined by ``_``), ``rows_where`` (the set's ``rows``) keeps the metadata rows whose columns hold those
    values, ``fields`` the columns joined. Cases without a metadata row are kept, counted in ``notes`` and logged: the
    statistics leave them out of the subgroup tests only (docs/published.md)."""
    meta = _read_metadata_csv(Path(path), sep, key, key_pattern, rows_where, fields)
    case_ids = pd.Series(rows["case_id"].unique())
    if case_key is None:
        keys = case_ids
    else:
        pattern = re.compile(case_key)
        matches = [pattern.search(str(case)) for case in case_ids]
        if unmatched := [case for case, m in zip(case_ids, matches) if m is None]:
            raise ValueError(f"{path}: metadata.case_key {case_key!r} finds no key in case id {unmatched[0]!r} ({len(unmatched)} case(s) without a key)")
        keys = pd.Series([m.group(1) if pattern.groups else m.group(0) for m in matches if m is not None])  # every case matched (above)
    join = dict(zip(case_ids, keys))
    without = sorted(str(case) for case, k in join.items() if k not in meta.index)
    notes["cases_without_metadata"] = len(without)
    if without:
        log.warning("%s: %d case(s) without metadata (kept; left out of the subgroup tests), e.g. %s", path, len(without), without[:5])
    rows = rows.assign(_meta_key=rows["case_id"].map(join))
    return rows.merge(meta, how="left", left_on="_meta_key", right_index=True, validate="many_to_one").drop(columns="_meta_key")


#: a DICOM age string (value representation AS): three digits and the unit, e.g. 063Y; TCIA's clinical tables use it
DICOM_AGE = re.compile(r"^(\d{3})([DWMY])$")
#: each DICOM age unit in years
DICOM_AGE_YEARS = {"D": 1 / 365.25, "W": 7 / 365.25, "M": 1 / 12, "Y": 1.0}


def _ages(path: Path, ages: pd.Series, lines: np.ndarray) -> pd.Series:
    """An ``age`` column in years: numbers, or DICOM age strings (``063Y``, ``006M``); anything else raises ValueError
    naming the file's row (``lines``) and the value."""
    age = pd.to_numeric(ages, errors="coerce")
    if not (ages.notna() & age.isna()).any():
        return age  # numbers only: as read
    dicom = ages.astype("string").str.strip().str.extract(DICOM_AGE)
    years = pd.to_numeric(dicom[0], errors="coerce") * dicom[1].map(DICOM_AGE_YEARS)
    age = age.astype(np.float64).fillna(years.astype(np.float64))
    bad = ages.notna() & age.isna()
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{path}: row {lines[r]}, column 'age': {ages.iloc[r]!r} is not a number of years or a DICOM age string such as 063Y")
    return age


def _read_metadata_csv(
    path: Path, sep: str, key: str, key_pattern: str | None = None, rows_where: dict[str, str] | None = None, fields: tuple[str, ...] | None = None
) -> pd.DataFrame:
    """A metadata CSV (optional BOM) -> meta.* columns indexed by its ``key`` column (as text, or the join key
    ``key_pattern`` makes of it), only the rows ``rows_where`` keeps and the columns ``fields`` names; an ``age`` column
    (years, or DICOM age strings) adds ``age_band``. A key on two kept rows raises ValueError naming both rows."""
    try:
        meta = pd.read_csv(path, sep=sep, encoding="utf-8-sig", dtype={key: str, **{c: str for c in (rows_where or {})}})
    except UNREADABLE as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from exc
    lines = np.arange(len(meta)) + 2  # the file's line of each row: the header is row 1
    wanted = [key, *(rows_where or {}), *(fields or ())]
    if missing := [c for c in dict.fromkeys(wanted) if c not in meta.columns]:
        raise ValueError(f"{path}: row 1 (header): no column {missing[0]!r} (metadata key, rows or fields); columns are {list(meta.columns)}")
    kept = np.ones(len(meta), dtype=bool)
    for column, value in (rows_where or {}).items():
        kept &= (meta[column].str.strip() == value).to_numpy()
    meta, lines = meta[kept].reset_index(drop=True), lines[kept]
    if meta[key].isna().any():
        raise ValueError(f"{path}: row {lines[np.flatnonzero(meta[key].isna())[0]]}, column {key!r}: empty key")
    if key_pattern is not None:
        found = meta[key].str.extract(re.compile(key_pattern) if re.compile(key_pattern).groups else f"({key_pattern})")
        if found.isna().any(axis=1).any():
            r = int(np.flatnonzero(found.isna().any(axis=1))[0])
            raise ValueError(f"{path}: row {lines[r]}, column {key!r}: metadata.key_pattern {key_pattern!r} finds no key in {meta[key].iloc[r]!r}")
        meta[key] = found.astype(str).agg("_".join, axis=1)
    dup = meta[key].duplicated(keep=False)
    if dup.any():
        first, second = np.flatnonzero(meta[key] == meta[key][dup].iloc[0])[:2]
        raise ValueError(
            f"{path}: rows {lines[first]} and {lines[second]}, column {key!r}: duplicate key {meta[key].iloc[first]!r}"
            + ("; metadata.rows can keep one row per case" if not rows_where else "")
        )
    if fields:
        meta = meta[[key, *(f for f in fields if f != key)]]
    if "age" in meta.columns:
        meta["age"] = _ages(path, meta["age"], lines)
        meta[AGE_BAND] = age_band(meta["age"])
    meta = meta.set_index(key)
    meta.columns = [f"meta.{c}" for c in meta.columns]
    return meta


#: each published format's reader by its name in ``published_schema.PUBLISHED_FORMATS``: the set's rows from its
#: configuration (its path and the arguments its options became)
READERS: dict[str, Callable[[PublishedConfig], pd.DataFrame]] = {
    "touchstone": lambda source: read_touchstone(source.path, metadata=source.metadata, **source.options),
    "segauge_results": lambda source: read_segauge_results(source.path, source.metadata_file),
    "cvpr25_metrics": lambda source: read_cvpr25_metrics(source.path, **source.options),
    "challenger_csv": lambda source: read_long_csv(source.path, **source.options),
    "generic_csv": lambda source: read_long_csv(source.path, **source.options),
    "nnunet_summary": lambda source: read_nnunet_summaries(source.path, **source.options),
}


def read_set(source: PublishedConfig) -> pd.DataFrame:
    """Rows of a published score set by its format's reader, checked (``segbench.base.rows``), its ``metadata`` joined;
    ``rows.attrs["import_summary"]`` says what the import found and what its policies did (docs/published.md); segauge
    results keep each model's version, licence and training sets in ``rows.attrs["models"]``."""
    rows = check_rows(
        READERS[source.format](source),
        str(source.path),
        "correct the published file or its format's options in params.yaml (docs/published.md)",
        file_lines=False,
    )
    attrs = dict(rows.attrs)
    notes = attrs.pop("import", None) or import_notes()
    if source.metadata and source.format != "touchstone":  # the Touchstone reader joins its own
        rows = join_metadata(rows, **source.metadata, notes=notes)
    policies = {k: v for k, v in source.options.items() if k in ("duplicates", "one_sided_missing")}
    rows.attrs = {**attrs, "import_summary": import_summary(rows, notes, policies)}
    return rows
