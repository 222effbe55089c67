"""The per-case rows table every board is computed from, and the one check each reader of it runs.

Per-case rows come from four places: a score bundle (``scores/<set>/<model>/``, written by the score, import and
interact stages), its copy logged to MLflow (which compare reads back), a published score file (the import stage's
readers) and the scoring of predictions. Each reader calls :func:`check_rows` where the rows enter, so a number out of
its metric's range (a flipped bit, a hand edit, a published file in percent) stops there, naming the file, the row
and the value, and never reaches a leaderboard. The rule per column is written once: a metric's in the metric table
(``segbench.base.metrics``), another column's here, both in ``KINDS``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from segbench.base.metrics import COUNT, FLAG, FRACTION, MEASURE, names

#: the columns of a rows table that are no metric of the metric table, by kind
OTHER_COLUMNS: dict[str, tuple[str, ...]] = {
    MEASURE: ("worst_case_value_mm", "nsd_tolerance_mm", "reference_volume_ml", "prediction_volume_ml", "fp_volume_ml", "fn_volume_ml"),
    COUNT: ("n_reference", "n_prediction", "tp", "fp", "fn", "reference_id"),
    FLAG: ("reference_present", "prediction_present", "prediction_missing", "worst_case"),
}
#: each metric or column of a rows table -> its kind: the metrics' from the metric table (``segbench.base.metrics``), then the
#: other columns', kind by kind; a cell left empty (a metric not defined for the row: a structure the reference lacks, a
#: lesion quality without a matched lesion) is no value and is not checked here
KINDS: dict[str, str] = {name: k for k in (FRACTION, MEASURE, COUNT, FLAG) for name in (*names(kind=k), *OTHER_COLUMNS.get(k, ()))}
#: columns named by a prefix: the recall in each lesion-volume stratum (``recall_lt_10ml``, ...)
PREFIX_KINDS: dict[str, str] = {"recall_": FRACTION}


def kind(column: str) -> str | None:
    """The kind of ``column`` (``FRACTION``, ``MEASURE``, ``COUNT``, ``FLAG``), None for a column without a rule."""
    return KINDS.get(column) or next((k for prefix, k in PREFIX_KINDS.items() if column.startswith(prefix)), None)


def _refused(values: np.ndarray, column_kind: str) -> np.ndarray:
    """Where ``values`` (float, NaN for an empty cell) break the rule of ``column_kind``."""
    with np.errstate(invalid="ignore"):
        present = ~np.isnan(values)
        if column_kind == FRACTION:
            return present & ~((values >= 0) & (values <= 1))
        if column_kind == MEASURE:
            return present & ~(np.isfinite(values) & (values >= 0))
        return present & ~(np.isfinite(values) & (values >= 0) & (values == np.floor(values)))


def _describe(rows: pd.DataFrame, index: int, column: str, file_lines: bool) -> str:
    """Where a refused cell is: its line in the CSV file the rows were read from (the header is line 1) or, for rows
    made from several files, its position in the table; and the row's identity."""
    row = rows.iloc[index]
    who = ", ".join(f"{key} {row[key]!r}" for key in ("model", "case_id", "structure") if key in rows.columns)
    where = f"line {index + 2}" if file_lines else f"row {index + 1} of the rows table"
    value = row[column].item() if isinstance(row[column], np.generic) else row[column]
    return f"{where}{f' ({who})' if who else ''}, column {column!r}: {value!r}"


_EXPECTED = {FRACTION: "a number in [0, 1]", MEASURE: "a finite number >= 0", COUNT: "a whole number >= 0", FLAG: "True or False"}


def row_problems(rows: pd.DataFrame, columns: Iterable[str] | None = None, file_lines: bool = True) -> list[str]:
    """Each column of ``rows`` (or of ``columns``) with a rule whose cells break it, described by its first such cell
    (``file_lines``: by its line in the CSV file ``rows`` was read from) and how many there are."""
    problems = []
    for column in rows.columns if columns is None else columns:
        column_kind = kind(str(column))
        if column_kind is None or column not in rows.columns:
            continue
        cells = rows[column]
        if column_kind == FLAG:
            bad = ~cells.isin([True, False]).to_numpy() if not pd.api.types.is_bool_dtype(cells) else np.zeros(len(cells), bool)
        elif pd.api.types.is_bool_dtype(cells) or not pd.api.types.is_numeric_dtype(cells):
            numbers = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            bad = (cells.notna().to_numpy() & np.isnan(numbers)) | _refused(numbers, column_kind)
        else:
            bad = _refused(cells.to_numpy(dtype=np.float64, na_value=np.nan), column_kind)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            more = int(bad.sum()) - 1
            problems.append(
                f"{_describe(rows, first, str(column), file_lines)} is not {_EXPECTED[column_kind]}"
                f"{f' (and {more} more cell(s) of the column)' if more else ''}"
            )
    return problems


class RowsError(ValueError):
    """A rows table holds a value its column's kind does not allow."""


def check_rows(rows: pd.DataFrame, where: str, fix: str, file_lines: bool = True) -> pd.DataFrame:
    """``rows`` unchanged if every cell with a rule keeps it, else a :class:`RowsError` naming ``where`` (the file or
    MLflow artifact read), the first refused cell (its line there, or with ``file_lines`` False its row in the table;
    its identity and value), how many columns break their rule and ``fix`` (what to do: the authoritative copy and how
    to write it again)."""
    problems = row_problems(rows, file_lines=file_lines)
    if problems:
        others = f"; {len(problems) - 1} more column(s) out of range" if len(problems) > 1 else ""
        raise RowsError(f"{where}: {problems[0]}{others}; refused, no board is computed from it: {fix}")
    return rows
