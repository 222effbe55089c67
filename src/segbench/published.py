"""Readers for published per-case score files -> the long rows table of ``segbench.stats.analyze``.

Rows: one per (model, case_id, structure) with ``reference_present`` (bool), one float column per metric
and case metadata as ``meta.<field>`` columns, including ``meta.age_band`` (``AGE_BANDS``).
Malformed input (missing columns, non-numeric cells, duplicate rows) raises ValueError naming the file,
the row and the column.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

# Age bands (years, left-closed): decades between 40 and 80, open-ended at both ends so that the
# youngest and oldest bands still hold enough cases for the subgroup tests (docs/methodology.md#59-subgroups).
AGE_BANDS: tuple[tuple[float, float, str], ...] = (
    (-np.inf, 40, "<40"),
    (40, 50, "40-49"),
    (50, 60, "50-59"),
    (60, 70, "60-69"),
    (70, 80, "70-79"),
    (80, np.inf, "80+"),
)
TOUCHSTONE_FILES = {"dice": "dsc.csv", "nsd": "nsd.csv"}
TOUCHSTONE_META = "metaTotalSeg.csv"
SEGAUGE_METRICS = ("dice", "hd95", "nsd", "assd")


def age_band(ages: pd.Series) -> pd.Series:
    """Label each age with its ``AGE_BANDS`` band; missing ages stay missing (None)."""
    values = pd.to_numeric(ages, errors="raise").astype(np.float64)
    bins = [lo for lo, _, _ in AGE_BANDS] + [np.inf]
    banded = pd.cut(values, bins, right=False, labels=[label for _, _, label in AGE_BANDS])
    return pd.Series([None if pd.isna(v) else str(v) for v in banded], index=ages.index, dtype=object)


def read_touchstone(folder: Path) -> pd.DataFrame:
    """Touchstone published scores: ``folder/<model>/{dsc,nsd}.csv`` plus ``folder/metaTotalSeg.csv``.

    Model = subfolder name, structure = organ column, metrics ``dice`` and ``nsd``. An empty cell means
    the organ is absent in that scan: ``reference_present`` False, metrics NaN; the two files of a model
    must agree on which cells are empty.
    """
    folder = Path(folder)
    model_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not model_dirs:
        raise ValueError(f"{folder}: no model folders")
    frames = [_read_touchstone_model(d) for d in model_dirs]
    organs = [set(frame["structure"]) for frame in frames]
    for model_dir, own in zip(model_dirs[1:], organs[1:]):
        if own != organs[0]:  # a model without an organ column would silently leave that leaderboard
            missing, extra = sorted(organs[0] - own), sorted(own - organs[0])
            raise ValueError(f"{model_dir}: organ columns differ from {model_dirs[0].name}'s: missing {missing}, extra {extra}")
    rows = pd.concat(frames, ignore_index=True)
    meta = _read_touchstone_meta(folder / TOUCHSTONE_META)
    return rows.merge(meta, how="left", left_on="case_id", right_index=True, validate="many_to_one")


def _read_touchstone_model(model_dir: Path) -> pd.DataFrame:
    tables = {metric: _read_score_csv(model_dir / name) for metric, name in TOUCHSTONE_FILES.items()}
    (first, a), (second, b) = tables.items()
    path_a, path_b = model_dir / TOUCHSTONE_FILES[first], model_dir / TOUCHSTONE_FILES[second]
    if list(a.columns) != list(b.columns):
        raise ValueError(f"{path_b}: columns {list(b.columns)} differ from {path_a}: {list(a.columns)}")
    if not a.index.equals(b.index):
        only = sorted(set(a.index).symmetric_difference(b.index))[:1] or [a.index[0]]
        raise ValueError(f"{path_b}: case ids differ from {path_a} (e.g. row name={only[0]!r})")
    mismatch = a.isna() != b.isna()
    if mismatch.to_numpy().any():
        case, organ = mismatch.stack().loc[lambda s: s].index[0]
        raise ValueError(f"{path_b}: row name={case!r}, column {organ!r} is empty in one of {path_a.name}/{path_b.name} only")
    long = {metric: t.stack(future_stack=True) for metric, t in tables.items()}
    rows = pd.DataFrame(long).rename_axis(["case_id", "structure"]).reset_index()
    rows.insert(0, "model", model_dir.name)
    rows.insert(3, "reference_present", rows[first].notna())
    return rows


def _read_score_csv(path: Path) -> pd.DataFrame:
    """A per-case score CSV (first column ``name`` = case id, one column per organ), validated."""
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from exc
    if raw.columns.empty or raw.columns[0] != "name":
        raise ValueError(f"{path}: first column must be 'name' (case id), got {list(raw.columns[:1])}")
    if len(raw.columns) < 2:
        raise ValueError(f"{path}: no organ columns")
    names = raw["name"].str.strip()
    if (names == "").any():
        raise ValueError(f"{path}: row {int(np.flatnonzero(names == '')[0]) + 2}, column 'name' is empty")
    dup = names.duplicated()
    if dup.any():
        raise ValueError(f"{path}: row {int(np.flatnonzero(dup)[0]) + 2}, column 'name': duplicate case {names[dup].iloc[0]!r}")
    cells = raw.drop(columns="name").apply(lambda c: c.str.strip())
    numbers = cells.apply(pd.to_numeric, errors="coerce")
    bad = (cells != "") & ~np.isfinite(numbers.to_numpy(dtype=np.float64, na_value=np.nan))
    if bad.to_numpy().any():
        r, c = np.argwhere(bad.to_numpy())[0]
        raise ValueError(
            f"{path}: row {r + 2} (name={names.iloc[r]!r}), column {cells.columns[c]!r}: "
            f"{cells.iat[r, c]!r} is not a finite number"
        )
    numbers.index = pd.Index(names, name="case_id")
    return numbers.astype(np.float64)


def _read_touchstone_meta(path: Path) -> pd.DataFrame:
    """metaTotalSeg.csv (';'-separated, optional BOM) -> meta.* columns indexed by case id."""
    try:
        meta = pd.read_csv(path, sep=";", encoding="utf-8-sig")
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{path}: cannot read ({exc})") from exc
    missing = [c for c in ("image_id", "age") if c not in meta.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    dup = meta["image_id"].duplicated()
    if dup.any():
        raise ValueError(f"{path}: row {int(np.flatnonzero(dup)[0]) + 2}, column 'image_id': duplicate {meta['image_id'][dup].iloc[0]!r}")
    age = pd.to_numeric(meta["age"], errors="coerce")
    bad = meta["age"].notna() & age.isna()
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{path}: row {r + 2}, column 'age': {meta['age'].iloc[r]!r} is not a number")
    meta["age"] = age
    meta["age_band"] = age_band(age)
    meta = meta.set_index("image_id")
    meta.columns = [f"meta.{c}" for c in meta.columns]
    return meta


def read_segauge_results(path: Path, metadata: Path | None = None) -> pd.DataFrame:
    """segauge-benchmark results JSON (models[].per_organ.<organ>.per_case[]) -> rows.

    Metrics dice, hd95, nsd, assd; ``reference_present`` is True (the file scores present organs only).
    ``rows.attrs``: ``contaminated_on`` {model: [dataset, ...]}, ``suspect`` {model: {organ: bool}} and
    ``dataset`` (the file's dataset name), so callers can build the ``contaminated`` mapping.
    ``metadata``: optional KiTS-style clinical JSON (list of {case_id, ...}); its scalar fields become
    meta.* columns, plus meta.age_band from ``age_at_nephrectomy`` (or ``age``).
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        models = doc["models"]
        dataset = doc.get("dataset", {}).get("name")
    except (OSError, json.JSONDecodeError, KeyError, AttributeError, TypeError) as exc:
        raise ValueError(f"{path}: not a segauge results file ({exc!r})") from exc
    records, contaminated_on, suspect = [], {}, {}
    for i, model in enumerate(models):
        where = f"{path}: models[{i}]"
        if not isinstance(model, dict) or not isinstance(model.get("name"), str) or not isinstance(model.get("per_organ"), dict):
            raise ValueError(f"{where}: needs 'name' (str) and 'per_organ' (object)")
        name = model["name"]
        contaminated_on[name] = list(model.get("contaminated_on") or [])
        suspect[name] = {}
        for organ, block in model["per_organ"].items():
            suspect[name][organ] = bool(block.get("suspect", False))
            for j, case in enumerate(block.get("per_case", [])):
                cell = f"{where} ({name}).per_organ.{organ}.per_case[{j}]"
                if not isinstance(case, dict) or not isinstance(case.get("case_id"), str):
                    raise ValueError(f"{cell}: needs a 'case_id' string")
                record = {"model": name, "case_id": case["case_id"], "structure": organ, "reference_present": True}
                for metric in SEGAUGE_METRICS:
                    value = case.get(metric)
                    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                        raise ValueError(f"{cell} (case {case['case_id']!r}), column {metric!r}: {value!r} is not a finite number")
                    record[metric] = float(value)
                records.append(record)
    rows = pd.DataFrame.from_records(
        records, columns=["model", "case_id", "structure", "reference_present", *SEGAUGE_METRICS]
    )
    dup = rows.duplicated(["model", "case_id", "structure"])
    if dup.any():
        r = rows[dup].iloc[0]
        raise ValueError(f"{path}: duplicate row model {r['model']!r}, case {r['case_id']!r}, structure {r['structure']!r}")
    if metadata is not None:
        rows = rows.merge(_read_clinical_json(Path(metadata)), how="left", left_on="case_id",
                          right_index=True, validate="many_to_one")
    rows.attrs = {"contaminated_on": contaminated_on, "suspect": suspect, "dataset": dataset}
    return rows


def _read_clinical_json(path: Path) -> pd.DataFrame:
    """KiTS-style clinical metadata (list of per-case objects) -> meta.* columns indexed by case id."""
    try:
        cases = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read ({exc!r})") from exc
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "case_id" in c for c in cases):
        raise ValueError(f"{path}: expected a list of objects with 'case_id'")
    table = pd.DataFrame([{k: v for k, v in c.items() if not isinstance(v, (dict, list))} for c in cases])
    dup = table["case_id"].duplicated()
    if dup.any():
        raise ValueError(f"{path}: entry {int(np.flatnonzero(dup)[0])}, column 'case_id': duplicate {table['case_id'][dup].iloc[0]!r}")
    age_field = next((f for f in ("age_at_nephrectomy", "age") if f in table.columns), None)
    if age_field is not None:
        table["age_band"] = age_band(table[age_field])
    table = table.set_index("case_id")
    table.columns = [f"meta.{c}" for c in table.columns]
    return table
