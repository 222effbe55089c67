"""Lesion-wise scoring of case files (docs/methodology.md#37-lesion-wise-scores): every lesion structure of a case
under the lesion profile and its sensitivity profiles, from one decode of each label map.

``instances`` defines the instances, matching rules and reductions on arrays; this module reads a case's two label
maps with the engine's checks (``engine.decode_pair``: grids, spacing, allowed labels), cuts each lesion structure
out of them and returns two tables: one row per case x structure x lesion profile (the case's lesion-wise scores),
and one row per lesion (the per-instance table). A case without a prediction file scores every reference lesion as
missed (an empty prediction), flagged ``prediction_missing``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from segbench.scoring.engine import COLUMNS, DecodedPair, _region_mask, case_bytes, decode_pair, map_cases, raise_worker_died, score_pair
from segbench.scoring.instances import TABLE_COLUMNS, case_scores, counted_references, get_lesion_profile, instance_tables, volume_strata
from segbench.scoring.profiles import get_profile
from segbench.scoring.settings import DEFAULT_PROFILE, LesionSetting, Region

KEY_COLUMNS: tuple[str, ...] = ("case_id", "structure", "lesion_profile")


def case_columns(setting: LesionSetting) -> list[str]:
    """Columns of the per-case lesion table: the keys, then every score of ``instances.case_scores``."""
    scores = case_scores(pd.DataFrame(columns=list(TABLE_COLUMNS)), setting.profile, setting.strata_ml)
    return [*KEY_COLUMNS, "reference_present", "prediction_missing", *scores]


def score_case_lesions(
    case_id: str,
    reference: Path,
    prediction: Path | None,
    setting: LesionSetting,
    *,
    allowed_labels: set[int] | None = None,
) -> tuple[list[dict], pd.DataFrame]:
    """One case: its lesion-wise score rows (structure x profile) and its per-lesion table (every profile; a reference
    lesion's ``volume_stratum`` is its volume's stratum of ``setting.strata_ml``, empty for false positives).

    ``reference_present`` of a row: the reference holds at least one lesion the profile's lesion-wise Dice/HD95
    count (``instances.counted_references``), so that every analysed score is defined; the other rows keep their
    counts (a false positive in a case without lesions is in ``fp`` and the per-lesion table)."""
    return lesions_of_pair(case_id, decode_pair(case_id, reference, prediction, allowed_labels=allowed_labels), setting)


def lesions_of_pair(case_id: str, pair: DecodedPair, setting: LesionSetting) -> tuple[list[dict], pd.DataFrame]:
    """:func:`score_case_lesions` on a case already decoded (``engine.decode_pair``)."""
    rows, tables = [], []
    for structure in setting.structures:
        ref = _region_mask(pair.reference, structure)
        pred = np.zeros_like(ref) if pair.prediction is None else _region_mask(pair.prediction, structure)
        profiles = [get_lesion_profile(name) for name in setting.profiles]
        for name, profile, table in zip(setting.profiles, profiles, instance_tables(ref, pred, pair.spacing, profiles), strict=True):
            scores = case_scores(table, profile, setting.strata_ml)
            rows.append(
                {
                    "case_id": case_id,
                    "structure": structure.name,
                    "lesion_profile": name,
                    "reference_present": not counted_references(table, profile).empty,
                    "prediction_missing": pair.prediction is None,
                }
                | scores
            )
            stratum = np.where(table.status != "FP", volume_strata(table.reference_volume_ml.to_numpy(), setting.strata_ml), "")
            tables.append(table.assign(case_id=case_id, structure=structure.name, lesion_profile=name, volume_stratum=stratum))
    columns = [*KEY_COLUMNS, *TABLE_COLUMNS, "volume_stratum"]
    return rows, (pd.concat(tables, ignore_index=True)[columns] if tables else pd.DataFrame(columns=columns))


def _score_case_lesions_job(args: tuple) -> tuple[list[dict], pd.DataFrame]:
    case_id, reference, prediction, setting, allowed_labels = args
    return score_case_lesions(case_id, reference, prediction, setting, allowed_labels=allowed_labels)


def score_lesion_cases(
    cases: Sequence[tuple[str, Path, Path | None]],
    setting: LesionSetting,
    *,
    workers: int = 1,
    progress: bool = True,
    allowed_labels: set[int] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every (case_id, reference, prediction) in input order: the per-case lesion table and the per-lesion table."""
    jobs = [(cid, Path(ref), None if pred is None else Path(pred), setting, allowed_labels) for cid, ref, pred in cases]
    sizes = [case_bytes(ref, pred) for _, ref, pred in cases]
    return _lesion_frames(
        map_cases(_score_case_lesions_job, jobs, workers=workers, progress=progress, desc="lesions", sizes=sizes, died=raise_worker_died), setting
    )


def _lesion_frames(done: list[tuple[list[dict], pd.DataFrame]], setting: LesionSetting) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-case lesion table and the per-lesion table from every case's (rows, per-lesion table)."""
    rows = pd.DataFrame([row for case_rows, _ in done for row in case_rows], columns=case_columns(setting))
    instances = pd.concat([table for _, table in done], ignore_index=True) if done else pd.DataFrame(columns=[*KEY_COLUMNS, *TABLE_COLUMNS, "volume_stratum"])
    return rows, instances


def _score_and_lesions_job(args: tuple) -> tuple[list[dict], tuple[list[dict], pd.DataFrame]]:
    case_id, reference, prediction, regions, setting, allowed_labels, profile, extra_profiles = args
    pair = decode_pair(case_id, reference, prediction, allowed_labels=allowed_labels)
    return score_pair(case_id, pair, regions, profile=profile, extra_profiles=extra_profiles), lesions_of_pair(case_id, pair, setting)


def score_cases_and_lesions(
    cases: Sequence[tuple[str, Path, Path | None]],
    regions: Sequence[Region],
    setting: LesionSetting,
    *,
    workers: int = 1,
    progress: bool = True,
    allowed_labels: set[int] | None = None,
    profile: str = DEFAULT_PROFILE,
    extra_profiles: Sequence[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``engine.score_cases`` and :func:`score_lesion_cases` of the same cases from one decode of each case in one pool
    (the score stage): (rows, per-case lesion table, per-lesion table), each as the two functions return it. Apart, every
    case was decoded twice and a second pool of workers imported the engine again."""
    for name in (profile, *extra_profiles):
        get_profile(name)
    jobs = [
        (cid, Path(ref), None if pred is None else Path(pred), tuple(regions), setting, allowed_labels, profile, tuple(extra_profiles))
        for cid, ref, pred in cases
    ]
    done = map_cases(
        _score_and_lesions_job, jobs, workers=workers, progress=progress, sizes=[case_bytes(ref, pred) for _, ref, pred in cases], died=raise_worker_died
    )
    scored = pd.DataFrame([row for case_rows, _ in done for row in case_rows], columns=list(COLUMNS))
    return (scored, *_lesion_frames([lesions for _, lesions in done], setting))
